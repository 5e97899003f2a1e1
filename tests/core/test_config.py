import pytest
import torch

from phasekv.config import CompressionConfig, ConfigError, ModelConfig
from phasekv.model import PRESETS, PhaseKVModel, preset_config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(window=4, stride=8), "stride (8) > window (4)"),
        (dict(window=0, stride=1), "window must be an integer >= 1"),
        (dict(window=8, stride=0), "stride must be an integer >= 1"),
        (dict(local_window=0), "local_window must be an integer >= 1"),
        (dict(gate="softmax"), "unknown gate kind 'softmax'"),
        (dict(kind="nsa"), "unknown compressor kind 'nsa'"),
        (dict(entry_position="middle"), "unknown entry_position"),
        (dict(kind="dsv4", window=12, stride=4, gate="vector", shared_kv=True), "(CSA: window = 2*stride)"),
        (dict(kind="dsv4", window=8, stride=4, gate="scalar", shared_kv=True), "gate='vector'"),
        (dict(kind="dsv4", window=8, stride=4, gate="vector"), "shared_kv=True"),
        (dict(stagger="head"), "unknown stagger 'head'"),
        (dict(stride=8, offsets=(0, 8)), "offsets must be integers in .0, stride=8., got (0, 8)"),
        (dict(offsets=3), "offsets must be a list of per-layer ints"),
        (dict(offsets=(0, 4), stagger="layer"), "give either explicit offsets or stagger='layer'"),
        (dict(token_shift=1), "token_shift must be True or False"),
    ],
)
def test_bad_compression_configs_fail_with_a_clear_message(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        CompressionConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=8, num_kv_heads=3), r"num_kv_heads \(3\) must divide num_heads \(8\)"),
        (dict(head_dim=32, rope_dim=33), "rope_dim must be even"),
        (dict(rope_style="yarn"), "unknown rope_style"),
        (dict(hidden_size=0), "hidden_size must be an integer >= 1"),
        (dict(num_layers=3, compression=CompressionConfig(offsets=(0, 4))), "offsets has 2 entries for 3 layers"),
    ],
)
def test_bad_model_configs_fail_with_a_clear_message(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**kwargs)


def test_config_round_trips_through_dict():
    for name in PRESETS:
        cfg = preset_config(name)
        assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_unknown_keys_and_presets_are_named():
    with pytest.raises(ConfigError, match="unknown config keys"):
        ModelConfig.from_dict({"hidden": 3})
    with pytest.raises(ConfigError, match="unknown preset 'w9s9'"):
        preset_config("w9s9")
    with pytest.raises(ConfigError, match="unknown size 'huge'"):
        preset_config("full-1kv", "huge")


def test_every_tiny_preset_builds_and_runs():
    ids = torch.randint(0, 50, (2, 21), generator=torch.Generator().manual_seed(0))
    for name in PRESETS:
        model = PhaseKVModel(preset_config(name, vocab_size=50)).eval()
        with torch.no_grad():
            logits = model(ids)
        assert logits.shape == (2, 21, 50) and torch.isfinite(logits).all(), name
        # counted from the state dict, tied tensors once (storage pointers), not from model.parameters()
        names = {n for n, _ in model.named_parameters(remove_duplicate=False)}
        unique = {t.data_ptr(): t.numel() for k, t in model.state_dict().items() if k in names}
        assert model.num_parameters() == sum(unique.values()) > 50 * 128, name


def test_layer_offsets_follow_stagger_or_the_explicit_list():
    stagger = CompressionConfig(8, 8, stagger="layer")
    assert [stagger.layer_offset(i, 4) for i in range(4)] == [0, 2, 4, 6]
    assert [stagger.layer_offset(i, 28) for i in (0, 3, 4, 27)] == [0, 0, 1, 7]
    assert CompressionConfig(offsets=[5, 1]).layer_offset(1, 2) == 1  # lists (JSON) become tuples
    assert [CompressionConfig().layer_offset(i, 2) for i in range(2)] == [0, 0]
    cfg = ModelConfig(num_layers=2, compression=CompressionConfig(offsets=(5, 1), token_shift=True))
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
