"""Training data: the synthetic retrieval mixture and memory-mapped token files.

Modules: `batch` (Batch, the DataSource protocol), `token_patterns` (record/query formats), `mixture`
(the synthetic mixture), `tokens` (token-file format and random-window loader), `tokenize` (text
files → token files). The animal→name pairs kept out of training are `phasekv.tasks.heldout`'s
(evaluation draws from them too).
"""

from phasekv.corpus.batch import Batch, DataSource
from phasekv.corpus.mixture import MixtureConfig, MixtureSource, make_sequence
from phasekv.corpus.tokens import TokenWindowSource, open_split, read_header
from phasekv.tasks.heldout import HeldOutPairs, assign_names

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
