"""`python -m phasekv.train [OPTIONS]`: the training command alone, for torchrun."""

from phasekv.train.cli import train_app

train_app()
