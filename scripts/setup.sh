#!/usr/bin/env bash
# Create .venv (if missing) and install phasekv with its test tools.
# torch goes in first: asking pip for plain "torch" on a machine without it may pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/pip install -q "torch==${PHASEKV_TORCH_VERSION:-2.13.0}"
fi
.venv/bin/pip install -q -e ".[test]"
