"""What every typed result shares: validation on load with errors that name the file and the field, the
untyped rest kept as it is, and writing back as the same JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ..files import write_text_atomic
from .text import results_json

Numbers = list[float | None]  # None where a number is undefined (e.g. a relative change from 0)


class ResultFileError(ValueError):
    """A result file that cannot be used; the message names the file and the field."""


class Typed(BaseModel):
    """A part of a result: its typed fields checked, any other field kept."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)


class TypedResult(Typed):
    """A whole result file. Subclasses type the fields their readers rely on and say how a file of their
    kind is recognised: by its "schema" prefix, else (files without one) by keys only it has."""

    schema_prefix: ClassVar[str] = ""
    recognising_keys: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def recognises(cls, data: dict) -> bool:
        if cls.schema_prefix:
            return str(data.get("schema", "")).startswith(cls.schema_prefix)
        return bool(cls.recognising_keys) and cls.recognising_keys <= data.keys()

    def extra(self, name: str, default: Any = None) -> Any:
        """A field the class does not type (e.g. "prompt_records", "position_stats", "training")."""
        return (self.model_extra or {}).get(name, default)

    def to_dict(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        return results_json(self.to_dict())

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        write_text_atomic(path, self.to_json())
        return path

    @classmethod
    def from_dict(cls, data: object, where: str = "result"):
        """Validate `data`; raises ResultFileError naming `where` and the first bad fields."""
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'result'}: {e['msg']}" for e in err.errors()[:3]
            )
            more = f" (and {err.error_count() - 3} more)" if err.error_count() > 3 else ""
            raise ResultFileError(f"{where}: not a usable {cls.__name__}: {problems}{more}") from None

    @classmethod
    def load(cls, path: str | Path):
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ResultFileError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
        except OSError as err:
            raise ResultFileError(f"{path}: cannot be read ({err.strerror})") from None
        return cls.from_dict(data, str(path))
