"""Chunked KV compressors: windows of W tokens every S tokens, one entry per window."""

from __future__ import annotations

from .. import numerics  # noqa: F401  (imported for its effect: MKL's math kernels settled before any model runs)
from ..config import CompressionConfig
from .base import Compressor, Entries, cut_windows, join_head_calls
from .dsv4 import DSV4Compressor
from .paper import PaperCompressor
from .windows import WindowGeometry


def build_compressor(
    hidden_size: int, kv_heads: int, head_dim: int, cfg: CompressionConfig, eps: float = 1e-6, offset: int = 0
) -> Compressor:
    """The compressor `cfg` describes, its windows at `offset` (see WindowGeometry)."""
    if cfg.kind == "dsv4":
        return DSV4Compressor(hidden_size, kv_heads, head_dim, cfg, eps, offset)
    return PaperCompressor(hidden_size, kv_heads, head_dim, cfg, offset)


__all__ = [
    "Compressor",
    "DSV4Compressor",
    "Entries",
    "PaperCompressor",
    "WindowGeometry",
    "build_compressor",
    "cut_windows",
    "join_head_calls",
]
