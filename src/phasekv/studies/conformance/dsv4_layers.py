"""phasekv's DeepSeek-V4 attention layers against transformers' `DeepseekV4Attention`, one layer at a time.

transformers' whole `DeepseekV4ForCausalLM` has mixture-of-experts MLPs and hyper-connections that phasekv's
models do not, so the two implementations are compared where they should agree exactly: one attention layer
of each kind (sliding window, compressed sparse attention with the lightning indexer, heavily compressed
attention), built from twin tiny configs, with transformers' weights copied into phasekv's layer, fed the
same hidden states. Each side runs every execution mode with its own cache (phasekv's `LayerState`,
transformers' `DynamicCache` with its compressor caches); rows are layer outputs, not log-probs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from .run import HIDDEN, LocalRunner, _jitter

LAYER_KINDS = {
    "sliding": "sliding_attention",
    "csa": "compressed_sparse_attention",
    "hca": "heavily_compressed_attention",
}
TOP_K, HCA_RATE, WINDOW, CSA_RATE = 3, 8, 16, 4
DEFAULT_TOP_K = TOP_K
HIDDEN_SIZE, VOCAB = 64, 64


def layer_kind(name: str) -> str:
    """ "dsv4-csa" (or "csa") -> "csa"; the command line names the architecture with the layer."""
    kind = name.removeprefix("dsv4-")
    if kind not in LAYER_KINDS:
        raise ValueError(f"unknown layer {name!r}; choose one of {', '.join('dsv4-' + k for k in LAYER_KINDS)}")
    return kind


def twin_configs(top_k: int = TOP_K):
    """A transformers `DeepseekV4Config` and the phasekv `ModelConfig` with the same attention (one layer of
    each kind, in `LAYER_KINDS` order)."""
    from transformers import DeepseekV4Config

    from phasekv.compress import DSV4Compression
    from phasekv.config import DSV4Layers, ModelConfig

    hf = DeepseekV4Config(
        vocab_size=VOCAB, hidden_size=HIDDEN_SIZE, head_dim=32, num_attention_heads=4, q_lora_rank=16,
        num_hidden_layers=3, index_n_heads=4, index_head_dim=16, index_topk=top_k, partial_rotary_factor=0.5,
        o_groups=2, o_lora_rank=16, sliding_window=WINDOW, layer_types=list(LAYER_KINDS.values()),
        mlp_layer_types=["moe"] * 3,
        compress_rates={"compressed_sparse_attention": CSA_RATE, "heavily_compressed_attention": HCA_RATE},
    )  # fmt: skip
    windows = DSV4Compression(
        window=2 * CSA_RATE, stride=CSA_RATE, entry_position="last_stride_start", pad_first_window=True,
        attention_sink=True, local_window=WINDOW,
    )  # fmt: skip
    layers = DSV4Layers(
        layer_types=tuple(LAYER_KINDS), q_lora_rank=16, o_groups=2, o_lora_rank=16, hca_rate=HCA_RATE,
        index_heads=4, index_head_dim=16, index_topk=top_k, compress_rope_theta=hf.compress_rope_theta,
    )  # fmt: skip
    ours = ModelConfig(
        hidden_size=HIDDEN_SIZE, num_layers=3, num_heads=4, num_kv_heads=1, head_dim=32, rope_dim=16,
        rope_style="interleaved", rope_theta=hf.rope_theta, rms_norm_eps=hf.rms_norm_eps, compression=windows,
        dsv4=layers,
    )  # fmt: skip
    return hf, ours


def layer_pair(kind: str, seed: int = 0, std: float = 0.3, top_k: int = TOP_K):
    """(transformers' DeepseekV4Attention, phasekv's DSV4Attention, the transformers config) of layer `kind`
    with the same random weights (transformers' drawn from `seed`, copied into phasekv's)."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Attention

    from phasekv.attention.dsv4_layer import DSV4Attention, transformers_state_dict

    if kind not in LAYER_KINDS:
        raise ValueError(f"unknown DeepSeek-V4 layer kind {kind!r}; choose one of {', '.join(LAYER_KINDS)}")
    hf_cfg, cfg = twin_configs(top_k)
    layer = list(LAYER_KINDS).index(kind)
    hf = DeepseekV4Attention(hf_cfg, layer)
    _jitter(hf, seed, std)
    ours = DSV4Attention(cfg, layer)
    ours.load_state_dict(transformers_state_dict(hf.state_dict()))
    return hf.eval(), ours.eval(), hf_cfg


