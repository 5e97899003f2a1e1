#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install_chromium.sh || true  # the report's browser test; it skips with a reason without chromium
# One process per core (pytest-xdist), one torch thread each: the tests are small, so processes beat threads.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
.venv/bin/python -m pytest -n "${PHASEKV_TEST_WORKERS:-auto}" "$@"
# kvpress needs an older transformers: its tests run again in their own environment (PHASEKV_SKIP_KVPRESS=1 skips).
if [ -z "${PHASEKV_SKIP_KVPRESS:-}" ]; then
  bash scripts/test_kvpress.sh
fi
