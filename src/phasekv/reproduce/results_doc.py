"""The results document a profile run writes (`OUT/<profile>.md`, its figure beside it as
`OUT/<profile>-residues.png`): the table, what produced it (command, commit, date, machine, software, threads) and
the wall time of every stage. The copy under docs/results/ is this file, so a published table cannot drift from
what the code writes.
"""

from __future__ import annotations

from pathlib import Path

from ..provenance import provenance
from .profiles import Profile

MACHINE_NOTE = (
    "Training repeats exactly on one machine (same code, software and threads); on another machine of the same "
    "kind its floats differ in the third digit, so validation losses and accuracies there may differ slightly "
    "from this table's; compare verdicts and intervals, not digits."
)


def figure_name(profile: Profile) -> str:
    return f"{profile.name}-residues.png"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} s"


def results_document(profile: Profile, out: Path, summary: dict, table: str, jobs: int, with_figure: bool) -> str:
    """The markdown of one profile run: `summary` is the run's summary.json, `table` its markdown table."""
    found = provenance()
    code, software, machine = found["code"], found["software"], found["machine"]
    commit = code.get("commit")
    commit_text = "not a git checkout" if commit is None else commit[:12]
    if commit is not None and code.get("local_changes"):
        commit_text += " with local changes"
    load = machine["load_average"]
    packages = ", ".join(f"{name} {version}" for name, version in software.items() if name != "python")
    trained_now = summary["train_seconds"]
    training = summary["training_seconds"]
    runs = ", ".join(
        f"{name} {_seconds(training.get(name))}" + ("" if name in trained_now else " (reused)") for name in training
    )
    walls = summary["wall_seconds"]
    stages = ", ".join(f"{name} {_seconds(seconds)}" for name, seconds in walls.items() if name != "total")
    lines = [
        f"# Results of the `{profile.name}` profile",
        "",
        f"{profile.description[0].upper()}{profile.description[1:]}.",
        "",
        f"Written by `phasekv reproduce --profile {profile.name} --out {out}` on {found['date'][:10]} "
        f"({found['date']}).",
        "",
        f"- **code**: phasekv {code['version']}, commit {commit_text}",
        f"- **machine**: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} usable), "
        f"{machine['memory_gib']} GiB, {machine['os']}; load average at the end "
        + ("unknown" if load is None else " / ".join(f"{x:.1f}" for x in load))
        + " (1 / 5 / 15 min)",
        f"- **software**: Python {software['python']}, {packages}",
        f"- **threads**: training {jobs} one-thread process(es) at a time; evaluation one-thread workers",
        f"- **wall time**: {stages}; total {_seconds(walls.get('total'))}",
        f"- **training per run** (from its log): {runs}",
        "",
        MACHINE_NOTE,
        "",
        table,
    ]
    if with_figure:
        lines += ["", f"![accuracy by residue]({figure_name(profile)})"]
    return "\n".join(lines) + "\n"
