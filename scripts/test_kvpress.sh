#!/usr/bin/env bash
# The tests marked `kvpress` (tests/studies/presses/test_presses.py, tests/scoring/test_press_variants.py), run in the
# kvpress environment (created if missing).
# About 3 minutes to create the environment on a fresh machine (network), then about 1-2 minutes per run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/kvpress_venv.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
"${PHASEKV_KVPRESS_VENV:-.venv-kvpress}/bin/python" -m pytest -p no:cacheprovider -m kvpress tests/studies/presses/test_presses.py \
  tests/scoring/test_press_variants.py "$@"
