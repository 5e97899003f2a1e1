"""The model-level cache: one LayerState per layer and the next position to fill."""

from __future__ import annotations

import copy

from ..attention import LayerState


class KVCache:
    """Per layer: compressed entries (about T/S per KV head), the last L-1 exact keys/values, and the
    compressor inputs of the unfinished window(s). Full-attention layers keep every exact key/value."""

    def __init__(self, num_layers: int):
        self.layers = [LayerState() for _ in range(num_layers)]
        self.position = 0

    @classmethod
    def for_model(cls, model) -> KVCache:
        return cls(len(model.layers))

    def fork(self) -> KVCache:
        """An independent continuation point: later calls on the fork leave this cache as it is
        (layers only ever replace their tensors, never write into them)."""
        forked = KVCache(0)
        forked.layers = [copy.copy(state) for state in self.layers]
        forked.position = self.position
        return forked

    def num_entries(self) -> list[int]:
        return [layer.num_entries for layer in self.layers]

    def nbytes(self) -> int:
        return sum(layer.nbytes() for layer in self.layers)
