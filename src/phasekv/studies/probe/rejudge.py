"""Judge a stored residue probe's result (lookup, needle or any registered probe) again, from its per-prompt
records alone: nothing is scored.

A result's outcomes depend on the model and the prompts; its residue summary and phase verdict depend on the
statistics that turned those outcomes into a finding. When the statistics change (a new rule, a corrected
power simulation), `rejudge` recomputes the summary, the verdict with its minimum detectable effect and, where
the grid was moved, the grid-shift test, with the options the run recorded (seed, resamples, stride, chance
level, minimum effect), and says when and with which software it did. On an unchanged analysis it returns the
run's own numbers (tested). `phasekv reproduce` uses it for cells whose scoring is still valid; by hand:

    python -m phasekv.studies.probe.rejudge RESULT.json [OUT.json]

which writes OUT.json (default RESULT.rejudged.json beside it) and never RESULT.json itself: the input keeps
the verdict it was written with.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from phasekv.provenance import software_versions
from phasekv.stats.verdict import MAX_MDE_POINTS, rest_on_grid_shift

from . import registry
from .grid_shift import grid_shift_of_result, identical_prompts_of_result
from .scored import PromptScores
from .units import summarize_units

GRID_COLUMN = "correct_grid_offset_"


def rejudge(result: dict) -> dict:
    """`result` with "summary", "cell_accuracy" and "phase_test" recomputed from its "prompt_records" by the
    current statistics, and "rejudged" saying when and with what. Raises ValueError for a result that is not a
    run of a registered probe with per-prompt records."""
    records = result.get("prompt_records") or {}
    columns, unit = records.get("columns") or {}, records.get("unit")
    options = result.get("options") or {}
    if result.get("probe") not in registry.names() or not columns or f"n_{unit}s" not in options:
        raise ValueError(
            f"only the result of a residue probe ({', '.join(registry.names())}) with per-prompt records can be "
            "judged again"
        )
    n = len(columns["correct"])
    layout = np.ones(n, dtype=bool)  # the layout checks were made when the prompts were scored
    scores = PromptScores(
        correct=np.asarray(columns["correct"], dtype=float),
        logprob=np.asarray(columns["answer_logprob"], dtype=float),
        residue=np.asarray(columns["residue"]),
        unit=np.asarray(columns["unit"]),
        placement=np.asarray(columns["placement"]),
        target_position=np.asarray(columns["target_position"]),
        query_position=np.asarray(columns["query_position"]),
        answer_follows_key=layout,
        query_repeats_key=layout,
        prompt_id=identical_prompts_of_result(result),
    )
    phase = result["phase_test"]
    cells, summary, verdict = summarize_units(
        scores,
        options[f"n_{unit}s"],
        options["modulus"],
        options[f"placements_per_{unit}"],
        stride=result["stride"]["value"],
        model_stride=result["model"].get("compression_stride"),
        seed=int(result.get("seed", 0)),
        n_resamples=int(result["summary"]["bootstrap_resamples"]),
        unit=unit,
        chance=phase.get("chance"),
        min_effect=phase["min_effect_points"],
        max_mde=phase.get("max_mde_points", MAX_MDE_POINTS),
    )
    if any(name.startswith(GRID_COLUMN) for name in columns):
        shifted = grid_shift_of_result(result, alpha=verdict.alpha, min_effect=verdict.min_effect_points)
        verdict = rest_on_grid_shift(verdict, shifted)
    else:
        verdict = replace(verdict, basis=phase.get("basis", ""))
    return {
        **result,
        "summary": summary.to_dict(),
        "cell_accuracy": cells.round(6).tolist(),
        "phase_test": verdict.to_dict(),
        "rejudged": {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "software": software_versions(),
            "what": "summary and phase verdict recomputed from the per-prompt records; nothing was scored",
        },
    }


def main(argv: list[str] | None = None) -> None:
    from phasekv.files import WriteError, check_not_input
    from phasekv.results.record import write_results
    from phasekv.stats.format import format_verdict

    args = argv if argv is not None else sys.argv[1:]
    if len(args) not in (1, 2):
        raise SystemExit("usage: python -m phasekv.studies.probe.rejudge RESULT.json [OUT.json]")
    source = Path(args[0])
    out = Path(args[1]) if len(args) == 2 else source.with_suffix(".rejudged.json")
    try:
        check_not_input(out, [source], option="OUT.json")
        result = rejudge(json.loads(source.read_text()))
        write_results(result, out)
    except (ValueError, WriteError) as err:
        raise SystemExit(f"error: {err}") from None
    print(format_verdict(result["phase_test"]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
