"""`python -m phasekv.train --config run.json --out DIR [--resume] [--no-progress]`: one training run from its run
file, the form torchrun launches (`torchrun --nproc_per_node 8 -m phasekv.train --config run.json --out DIR`, as
`phasekv reproduce --plan` writes it) and the profile runner spawns. `--out DIR --resume` alone continues the run
saved in DIR. Run options given as flags are `phasekv train`'s job; this entry stays below the command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from phasekv.config import ConfigError
from phasekv.files import check_output
from phasekv.model import CheckpointError
from phasekv.train.config import RUN_FILE, load_run_config
from phasekv.train.loop import train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m phasekv.train",
        description="Train one run from its run file (phasekv train takes run options as flags).",
    )
    parser.add_argument("--config", type=Path, help="the run file (run.json); default: the one saved in --out")
    parser.add_argument("--out", type=Path, required=True, help="run directory (checkpoints, logs, gate snapshots)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        check_output(args.out, directory=True)  # a bad path fails now, not after the data and model are built
        if args.config is None and not (args.resume and (args.out / RUN_FILE).is_file()):
            parser.error(f"--config is needed unless --resume continues a run saved in --out ({args.out / RUN_FILE})")
        run = load_run_config(args.config if args.config is not None else args.out)
        result = train(run, args.out, resume=args.resume, progress=args.progress)
    except (ConfigError, CheckpointError, FileNotFoundError, ValueError) as error:
        print(f"python -m phasekv.train: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps({"checkpoint": str(result.checkpoint), "step": result.step, **result.metrics}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
