"""Typed result formats, readable without torch: what the probes and analyses write, as the report, the
reproduction tables and any user script read it back.

- `probe.ProbeResult`: a lookup or needle result (`phasekv eval lookup|needle`), validated on load;
  `ResultFileError` names the file and the field that is wrong.
- `gates.snapshot_rows`: gate-metric rows from a training run's gate snapshot.
"""

from .gates import snapshot_rows
from .probe import PROBE_SCHEMA, ProbeResult, ResultFileError, learned

__all__ = ["PROBE_SCHEMA", "ProbeResult", "ResultFileError", "learned", "snapshot_rows"]