def transformers_layer_call(hf, hf_cfg, x: torch.Tensor, start: int, cache=None) -> torch.Tensor:
    """transformers' layer on x [B, T, d] at positions start.. with what its model would pass: rotary
    embeddings of both kinds and the sliding-window mask over the cached and new keys."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4RotaryEmbedding

    batch, length, _ = x.shape
    positions = torch.arange(start, start + length)[None].expand(batch, -1)
    rotary = DeepseekV4RotaryEmbedding(hf_cfg)
    embeddings = {kind: rotary(x, positions, layer_type=kind) for kind in ("main", "compress")}
    past = 0 if cache is None or not cache.layers[hf.layer_idx].is_initialized else cache.layers[hf.layer_idx].keys
    past = past if isinstance(past, int) else past.shape[2]
    key_positions = torch.arange(start - past, start + length)
    distance = positions[0, :, None] - key_positions[None, :]
    allowed = (distance >= 0) & (distance < hf_cfg.sliding_window)
    mask = torch.zeros(batch, 1, length, key_positions.numel(), dtype=x.dtype).masked_fill(~allowed, float("-inf"))
    return hf(x, embeddings, positions, mask, cache=cache)[0]


@dataclass
class _LayerCache:
    state: Any  # phasekv's LayerState or transformers' DynamicCache
    length: int = 0  # tokens fed so far: the next call's first position


class _LayerRunner(LocalRunner):
    """One attention layer fed the hidden states of a fixed random embedding of the prompt ids (the same
    table on both sides), so every mode of the conformance run applies; rows are the layer's outputs."""

    output = HIDDEN
    left_padding = "not defined: a single layer takes no attention mask or per-row positions"

    def __init__(self, kind: str, embedding: torch.Tensor, name: str):
        self.kind_name, self.embedding, self.name = kind, embedding, name
        self.stride = HCA_RATE if kind == "hca" else CSA_RATE
        self.ratios = () if kind == "sliding" else (self.stride,)  # a sliding layer compresses nothing
        self.vocab_size = embedding.shape[0]

    def readout(self, out):
        return out.detach().cpu()

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding[ids]

    def logits(self, ids):
        return self.call(self.hidden(ids), 0, None)

    def step(self, ids, cache: _LayerCache):
        out = self.call(self.hidden(ids), cache.length, cache.state)
        cache.length += ids.shape[1]
        return out

    def fork_cache(self, cache):
        return copy.deepcopy(cache)

    @torch.no_grad()
    def padded(self, rows, side):
        if side != "right":
            raise ValueError(self.left_padding)
        width = max(map(len, rows))
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        out = self.readout(self.logits(ids))  # causal: what follows a row's end cannot change it
        return [out[i, : len(row)] for i, row in enumerate(rows)]


class PhaseKVLayerRunner(_LayerRunner):
    kind = "phasekv layer"

    def __init__(self, layer, kind: str, embedding: torch.Tensor):
        super().__init__(kind, embedding, f"phasekv DSV4Attention ({kind})")
        self.layer = layer

    def call(self, x, start, state):
        return self.layer(x) if state is None else self.layer(x, start, state)

    def new_cache(self):
        from phasekv.attention import LayerState

        return _LayerCache(LayerState())

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name, "layer_kind": self.kind_name}


class TransformersLayerRunner(_LayerRunner):
    kind = "transformers layer"

    def __init__(self, layer, hf_cfg, kind: str, embedding: torch.Tensor):
        super().__init__(kind, embedding, f"transformers DeepseekV4Attention ({kind})")
        self.layer, self.hf_cfg = layer, hf_cfg

    def call(self, x, start, state):
        return transformers_layer_call(self.layer, self.hf_cfg, x, start, state)

    def new_cache(self):
        from transformers import DynamicCache

        return _LayerCache(DynamicCache(config=self.hf_cfg))

    def describe(self) -> dict:
        import transformers

        return {"kind": self.kind, "name": self.name, "layer_kind": self.kind_name, "version": transformers.__version__}


def layer_runners(kind: str, seed: int = 0, dtype: torch.dtype = torch.float32, top_k: int = TOP_K):
    """(phasekv's layer, transformers' layer) of DeepSeek-V4 layer `kind`, same weights, same embedding."""
    hf, ours, hf_cfg = layer_pair(kind, seed, top_k=top_k)
    embedding = torch.randn(VOCAB, HIDDEN_SIZE, generator=torch.Generator().manual_seed(seed + 1), dtype=dtype)
    return (
        PhaseKVLayerRunner(ours.to(dtype), kind, embedding),
        TransformersLayerRunner(hf.to(dtype), hf_cfg, kind, embedding),
    )
