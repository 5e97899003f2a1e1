#!/usr/bin/env bash
# Set up (if needed) and run the main job: the quick reproduction of phase sensitivity (about 25 minutes
# on a 2-core CPU). Finished runs in the output directory are reused, so a rerun only evaluates.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/phasekv reproduce --profile quick --out "${1:-runs/quick}"
