"""The residue probes phasekv knows, in one registry: `phasekv eval PROBE`, `phasekv.probe(model, PROBE)`,
`phasekv audit --probes`, the presses profiles, `--like` and `rejudge` all read it, so a probe is declared once.

A residue probe places each unit of content (a key-name mapping, a haystack) at every residue of a
moment-matched position design and scores whether the model answers; the engine in `units` turns the outcomes
into a `ProbeResult` the same way for every probe. A `Probe` says what differs: its options class (the only
place its defaults live), how its prompts are built, how many prompt tokens a press must keep as the question,
the flags of its command, the chance level of its answers and how an audit sizes it.

Adding a probe: a folder `phasekv/studies/probes/<name>/` whose `__init__.py` declares it (`declared` says by which
names), and its module named in `BUILT_IN` below (`register` adds one at run time, as a test or a plugin does).
Probe folders import the engine (`studies.probe`) and the prompt generators, never each other (import-linter checks it).
This module imports no torch: result readers ask it which probes exist.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from phasekv.studies.flags import Flag

# The probes phasekv ships, by module (`declared` reads each).
BUILT_IN = (
    "phasekv.studies.probes.lookup",
    "phasekv.studies.probes.needle",
    "phasekv.studies.probes.passkey",
)

_REGISTERED: dict[str, Probe] = {}


def chance_level(n_answers: int) -> float:
    """The accuracy a probe must clear to be judged: twice the rate of guessing one of `n_answers` equally likely
    answers (the same level decides whether a table calls a model learned)."""
    return min(0.99, 2.0 / n_answers)


def modulus_flag() -> Flag:
    return Flag("group targets by position mod this", min=2)


def protocol_flag() -> Flag:
    return Flag("padding protocol: prefix or in-sequence")


def spread_flag() -> Flag:
    return Flag("cross the position design with this many blocks of M (wider span of t_K)", "--spread-blocks", 1)


def seed_flag() -> Flag:
    return Flag("seed of the prompts, the bootstrap and the permutation tests")


def placements_flag(unit: str) -> Flag:
    return Flag(f"placements per {unit} and residue (default: fewest exact)", "--placements", 1)


def records_chance(options: Any) -> float:
    """The chance level of a probe whose answer is one of its `n_records` records' values."""
    return chance_level(options.n_records)


@dataclass(frozen=True)
class Probe:
    """One residue probe (`declared` reads it from its folder, whose names are the fields in capitals and the
    functions by their own names).

    `options`: its options dataclass (JSON-serialisable, torch-free), with `modulus`, `seed`, `split`,
    `spread_blocks`, `n_<unit>s` and `placements_per_<unit>` fields, where the unit ("mapping", "haystack") is the
    content placed at every residue, which the bootstrap resamples (`bootstrap_unit` says how, in words).
    `prompts(tokenizer, options, prefix_ids)`: its `tasks.prompts.PromptSet`, whose options record `answer_offset`
    (tokens from t_K to the answer) and `placements_per_<unit>`. `question(tokenizer, options)`: the prompt tokens
    at the end a KV-cache press keeps exact. `flags`: the option fields its command sets, in the order its help
    shows them. `summary`: the command's help; `heading(result, options, target)`: the line over its table.
    `chance(options)`: the accuracy of guessing (`chance_level`). `audit_design(audit_options, template)`: its
    design in an audit, whose residues, spread, seed and number of units the audit sets (the counts it tries are
    the `AuditOptions` field `<unit>s`); `audit_size(options)`: a design's size in words for the audit's plan."""

    name: str
    summary: str
    options: type
    prompts: Callable[..., Any]
    question: Callable[[Any, Any], int]
    flags: dict[str, Flag]
    heading: Callable[[dict, Any, Any], str]
    audit_design: Callable[[Any, str], Any]
    audit_size: Callable[[dict], str]
    chance: Callable[[Any], float] = records_chance
    bootstrap_unit: str | None = None  # None: the unit's name

    @property
    def unit(self) -> str:
        return next(f.removeprefix("placements_per_") for f in self.option_fields() if f.startswith("placements_per_"))

    def option_fields(self) -> set[str]:
        return {f.name for f in dataclasses.fields(self.options)}

    def units(self, options: dict) -> int:
        """The number of units of a design (its options as a dict)."""
        return options[f"n_{self.unit}s"]


CONSTANTS = ("name", "summary", "options", "flags", "bootstrap_unit")  # in capitals in a probe's folder


def declared(module: str) -> Probe:
    """The probe the folder `module` declares: NAME, SUMMARY, OPTIONS, FLAGS (and BOOTSTRAP_UNIT where the unit's
    name does not say it), and the functions `prompts`, `question`, `heading`, `audit_design`, `audit_size` (and
    `chance` where it is not `records_chance`)."""
    folder = importlib.import_module(module)
    found = {}
    for field in dataclasses.fields(Probe):
        name = field.name.upper() if field.name in CONSTANTS else field.name
        if hasattr(folder, name):
            found[field.name] = getattr(folder, name)
        elif field.default is dataclasses.MISSING:
            raise TypeError(f"{module} declares no {name}: a probe's folder declares {declaration()}")
    return Probe(**found)


def declaration() -> str:
    """The names a probe's folder declares, in words."""
    return ", ".join(f.name.upper() if f.name in CONSTANTS else f.name for f in dataclasses.fields(Probe))


def register(probe: Probe) -> Probe:
    """Add `probe` (or replace the one of its name); returns it."""
    probes()  # the built-in probes first, so a probe registered early keeps its place after them
    _REGISTERED[probe.name] = probe
    return probe


def probes() -> dict[str, Probe]:
    """Every probe by name: the built-in ones, then any registered."""
    for module in BUILT_IN:
        probe = declared(module)
        _REGISTERED.setdefault(probe.name, probe)
    return dict(_REGISTERED)


def names() -> tuple[str, ...]:
    return tuple(probes())


def get(name: str) -> Probe:
    """The probe `name`; ValueError naming the known ones otherwise."""
    known = probes()
    if name not in known:
        raise ValueError(f"unknown probe {name!r}; the residue probes are {', '.join(known)}")
    return known[name]


def probe_of(options: Any) -> Probe:
    """The probe whose options class `options` is an instance of."""
    found = next((p for p in probes().values() if isinstance(options, p.options)), None)
    if found is None:
        raise TypeError(f"no probe takes {type(options).__name__}")
    return found


def question_tokens(tokenizer, options: Any) -> int:
    """The prompt tokens at the end of every prompt of a run with `options` that a KV-cache press keeps exact
    (`Probe.question` of the probe that takes them; `scoring.press_question.bind_question` tells the scorer)."""
    return probe_of(options).question(tokenizer, options)
