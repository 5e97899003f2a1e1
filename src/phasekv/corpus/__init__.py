"""Training data: the synthetic retrieval mixture and memory-mapped token files.

Modules: `batch` (Batch, the DataSource protocol), `heldout` (animal→name pairs kept out of
training), `templates` (record/query formats), `mixture` (the synthetic mixture), `tokens`
(token-file format and random-window loader), `tokenize` (text files → token files).
"""

from phasekv.corpus.batch import Batch, DataSource
from phasekv.corpus.heldout import HeldOutPairs, assign_names
from phasekv.corpus.mixture import MixtureConfig, MixtureSource, make_sequence
from phasekv.corpus.tokens import TokenWindowSource, open_split, read_header

__all__ = [
    "Batch",
    "DataSource",
    "HeldOutPairs",
    "MixtureConfig",
    "MixtureSource",
    "TokenWindowSource",
    "assign_names",
    "make_sequence",
    "open_split",
    "read_header",
]
