#!/usr/bin/env bash
# The CUDA path measured, in one go on a machine with one CUDA GPU (written for an H200; < 8 minutes).
#
#     OUT=/some/dir benchmarks/gpu_check.sh        # from the repository root; default OUT: out/gpu-<date>
#     PYTHON=.venv/bin/python BUDGET_S=470 benchmarks/gpu_check.sh
#
# Steps (each under its own timeout, all under BUDGET_S seconds together; a step that would not fit is
# skipped and says so). Every step's output is $OUT/<step>.txt; $OUT/summary.txt lists them with rc and time.
#   env         GPU name, driver, torch / CUDA versions, commit
#   tests       tests/core/test_cuda.py + tests/core/test_flex.py on CUDA (float32 2e-4, bfloat16 3e-2; see test_cuda.py)
#   attn_*      benchmarks/bench_attention.py, paper size (d_model 1024, 16 x 128, 1 KV head), bf16, W8/S8 vs SDPA
#               full attention, fwd+bwd time and peak CUDA memory at T = 8K, 32K, 128K: the pure-PyTorch path,
#               then (only if the tests passed) flex_attention
#   train_*     benchmarks/bench_train.py, paper-size full-1kv vs w8s8-1kv at T = 8192, bf16 autocast,
#               tokens/s and MFU over a few hundred steps (pure PyTorch, then flex if the tests passed)
#   torchrun    the `paper` profile's torchrun command (phasekv reproduce --profile paper --plan) on one GPU for
#               w8s8-1kv, shortened to 30 steps of 8 x 2048 tokens with a checkpoint every 10: the first launch
#               is stopped (SIGTERM) once a checkpoint exists, the same command is launched again and resumes
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-$(date -u +%Y%m%d-%H%M%S)}
PY=${PYTHON:-python}
BUDGET_S=${BUDGET_S:-470}
mkdir -p "$OUT"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
END=$(($(date +%s) + BUDGET_S))
SUMMARY="$OUT/summary.txt"

# step NAME LIMIT_S COMMAND...: run COMMAND under min(LIMIT_S, time left) seconds, output in $OUT/NAME.txt
step() {
    local name=$1 limit=$2 left start rc
    shift 2
    left=$((END - $(date +%s)))
    if ((left < 20)); then
        echo "== $name: skipped (${left} s of the budget left)" | tee -a "$SUMMARY"
        return 124
    fi
    ((limit > left)) && limit=$left
    echo "== $name (limit ${limit} s): $*" | tee -a "$SUMMARY"
    start=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.txt" 2>&1
    rc=$?
    echo "   rc $rc, $(($(date +%s) - start)) s" | tee -a "$SUMMARY"
    tail -n 25 "$OUT/$name.txt"
    return $rc
}

if ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "no CUDA device visible to $PY (a CUDA build of torch and a GPU are needed)" | tee -a "$SUMMARY"
    exit 1
fi

step env 30 bash -c "nvidia-smi; git rev-parse HEAD; uptime; $PY -c 'import torch; print(torch.__version__, \
torch.version.cuda, torch.cuda.get_device_name(0), torch.backends.cudnn.version())'"

step tests 110 "$PY" -m pytest -q -rs -p no:cacheprovider tests/core/test_cuda.py tests/core/test_flex.py \
    --junitxml "$OUT/tests.xml"
TESTS_RC=$?
FLEX=()
if ((TESTS_RC == 0)); then
    FLEX=(--flex)
    echo "   CUDA tests passed: flex runs follow" | tee -a "$SUMMARY"
else
    echo "   CUDA tests did not pass (rc $TESTS_RC): no flex runs; flex stays opt-in" | tee -a "$SUMMARY"
fi

ATTN=(benchmarks/bench_attention.py --device cuda --dtype bfloat16 --size paper --kinds w8s8 --reps 3)
step attn_pytorch 60 "$PY" "${ATTN[@]}" --lengths 8192,32768 --out "$OUT/attn_pytorch.json"
step attn_pytorch_128k 50 "$PY" "${ATTN[@]}" --lengths 131072 --out "$OUT/attn_pytorch_128k.json"
if ((${#FLEX[@]})); then
    step attn_flex 80 "$PY" "${ATTN[@]}" --lengths 8192,32768,131072 --flex --out "$OUT/attn_flex.json"
fi

TRAIN=(benchmarks/bench_train.py --device cuda --size paper --dtype bfloat16 --lengths 8192 --batch-tokens 8192
    --presets w8s8-1kv --warmup 5)
step train_pytorch 75 "$PY" "${TRAIN[@]}" --reps 200 --out "$OUT/train_pytorch.json"
if ((${#FLEX[@]})); then
    step train_flex 60 "$PY" "${TRAIN[@]}" --reps 100 --flex --out "$OUT/train_flex.json"
fi

# the paper profile's launch command for w8s8-1kv, on a shortened copy of its run config
torchrun_check() {
    local plan="$OUT/plan" run="$OUT/torchrun_run" short="$OUT/plan/configs/short" cmd pid waited
    "$PY" -c "from phasekv.cli import main; main()" reproduce --profile paper --plan --out "$plan" >"$plan.txt" ||
        return 1
    cmd=$(grep -m1 -- "--config $plan/configs/w8s8-1kv/run.json" "$plan.txt")
    echo "the profile's command: $cmd"
    "$PY" - "$plan/configs/w8s8-1kv/run.json" "$short" <<'EOF' || return 1
import dataclasses, sys
from pathlib import Path
from phasekv.train.config import load_run_config, save_run_config
config = load_run_config(sys.argv[1])
short = dataclasses.replace(config, steps=30, batch_size=8, checkpoint_every=10, keep_checkpoints=2, log_every=5,
                            val_every=0, val_batches=1, gate_every=0, gate_steps=())
print("shortened:", save_run_config(short, Path(sys.argv[2])))
EOF
    cmd=${cmd/torchrun/$PY -m torch.distributed.run}  # torchrun of the same Python
    cmd=${cmd/--nproc_per_node 8/--nproc_per_node 1}
    cmd=${cmd/$plan\/configs\/w8s8-1kv\/run.json/$short/run.json}
    cmd=${cmd/$plan\/runs\/w8s8-1kv/$run}
    echo "launch 1 (stopped after its first checkpoint): $cmd --no-progress"
    $cmd --no-progress &
    pid=$!
    waited=0
    until ls -d "$run"/checkpoints/step_* >/dev/null 2>&1 || ! kill -0 $pid 2>/dev/null || ((waited > 600)); do
        sleep 0.5
        waited=$((waited + 1))
    done
    kill -TERM $pid 2>/dev/null
    wait $pid
    echo "after launch 1: $(ls "$run/checkpoints")"
    echo "launch 2 (the same command: resumes): $cmd --no-progress"
    $cmd --no-progress || return 1
    echo "after launch 2: $(ls "$run/checkpoints")"
    echo "log.jsonl:"
    cat "$run/log.jsonl"
    rm -rf "$run/checkpoints"  # gigabytes of weights and optimiser state: not for $OUT
}
export -f torchrun_check
export OUT PY
step torchrun 120 bash -c torchrun_check

echo "== done; everything is in $OUT" | tee -a "$SUMMARY"
