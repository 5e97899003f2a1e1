#!/usr/bin/env bash
# Create .venv-kvpress (if missing) with phasekv and its kvpress extra: kvpress 0.5.5 needs transformers < 5.3,
# so it lives beside the main .venv (transformers 5.24), not in it. Use it as .venv-kvpress/bin/phasekv.
# torch goes in first, like scripts/setup.sh does: otherwise pip may pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${PHASEKV_KVPRESS_VENV:-.venv-kvpress}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  "$VENV/bin/pip" install -q "torch==${PHASEKV_TORCH_VERSION:-2.13.0}"
fi
# every time (seconds when nothing changed): picks up dependencies added to phasekv since the environment was made
"$VENV/bin/pip" install -q -e ".[test,kvpress]"
