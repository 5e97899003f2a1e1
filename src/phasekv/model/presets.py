"""Presets named after the paper's runs, each at two sizes.

`tiny` fits a laptop CPU (2 layers, width 128); `paper` is the Qwen3-0.6B backbone (28 layers,
width 1024, 16 query heads of dim 128). Names read like the paper's: w8s8-1kv is W8/S8 with one KV
head; suffixes say what else differs (-nope: no RoPE; -uniform/-vector: gate kind; -shared: K=V;
-stagger: layer l's windows start at offset l*S/n_layers; -head-stagger: KV head h's at h*S/n_kv_heads;
-shift: token shift). Candidates
without periodic weak spots at W8/S8's cache size: w8s8-1kv-stagger, w16s8-1kv, w8s8-1kv-shift, and the minimal
overlaps w9s8-1kv and w10s8-1kv (the boundary token shares a window with the next one; -vector: per-channel gates).
Designs that take away what the gates use to prefer offsets: -offset-shared (one gate and one payload map
for every offset, at W8/S8 and W9/S8), -sigmoid (offsets do not compete for weight) and w9s8-1kv-tied (the
overlap slot's gate is the gate of the slot its token holds in the next window).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..compress import DSV4Compression, PaperCompression
from ..config import CompressionConfig, ConfigError, DSV4Layers, ModelConfig

SIZES = {
    "tiny": dict(
        num_layers=2,
        hidden_size=128,
        num_heads=8,
        head_dim=32,
        intermediate_size=512,
        vocab_size=1024,
        rope_theta=10_000.0,
    ),
    "paper": dict(
        num_layers=28,
        hidden_size=1024,
        num_heads=16,
        head_dim=128,
        intermediate_size=3072,
        vocab_size=151_936,
        rope_theta=1_000_000.0,
    ),
}


@dataclass(frozen=True)
class Preset:
    description: str
    kv_heads: int
    compression: CompressionConfig | None = None
    rope: bool = True
    dsv4_layers: str = ""  # DeepSeek-V4 attention layers: "sliding", "csa", "hca" or "mix" (see dsv4_layers)


DSV4_STYLE = DSV4Compression(
    window=8,
    stride=4,
    entry_position="last_stride_start",
    pad_first_window=True,
    attention_sink=True,
)

# DeepSeek-V4's attention family (transformers' DeepseekV4Attention) at each size: low-rank q and grouped
# output projections, indexer sizes, the HCA rate (128 in V4; 16 at tiny size so a 192-token sequence has
# some HCA entries). "mix" opens with a sliding-only layer, then alternates CSA and HCA like V4.
DSV4_SIZES = {
    "tiny": dict(q_lora_rank=32, o_groups=2, o_lora_rank=32, hca_rate=16, index_heads=4, index_head_dim=16),
    "paper": dict(q_lora_rank=256, o_groups=4, o_lora_rank=256, hca_rate=128, index_heads=8, index_head_dim=64),
}
DSV4_TOP_K = 8  # entries each CSA query reads: 8 of the ~48 of a 192-token sequence


def dsv4_layers(pattern: str, size: str, num_layers: int) -> DSV4Layers:
    """The DSV4Layers of preset pattern `pattern` for a model of `num_layers` layers."""
    if pattern == "mix":
        types = ["sliding"] + ["csa" if i % 2 == 0 else "hca" for i in range(num_layers - 1)]
    else:
        types = [pattern] * num_layers
    top_k = DSV4_TOP_K if size == "tiny" else 512
    return DSV4Layers(layer_types=tuple(types), index_topk=top_k, **DSV4_SIZES[size])


PRESETS: dict[str, Preset] = {
    "full-1kv": Preset("full attention, 1 KV head", 1),
    "full-4kv": Preset("full attention, 4 KV heads", 4),
    "full-8kv": Preset("full attention, 8 KV heads (the Qwen3-0.6B layout at paper size)", 8),
    "w8s8-1kv": Preset("W8/S8, 1 KV head, scalar gates, separate K/V", 1, PaperCompression(8, 8)),
    "w8s8-8kv": Preset("W8/S8, 8 KV heads", 8, PaperCompression(8, 8)),
    "w8s4-1kv": Preset("W8/S4 (overlapping windows), 1 KV head", 1, PaperCompression(8, 4)),
    "w12s12-1kv": Preset("W12/S12, 1 KV head", 1, PaperCompression(12, 12)),
    "w12s12-4kv": Preset("W12/S12, 4 KV heads", 4, PaperCompression(12, 12)),
    "w8s8-1kv-nope": Preset("W8/S8, 1 KV head, no RoPE anywhere", 1, PaperCompression(8, 8), rope=False),
    "w8s8-1kv-uniform": Preset(
        "W8/S8, 1 KV head, uniform averaging (no gate)", 1, PaperCompression(8, 8, gate="uniform")
    ),
    "w8s8-1kv-vector": Preset("W8/S8, 1 KV head, vector (per-channel) gates", 1, PaperCompression(8, 8, gate="vector")),
    "w8s8-1kv-shared": Preset(
        "W8/S8, 1 KV head, one latent read as key and value", 1, PaperCompression(8, 8, shared_kv=True)
    ),
    "w8s8-1kv-stagger": Preset(
        "W8/S8, 1 KV head, windows of layer l offset by l*S/n_layers", 1, PaperCompression(8, 8, stagger="layer")
    ),
    "w8s8-4kv-head-stagger": Preset(
        "W8/S8, 4 KV heads, KV head h's windows offset by h*S/4 (0, 2, 4, 6)",
        4,
        PaperCompression(8, 8, stagger="kv_head"),
    ),
    "w8s8-8kv-head-stagger": Preset(
        "W8/S8, 8 KV heads, KV head h's windows offset by h*S/8 (0, 1, .., 7)",
        8,
        PaperCompression(8, 8, stagger="kv_head"),
    ),
    "w16s8-1kv": Preset("W16/S8 (overlap at W8/S8's cache size), 1 KV head", 1, PaperCompression(16, 8)),
    "w9s8-1kv": Preset("W9/S8 (one token of overlap at W8/S8's cache size), 1 KV head", 1, PaperCompression(9, 8)),
    "w10s8-1kv": Preset("W10/S8 (two tokens of overlap at W8/S8's cache size), 1 KV head", 1, PaperCompression(10, 8)),
    "w9s8-1kv-vector": Preset(
        "W9/S8 (one token of overlap), 1 KV head, vector (per-channel) gates", 1, PaperCompression(9, 8, gate="vector")
    ),
    "w8s8-1kv-offset-shared": Preset(
        "W8/S8, 1 KV head, one gate and one payload map shared by every offset",
        1,
        PaperCompression(8, 8, offset_sharing=True),
    ),
    "w9s8-1kv-offset-shared": Preset(
        "W9/S8 (one token of overlap), 1 KV head, one gate and one payload map shared by every offset",
        1,
        PaperCompression(9, 8, offset_sharing=True),
    ),
    "w8s8-1kv-sigmoid": Preset(
        "W8/S8, 1 KV head, non-competitive gates: each offset's weight sigmoid(s_i) / W",
        1,
        PaperCompression(8, 8, gate_norm="sigmoid"),
    ),
    "w9s8-1kv-tied": Preset(
        "W9/S8 (one token of overlap), 1 KV head, the overlap slot's gate tied to slot 0's (same token, next window)",
        1,
        PaperCompression(9, 8, tie_overlap_gate=True),
    ),
    "w8s8-1kv-shift": Preset(
        "W8/S8, 1 KV head, compressor reads [h_p ; h_p-1] (token shift)", 1, PaperCompression(8, 8, token_shift=True)
    ),
    "dsv4": Preset("DeepSeek-V4-style CSA kernel: W8/S4 from two halves, per-offset bias, K=V, sink", 1, DSV4_STYLE),
    "dsv4-sliding": Preset("DeepSeek-V4 attention, sliding-only layers", 1, DSV4_STYLE, dsv4_layers="sliding"),
    "dsv4-csa": Preset(
        "DeepSeek-V4 attention, CSA layers: each query reads the lightning indexer's top 8 W8/S4 entries",
        1,
        DSV4_STYLE,
        dsv4_layers="csa",
    ),
    "dsv4-hca": Preset("DeepSeek-V4 attention, HCA layers: every W16/S16 entry", 1, DSV4_STYLE, dsv4_layers="hca"),
    "dsv4-mix": Preset(
        "a small DeepSeek-V4: a sliding-only layer, then CSA (indexer top 8) and HCA alternating (3 layers at tiny)",
        1,
        DSV4_STYLE,
        dsv4_layers="mix",
    ),
}


def preset_config(name: str, size: str = "tiny", vocab_size: int | None = None, **overrides) -> ModelConfig:
    """The ModelConfig of preset `name` at `size` ("tiny" or "paper"); `overrides` replace fields."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; `phasekv models` lists them: {', '.join(PRESETS)}")
    if size not in SIZES:
        raise ConfigError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
    preset = PRESETS[name]
    base = dict(SIZES[size])
    if vocab_size is not None:
        base["vocab_size"] = vocab_size
    extra = {} if preset.compression is None else preset.compression.model_defaults(base["head_dim"])
    if preset.dsv4_layers:
        overrides = dict(overrides)
        default_layers = 3 if preset.dsv4_layers == "mix" and size == "tiny" else base["num_layers"]
        base["num_layers"] = overrides.pop("num_layers", default_layers)
        extra["dsv4"] = dsv4_layers(preset.dsv4_layers, size, base["num_layers"])
    cfg = ModelConfig(
        name=f"{name}@{size}",
        num_kv_heads=preset.kv_heads,
        compression=preset.compression,
        rope=preset.rope,
        **base,
        **extra,
    )
    return replace(cfg, **overrides) if overrides else cfg
