"""No command restates a study's defaults: every option that sets a field of a study's options (a `FieldGroup`
option) defaults to that field's value in the study's defaults, or in the named design the command starts from,
as the click commands of `phasekv` show them."""

from __future__ import annotations

import dataclasses

import pytest
import typer

from phasekv.cli import app
from phasekv.cli.options import FieldGroup
from phasekv.studies.cycle.options import format_deltas, parse_deltas
from phasekv.studies.probe.registry import names

# the commands that make a study's options; each must read every default it shows from them
STUDY_COMMANDS = {
    *(f"eval {probe}" for probe in names()),  # every registered residue probe has its command
    "eval flip",
    "knockout",
    "gates",
    "cycle",
    "theory theorem1",
    "theory theorem2",
    "theory sweep",
    "audit",
    "conformance",
}


def _leaf_commands(command, path=()):
    """(name, click command) of every command under `command`, subcommands spelled out ('eval lookup')."""
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield " ".join(path), command
        return
    for name, subcommand in subcommands.items():
        yield from _leaf_commands(subcommand, (*path, name))


COMMANDS = dict(_leaf_commands(typer.main.get_command(app)))


def _field_groups(command) -> dict[str, FieldGroup]:
    """The command's `FieldGroup`s by parameter, read off the function `expand_groups` made for typer."""
    callback = command.callback
    while callback is not None and not hasattr(callback, "option_groups"):
        callback = getattr(callback, "__wrapped__", None)
    groups = {} if callback is None else callback.option_groups
    return {name: group for name, group in groups.items() if isinstance(group, FieldGroup)}


def _value(options, field: str):
    return options[field] if isinstance(options, dict) else getattr(options, field)


def _field_names(options) -> set[str]:
    return set(options) if isinstance(options, dict) else {field.name for field in dataclasses.fields(options)}


def test_every_study_command_reads_its_defaults_from_field_groups():
    assert {name for name, command in COMMANDS.items() if _field_groups(command)} == STUDY_COMMANDS


@pytest.mark.parametrize("name", sorted(STUDY_COMMANDS))
def test_every_field_option_defaults_to_its_field(name):
    command = COMMANDS[name]
    shown = {param.name: param for param in command.params}
    groups = _field_groups(command)
    drifted = []
    for group_name, group in groups.items():
        assert group.fields(), f"{name}: the group {group_name} sets no field of its defaults"
        built = group.build({parameter: shown[parameter].default for parameter in group})
        for field in group.fields():
            cli, study = _value(built, field), _value(group.defaults, field)
            if cli != study:
                flag = "/".join(shown[field].opts)
                drifted.append(f"{flag} builds {field}={cli!r}, the study's default is {study!r}")
    assert not drifted, f"phasekv {name}: " + "; ".join(drifted)

    # an option outside the groups that is named after a field would set it past the study's defaults
    grouped = {parameter for group in groups.values() for parameter in group}
    fields = set().union(*(_field_names(group.defaults) for group in groups.values()))
    assert not (set(shown) - grouped) & fields, f"phasekv {name}: options outside a field group set fields"


@pytest.mark.parametrize("deltas", [(-3, -2, -1, 0, 1, 2, 3), (1, 2, -1), (0,), (-2, -1, 1, 2), (5, 3, 4)])
def test_a_cycle_design_shows_deltas_that_read_back_as_themselves(deltas):
    assert tuple(parse_deltas(format_deltas(deltas))) == deltas


def test_the_analyses_run_by_default_on_the_design_their_commands_start_from():
    # Called from Python without options, a study measures what its command measures without flags.
    import inspect

    from phasekv.cli.analyses import PROMPTS
    from phasekv.internals.design import ANALYSIS_LOOKUP
    from phasekv.studies.cycle.options import CycleOptions
    from phasekv.studies.cycle.run import run_cycle
    from phasekv.studies.gates.options import GatesOptions
    from phasekv.studies.gates.run import run_gate_trajectory, run_gates
    from phasekv.studies.knockout.run import run_knockout

    assert PROMPTS.defaults is ANALYSIS_LOOKUP
    for run in (run_knockout, run_gates, run_gate_trajectory, run_cycle):
        assert inspect.signature(run).parameters["lookup"].default == ANALYSIS_LOOKUP, run.__name__
    for run in (run_gates, run_gate_trajectory):
        assert inspect.signature(run).parameters["batch_size"].default == GatesOptions().batch_size
    assert inspect.signature(run_cycle).parameters["n_resamples"].default == CycleOptions().n_resamples


def test_a_flag_takes_its_type_and_default_from_the_field_it_sets():
    from phasekv.studies.flags import Flag

    @dataclasses.dataclass(frozen=True)
    class Options:
        count: int | None = 3
        rate: float = 0.5
        name: str = "x"

    group = FieldGroup(Options(), {"count": Flag("how many", "--n", 1), "rate": Flag("how fast"), "name": Flag("who")})
    kinds = {name: kind for name, (kind, _) in group.items()}
    assert kinds == {"count": int, "rate": float, "name": str}  # `int | None` parses as int
    count = group["count"][1]
    assert (count.default, count.param_decls, count.min, count.help) == (3, ("--n",), 1, "how many")
    assert group.build({"count": 5, "rate": None, "name": "y"}) == Options(count=5, rate=0.5, name="y")
    with pytest.raises(TypeError, match="options dataclass or a dict"):
        FieldGroup(object(), {"count": Flag("how many")})
