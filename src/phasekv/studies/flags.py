"""How a command line spells one field of a study's options. The field's default and type come from the options
class, so a `Flag` holds only what the class cannot say: the flag's name, its help and its smallest value. No typer
here: studies declare flags, the CLI turns them into options (`cli.options.FieldGroup`)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Flag:
    """One option field on the command line: `flag` (None: --field-name), its help, and the smallest value it
    takes (None: any)."""

    help: str
    flag: str | None = None
    min: int | None = None


def field_type(defaults: Any, name: str) -> type:
    """The type a command line parses field `name` of `defaults` as: an options dataclass's annotation without None
    (`int | None` -> int), or the type of a design table's (a dict's) value."""
    if isinstance(defaults, dict):
        return type(defaults[name])
    if not dataclasses.is_dataclass(defaults):
        raise TypeError(f"flags set fields of an options dataclass or a dict, not {type(defaults).__name__}")
    hint = typing.get_type_hints(type(defaults))[name]
    kinds = [kind for kind in typing.get_args(hint) if kind is not type(None)]
    return kinds[0] if kinds else hint


def field_default(defaults: Any, name: str) -> Any:
    return defaults[name] if isinstance(defaults, dict) else getattr(defaults, name)
