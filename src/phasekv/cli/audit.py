"""`phasekv audit MODEL`: one command from a model to its phase verdict (`phasekv.studies.audit`)."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

import typer

from phasekv.cli.errors import one_line_errors
from phasekv.cli.options import FieldGroup, comma_list, expand_groups
from phasekv.cli.scoring import ENDPOINT, SCORING
from phasekv.studies.audit.options import DEFAULT_BUDGET_S, AuditOptions, parse_duration
from phasekv.studies.flags import Flag
from phasekv.studies.probe.registry import seed_flag

DEFAULTS = AuditOptions()
DEFAULT_BUDGET = f"{DEFAULT_BUDGET_S / 60:g}m"  # as --budget takes it
DESIGN = FieldGroup(  # the `AuditOptions` fields `phasekv audit` sets
    DEFAULTS,
    dict(
        budget_s=(
            str,
            typer.Option(
                DEFAULTS.budget_s,
                "--budget",
                help=f"wall time for the whole audit, e.g. 10m, 90s, 1h (default {DEFAULT_BUDGET} unless --mde)",
            ),
        ),
        mde_points=Flag(
            "the largest minimum detectable effect (points) that backs a null (default 20): a run that "
            "could miss a larger weak phase reads 'inconclusive: could miss a weak phase of up to N points', "
            "and an audit whose budget buys no design that reaches it stops before scoring (unless --anyway); "
            "without --budget, the design is sized to reach it however long it takes; with one, the smallest "
            "design within the budget that reaches it",
            "--mde",
        ),
        anyway=Flag("score the design the budget buys even when its planned MDE does not reach --mde", "--anyway"),
        needle=Flag("also run the needle probe (default: when the budget leaves time for it)", "--needle/--no-needle"),
        probes=(
            str,
            typer.Option(
                DEFAULTS.probes,
                "--probes",
                help="comma-separated residue probes to run (the lookup, whose templates the screen compares, "
                "always runs first), e.g. lookup,needle; each is sized by what the budget leaves "
                "(default: the needle as --needle says)",
            ),
        ),
        templates=(str, typer.Option(",".join(DEFAULTS.templates), help="comma-separated templates to screen")),
        n_records=Flag("key-name records per lookup prompt", "--records", 2),
        stride=Flag(
            "period of the verdict (default: the model's or the press's compression stride, else half the modulus; "
            "printed with its reason)",
            min=1,
        ),
        seed=seed_flag(),
    ),
    parsers=dict(budget_s=parse_duration, templates=comma_list, probes=comma_list),
)


def default_out(model: Path | None, remote: dict, press: str | None) -> Path:
    """runs/audit/<the model folder's name, or the served model's>[-<press>], made file-safe."""
    name = remote["served_model"] if remote["url"] is not None else Path(model).resolve().name
    if press:
        name += "-" + press
    return Path("runs/audit") / re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("_")


def _model_args(model: Path | None, scoring: dict, remote: dict) -> str:
    """How an eval command names the audited model: as this command was given it."""
    import shlex

    if remote["url"] is not None:
        tokenizer = remote["tokenizer"] or model
        return (
            f"--endpoint {shlex.quote(remote['url'])} --served-model {shlex.quote(str(remote['served_model']))} "
            f"--tokenizer {shlex.quote(str(tokenizer))}"
        )
    return shlex.quote(str(model)) + (f" --press {shlex.quote(scoring['press'])}" if scoring["press"] else "")


@expand_groups
def audit_command(
    model: Path = typer.Argument(None, help="phasekv checkpoint or HF model folder (with --endpoint: its tokenizer)"),
    design: dict = DESIGN,
    scoring: dict = SCORING,
    remote: dict = ENDPOINT,
    out: Path = typer.Option(None, "--out", help="folder for the results and the report (default runs/audit/MODEL)"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress bars"),
) -> None:
    """Audit a model for phase-sensitive retrieval in one command: screen the templates, size the design from a
    budget or a target MDE (the plan is printed first), run the lookup (and the needle when there is time, or the
    --probes asked for), print the verdict and write the JSON results and the HTML report."""
    started = time.perf_counter()
    from phasekv.files import check_output

    with one_line_errors("audit"):
        chosen = DESIGN.build(design)
        options = replace(chosen, n_demos=min(chosen.n_demos, chosen.n_records - 1))  # demos are the other records
        if remote["url"] is None:
            if model is None:
                raise ValueError("give MODEL (a model folder) or --endpoint URL")
            if not model.is_dir():
                raise FileNotFoundError(f"no model folder at {model}")
        elif scoring["press"] is not None:
            raise ValueError("--press compresses a local model's cache: it cannot apply to --endpoint")
        out = out or default_out(model, remote, scoring["press"])
        check_output(out, directory=True)  # a bad path fails now, not after the probes
        from phasekv.auditing.run import run_audit
        from phasekv.cli.scoring import scorer_from_options

        scorer = scorer_from_options(model, scoring, remote)
        goal = (
            f"budget {design['budget_s'] or DEFAULT_BUDGET}, MDE bound {options.max_mde:g} points"
            if options.goal == "budget"
            else f"target MDE {options.mde_points:g} points"
        )
        typer.echo(f"audit of {remote['url'] or model} ({goal}), loaded in {time.perf_counter() - started:.0f} s")
        result = run_audit(
            scorer,
            options,
            out,
            started=started,
            model_args=_model_args(model, scoring, remote),
            echo=typer.echo,
            progress=not quiet,
        )
    typer.echo("")
    typer.echo(result.summary)
