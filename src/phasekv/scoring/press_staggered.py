"""ChunkKV with its chunk grid staggered across layers, a training-free way to lay ChunkKV's chunks so that no token
position is always at a chunk's edge: kvpress's ChunkKVPress with its grid moved (`press_grid`), at ChunkKV's
kept-token budget.

`StaggeredChunkKVPress(press=..., chunk_length=C, stagger=1, grid_offset=0)`: layer l cuts its chunks at
(stagger * l + grid_offset) mod C + kC. With stagger 1 (the default) layer l is moved by l mod C: neighbouring
layers never share their cuts, and each of the C grids recurs every C layers, so it is spread over the whole depth
(SmolLM2-135M's 30 layers: every offset in 3 or 4 layers, from the first layers to the last), whatever the number
of layers. The alternative l * C // layers gives runs of neighbouring layers one grid (layers 0-3 of 30 at offset
0): a phase lost in those layers is lost to the whole run. stagger 0 is kvpress's ChunkKVPress in every layer.
`grid_offset` moves every layer's cuts by the same amount: the grid-shift test (`--grid-shift`).

It keeps exactly the tokens ChunkKV keeps on the same input, in every layer (`press_grid.matched_chunkkv_compress`);
at offset 0 it is ChunkKV. kvpress is needed; the class is made on first use (`press_class`).
"""

from __future__ import annotations

import functools
from collections import Counter

from .press_grid import MATCHED_BUDGET, chunkkv_variant, matched_chunkkv_compress, seen_counter
from .press_spec import NativePress, register_press

NAME = "StaggeredChunkKVPress"


def layer_offset(layer: int, chunk_length: int, stagger: int = 1, grid_offset: int = 0) -> int:
    """Where the staggered press's layer `layer` starts its grid: (stagger * layer + grid_offset) mod chunk_length."""
    return (stagger * layer + grid_offset) % chunk_length


def _compress(self, module, hidden_states, keys, values, attentions, kwargs):
    offset = layer_offset(module.layer_idx, self.chunk_length, self.stagger, self.grid_offset)
    self.offsets_seen[offset] += 1
    return matched_chunkkv_compress(self, offset, module, hidden_states, keys, values, attentions, kwargs)


def _record(self) -> dict:
    return {
        "rule": "layer l cuts its chunks at (stagger * l + grid_offset) mod chunk_length + k * chunk_length",
        "stagger": self.stagger,
        "grid_offset": self.grid_offset,
        "budget": MATCHED_BUDGET,
        "layer_compressions_by_offset": {str(k): v for k, v in sorted(self.offsets_seen.items())},
    }


@functools.cache
def press_class() -> type:
    """StaggeredChunkKVPress: a dataclass subclass of kvpress's ChunkKVPress."""
    return chunkkv_variant(
        NAME,
        {
            "__annotations__": {"stagger": int, "grid_offset": int, "offsets_seen": Counter},
            "stagger": 1,
            "grid_offset": 0,
            "offsets_seen": seen_counter(),
            "compress": _compress,
            "grid_record": _record,
        },
    )


register_press(
    NativePress(
        NAME,
        # chunkkv8 with layer l's chunk cuts moved by l mod 8
        presets={
            "chunkkv8-staggered": f"{NAME}(press=SnapKVPress(compression_ratio=0.5), chunk_length=8, stagger=1)",
        },
        needs_kvpress=True,
        summary=f"{NAME}(press=..., chunk_length=C, stagger=1) (ChunkKV, layer l's grid moved by l mod C)",
        grid_field="chunk_length",
        press_class=press_class,
    )
)
