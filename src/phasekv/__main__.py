"""`python -m phasekv`: the same command line as `phasekv`."""

from .cli import main

main()
