"""DeepSeek-V4 attention layers: parity with transformers' DeepseekV4Attention (parallel and cached), the
indexer's top-k against its per-query twin, the gathered attention against its reference, indexer training."""

import pytest
import torch

from conftest import randomize
from phasekv.attention.dsv4_indexer import NO_ENTRY, reference_select_top_k, select_top_k
from phasekv.attention.dsv4_layer import (
    DSV4Attention,
    gathered_attention,
    reference_gathered_attention,
    transformers_state_dict,
)
from phasekv.config import CompressionConfig, DSV4Layers, ModelConfig
from phasekv.model import PhaseKVModel, preset_config

TYPES = {"sliding": "sliding_attention", "csa": "compressed_sparse_attention", "hca": "heavily_compressed_attention"}
TOP_K, HCA_RATE, WINDOW = 3, 8, 16
PARITY_TOLERANCE = 1e-5  # fp32, outputs of size ~1


def _has_deepseek_v4() -> bool:
    try:
        import transformers.models.deepseek_v4.modeling_deepseek_v4  # noqa: F401
    except ImportError:
        return False
    return True


needs_hf = pytest.mark.skipif(not _has_deepseek_v4(), reason="the installed transformers has no deepseek_v4 model")


def _configs():
    """A transformers DeepseekV4Config and the phasekv ModelConfig with the same attention (3 layer types)."""
    from transformers import DeepseekV4Config

    hf = DeepseekV4Config(
        vocab_size=64, hidden_size=64, head_dim=32, num_attention_heads=4, q_lora_rank=16, num_hidden_layers=3,
        index_n_heads=4, index_head_dim=16, index_topk=TOP_K, partial_rotary_factor=0.5, o_groups=2, o_lora_rank=16,
        sliding_window=WINDOW, layer_types=list(TYPES.values()), mlp_layer_types=["moe"] * 3,
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": HCA_RATE},
    )  # fmt: skip
    windows = CompressionConfig(
        window=8, stride=4, kind="dsv4", gate="vector", shared_kv=True, entry_position="last_stride_start",
        pad_first_window=True, attention_sink=True, local_window=WINDOW,
    )  # fmt: skip
    layers = DSV4Layers(
        layer_types=tuple(TYPES), q_lora_rank=16, o_groups=2, o_lora_rank=16, hca_rate=HCA_RATE, index_heads=4,
        index_head_dim=16, index_topk=TOP_K, compress_rope_theta=hf.compress_rope_theta,
    )  # fmt: skip
    ours = ModelConfig(
        hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=1, head_dim=32, rope_dim=16, rope_style="interleaved",
        rope_theta=hf.rope_theta, rms_norm_eps=hf.rms_norm_eps, compression=windows, dsv4=layers,
    )  # fmt: skip
    return hf, ours


def _pair(kind: str, seed: int = 0):
    """(transformers' DeepseekV4Attention, our DSV4Attention) of layer type `kind` with the same random weights."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Attention

    hf_cfg, cfg = _configs()
    layer = list(TYPES).index(kind)
    hf = randomize(DeepseekV4Attention(hf_cfg, layer), seed=seed).eval()
    ours = DSV4Attention(cfg, layer).eval()
    ours.load_state_dict(transformers_state_dict(hf.state_dict()))
    return hf, ours, hf_cfg


def _hf_call(hf, hf_cfg, x, start, cache=None):
    """transformers' layer on x [B, T, d] at positions start.. (the model's masks and rotary embeddings)."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4RotaryEmbedding

    batch, length, _ = x.shape
    positions = torch.arange(start, start + length)[None].expand(batch, -1)
    rotary = DeepseekV4RotaryEmbedding(hf_cfg)
    embeddings = {kind: rotary(x, positions, layer_type=kind) for kind in ("main", "compress")}
    past = 0 if cache is None or not cache.layers[hf.layer_idx].is_initialized else cache.layers[hf.layer_idx].keys
    past = past if isinstance(past, int) else past.shape[2]
    key_positions = torch.arange(start - past, start + length)
    distance = positions[0, :, None] - key_positions[None, :]
    allowed = (distance >= 0) & (distance < WINDOW)
    mask = torch.zeros(batch, 1, length, key_positions.numel()).masked_fill(~allowed, float("-inf"))
    return hf(x, embeddings, positions, mask, cache=cache)[0]


@needs_hf
@pytest.mark.parametrize("kind", list(TYPES))
def test_layer_equals_transformers_deepseek_v4_attention(kind):
    hf, ours, hf_cfg = _pair(kind)
    gen = torch.Generator().manual_seed(1)
    worst = 0.0
    for length in (1, 5, 8, 23, 41):
        x = torch.randn(2, length, 64, generator=gen)
        with torch.no_grad():
            expected, got = _hf_call(hf, hf_cfg, x, 0), ours(x)
        assert expected.abs().max() > 0.1
        worst = max(worst, (expected - got).abs().max().item())
    print(f"dsv4 {kind} layer vs transformers DeepseekV4Attention (parallel): max abs diff {worst:.2e}")
    assert worst < PARITY_TOLERANCE


@needs_hf
@pytest.mark.parametrize("kind", list(TYPES))
def test_cached_decoding_equals_transformers_caches(kind):
    """Prefill 13 tokens, then one at a time, against DeepseekV4CSACache / HCACache / the sliding cache."""
    from transformers import DynamicCache

    from phasekv.attention import LayerState

    hf, ours, hf_cfg = _pair(kind, seed=3)
    x = torch.randn(2, 37, 64, generator=torch.Generator().manual_seed(2))
    cache, state = DynamicCache(config=hf_cfg), LayerState()
    expected, got = [], []
    with torch.no_grad():
        for start, stop in [(0, 13)] + [(t, t + 1) for t in range(13, 37)]:
            expected.append(_hf_call(hf, hf_cfg, x[:, start:stop], start, cache))
            got.append(ours(x[:, start:stop], start, state))
        parallel = ours(x)
    expected, got = torch.cat(expected, 1), torch.cat(got, 1)
    worst = (expected - got).abs().max().item()
    print(f"dsv4 {kind} cached decoding vs transformers: max abs diff {worst:.2e} ({type(cache.layers[list(TYPES).index(kind)]).__name__})")
    assert worst < PARITY_TOLERANCE
    torch.testing.assert_close(got, parallel, rtol=1e-5, atol=1e-5)
