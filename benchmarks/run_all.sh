#!/usr/bin/env bash
# Run every benchmark with its default sizes; each prints its table and writes JSON beside it.
#
#   benchmarks/run_all.sh [OUT_DIR]        (default: out/bench-YYYYmmdd-HHMMSS; out/ is git-ignored)
#   THREADS=2 benchmarks/run_all.sh        (torch threads for every script; default 1, see README)
#   ONLY="attention decode" benchmarks/run_all.sh   (a subset: attention decode train compressor long_context lookup)
#
# OUT_DIR gets <name>.txt (the printed table) and <name>.json for each benchmark, plus env.txt
# (date, uptime load average at start and end, CPU count, torch version, git commit).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
THREADS=${THREADS:-1}
OUT=${1:-out/bench-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"

{
  echo "date: $(date -Is)"
  echo "start: $(uptime)"
  echo "cpus: $(nproc)"
  echo "torch: $($PY -c 'import torch; print(torch.__version__)')"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "threads: $THREADS"
} | tee "$OUT/env.txt"

ONLY=${ONLY:-attention decode train compressor long_context lookup}
wanted() { [[ " $ONLY " == *" $1 "* ]]; }

run() {  # run NAME SCRIPT ARGS...: table to stdout and NAME.txt, JSON to NAME.json
  local name=$1 script=$2
  shift 2
  wanted "$name" || return 0
  echo
  echo "== $name: $script $* ($(uptime | sed 's/.*load/load/'))"
  local start=$SECONDS
  "$PY" "benchmarks/$script" "$@" --out "$OUT/$name.json" | tee "$OUT/$name.txt"
  echo "($name: $((SECONDS - start)) s)"
}

run attention bench_attention.py --lengths 1024,4096,8192,16384 --threads "$THREADS"
run decode bench_decode.py --threads "$THREADS"
run train bench_train.py --threads "$THREADS"
run compressor bench_compressor.py --threads "$THREADS"
run long_context bench_long_context.py --threads "$THREADS"

# bench_lookup.py has no --out: its printed report is stored as JSON lines of text.
if wanted lookup; then
  echo
  echo "== lookup: bench_lookup.py --threads 1 ($(uptime | sed 's/.*load/load/'))"
  start=$SECONDS
  "$PY" benchmarks/bench_lookup.py --threads 1 | tee "$OUT/lookup.txt"
  "$PY" -c 'import json, sys; print(json.dumps({"stdout": open(sys.argv[1]).read().splitlines()}, indent=2))' \
    "$OUT/lookup.txt" > "$OUT/lookup.json"
  echo "(lookup: $((SECONDS - start)) s)"
fi

echo "end: $(uptime)" | tee -a "$OUT/env.txt"
echo "results in $OUT"
