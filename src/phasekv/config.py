"""Model configuration: a Qwen3-style decoder whose attention is full or chunk-compressed.

Configs are plain dataclasses that round-trip through JSON (`to_dict` / `from_dict`) and check
themselves at construction, so a bad config fails before any tensor is built.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

ENTRY_POSITIONS = ("window_start", "last_stride_start")
ROPE_STYLES = ("half", "interleaved")
STAGGERS = ("none", "layer", "kv_head")
DSV4_LAYER_TYPES = ("sliding", "csa", "hca")


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which and what to do."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _require_counts(config, keys: tuple[str, ...], label: str = "") -> None:
    """Each of `config`'s fields `keys` must be an integer >= 1 (`label` starts the message)."""
    for key in keys:
        value = getattr(config, key)
        require(isinstance(value, int) and value >= 1, f"{label}{key} must be an integer >= 1, got {value!r}")


def _check_keys(config_class, data: dict[str, Any], label: str) -> None:
    """`data` may hold only fields of `config_class` (`label` names them in the message)."""
    known = {f.name for f in fields(config_class)}
    unknown = sorted(set(data) - known)
    require(not unknown, f"unknown {label} keys {unknown}; known keys are {sorted(known)}")


@dataclass(frozen=True)
class CompressionConfig:
    """How a layer's KV history is compressed: what every compressor kind shares (the windows, the local window,
    the sink, the offsets). A kind (`phasekv.compress.paper`, `phasekv.compress.dsv4`) subclasses it with its own
    fields and registers itself (`register_kind`); `kind` names it in config.json.

    Window j covers positions o+j*stride .. o+j*stride+window-1 (o: the layer's window offset, 0
    unless staggered) and writes one entry, visible to a query at t iff t >= o+j*stride+window-1.
    Queries also attend to the last `local_window` exact tokens (their own included), in one softmax
    with the visible entries.

    Every kind also answers `gate` ("scalar", "vector" or "uniform"), `gate_norm` ("softmax" or "sigmoid") and
    `shared_kv` (one latent read as key and value), as fields or as fixed class attributes.

    entry_position:  RoPE position of entry j: "window_start" (j*stride) or "last_stride_start"
                     (j*stride + window - stride, DeepSeek-V4's choice).
    pad_first_window: also write the windows that start before position 0, their missing slots
                     given gate weight 0 (DeepSeek-V4 does this; off by default).
    attention_sink:  a learned per-head logit in every softmax denominator (DeepSeek-V4).
    stagger:         window offsets per layer or KV head: "none" (every layer at offset 0, or `offsets`) or "layer"
                     (layer l of n at offset l*stride//n). With offset o, window j covers
                     o+j*stride .. o+j*stride+window-1, is visible from its last position on, and RoPE
                     places it at its start (incl. o). Tokens before o belong to no complete window;
                     with pad_first_window they fall in window -1, whose slots before 0 get weight 0.
                     "kv_head": every layer at offset 0 (or `offsets`), and KV head h of n_kv writes its
                     windows at o_h = h*stride//n_kv on top of the layer's offset (mod stride): with 4 KV
                     heads at S=8, heads 0-3 cut at 0, 2, 4, 6 (`head_offsets`), so each phase is the last
                     slot of a window for only some heads. One entry per head per S tokens, as unstaggered:
                     the same parameters and cache bytes. Kinds with `head_stagger` only.
    offsets:         explicit per-layer offsets (one per layer, each in [0, stride)); needs stagger="none" or
                     "kv_head".
    token_shift:     gates and payload maps read [h_p ; h_{p-1}] (h_{-1} = 0) instead of h_p, so a key
                     in a window's last slot and its value in the next window's first slot are both
                     readable at one offset. Entry count, visibility and cache bytes are unchanged.
    """

    kind: ClassVar[str] = ""
    head_stagger: ClassVar[bool] = False  # whether the kind can write each KV head on its own grid

    window: int = 8
    stride: int = 8
    local_window: int = 16
    entry_position: str = "window_start"
    pad_first_window: bool = False
    attention_sink: bool = False
    stagger: str = "none"
    offsets: tuple[int, ...] = ()
    token_shift: bool = False

    def __post_init__(self) -> None:
        require(
            self.kind in COMPRESSOR_KINDS and COMPRESSOR_KINDS[self.kind].config is type(self),
            f"{type(self).__name__} is not a registered compressor kind; registered: {sorted(COMPRESSOR_KINDS)}",
        )
        require(
            isinstance(self.offsets, tuple | list), f"offsets must be a list of per-layer ints, got {self.offsets!r}"
        )
        object.__setattr__(self, "offsets", tuple(self.offsets))  # lists from JSON
        require(
            isinstance(self.window, int) and self.window >= 1, f"window must be an integer >= 1, got {self.window!r}"
        )
        require(
            isinstance(self.stride, int) and self.stride >= 1, f"stride must be an integer >= 1, got {self.stride!r}"
        )
        require(
            self.stride <= self.window,
            f"stride ({self.stride}) > window ({self.window}) would leave tokens that no entry covers; "
            "use stride <= window",
        )
        require(
            isinstance(self.local_window, int) and self.local_window >= 1,
            f"local_window must be an integer >= 1 (it includes the query's own token), got {self.local_window!r}",
        )
        require(
            self.entry_position in ENTRY_POSITIONS,
            f"unknown entry_position {self.entry_position!r}; choose one of {ENTRY_POSITIONS}",
        )
        require(self.stagger in STAGGERS, f"unknown stagger {self.stagger!r}; choose one of {STAGGERS}")
        require(
            all(isinstance(o, int) and 0 <= o < self.stride for o in self.offsets),
            f"offsets must be integers in [0, stride={self.stride}), got {self.offsets}",
        )
        require(
            not (self.offsets and self.stagger == "layer"),
            f"give either explicit offsets or stagger={self.stagger!r}, not both",
        )
        require(isinstance(self.token_shift, bool), f"token_shift must be True or False, got {self.token_shift!r}")
        require(
            self.stagger != "kv_head" or self.head_stagger,
            f"stagger='kv_head' applies to paper-style compressors only, not kind={self.kind!r}",
        )

    @property
    def overlap(self) -> bool:
        return self.stride < self.window

    def layer_offset(self, layer: int, num_layers: int) -> int:
        """The window offset of layer `layer` (0-based) in a model of `num_layers` layers."""
        if self.offsets:
            return self.offsets[layer]
        return layer * self.stride // num_layers if self.stagger == "layer" else 0

    def head_offsets(self, kv_heads: int) -> tuple[int, ...]:
        """Each KV head's window offset relative to its layer's (all 0 unless stagger="kv_head")."""
        if self.stagger != "kv_head":
            return (0,) * kv_heads
        return tuple(h * self.stride // kv_heads for h in range(kv_heads))

    def model_defaults(self, head_dim: int) -> dict[str, Any]:
        """ModelConfig fields a preset of this kind sets unless told otherwise (none by default)."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class CompressorKind:
    """A registered compressor kind: its config class and the module that computes it (a
    `phasekv.compress.Compressor` subclass, whose constructor takes the config)."""

    config: type[CompressionConfig]
    compressor: type


DEFAULT_KIND = "paper"  # the kind of a compression dict that names none
# kind name -> its config and compressor; each kind's module registers itself (`register_kind`) when
# `phasekv.compress` is imported
COMPRESSOR_KINDS: dict[str, CompressorKind] = {}


def register_kind(config: type[CompressionConfig], compressor: type) -> None:
    """Make `config.kind` a compressor kind: configs of that name read from JSON become `config`, and
    `phasekv.compress.build_compressor` builds `compressor` for them."""
    require(bool(config.kind), f"{config.__name__} has no kind name")
    known = COMPRESSOR_KINDS.get(config.kind)
    require(
        known is None or known == CompressorKind(config, compressor),
        f"compressor kind {config.kind!r} is already registered by {known and known.config.__name__}",
    )
    COMPRESSOR_KINDS[config.kind] = CompressorKind(config, compressor)


def compression_from_dict(data: dict[str, Any]) -> CompressionConfig:
    """The config of kind `data["kind"]` ("paper" when it names none) with the other keys of `data` as its
    fields."""
    data = dict(data)
    kind = data.pop("kind", DEFAULT_KIND)
    require(
        kind in COMPRESSOR_KINDS,
        f"unknown compressor kind {kind!r}; choose one of {sorted(COMPRESSOR_KINDS)} "
        "(kinds are registered when phasekv.compress is imported)",
    )
    config = COMPRESSOR_KINDS[kind].config
    unknown = set(data) - {f.name for f in fields(config)}
    owners = [name for name, other in COMPRESSOR_KINDS.items() if unknown & {f.name for f in fields(other.config)}]
    require(
        not unknown,
        f"unknown {kind} compression keys {sorted(unknown)}; known keys are {sorted(f.name for f in fields(config))}"
        + (f"; they are options of kind {', '.join(map(repr, owners))}" if owners else ""),
    )
    return config(**data)


@dataclass(frozen=True)
class DSV4Layers:
    """DeepSeek-V4's attention family (transformers' `DeepseekV4Attention`), one layer type per layer.

    Every layer: low-rank queries (q_a_proj -> RMSNorm -> q_b_proj -> per-head unweighted RMSNorm), one
    shared K=V head (kv_proj -> RMSNorm), partial interleaved RoPE on the trailing `rope_dim` channels
    (the rotation is undone on the output at the query position), a per-head sink, a grouped low-rank
    output projection, and the last `sliding_window` exact tokens. "csa" layers add the model's
    `compression` entries (W = 2S, S = csa stride) of which each query reads only the `index_topk` that the
    lightning indexer scores highest; "hca" layers add every visible entry of non-overlapping windows of
    `hca_rate` tokens. Compressed layers rotate with `compress_rope_theta`, sliding ones with `rope_theta`.
    The indexer learns from `indexer_loss_weight` x KL(attention over its picks || its softmax), with
    its inputs detached (DeepSeek-V3.2's sparse-stage objective).
    """

    layer_types: tuple[str, ...] = ("sliding", "csa")
    q_lora_rank: int = 32
    o_groups: int = 2
    o_lora_rank: int = 32
    hca_rate: int = 16
    index_heads: int = 4
    index_head_dim: int = 16
    index_topk: int = 8
    compress_rope_theta: float = 160_000.0
    indexer_loss_weight: float = 1.0

    def __post_init__(self) -> None:
        require(
            isinstance(self.layer_types, tuple | list) and len(self.layer_types) > 0,
            f"layer_types must be a non-empty list, got {self.layer_types!r}",
        )
        object.__setattr__(self, "layer_types", tuple(self.layer_types))  # lists from JSON
        bad = [t for t in self.layer_types if t not in DSV4_LAYER_TYPES]
        require(not bad, f"unknown dsv4 layer types {bad}; choose from {DSV4_LAYER_TYPES}")
        _require_counts(
            self,
            ("q_lora_rank", "o_groups", "o_lora_rank", "hca_rate", "index_heads", "index_head_dim", "index_topk"),
            "dsv4 ",
        )
        require(self.compress_rope_theta > 0, f"compress_rope_theta must be positive, got {self.compress_rope_theta}")
        require(self.indexer_loss_weight >= 0, f"indexer_loss_weight must be >= 0, got {self.indexer_loss_weight}")


@dataclass(frozen=True)
class ModelConfig:
    """A Qwen3-style decoder: RMSNorm, SwiGLU, GQA, per-head q/k RMSNorm, RoPE or none, tied embeddings.

    `compression=None` means full causal attention in every layer.
    RoPE rotates the trailing `rope_dim` channels of each head (all of them by default), pairing
    channels as Qwen does ("half") or as DeepSeek-V4 does ("interleaved").
    """

    vocab_size: int = 1024
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 8
    num_kv_heads: int = 1
    head_dim: int = 32
    intermediate_size: int = 512
    rope: bool = True
    rope_theta: float = 1_000_000.0
    rope_dim: int | None = None
    rope_style: str = "half"
    rms_norm_eps: float = 1e-6
    tie_embeddings: bool = True
    attention_bias: bool = False
    init_std: float = 0.02
    compression: CompressionConfig | None = None
    dsv4: DSV4Layers | None = None
    name: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        _require_counts(
            self,
            ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "intermediate_size"),
        )
        require(
            self.num_heads % self.num_kv_heads == 0,
            f"num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads}): each KV head serves "
            "an equal group of query heads",
        )
        require(self.rope_style in ROPE_STYLES, f"unknown rope_style {self.rope_style!r}; choose one of {ROPE_STYLES}")
        rope_dim = self.rotary_dim
        require(
            0 < rope_dim <= self.head_dim and rope_dim % 2 == 0,
            f"rope_dim must be even and in (0, head_dim={self.head_dim}], got {rope_dim}",
        )
        require(self.rope_theta > 0, f"rope_theta must be positive, got {self.rope_theta}")
        if isinstance(self.compression, dict):  # tolerate dicts from JSON
            object.__setattr__(self, "compression", compression_from_dict(self.compression))
        if isinstance(self.dsv4, dict):
            object.__setattr__(self, "dsv4", DSV4Layers(**self.dsv4))
        if self.dsv4 is not None:
            self._check_dsv4()
        if self.compression is not None and self.compression.offsets:
            require(
                len(self.compression.offsets) == self.num_layers,
                f"compression.offsets has {len(self.compression.offsets)} entries for {self.num_layers} layers: "
                "give one offset per layer",
            )

    def _check_dsv4(self) -> None:
        layers, comp = self.dsv4, self.compression
        require(
            len(layers.layer_types) == self.num_layers,
            f"dsv4.layer_types has {len(layers.layer_types)} entries for {self.num_layers} layers: give one per layer",
        )
        require(
            self.num_kv_heads == 1, f"dsv4 layers read one shared K=V head: set num_kv_heads=1, not {self.num_kv_heads}"
        )
        require(
            comp is not None and comp.kind == "dsv4" and comp.window == 2 * comp.stride and comp.pad_first_window,
            "dsv4 layers need compression=kind 'dsv4' with window = 2*stride and pad_first_window (the CSA windows)",
        )
        require(
            (self.num_heads * self.head_dim) % layers.o_groups == 0,
            f"dsv4 o_groups ({layers.o_groups}) must divide num_heads*head_dim ({self.num_heads * self.head_dim})",
        )
        require(
            self.rotary_dim <= layers.index_head_dim,
            f"the indexer rotates rope_dim={self.rotary_dim} channels: index_head_dim must be >= it",
        )

    @property
    def rotary_dim(self) -> int:
        return self.head_dim if self.rope_dim is None else self.rope_dim

    @property
    def compressed(self) -> bool:
        return self.compression is not None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.compression is not None:
            out["compression"] = self.compression.to_dict()
        return {"config_version": CONFIG_VERSION, **out}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """A config from `to_dict`'s output, or from an earlier version's (`migrate_config`)."""
        data = migrate_config(data)
        _check_keys(cls, data, "config")
        if data.get("compression") is not None:
            data["compression"] = compression_from_dict(data["compression"])
        if data.get("dsv4") is not None:
            _check_keys(DSV4Layers, data["dsv4"], "dsv4")
            data["dsv4"] = DSV4Layers(**data["dsv4"])
        return cls(**data)


# The version of the dicts `ModelConfig.to_dict` writes. 1 (no "config_version" key): one flat compression dict
# with every kind's fields. 2: a compression dict holds its kind's fields only.
CONFIG_VERSION = 2
# version 1's compression fields that not every kind has, with the value version 1 gave them by default
_V1_KIND_FIELDS = {
    "gate": "scalar",
    "shared_kv": False,
    "offset_sharing": False,
    "gate_norm": "softmax",
    "tie_overlap_gate": False,
}


def migrate_config(data: dict[str, Any]) -> dict[str, Any]:
    """A ModelConfig dict of any version (a saved config.json's "config") as this version's, without the
    version key. Version 1 -> 2: a compression dict keeps the fields its kind has ("paper" when it names
    none); a field its kind lacks must hold the kind's fixed value (DeepSeek-V4's vector gate, K=V) or
    version 1's default, as version 1 required, and is dropped."""
    data = dict(data)
    version = data.pop("config_version", 1)
    require(
        version in (1, CONFIG_VERSION),
        f"config_version {version!r} is not one this phasekv reads (1 to {CONFIG_VERSION}); a newer phasekv wrote it",
    )
    compression = data.get("compression")
    if version == 1 and compression is not None:
        compression = {"kind": DEFAULT_KIND, **compression}
        kind = COMPRESSOR_KINDS.get(compression["kind"])
        if kind is not None:
            own = {f.name for f in fields(kind.config)}
            for key in sorted(set(compression) & set(_V1_KIND_FIELDS) - own):
                value = compression.pop(key)
                fixed = getattr(kind.config, key, _V1_KIND_FIELDS[key])
                require(
                    value == fixed,
                    f"compression {key}={value!r} does not apply to kind {compression['kind']!r} (it has {fixed!r})",
                )
        data["compression"] = compression
    return data
