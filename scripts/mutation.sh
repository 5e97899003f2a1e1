#!/usr/bin/env bash
# Mutation testing of the measuring side (mutmut; configured in pyproject.toml [tool.mutmut]), one module at
# a time, nice'd, each module bounded by MUTATION_MODULE_SECONDS, then a report of the score per module and
# every surviving mutant (docs/mutation.md unless MUTATION_REPORT says otherwise).
#
#   bash scripts/mutation.sh                       # every configured module
#   bash scripts/mutation.sh phasekv.stats.spread  # some modules (dotted names)
#
# Not part of CI: on a 2-core machine the whole set takes tens of minutes. Results are cached in mutants/,
# so a rerun only runs the mutants of functions that changed (rm -rf mutants for a fresh run).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python
MUTMUT=("$PY" -m mutmut)
"$PY" -c "import mutmut" 2>/dev/null || { echo "mutmut is not installed: pip install -e '.[mutation]'" >&2; exit 2; }
LIMIT=${MUTATION_MODULE_SECONDS:-1200}
REPORT=${MUTATION_REPORT:-docs/mutation.md}
CHILDREN=${MUTATION_CHILDREN:-2}
export OMP_NUM_THREADS=1 PYTHONPATH=  # the mutated copy in mutants/src must be the phasekv that tests import

if [ $# -gt 0 ]; then
  MODULES=("$@")
else
  mapfile -t MODULES < <("$PY" - <<'PY'
import tomllib
for path in tomllib.load(open("pyproject.toml", "rb"))["tool"]["mutmut"]["only_mutate"]:
    print(path.removeprefix("src/").removesuffix(".py").replace("/", "."))
PY
)
fi

LOG=mutants/mutation-times.tsv
mkdir -p mutants
for module in "${MODULES[@]}"; do
  start=$(date +%s)
  status=done
  timeout "$LIMIT" nice -n 10 "${MUTMUT[@]}" run --max-children "$CHILDREN" "$module.*" >/dev/null 2>&1 || status="stopped (rc $?)"
  seconds=$(( $(date +%s) - start ))
  printf '%s\t%s\t%s\n' "$module" "$seconds" "$status" >> "$LOG"
  echo "$module: ${seconds}s, $status"
done

"${MUTMUT[@]}" results --all true > mutants/results.txt 2>/dev/null || true
"$PY" scripts/mutation_report.py mutants/results.txt "$LOG" "$REPORT"
echo "report: $REPORT"
