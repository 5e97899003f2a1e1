"""Groups of typer options that several commands share, each defined once.

A command takes a whole group as one parameter whose default is the group (``scoring: dict = SCORING``) and
is decorated with :func:`expand_groups`. Typer then sees every option of the group in that parameter's place
(same flags, defaults and help as if written out), and the command receives their values as one dict.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import typer

TEMPLATE = typer.Option(
    "paper",
    help="record template: paper (the paper's token layout), natural ('cat: Bob,' lists, for pretrained LMs) "
    "or sentence ('The owner of the cat is Bob.')",
)


class OptionGroup(dict):
    """Parameter name -> (type, ``typer.Option``/``typer.Argument``), in the order typer shows them."""


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
    return with_groups
