"""Small helpers shared by the section modules."""

from __future__ import annotations

import math
from pathlib import Path


def num(value, digits: int = 4):
    """A JSON-safe rounded float (None for None, NaN and infinities)."""
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        return None
    return round(value, digits)


def nums(values, digits: int = 4, scale: float = 1.0) -> list:
    return [None if v is None else num(float(v) * scale, digits) for v in values]


def model_name(data: dict, fallback: str) -> str:
    """A readable name for the model a result came from: its label, else its checkpoint path
    (`<run>/checkpoints/step_000900` -> `<run> · step 900`), else `fallback`."""
    for key in ("label", "run"):
        if isinstance(data.get(key), str) and data[key]:
            return data[key]
    path = (data.get("model") or {}).get("path") or data.get("run_dir")
    if not path:
        return fallback
    p = Path(path)
    if p.name.startswith("step_") and p.parent.name == "checkpoints":
        try:
            return f"{p.parent.parent.name} · step {int(p.name[5:])}"
        except ValueError:
            return f"{p.parent.parent.name} · {p.name}"
    return p.name
