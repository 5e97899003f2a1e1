"""What every typed result shares (readable without torch): validation on load with errors that name the
file and the field (`ResultFileError`), the untyped rest kept as it is, writing back as the same JSON.

Each study defines its own result format beside its code (`phasekv.studies.<study>.result`);
`phasekv.studies.registry.RESULT_TYPES` maps the report's kinds to them. `record` is the writing side every run
shares: the envelope (model, scoring settings, software, timing), the per-prompt records and the atomic JSON writer
(`write_results`); it reads the run's scorer, so it is not imported here.
"""

from .base import Numbers, ResultFileError, Typed, TypedResult

__all__ = ["Numbers", "ResultFileError", "Typed", "TypedResult"]
