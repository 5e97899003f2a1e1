"""Small helpers shared by the section modules."""

from __future__ import annotations

import math
from pathlib import Path

from phasekv.results.base import press_label


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


def head_label(row: dict) -> str:
    """'L3' for a whole layer, 'L3H1' for a KV head (a row of a knockout or gate result)."""
    return f"L{row['layer']}" if row.get("kv_head") is None else f"L{row['layer']}H{row['kv_head']}"


def given_name(data: dict) -> str | None:
    """The name a result gives its model: its label or run, else the name an endpoint serves it under (an audit
    of a served model records no path); None when it gives none."""
    served = (data.get("model") or {}).get("served_model")
    for name in (data.get("label"), data.get("run"), served):
        if isinstance(name, str) and name:
            return name
    return None


def model_name(data: dict, fallback: str) -> str:
    """A readable name for the model a result came from: its `given_name`, else its checkpoint path
    (`<run>/checkpoints/step_000900` -> `<run> · step 900`) or folder, with the press it was scored through
    (`qwen with press chunkkv8`), else `fallback`."""
    if given_name(data):
        return given_name(data)
    model = data.get("model") or {}
    path = model.get("path") or data.get("run_dir")
    if not path:
        return fallback
    p = Path(path)
    name = p.name
    if p.name.startswith("step_") and p.parent.name == "checkpoints":
        try:
            name = f"{p.parent.parent.name} · step {int(p.name[5:])}"
        except ValueError:
            name = f"{p.parent.parent.name} · {p.name}"
    return name + press_label(model)


def fmt(value, digits: int = 1) -> str:
    """A number for a table cell, "–" for None."""
    return "–" if value is None else f"{value:.{digits}f}"
