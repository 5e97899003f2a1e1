#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install_chromium.sh || true  # the report's browser test; it skips with a reason without chromium
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
.venv/bin/python -m pytest "$@"
