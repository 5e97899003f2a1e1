"""phasekv's training-free chunked pooling as a --press: `pool:w=8,s=8,local=16` (presets pool-w8s8, pool-w8s4).

Each complete window of `w` tokens every `s` tokens is replaced by the mean of its keys and values, beside a local
window of `local` exact tokens; the attention that does it is `scoring.pooled` (no kvpress needed). The pooling
stride is the chunk grid the period check and the grid-shift test use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .press_spec import NativePress, PressSpecError, register_press

PREFIX = "pool"
_KEYS = {"w": "window", "s": "stride", "local": "local"}


@dataclass(frozen=True)
class PoolSpec:
    """phasekv's training-free chunked pooling: windows of `window` tokens every `stride` tokens, each
    replaced by the mean of its keys and values, beside a local window of `local` exact tokens."""

    name: ClassVar[str] = PREFIX

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
        return f"{PREFIX}:w={self.window},s={self.stride},local={self.local}"

    def to_dict(self) -> dict:
        return {"class": "phasekv.pool", "params": {"window": self.window, "stride": self.stride, "local": self.local}}

    def grid(self) -> tuple[int, str]:
        """(the chunk grid's spacing, which field set it)."""
        return self.stride, "pool stride s"


def parse_pool(body: str) -> PoolSpec:
    """`w=8,s=8,local=16` (the text after `pool:`) as a PoolSpec."""
    values = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in _KEYS or not value.strip().isdigit():
            raise PressSpecError(f"cannot read pool option {part!r}; write pool:w=8,s=8,local=16 (integers)")
        values[_KEYS[key.strip()]] = int(value)
    if "window" not in values or "stride" not in values:
        raise PressSpecError("pool needs w= and s=, e.g. pool:w=8,s=8,local=16")
    return PoolSpec(**values)


def pooled_scorer(directory, spec: PoolSpec, **options):
    """An HF model in `directory` whose attention pools its KV cache as `spec` says (`scoring.pooled`)."""
    from .pooled import PooledScorer

    return PooledScorer.from_pretrained(directory, spec=spec, **options)


register_press(
    NativePress(
        PREFIX,
        presets={"pool-w8s8": "pool:w=8,s=8,local=16", "pool-w8s4": "pool:w=8,s=4,local=16"},
        needs_kvpress=False,
        summary="pool:w=8,s=8,local=16 (phasekv's chunked pooling)",
        parse=parse_pool,
        scorer=pooled_scorer,
    )
)
