"""Result files as text: indented JSON with every list of numbers on one line, so per-prompt records stay
compact and a diff shows which field changed."""

from __future__ import annotations

import json
import re

_SCALAR = r"(?:-?[0-9][0-9.eE+-]*|true|false|null|NaN|-?Infinity)"
# a list of scalars as json.dumps(indent=...) spreads it, one item a line (strings never hold a raw newline)
_SPREAD_LIST = re.compile(rf"\[\n\s+({_SCALAR}(?:,\n\s+{_SCALAR})*)\n\s*\]")


def results_json(result: dict) -> str:
    """Indented JSON with every list of numbers on one line (per-prompt records stay compact)."""
    text = json.dumps(result, indent=2)
    return _SPREAD_LIST.sub(lambda m: "[" + ", ".join(item.strip() for item in m[1].split(",")) + "]", text) + "\n"
