"""Write the mutation report from `mutmut results --all true` output: the score per module and every mutant
that survived, with its diff and the explanation from scripts/mutation_notes.tsv (mutant name or fnmatch
pattern, tab, why it is equivalent or which test kills it now).

mutants/ is a local cache, so a run rarely holds every module: a module none of whose mutants ran in this cache
keeps its counts and survivors from the report being replaced, marked "earlier run" (its survivors explained
with today's notes)."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

KILLED = {"killed", "caught by type check"}
NOTES = Path(__file__).with_name("mutation_notes.tsv")


def module_of(name: str) -> str:
    return re.split(r"\.x_|\.xǁ", name, maxsplit=1)[0]


def diff_of(name: str) -> str:
    shown = subprocess.run([sys.executable, "-m", "mutmut", "show", name], capture_output=True, text=True).stdout
    lines = [line for line in shown.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    return " / ".join(line.strip() for line in lines)[:300]


EARLIER = " (earlier run)"
SURVIVOR = re.compile(r"^- `([^`]+)` \(([^)]+)\): `(.*)`: .*$")


def earlier_results(text: str) -> tuple[dict[str, Counter], dict[str, str], dict[str, list]]:
    """(counts, seconds, survivors as (name, state, diff)) per module of a report this script wrote."""
    counts: dict[str, Counter] = {}
    seconds: dict[str, str] = {}
    survivors: dict[str, list] = defaultdict(list)
    module = None
    for line in text.partition("<!-- generated -->")[2].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| phasekv."):
            name = cells[0].removesuffix(EARLIER)
            total, *numbers = (int(c) for c in cells[1:7])
            states = ("killed", "survived", "no tests", "timeout", "not checked")
            counts[name] = Counter(dict(zip(states, numbers, strict=True)))
            counts[name]["other"] = total - sum(counts[name].values())  # suspicious, segfault: listed as survivors
            seconds[name] = cells[9]
        elif line.startswith("### "):
            module = line[4:].removesuffix(EARLIER).strip()
        elif module and (match := SURVIVOR.match(line)):
            survivors[module].append(match.groups())
    return counts, seconds, survivors


def main(results: str, times: str, out: str) -> None:
    status = {}
    for line in Path(results).read_text().splitlines():
        name, _, state = line.strip().rpartition(": ")
        if name:
            status[name] = state
    notes = []
    if NOTES.exists():
        for line in NOTES.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                pattern, _, why = line.partition("\t")
                notes.append((pattern.strip(), why.strip()))
    seconds = defaultdict(int)
    for line in Path(times).read_text().splitlines() if Path(times).exists() else []:
        module, secs, _ = line.split("\t")
        seconds[module] += int(secs)
    by_module: dict[str, Counter] = defaultdict(Counter)
    survivors = defaultdict(list)
    for name, state in sorted(status.items()):
        module = module_of(name)
        by_module[module][state] += 1
        if state not in KILLED and state != "not checked":
            survivors[module].append((name, state, None))
    text = Path(out).read_text() if Path(out).exists() else ""
    old_counts, old_seconds, old_survivors = earlier_results(text)
    labels = {}
    for module, old in old_counts.items():
        now = by_module.get(module, Counter())
        if sum(now.values()) == now["not checked"] and sum(old.values()) > old["not checked"]:
            by_module[module], survivors[module] = old, old_survivors.get(module, [])
            seconds[module], labels[module] = old_seconds[module], EARLIER
    rows = ["| module | mutants | killed | survived | no tests | timeout | not run | score | explained | seconds |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for module, counts in sorted(by_module.items()):
        total = sum(counts.values())
        run = total - counts["not checked"]
        killed = sum(counts[s] for s in KILLED) + counts["timeout"]
        explained = sum(1 for name, *_ in survivors[module] if any(fnmatch.fnmatch(name, p) for p, _ in notes))
        score = f"{100 * killed / run:.1f}%" if run else "-"
        adjusted = f"{100 * (killed + explained) / run:.1f}%" if run else "-"
        rows.append(
            f"| {module}{labels.get(module, '')} | {total} | {killed - counts['timeout']} | {counts['survived']} | "
            f"{counts['no tests']} | {counts['timeout']} | {counts['not checked']} | {score} | {adjusted} | "
            f"{seconds.get(module, '')} |"
        )
    body = ["## Scores", "", "Score = (killed + timed out) / mutants run; explained = the score counting survivors",
            "explained below as equivalent (or left on purpose) too.", "", *rows, "", "## Survivors", ""]  # fmt: skip
    for module, items in sorted(survivors.items()):
        body += [f"### {module}{labels.get(module, '')}", ""]
        for name, state, diff in items:
            why = next((w for p, w in notes if fnmatch.fnmatch(name, p)), "**not yet explained**")
            body.append(f"- `{name}` ({state}): `{diff_of(name) if diff is None else diff}`: {why}")
        body.append("")
    head = text.split("<!-- generated -->")[0].rstrip() if text else "# Mutation testing"
    Path(out).write_text(head + "\n\n<!-- generated -->\n\n" + "\n".join(body) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
