"""Groups of typer options that several commands share, each defined once.

A command takes a whole group as one parameter whose default is the group (``scoring: dict = SCORING``) and
is decorated with :func:`expand_groups`. Typer then sees every option of the group in that parameter's place
(same flags, defaults and help as if written out), and the command receives their values as one dict.

A `FieldGroup` is a group of the fields of a study's options: its options default to that study's defaults, so
a default is written once, in the options class (or the named design a command starts from). A field's option is
given as a `Flag` (its name, help and smallest value; type and default come from the field) or, where it parses
text into another type, as (type, ``typer.Option``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import typer

from phasekv.studies.flags import Flag, field_default, field_type


def template(default: str):
    """The --template option of the lookup prompts."""
    from phasekv.tasks.templates import TEMPLATE_HELP

    return typer.Option(default, help=TEMPLATE_HELP)


def comma_list(text: str) -> tuple[str, ...]:
    """'a, b,,c' -> ('a', 'b', 'c')."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


class OptionGroup(dict):
    """Parameter name -> (type, ``typer.Option``/``typer.Argument``), in the order typer shows them."""


class FieldGroup(OptionGroup):
    """An `OptionGroup` of fields of `defaults`: each parameter that is named after one of its fields sets that
    field and defaults to its value there. `defaults` is an options dataclass instance (the class's own
    defaults, ``LookupOptions()``, or a named design such as ``ANALYSIS_LOOKUP``) or a dict (a design's table,
    such as a sweep's grid). Parameters that are no field of it (--threads beside --batch-size) pass through.

    `build` makes the options from the values given: `parsers` turn a field's typed text into its value (a
    comma list into a tuple), and a None value leaves the field at its default, so an option may show no
    default where it is long (flip's context) or differs between the commands sharing the option."""

    def __init__(self, defaults: Any, options: dict, parsers: dict[str, Callable[[Any], Any]] | None = None):
        super().__init__({name: _spelled(defaults, name, spec) for name, spec in options.items()})
        self.defaults = defaults
        self.parsers = parsers or {}

    def fields(self) -> list[str]:
        """The parameters that are fields of `defaults`, in the group's order."""
        if isinstance(self.defaults, dict):
            names = set(self.defaults)
        else:
            names = {field.name for field in dataclasses.fields(self.defaults)}
        return [name for name in self if name in names]

    def build(self, values: dict) -> Any:
        """`defaults` with every field's value from `values` (parsed; None: left at its default)."""
        given = {
            name: self.parsers.get(name, _unparsed)(values[name]) for name in self.fields() if values[name] is not None
        }
        if isinstance(self.defaults, dict):
            return {**self.defaults, **given}
        return dataclasses.replace(self.defaults, **given)


def _spelled(defaults: Any, name: str, spec: Flag | tuple) -> tuple:
    """(type, typer.Option) of field `name`: a `Flag` takes the field's type and default from `defaults`."""
    if not isinstance(spec, Flag):
        return spec
    flags = [spec.flag] if spec.flag else []
    return field_type(defaults, name), typer.Option(field_default(defaults, name), *flags, min=spec.min, help=spec.help)


def _unparsed(value: Any) -> Any:
    return value


def expand_groups(command: Callable[..., Any]) -> Callable[..., Any]:
    """Spell out the command's `OptionGroup` parameters for typer; call it with one dict per group."""
    signature = inspect.signature(command)
    groups: dict[str, OptionGroup] = {}
    parameters = []
    for parameter in signature.parameters.values():
        if not isinstance(parameter.default, OptionGroup):
            parameters.append(parameter)
            continue
        groups[parameter.name] = parameter.default
        parameters += [
            inspect.Parameter(name, parameter.kind, default=default, annotation=annotation)
            for name, (annotation, default) in parameter.default.items()
        ]

    @functools.wraps(command)
    def with_groups(**values: Any) -> Any:
        for group_name, group in groups.items():
            values[group_name] = {name: values.pop(name) for name in group}
        return command(**values)

    with_groups.__signature__ = signature.replace(parameters=parameters)
    with_groups.option_groups = groups  # what it spells out, for readers of the command's defaults
    return with_groups
