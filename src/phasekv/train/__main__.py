"""`python -m phasekv.train [OPTIONS]`: the training command alone, for torchrun."""

from phasekv.cli.train import train_app

train_app()
