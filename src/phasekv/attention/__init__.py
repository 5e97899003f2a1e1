"""Attention over compressed entries plus a local window of exact tokens; full attention baseline."""

from .dispatch import compressed_attention
from .full import full_attention
from .layer import Attention
from .reference import reference_compressed_attention, reference_full_attention
from .rope import Rotary
from .state import KVView, LayerState

__all__ = [
    "Attention",
    "KVView",
    "LayerState",
    "Rotary",
    "compressed_attention",
    "full_attention",
    "reference_compressed_attention",
    "reference_full_attention",
]
