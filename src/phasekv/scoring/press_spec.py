"""The `--press SPEC` syntax: which training-free KV-cache compression a scorer applies.

A spec is one of
- a kvpress press written as a Python call with keyword arguments, nested calls allowed:
  `ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8)`. Only class names,
  keyword arguments and literals (numbers, strings, True/False/None, lists) are accepted; the text
  is parsed with `ast`, never evaluated, and names are looked up in `kvpress` when the press is built;
- phasekv's own chunked pooling, `pool:w=8,s=8,local=16` (see `scoring.pooled`; no kvpress needed);
- a named preset (`PRESETS`), e.g. `chunkkv8`, which stands for its spec text.

phasekv's own ChunkKV variants (`VARIANT_PRESSES`, `press_variants`) are written like kvpress calls:
`StaggeredChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8, stagger=1)` and
`DitheredChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8, seed=0)`.

The chunk grid: a press that cuts the context into fixed chunks (`GRID_FIELDS`: ChunkKVPress and
ChunkPress by `chunk_length`, BlockPress by `block_size`; pooling by its stride) has a stride, and
`press_stride` returns it so the phase test's period check uses it automatically. A press whose grid moves from
prompt to prompt (`GRID_SHIFT_REFUSED`) has a stride but no grid the grid-shift test could move.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

# kvpress wrappers whose selection works on a fixed grid of the context, and the field that sets its spacing
GRID_FIELDS = {
    "ChunkKVPress": "chunk_length",
    "ChunkPress": "chunk_length",
    "BlockPress": "block_size",
    "StaggeredChunkKVPress": "chunk_length",
    "DitheredChunkKVPress": "chunk_length",
}
# phasekv's ChunkKV variants (`press_variants`): built by phasekv on kvpress's ChunkKVPress, named like kvpress presses
VARIANT_PRESSES = ("StaggeredChunkKVPress", "DitheredChunkKVPress")
# grid presses whose grid cannot be moved by the grid-shift test, and why (one line, shown as the error)
GRID_SHIFT_REFUSED = {
    "DitheredChunkKVPress": "--grid-shift: DitheredChunkKVPress draws its grid offset per prompt (from the prompt's "
    "tokens and its seed), so it has no fixed grid to move; run it without --grid-shift (its verdict then rests on the "
    "position design)",
}
POOL_PREFIX = "pool:"

# kvpress presses that compress each row of a batch from that row alone (scores and top-k per row, the same
# number of entries kept in every row): the rows of a batch of equal-length contexts can be prefilled together.
# ChunkKVPress is not one (it keeps the chunks the batch's first row chooses), nor is any press not listed here.
# tests/studies/presses/test_presses.py compares a batched prefill with one row at a time for each.
ROW_INDEPENDENT = frozenset({"KnormPress", "SnapKVPress", "StreamingLLMPress", "ChunkPress", "BlockPress"})

PRESETS = {
    "knorm": "KnormPress(compression_ratio=0.5)",
    "snapkv": "SnapKVPress(compression_ratio=0.5)",
    "streaming": "StreamingLLMPress(compression_ratio=0.5, n_sink=4)",
    "chunkkv8": "ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8)",
    "chunkkv4": "ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=4)",
    "chunkkv16": "ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=16)",
    # chunkkv8 with layer l's chunk cuts moved by l mod 8, and with one offset per prompt (issue 56; press_variants)
    "chunkkv8-staggered": "StaggeredChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8, stagger=1)",
    "chunkkv8-dithered": "DitheredChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8, seed=0)",
    "chunk8-knorm": "ChunkPress(press=KnormPress(compression_ratio=0.5), chunk_length=8)",
    "block8-knorm": "BlockPress(press=KnormPress(compression_ratio=0.5), block_size=8)",
    "pool-w8s8": "pool:w=8,s=8,local=16",
    "pool-w8s4": "pool:w=8,s=4,local=16",
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
class PoolSpec:
    """phasekv's training-free chunked pooling: windows of `window` tokens every `stride` tokens, each
    replaced by the mean of its keys and values, beside a local window of `local` exact tokens."""

    window: int
    stride: int
    local: int = 16

    def __post_init__(self) -> None:
        if self.window < 1 or self.stride < 1 or self.local < 0:
            raise PressSpecError(f"pool needs w >= 1, s >= 1 and local >= 0, got {self}")
        if self.local == 0 and self.window > 1:
            raise PressSpecError("pool with local=0 needs w=1: a query before its first complete window sees nothing")

    def cache_entries(self, length: int) -> int:
        """Entries a query at the last of `length` positions attends to: the complete windows' pooled entries
        (window j is complete iff jS + W - 1 <= length - 1) plus its local tokens."""
        windows = max(0, (length - self.window) // self.stride + 1)
        return windows + min(self.local, length)

    @property
    def text(self) -> str:
        return f"{POOL_PREFIX}w={self.window},s={self.stride},local={self.local}"

    def to_dict(self) -> dict:
        return {"class": "phasekv.pool", "params": {"window": self.window, "stride": self.stride, "local": self.local}}


def parse_press(text: str) -> PressCall | PoolSpec:
    """The spec `text` (a preset name, `pool:...` or a kvpress call) as a PressCall or PoolSpec."""
    text = PRESETS.get(text.strip(), text).strip()
    if text.startswith(POOL_PREFIX):
        return _parse_pool(text[len(POOL_PREFIX) :])
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as err:
        raise PressSpecError(f"cannot read --press {text!r} ({err.msg}); {_HELP}") from None
    return _call(tree, text)


_HELP = (
    "write a preset (" + ", ".join(PRESETS) + "), pool:w=8,s=8,local=16, or a kvpress call with keyword "
    "arguments such as ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8)"
)
_POOL_KEYS = {"w": "window", "s": "stride", "local": "local"}


def _parse_pool(body: str) -> PoolSpec:
    values = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in _POOL_KEYS or not value.strip().isdigit():
            raise PressSpecError(f"cannot read pool option {part!r}; write pool:w=8,s=8,local=16 (integers)")
        values[_POOL_KEYS[key.strip()]] = int(value)
    if "window" not in values or "stride" not in values:
        raise PressSpecError("pool needs w= and s=, e.g. pool:w=8,s=8,local=16")
    return PoolSpec(**values)


def _call(node: ast.expr, text: str) -> PressCall:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise PressSpecError(f"--press {text!r} is not a press call; {_HELP}")
    if node.args:
        raise PressSpecError(f"{node.func.id}(...) takes keyword arguments only (name=value); {_HELP}")
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
            f"--press {text!r}: {ast.unparse(node)!r} is not a literal or a press call; {_HELP}"
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


def grid_shift_refusal(spec: PressCall | PoolSpec) -> str | None:
    """Why the grid-shift test cannot move `spec`'s grid though it has one (`GRID_SHIFT_REFUSED`), else None."""
    call = grid_call(spec) if isinstance(spec, PressCall) else None
    return None if call is None else GRID_SHIFT_REFUSED.get(call.name)


def press_stride(spec: PressCall | PoolSpec) -> tuple[int | None, str]:
    """(the chunk grid's spacing, which field set it), or (None, why not) for a press without a grid."""
    if isinstance(spec, PoolSpec):
        return spec.stride, "pool stride s"
    call = grid_call(spec)
    if call is None:
        return None, f"{spec.name} has no chunk grid"
    name = GRID_FIELDS[call.name]
    if name not in call.kwargs:
        raise PressSpecError(f"give {call.name} its {name}= explicitly: it is the stride of the phase test")
    return int(call.kwargs[name]), f"{call.name}.{name}"
