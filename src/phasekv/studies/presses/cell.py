"""One cell of the presses profile, in its own process: `python -m phasekv.studies.presses.cell CONFIG OUT`.

CONFIG is `run.cell_config`'s JSON; OUT receives the probe's result with the config under "cell", written
atomically; `phasekv.reproduce.presses.run_presses` then adds the cell's cache key, so only a cell with its key
is reused.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from phasekv.results.record import write_results
from phasekv.scoring import load_scorer
from phasekv.scoring.press_question import bind_question
from phasekv.studies.probe.registry import get
from phasekv.studies.probe.run import run_probe


def run(config: dict) -> dict:
    probe = get(config["probe"])
    options = probe.options(**config["options"])
    scorer = load_scorer(
        config["model"],
        press=config["press"],
        batch_size=config["batch_size"],
        threads=config["threads"],
        device=config.get("device", "cpu"),  # configs written before cells took a device ran on the CPU
    )
    bind_question(scorer, probe.question(scorer.tokenizer, options))
    result = run_probe(
        probe.name, scorer, options, progress=False, grid_shift=config["grid_shift"], n_resamples=config["resamples"]
    )
    return {**result, "label": config["label"], "cell": config}


def main(argv: list[str] | None = None) -> None:
    config_path, out = argv or sys.argv[1:]
    write_results(run(json.loads(Path(config_path).read_text())), out)


if __name__ == "__main__":
    main()
