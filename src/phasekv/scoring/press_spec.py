"""The `--press SPEC` syntax: which training-free KV-cache compression a scorer applies.

A spec is one of
- a kvpress press written as a Python call with keyword arguments, nested calls allowed:
  `ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8)`. Only class names,
  keyword arguments and literals (numbers, strings, True/False/None, lists) are accepted; the text
  is parsed with `ast`, never evaluated, and names are looked up in `kvpress` when the press is built;
- a press of phasekv's own written as `name:options`, e.g. its chunked pooling `pool:w=8,s=8,local=16`
  (`press_pool`; no kvpress needed);
- a named preset (`PRESETS`), e.g. `chunkkv8`, which stands for its spec text.

phasekv's own presses (`NATIVE_PRESSES`) are each one module that declares itself with `register_press`: its
name, presets, spec syntax, whether it needs kvpress, its chunk grid, and how it is built or scored. Those built on
kvpress are written like kvpress calls: `StaggeredChunkKVPress(press=SnapKVPress(compression_ratio=0.5),
chunk_length=8, stagger=1)` (`press_staggered`) and `DitheredChunkKVPress(press=SnapKVPress(compression_ratio=0.5),
chunk_length=8, seed=0)` (`press_dithered`).

The chunk grid: a press that cuts the context into fixed chunks (`GRID_FIELDS`: ChunkKVPress and
ChunkPress by `chunk_length`, BlockPress by `block_size`; pooling by its stride) has a stride, and
`press_stride` returns it so the phase test's period check uses it automatically. A press whose grid moves from
prompt to prompt (`NativePress.grid_shift_refused`) has a stride but no grid the grid-shift test could move.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# kvpress wrappers whose selection works on a fixed grid of the context, and the field that sets its spacing (phasekv's
# own grid presses add theirs when they register)
GRID_FIELDS = {"ChunkKVPress": "chunk_length", "ChunkPress": "chunk_length", "BlockPress": "block_size"}

# kvpress presses that compress each row of a batch from that row alone (scores and top-k per row, the same
# number of entries kept in every row): the rows of a batch of equal-length contexts can be prefilled together.
# ChunkKVPress is not one (it keeps the chunks the batch's first row chooses), nor is any press not listed here.
# tests/studies/presses/test_presses.py compares a batched prefill with one row at a time for each.
ROW_INDEPENDENT = frozenset({"KnormPress", "SnapKVPress", "StreamingLLMPress", "ChunkPress", "BlockPress"})

# preset name -> spec text (phasekv's own presses add theirs when they register)
PRESETS = {
    "knorm": "KnormPress(compression_ratio=0.5)",
    "snapkv": "SnapKVPress(compression_ratio=0.5)",
    "streaming": "StreamingLLMPress(compression_ratio=0.5, n_sink=4)",
    "chunkkv8": "ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8)",
    "chunkkv4": "ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=4)",
    "chunkkv16": "ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=16)",
    "chunk8-knorm": "ChunkPress(press=KnormPress(compression_ratio=0.5), chunk_length=8)",
    "block8-knorm": "BlockPress(press=KnormPress(compression_ratio=0.5), block_size=8)",
}


class PressSpecError(ValueError):
    """A --press spec that cannot be read; the message says what is wrong and what to write."""


@dataclass(frozen=True)
class PressCall:
    """A kvpress class by name with its keyword arguments (values: literals or nested PressCalls)."""

    name: str
    kwargs: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        def plain(value):
            if isinstance(value, PressCall):
                return value.to_dict()
            if isinstance(value, list):
                return [plain(v) for v in value]
            return value

        return {"class": self.name, "params": {k: plain(v) for k, v in self.kwargs.items()}}


@dataclass(frozen=True)
class NativePress:
    """A press phasekv implements, declared once by its module (`register_press`).

    name:        its class name in a kvpress-style call (`Name(key=value, ...)`), or with `parse` the prefix of its
                 own syntax (`name:options`).
    presets:     preset name -> spec text.
    needs_kvpress: whether building or scoring it imports kvpress.
    summary:     one line for `--press`'s help (its syntax and what it is).
    grid_field:  the keyword that sets its chunk grid's spacing, if it cuts the context on a grid.
    grid_shift_refused: why the grid-shift test cannot move its grid, if it has one but it does not stay put.
    press_class: () -> the press class (a kvpress `BasePress`) a call of `name` builds; it takes `grid_offset`, which
                 moves its grid (the grid-shift test).
    parse:       its own syntax's options -> its spec (an object with `text`, `to_dict()` and `grid()`: (stride,
                 which field set it)).
    scorer:      (model directory, spec, **scorer options) -> its scorer, for a press not built as a kvpress press.
    """

    name: str
    presets: dict[str, str]
    needs_kvpress: bool
    summary: str
    grid_field: str | None = None
    grid_shift_refused: str | None = None
    press_class: Callable[[], type] | None = None
    parse: Callable[[str], Any] | None = None
    scorer: Callable[..., Any] | None = None


# name -> phasekv's own press; each registers itself in its module (imported at the end of this one)
NATIVE_PRESSES: dict[str, NativePress] = {}


def register_press(press: NativePress) -> NativePress:
    """Make `press` a --press spec: its name, presets and grid field become known to the spec reader."""
    if press.name in NATIVE_PRESSES or press.name in GRID_FIELDS or set(press.presets) & set(PRESETS):
        raise ValueError(f"press {press.name!r} or one of its presets {sorted(press.presets)} is already registered")
    NATIVE_PRESSES[press.name] = press
    PRESETS.update(press.presets)
    if press.grid_field is not None:
        GRID_FIELDS[press.name] = press.grid_field
    return press


def native_press(spec) -> NativePress | None:
    """The registered press that `spec` (a `parse_press` result) is, or None for a kvpress press."""
    return NATIVE_PRESSES.get(spec.name)


def needs_kvpress(spec) -> bool:
    """Whether building `spec` (a `parse_press` result) imports kvpress: a kvpress press, or a registered press
    that says so."""
    native = native_press(spec)
    return native is None or native.needs_kvpress


def parse_press(text: str):
    """The spec `text` (a preset name, a registered press's `name:options` or a kvpress call) as a PressCall, or as
    the spec its press's `parse` makes (`pool:...`: a `press_pool.PoolSpec`)."""
    text = PRESETS.get(text.strip(), text).strip()
    prefix, sep, options = text.partition(":")
    native = NATIVE_PRESSES.get(prefix.strip())
    if sep and native is not None and native.parse is not None:
        return native.parse(options)
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as err:
        raise PressSpecError(f"cannot read --press {text!r} ({err.msg}); write {press_help()}") from None
    return _call(tree, text)


def press_help() -> str:
    """What a --press spec may be: the presets, phasekv's own syntaxes, a kvpress call."""
    own = ", ".join(press.summary for press in NATIVE_PRESSES.values())
    return (
        f"a preset ({', '.join(PRESETS)}), one of phasekv's presses: {own}, or a kvpress call with keyword arguments "
        "such as 'ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8)' (kvpress calls and the "
        "presses built on kvpress need the kvpress extra)"
    )


def _call(node: ast.expr, text: str) -> PressCall:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise PressSpecError(f"--press {text!r} is not a press call; write {press_help()}")
    if node.args:
        raise PressSpecError(f"{node.func.id}(...) takes keyword arguments only (name=value); write {press_help()}")
    return PressCall(node.func.id, {kw.arg: _value(kw.value, text) for kw in node.keywords if kw.arg})


def _value(node: ast.expr, text: str):
    if isinstance(node, ast.Call):
        return _call(node, text)
    if isinstance(node, ast.List | ast.Tuple):
        return [_value(v, text) for v in node.elts]
    try:
        value = ast.literal_eval(node)  # numbers (also negative), strings, True/False/None
    except ValueError:
        raise PressSpecError(
            f"--press {text!r}: {ast.unparse(node)!r} is not a literal or a press call; write {press_help()}"
        ) from None
    if not isinstance(value, int | float | str | bool | type(None)):
        raise PressSpecError(f"--press {text!r}: {ast.unparse(node)!r} is not a number, string or press call")
    return value


def grid_call(spec: PressCall) -> PressCall | None:
    """The call whose field sets the chunk grid: the outermost one (a ChunkKVPress around a BlockPress chooses
    whole chunks), or None for a press without a grid."""
    if spec.name in GRID_FIELDS:
        return spec
    for value in spec.kwargs.values():
        if isinstance(value, PressCall) and (found := grid_call(value)) is not None:
            return found
    return None


def compresses_rows_apart(spec: PressCall) -> bool:
    """Whether `spec` and every press nested in it compress each row of a batch on its own (`ROW_INDEPENDENT`)."""
    nested = [v for value in spec.kwargs.values() for v in (value if isinstance(value, list) else [value])]
    return spec.name in ROW_INDEPENDENT and all(compresses_rows_apart(v) for v in nested if isinstance(v, PressCall))


def grid_shift_refusal(spec) -> str | None:
    """Why the grid-shift test cannot move `spec`'s grid though it has one (`NativePress.grid_shift_refused`), else
    None."""
    call = grid_call(spec) if isinstance(spec, PressCall) else None
    native = None if call is None else NATIVE_PRESSES.get(call.name)
    return None if native is None else native.grid_shift_refused


def press_stride(spec) -> tuple[int | None, str]:
    """(the chunk grid's spacing, which field set it), or (None, why not) for a press without a grid."""
    if not isinstance(spec, PressCall):
        return spec.grid()
    call = grid_call(spec)
    if call is None:
        return None, f"{spec.name} has no chunk grid"
    name = GRID_FIELDS[call.name]
    if name not in call.kwargs:
        raise PressSpecError(f"give {call.name} its {name}= explicitly: it is the stride of the phase test")
    return int(call.kwargs[name]), f"{call.name}.{name}"


# phasekv's own presses, each registering itself (in this order in PRESETS and in the help)
# isort: off
from . import press_staggered, press_dithered, press_pool  # noqa: E402, F401
# isort: on
