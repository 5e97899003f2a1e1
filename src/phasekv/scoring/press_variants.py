"""Two training-free ways to lay ChunkKV's chunks so that no token position is always at a chunk's edge
(issue 56): kvpress's ChunkKVPress with its grid moved (`press_grid`), at ChunkKV's kept-token budget.

- `StaggeredChunkKVPress(press=..., chunk_length=C, stagger=1, grid_offset=0)`: layer l cuts its chunks at
  (stagger * l + grid_offset) mod C + kC. With stagger 1 (the default) layer l is moved by l mod C: neighbouring
  layers never share their cuts, and each of the C grids recurs every C layers, so it is spread over the whole depth
  (SmolLM2-135M's 30 layers: every offset in 3 or 4 layers, from the first layers to the last), whatever the number
  of layers. The alternative l * C // layers gives runs of neighbouring layers one grid (layers 0-3 of 30 at offset
  0): a phase lost in those layers is lost to the whole run. stagger 0 is kvpress's ChunkKVPress in every layer.
  `grid_offset` moves every layer's cuts by the same amount: the grid-shift test (`--grid-shift`).
- `DitheredChunkKVPress(press=..., chunk_length=C, seed=0)`: one offset per prompt for all layers, drawn from the
  prompt's tokens and the seed (`dither_offset`): the same prompt always gets the same offset (results can be cached
  and rerun), prompts differ. Its grid has no fixed place, so it has no grid to move: `--grid-shift` is refused
  (`press_spec.GRID_SHIFT_REFUSED`). The offset is read from the context's token ids as the prefill enters the
  model's input embeddings (a forward pre-hook set while the press is active).

Both keep exactly the tokens ChunkKV keeps on the same input, in every layer (`press_grid.matched_chunkkv_compress`);
at offset 0 they are ChunkKV. kvpress is optional: the classes are made on first use (`variant_class`).
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

from .press_grid import matched_chunkkv_compress

DITHER_RULE = (
    "offset = int.from_bytes(sha256(b'phasekv-dither:<seed>:' + the context's token ids as int64 little-endian)"
    "[:8], 'little') % chunk_length"
)


def dither_offset(token_ids, seed: int, chunk_length: int) -> int:
    """The dithered grid offset of a prompt (`DITHER_RULE`): a function of its token ids and `seed` only."""
    import numpy as np

    data = np.asarray(token_ids, dtype="<i8").tobytes()
    digest = hashlib.sha256(f"phasekv-dither:{int(seed)}:".encode() + data).digest()
    return int.from_bytes(digest[:8], "little") % chunk_length


def layer_offset(layer: int, chunk_length: int, stagger: int = 1, grid_offset: int = 0) -> int:
    """Where the staggered press's layer `layer` starts its grid: (stagger * layer + grid_offset) mod chunk_length."""
    return (stagger * layer + grid_offset) % chunk_length


def _staggered_compress(self, module, hidden_states, keys, values, attentions, kwargs):
    offset = layer_offset(module.layer_idx, self.chunk_length, self.stagger, self.grid_offset)
    self.offsets_seen[offset] += 1
    return matched_chunkkv_compress(self, offset, module, hidden_states, keys, values, attentions, kwargs)


def _staggered_record(self) -> dict:
    return {
        "rule": "layer l cuts its chunks at (stagger * l + grid_offset) mod chunk_length + k * chunk_length",
        "stagger": self.stagger,
        "grid_offset": self.grid_offset,
        "budget": "exactly the tokens kvpress's ChunkKVPress keeps on the same input, per layer",
        "layer_compressions_by_offset": {str(k): v for k, v in sorted(self.offsets_seen.items())},
    }


def _dithered_compress(self, module, hidden_states, keys, values, attentions, kwargs):
    if self.current_offset is None:
        raise RuntimeError("DitheredChunkKVPress compresses inside `with press(model)` only (it reads the token ids)")
    return matched_chunkkv_compress(self, self.current_offset, module, hidden_states, keys, values, attentions, kwargs)


def _dithered_call(self, model):
    """kvpress's `with press(model)`, plus a pre-hook on the input embeddings that draws the prompt's offset."""
    from kvpress import ChunkKVPress

    @contextmanager
    def active():
        def draw(module, args):
            ids = args[0]
            offsets = {dither_offset(row.tolist(), self.seed, self.chunk_length) for row in ids}
            if len(offsets) > 1:
                raise ValueError("DitheredChunkKVPress draws one offset per prompt: prefill one prompt at a time")
            self.current_offset = offsets.pop()
            self.offsets_seen[self.current_offset] += ids.shape[0]

        hook = model.get_input_embeddings().register_forward_pre_hook(draw)
        try:
            with ChunkKVPress.__call__(self, model):
                yield
        finally:
            hook.remove()
            self.current_offset = None

    return active()


def _dithered_record(self) -> dict:
    return {
        "rule": DITHER_RULE,
        "seed": self.seed,
        "budget": "exactly the tokens kvpress's ChunkKVPress keeps on the same input, per layer",
        "prefills_by_offset": {str(k): v for k, v in sorted(self.offsets_seen.items())},
    }


def _counter() -> Counter:
    return field(default_factory=Counter, repr=False, compare=False)


@functools.cache
def variant_class(name: str) -> type:
    """The press class `name` (a key of `press_spec.VARIANT_PRESSES`): a dataclass subclass of kvpress's
    ChunkKVPress. Raises KeyError for another name."""
    from kvpress import ChunkKVPress

    if name == "StaggeredChunkKVPress":
        namespace = {
            "__annotations__": {"stagger": int, "grid_offset": int, "offsets_seen": Counter},
            "stagger": 1,
            "grid_offset": 0,
            "offsets_seen": _counter(),
            "compress": _staggered_compress,
            "grid_record": _staggered_record,
        }
    elif name == "DitheredChunkKVPress":
        namespace = {
            "__annotations__": {"seed": int, "offsets_seen": Counter},
            "seed": 0,
            "offsets_seen": _counter(),
            "current_offset": None,
            "compress": _dithered_compress,
            "__call__": _dithered_call,
            "grid_record": _dithered_record,
        }
    else:
        raise KeyError(name)
    return dataclass(type(name, (ChunkKVPress,), namespace))
