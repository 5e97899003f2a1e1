"""The Qwen3-style decoder with pluggable attention, its presets, and checkpoints."""

from ..config import CompressionConfig, ConfigError, ModelConfig
from .io import CheckpointError, load_checkpoint, save_checkpoint
from .presets import PRESETS, SIZES, preset_config
from .transformer import PhaseKVModel

__all__ = [
    "PRESETS",
    "SIZES",
    "CheckpointError",
    "CompressionConfig",
    "ConfigError",
    "ModelConfig",
    "PhaseKVModel",
    "load_checkpoint",
    "preset_config",
    "save_checkpoint",
]
