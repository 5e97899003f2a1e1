"""What every typed result shares (readable without torch): validation on load with errors that name the
file and the field (`ResultFileError`), the untyped rest kept as it is, writing back as the same JSON.

Each study defines its own result format beside its code (`phasekv.studies.<study>.result`);
`phasekv.studies.registry.RESULT_TYPES` maps the report's kinds to them.
"""

from .base import Numbers, ResultFileError, Typed, TypedResult

__all__ = ["Numbers", "ResultFileError", "Typed", "TypedResult"]
