"""Incremental decoding with a compressed KV cache."""

from .generate import generate
from .kv import KVCache

__all__ = ["KVCache", "generate"]
