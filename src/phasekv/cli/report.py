"""`phasekv report RESULTS_DIR --out report.html` (the lead mounts `report_command`)."""

from __future__ import annotations

from pathlib import Path

import typer


def report_command(
    results_dir: Path = typer.Argument(..., help="directory (or one file) of result JSON files", exists=True),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="the HTML file to write"),
    model: Path | None = typer.Option(
        None, "--model", help="a phasekv checkpoint whose gate parameters drive the compressor illustration"
    ),
    pngs: bool = typer.Option(True, "--pngs/--no-pngs", help="also write PNG figures beside the HTML"),
) -> None:
    """Write a self-contained interactive HTML report (and PNG figures) from result JSON files."""
    from phasekv.files import WriteError, check_not_input, check_output
    from phasekv.report import ReportInputError, build_report

    try:
        check_output(out)
        check_not_input(out, [results_dir], suffix=".json")  # every .json in a results folder is read as a result
        compressor = None
        if model is not None:  # reading a checkpoint needs torch: the report itself does not
            from phasekv.studies.gates.illustration import from_checkpoint

            try:
                compressor = from_checkpoint(model)
            except Exception as err:  # noqa: BLE001 (any unreadable checkpoint: asked for, so an error)
                raise ValueError(f"--model {model} cannot be read: {err}") from None
        result = build_report(results_dir, out, compressor=compressor, pngs=pngs)
    except (ReportInputError, ValueError, WriteError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        typer.echo(f"interrupted: {out} was not written (an earlier report there, if any, is unchanged)", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"wrote {result.html} ({', '.join(result.sections)})")
    if result.pngs:
        typer.echo(f"figures: {result.pngs[0].parent} ({len(result.pngs)} PNG)")
    for note in result.notes:
        typer.echo(f"note: {note}")
