"""Chunked KV compressors: windows of W tokens every S tokens, one entry per window.

Each kind is one module (`paper`, `dsv4`) that holds its config, its compressor and its plain formulas for the
reference, and registers them (`phasekv.config.register_kind`); importing this package registers them all.
"""

from __future__ import annotations

from .. import numerics  # noqa: F401  (imported for its effect: MKL's math kernels settled before any model runs)
from ..config import COMPRESSOR_KINDS, CompressionConfig
from .base import Compressor, Entries, cut_windows, join_head_calls
from .dsv4 import DSV4Compression, DSV4Compressor
from .paper import PaperCompression, PaperCompressor
from .windows import WindowGeometry


def build_compressor(
    hidden_size: int, kv_heads: int, head_dim: int, cfg: CompressionConfig, eps: float = 1e-6, offset: int = 0
) -> Compressor:
    """The compressor of `cfg`'s kind, its windows at `offset` (see WindowGeometry)."""
    return COMPRESSOR_KINDS[cfg.kind].compressor(hidden_size, kv_heads, head_dim, cfg, offset=offset, eps=eps)


__all__ = [
    "Compressor",
    "DSV4Compression",
    "DSV4Compressor",
    "Entries",
    "PaperCompression",
    "PaperCompressor",
    "WindowGeometry",
    "build_compressor",
    "cut_windows",
    "join_head_calls",
]
