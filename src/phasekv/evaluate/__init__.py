"""What the studies share to run: the results envelope and its atomic JSON writer (`write_results`), the stride
of the period check. The lookup and needle probes run in `phasekv.studies.probe.run`.
"""

from .record import SCHEMA, write_results
from .stride import resolve_period, resolve_stride

__all__ = [
    "SCHEMA",
    "resolve_period",
    "resolve_stride",
    "write_results",
]
