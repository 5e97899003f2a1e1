"""Scorer over our own models (PhaseKVModel), in memory or from a checkpoint directory."""

from __future__ import annotations

from pathlib import Path

import torch

from ..model import PhaseKVModel, load_checkpoint
from ..tasks.tokenizer import build_word_tokenizer, load_word_tokenizer
from .base import BatchedScorer, ScorerError, gather_positions

BUILT_IN_TOKENIZER = "built-in word tokenizer (phasekv.tasks.tokenizer)"


class PhaseKVScorer(BatchedScorer):
    """Scores with a PhaseKVModel and a word-level tokenizer (default: `build_word_tokenizer()`).

    Scores through `PhaseKVModel.forward_at`: only the requested positions reach the final norm and
    the LM head (a batch never materialises [B, T, V] logits), tokens after the last requested
    position are dropped, and the last layer runs its queries and MLP only from the first requested
    position on. `plain=True` uses the full forward and gathers (the reference the fast path is
    tested against).
    """

    def __init__(
        self,
        model: PhaseKVModel,
        tokenizer=None,
        *,
        path: str | Path | None = None,
        tokenizer_source: str = BUILT_IN_TOKENIZER,
        plain: bool = False,
        **options,
    ):
        tokenizer = build_word_tokenizer() if tokenizer is None else tokenizer
        if len(tokenizer) > model.config.vocab_size:
            raise ScorerError(
                f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary has only "
                f"{model.config.vocab_size}: save the matching tokenizer.json in the checkpoint directory"
            )
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        super().__init__(model, tokenizer, pad_id=pad_id, **options)
        self.path = None if path is None else str(path)
        self.tokenizer_source = tokenizer_source
        self.plain = plain

    @classmethod
    def from_checkpoint(cls, directory: str | Path, **options) -> PhaseKVScorer:
        """Load `directory` (config.json + model.safetensors); its tokenizer.json if present,
        else the built-in word tokenizer."""
        directory = Path(directory)
        model = load_checkpoint(directory)
        if (directory / "tokenizer.json").is_file():
            tokenizer, source = load_word_tokenizer(directory), str(directory / "tokenizer.json")
        else:
            tokenizer, source = None, BUILT_IN_TOKENIZER
        return cls(model, tokenizer, path=directory, tokenizer_source=source, **options)

    @property
    def compression_stride(self) -> int | None:
        comp = self.model.config.compression
        return None if comp is None else comp.stride

    @property
    def unshifted_grid_offset(self) -> int | None:
        """The offset every layer's windows start at outside `grid_offset` (None when they differ or a layer has
        no compressor)."""
        compressors = [layer.self_attn.compressor for layer in self.model.layers]
        offsets = {None if c is None else c.geometry.offset for c in compressors}
        return offsets.pop() if len(offsets) == 1 else None

    def grid_offset(self, offset: int):
        """A context in which every compressed layer's windows start at `offset` (`PhaseKVModel.window_offset`):
        the same prompts scored under another grid, for the grid-shift test."""
        return self.model.window_offset(offset)

    def _logits(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.plain:
            return gather_positions(self.model(input_ids), positions)
        return self.model(input_ids, positions=positions)

    def describe(self) -> dict:
        return {
            "path": self.path,
            "kind": "phasekv",
            "config": self.model.config.to_dict(),
            "parameters": self.num_parameters(),
            "compression_stride": self.compression_stride,
            "tokenizer": {"source": self.tokenizer_source, "size": len(self.tokenizer)},
            "device": str(self.device),
            "dtype": self.dtype,
            "forward": "plain (full forward, gathered)" if self.plain else "forward_at (needed positions only)",
        }
