"""ChunkKV with its chunk grid dithered per prompt, a training-free way to lay ChunkKV's chunks so that no token
position is always at a chunk's edge: kvpress's ChunkKVPress with its grid moved (`press_grid`), at ChunkKV's
kept-token budget.

`DitheredChunkKVPress(press=..., chunk_length=C, seed=0)`: one offset per prompt for all layers, drawn from the
prompt's tokens and the seed (`dither_offset`): the same prompt always gets the same offset (results can be cached
and rerun), prompts differ. Its grid has no fixed place, so it has no grid to move: `--grid-shift` is refused
(`GRID_SHIFT_REFUSED`). The offset is read from the context's token ids as the prefill enters the model's input
embeddings (a forward pre-hook set while the press is active).

It keeps exactly the tokens ChunkKV keeps on the same input, in every layer (`press_grid.matched_chunkkv_compress`);
at offset 0 it is ChunkKV. kvpress is needed; the class is made on first use (`press_class`).
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from contextlib import contextmanager

from .press_grid import MATCHED_BUDGET, chunkkv_variant, matched_chunkkv_compress, seen_counter
from .press_spec import NativePress, register_press

NAME = "DitheredChunkKVPress"
DITHER_RULE = (
    "offset = int.from_bytes(sha256(b'phasekv-dither:<seed>:' + the context's token ids as int64 little-endian)"
    "[:8], 'little') % chunk_length"
)
GRID_SHIFT_REFUSED = (
    f"--grid-shift: {NAME} draws its grid offset per prompt (from the prompt's tokens and its seed), so it has no "
    "fixed grid to move; run it without --grid-shift (its verdict then rests on the position design)"
)


def dither_offset(token_ids, seed: int, chunk_length: int) -> int:
    """The dithered grid offset of a prompt (`DITHER_RULE`): a function of its token ids and `seed` only."""
    import numpy as np

    data = np.asarray(token_ids, dtype="<i8").tobytes()
    digest = hashlib.sha256(f"phasekv-dither:{int(seed)}:".encode() + data).digest()
    return int.from_bytes(digest[:8], "little") % chunk_length


def _compress(self, module, hidden_states, keys, values, attentions, kwargs):
    if self.current_offset is None:
        raise RuntimeError(f"{NAME} compresses inside `with press(model)` only (it reads the token ids)")
    return matched_chunkkv_compress(self, self.current_offset, module, hidden_states, keys, values, attentions, kwargs)


def _call(self, model):
    """kvpress's `with press(model)`, plus a pre-hook on the input embeddings that draws the prompt's offset."""
    from kvpress import ChunkKVPress

    @contextmanager
    def active():
        def draw(module, args):
            ids = args[0]
            offsets = {dither_offset(row.tolist(), self.seed, self.chunk_length) for row in ids}
            if len(offsets) > 1:
                raise ValueError(f"{NAME} draws one offset per prompt: prefill one prompt at a time")
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


def _record(self) -> dict:
    return {
        "rule": DITHER_RULE,
        "seed": self.seed,
        "budget": MATCHED_BUDGET,
        "prefills_by_offset": {str(k): v for k, v in sorted(self.offsets_seen.items())},
    }


@functools.cache
def press_class() -> type:
    """DitheredChunkKVPress: a dataclass subclass of kvpress's ChunkKVPress."""
    return chunkkv_variant(
        NAME,
        {
            "__annotations__": {"seed": int, "offsets_seen": Counter},
            "seed": 0,
            "offsets_seen": seen_counter(),
            "current_offset": None,
            "compress": _compress,
            "__call__": _call,
            "grid_record": _record,
        },
    )


register_press(
    NativePress(
        NAME,
        # chunkkv8 with one grid offset per prompt
        presets={"chunkkv8-dithered": f"{NAME}(press=SnapKVPress(compression_ratio=0.5), chunk_length=8, seed=0)"},
        needs_kvpress=True,
        summary=f"{NAME}(press=..., chunk_length=C, seed=0) (ChunkKV, one grid offset per prompt)",
        grid_field="chunk_length",
        grid_shift_refused=GRID_SHIFT_REFUSED,
        press_class=press_class,
    )
)
