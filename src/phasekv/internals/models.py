"""What the analyses read from a model, asked the same way of every kind of model (`view(model)`): the
module per layer whose output is the attention output (for hooks), the logits at the final position, the
gate metric rows, the lightning indexer's top-k hits, and which analyses the model supports.

* phasekv models: the `layers.i.hook_attn_out` hook points, per-KV-head knockouts and gate cycling;
* Hugging Face causal LMs: the attention module of every decoder layer, found generically as
  `model.model.layers[i].self_attn` (or `.attn` / `.attention`); gate rows for DeepSeek-V4's compressors.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

import torch
from torch import nn

from ..model import PhaseKVModel
from ..tasks.prompts import Prompt
from .gate_metrics import gate_metrics
from .hf_gates import hf_gate_metrics
from .topk import csa_layers, topk_hits_by_phase

_ATTENTION_NAMES = ("self_attn", "attn", "attention")


class ModelView(ABC):
    head_knockouts = False  # per-KV-head knockouts at the final position (needs per-head hook points)
    gate_cycling = False  # offset-specific gate parameters that can be cycled

    def __init__(self, model: nn.Module):
        self.model = model

    @abstractmethod
    def attention_sites(self) -> list[nn.Module]:
        """One module per layer whose output is that layer's attention output (tensor or tuple)."""

    @abstractmethod
    def final_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits at the final position: ids [B, T] -> [B, V]."""

    @abstractmethod
    def gate_rows(self, batches: Iterable[torch.Tensor]) -> list[dict]:
        """Gate metric rows (`gate_metrics.gate_metrics`) over the windows of the batches."""

    def has_indexer(self) -> bool:
        """Whether `topk_hits` has anything to measure (a lightning indexer's top-k selection)."""
        return False

    def topk_hits(self, prompts: Sequence[Prompt], batch_size: int = 16, progress=False) -> list[dict]:
        """How often the top-k selection keeps the target record's entry, by phase (none: no indexer);
        `progress`: the planner whose "top-k hits" stage the batches are."""
        return []


class PhaseKVView(ModelView):
    head_knockouts = True
    gate_cycling = True

    def attention_sites(self) -> list[nn.Module]:
        return [layer.hook_attn_out for layer in self.model.layers]

    def final_logits(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids)[:, -1].clone()  # a slice would keep all [B, T, V] logits alive

    def gate_rows(self, batches: Iterable[torch.Tensor]) -> list[dict]:
        return gate_metrics(self.model, batches)

    def has_indexer(self) -> bool:
        return bool(csa_layers(self.model))

    def topk_hits(self, prompts: Sequence[Prompt], batch_size: int = 16, progress=False) -> list[dict]:
        return topk_hits_by_phase(self.model, prompts, batch_size, progress)


class HFView(ModelView):
    def attention_sites(self) -> list[nn.Module]:
        base = getattr(self.model, "model", self.model)
        layers = getattr(base, "layers", None)
        name = type(self.model).__name__
        if not isinstance(layers, nn.ModuleList):
            raise ValueError(f"{name}: no decoder layers found at model.model.layers")
        sites = []
        for i, layer in enumerate(layers):
            found = next((n for n in _ATTENTION_NAMES if isinstance(getattr(layer, n, None), nn.Module)), None)
            if found is None:
                raise ValueError(f"{name}: layer {i} has none of the attention modules {_ATTENTION_NAMES}")
            sites.append(getattr(layer, found))
        return sites

    def final_logits(self, ids: torch.Tensor) -> torch.Tensor:
        # Only the last position reaches the LM head where the model allows it; either way the result owns its
        # memory: a slice of [B, T, V] logits would keep them all alive (a knockout holds one per layer).
        if "logits_to_keep" in inspect.signature(self.model.forward).parameters:
            return self.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[:, -1].clone()
        return self.model(input_ids=ids, use_cache=False).logits[:, -1].clone()

    def gate_rows(self, batches: Iterable[torch.Tensor]) -> list[dict]:
        return hf_gate_metrics(self.model, batches)


def model_name(scorer) -> str:
    """What a plan calls the scorer's model: its directory, else its class (a model built in memory)."""
    return getattr(scorer, "path", None) or type(scorer.model).__name__


def view(model: nn.Module) -> ModelView:
    """The view of `model` the analyses use: phasekv's own models, else any HF causal LM."""
    return PhaseKVView(model) if isinstance(model, PhaseKVModel) else HFView(model)
