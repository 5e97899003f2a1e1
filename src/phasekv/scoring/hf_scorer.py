"""Scorer over any Hugging Face causal LM saved in a local directory."""

from __future__ import annotations

import inspect
from pathlib import Path

import torch

from .base import BatchedScorer, ScorerError, gather_positions


def hf_compression_ratios(config) -> tuple[int, ...]:
    """Every compression rate among the layer types a config uses, ascending (DeepSeek-V4: `compress_rates` keyed
    by `layer_types`, e.g. 4 for CSA layers and 128 for HCA layers; 0, a layer that compresses nothing, is none)."""
    rates = getattr(config, "compress_rates", None) or {}
    used = set(getattr(config, "layer_types", None) or ())
    return tuple(sorted({int(rate) for kind, rate in rates.items() if kind in used and int(rate) > 0}))


def hf_compression_stride(config) -> int | None:
    """The smallest compression rate among the layer types a config uses (e.g. 4 for CSA layers), or None."""
    ratios = hf_compression_ratios(config)
    return ratios[0] if ratios else None


class HFScorer(BatchedScorer):
    """Scores with an `AutoModelForCausalLM` and its (fast) tokenizer.

    When the model's forward takes `logits_to_keep`, only the needed positions reach the LM head.
    No attention mask is passed: batches are right-padded (see `base`), so causal masking alone
    keeps every row's real positions unaffected.
    """

    def __init__(self, model, tokenizer, *, path: str | Path | None = None, **options):
        if not getattr(tokenizer, "is_fast", False):
            raise ScorerError("the HF scorer needs a fast tokenizer (tokenizer.json) to place tokens exactly")
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        super().__init__(model, tokenizer, pad_id=pad_id, **options)
        self.path = None if path is None else str(path)
        self._keep = "logits_to_keep" in inspect.signature(model.forward).parameters

    @classmethod
    def from_pretrained(cls, directory: str | Path, **options) -> HFScorer:
        """Load model and tokenizer from `directory` (local files only)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        except (OSError, ValueError) as err:
            raise ScorerError(f"cannot load a tokenizer from {directory}: {err}") from err
        try:
            model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True)
        except (OSError, ValueError) as err:
            raise ScorerError(f"cannot load a causal LM from {directory}: {err}") from err
        return cls(model, tokenizer, path=directory, **options)

    @property
    def compression_stride(self) -> int | None:
        return hf_compression_stride(self.model.config)

    def _logits(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if not self._keep:
            return gather_positions(self.model(input_ids=input_ids, use_cache=False).logits, positions)
        keep, inverse = torch.unique(positions, return_inverse=True)
        logits = self.model(input_ids=input_ids, use_cache=False, logits_to_keep=keep).logits
        return gather_positions(logits, inverse)

    def describe(self) -> dict:
        config = self.model.config
        return {
            "path": self.path,
            "kind": "hf",
            "model_type": config.model_type,
            "architectures": list(getattr(config, "architectures", None) or [type(self.model).__name__]),
            "config": config.to_diff_dict(),
            "parameters": self.num_parameters(),
            "compression_stride": self.compression_stride,
            "tokenizer": {"class": type(self.tokenizer).__name__, "size": len(self.tokenizer)},
            "device": str(self.device),
            "dtype": self.dtype,
        }
