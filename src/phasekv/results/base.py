"""What every typed result shares: validation on load with errors that name the file and the field, the
untyped rest kept as it is, and writing back as the same JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from ..files import write_text_atomic
from .text import results_json

Numbers = list[float | None]  # None where a number is undefined (e.g. a relative change from 0)
TOLERANCE = 1e-4  # how far a stored statistic may sit from what its parts give (files round to ~6 digits)


class ResultFileError(ValueError):
    """A result file that cannot be used; the message names the file and the field."""


class FieldProblems(ValueError):
    """Raised by a result's validator: each problem is (field path inside the validated part, message), so
    the error names the whole path, e.g. ``summary.accuracy[3]: 40.0 is outside [0, 1]``."""

    def __init__(self, problems: list[tuple[str, str]]):
        super().__init__("; ".join(f"{field}: {message}" for field, message in problems))
        self.problems = problems


def _bound(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:g}"


def outside(value: float, low: float, high: float) -> str | None:
    """The message for a number outside [low, high] (NaN is outside everything), else None."""
    if low <= float(value) <= high:
        return None
    return f"{value!r} is outside [{_bound(low)}, {_bound(high)}]"


def range_problems(field: str, values: Any, low: float, high: float) -> Iterator[tuple[str, str]]:
    """(path, message) for every number in `values` (a number, or nested lists; None skipped) outside [low, high]."""
    if values is None or isinstance(values, bool):
        return
    if isinstance(values, int | float):
        message = outside(values, low, high)
        if message:
            yield field, message
        return
    if isinstance(values, Iterable) and not isinstance(values, str | dict):
        for i, value in enumerate(values):
            yield from range_problems(f"{field}[{i}]", value, low, high)


def within(low: float, high: float):
    """An annotation bounding a number to [low, high], e.g. ``Annotated[float, within(0, 1)]``."""

    def check(value):
        message = None if value is None else outside(value, low, high)
        if message:
            raise PydanticCustomError("outside_range", message)
        return value

    return AfterValidator(check)


Proportion = Annotated[float, within(0.0, 1.0)]  # an accuracy, a share, an agreement rate
Points = Annotated[float, within(0.0, 100.0)]  # a gap or difference of accuracies in percentage points
Change = Annotated[float, within(-1.0, 1.0)]  # a difference of two proportions
Count = Annotated[int, within(0, math.inf)]
NonNegative = Annotated[float, within(0.0, math.inf)]
Proportions = list[Proportion | None]
Changes = list[Change | None]


def _path(loc: tuple) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _problems(err: ValidationError) -> list[str]:
    found = []
    for e in err.errors():
        where = _path(e["loc"])
        error = (e.get("ctx") or {}).get("error")
        if isinstance(error, FieldProblems):
            found += [f"{where + '.' if where else ''}{field}: {message}" for field, message in error.problems]
        else:
            found.append(f"{where or 'result'}: {e['msg']}")
    return found


def model_label(model: dict) -> str:
    """The scored model of a result's model record as a reader names it: the served model's name, else its
    folder, else its kind."""
    return str(model.get("served_model") or model.get("path") or model.get("kind", "model"))


def press_label(model: dict) -> str:
    """' with press chunkkv8' for a model scored through a press (a model record's "press"), else ''."""
    press = model.get("press")
    if not press:
        return ""
    return f" with press {press.get('spec', press) if isinstance(press, dict) else press}"


class Typed(BaseModel):
    """A part of a result: its typed fields checked, any other field kept."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)


class TypedResult(Typed):
    """A whole result file. Subclasses type the fields their readers rely on and say how a file of their
    kind is recognised: by its "schema" prefix (or one of several: a schema renamed keeps its old files), else
    (files without one) by keys only it has."""

    schema_prefix: ClassVar[str | tuple[str, ...]] = ""
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
            found = _problems(err)
            problems = "; ".join(found[:3])
            more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
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
