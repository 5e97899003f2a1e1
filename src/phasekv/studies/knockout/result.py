"""The knockout map's result format (`phasekv knockout`, `phasekv.probe(model, "knockout")`) and the table the
command prints (`format_knockout`, `KnockoutResult.summary`). Numbers that can be undefined (a relative change
where the clean accuracy is 0) are `None`."""

from __future__ import annotations

import math
from typing import Annotated

from phasekv.results.base import Changes, Count, Proportions, Typed, TypedResult, within
from phasekv.studies.probe.result import StrideChoice

RelativeChanges = list[Annotated[float, within(-100.0, math.inf)] | None]  # in %: a knockout can lose all, no more


class KnockoutTarget(Typed):
    layer: Count
    kv_head: Count | None
    relative_change_by_phase: RelativeChanges
    relative_change_by_residue: RelativeChanges
    change_by_phase: Changes
    change_by_residue: Changes


class CleanAccuracy(Typed):
    accuracy_by_phase: Proportions
    accuracy_by_residue: Proportions


class KnockoutResult(TypedResult):
    """`phasekv knockout`: accuracy change by phase and residue when each head or layer is knocked out."""

    schema_prefix = ("phasekv.knockout/", "phasekv.analysis.knockout/")  # the second: files written before the rename

    mode: str
    modulus: int
    stride: StrideChoice
    clean: CleanAccuracy
    targets: list[KnockoutTarget]

    @property
    def summary(self) -> str:
        """What `phasekv knockout` prints: the relative accuracy change by phase of every knocked-out head or layer,
        under the clean accuracy by phase (`format_knockout`)."""
        return format_knockout(self.to_dict())

    def __str__(self) -> str:
        return self.summary

    @property
    def verdict(self) -> None:
        """None: a knockout map is a measurement of every head (or layer), not a test with a verdict; the phase
        verdict of the model is its lookup probe's (`phasekv.probe(model, "lookup").verdict`)."""
        return None

    def figure(self, name: str | None = None, interactive: bool = True) -> dict:
        """The report's knockout map of this result (`studies.knockout.figure.spec`): a Vega-Lite spec (a dict),
        shown in a notebook by `altair.Chart.from_dict(spec)`; `interactive=False` as the PNG draws it."""
        from phasekv.charts.labels import model_name
        from phasekv.studies.knockout import figure

        data = self.to_dict()
        return figure.spec(figure.map_block(data, name or model_name(data, "model")), interactive)


def _cell(value: float | None) -> str:
    return "   n/a" if value is None else f"{value:+6.0f}"


def format_knockout(result: dict) -> str:
    """Text table: one row per knocked-out head/layer, one column per phase (t_K mod S): the relative
    accuracy change in %; first row the clean accuracy by phase."""
    from phasekv.charts.labels import head_label

    stride = result["stride"]["value"]
    clean = result["clean"]
    head = f"{'target':<8}" + "".join(f"{'r=' + str(r):>7}" for r in range(stride)) + "   all"
    lines = [
        f"knockout ({result['mode']}): relative accuracy change (%) by phase t_K mod {stride}; "
        f"clean accuracy {100 * clean['accuracy']:.1f}% over {result['n_prompts']} prompts; "
        f"calibration {result['calibration']['n_unique_prompts']} prompts (disjoint)",
        head,
        f"{'clean %':<8}" + "".join(f"{100 * a:7.1f}" for a in clean["accuracy_by_phase"]),
    ]
    for row in result["targets"]:
        overall = None if clean["accuracy"] == 0 else 100 * (row["accuracy"] - clean["accuracy"]) / clean["accuracy"]
        cells = "".join(f" {_cell(v)}" for v in row["relative_change_by_phase"])
        lines.append(f"{head_label(row):<8}{cells} {_cell(overall)}")
    return "\n".join(lines)
