#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install_chromium.sh || true  # the report's browser test; it skips with a reason without chromium
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
.venv/bin/python -m pytest "$@"
# kvpress needs an older transformers: its tests run again in their own environment (PHASEKV_SKIP_KVPRESS=1 skips).
if [ -z "${PHASEKV_SKIP_KVPRESS:-}" ]; then
  bash scripts/test_kvpress.sh
fi
