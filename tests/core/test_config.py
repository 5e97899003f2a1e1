import json

import pytest
import torch

from phasekv.compress import PaperCompression
from phasekv.config import CONFIG_VERSION, ConfigError, ModelConfig, compression_from_dict
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
        (dict(kind="dsv4", window=12, stride=4), "(CSA: window = 2*stride)"),
        (dict(stagger="head"), "unknown stagger 'head'"),
        (dict(stride=8, offsets=(0, 8)), "offsets must be integers in .0, stride=8., got (0, 8)"),
        (dict(offsets=3), "offsets must be a list of per-layer ints"),
        (dict(offsets=(0, 4), stagger="layer"), "give either explicit offsets or stagger='layer'"),
        (dict(token_shift=1), "token_shift must be True or False"),
    ],
)
def test_bad_compression_configs_fail_with_a_clear_message(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        compression_from_dict(kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=8, num_kv_heads=3), r"num_kv_heads \(3\) must divide num_heads \(8\)"),
        (dict(head_dim=32, rope_dim=33), "rope_dim must be even"),
        (dict(rope_style="yarn"), "unknown rope_style"),
        (dict(hidden_size=0), "hidden_size must be an integer >= 1"),
        (dict(num_layers=3, compression=PaperCompression(offsets=(0, 4))), "offsets has 2 entries for 3 layers"),
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
    stagger = PaperCompression(8, 8, stagger="layer")
    assert [stagger.layer_offset(i, 4) for i in range(4)] == [0, 2, 4, 6]
    assert [stagger.layer_offset(i, 28) for i in (0, 3, 4, 27)] == [0, 0, 1, 7]
    assert PaperCompression(offsets=[5, 1]).layer_offset(1, 2) == 1  # lists (JSON) become tuples
    assert [PaperCompression().layer_offset(i, 2) for i in range(2)] == [0, 0]
    cfg = ModelConfig(num_layers=2, compression=PaperCompression(offsets=(5, 1), token_shift=True))
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


# A config.json's "config" as phasekv wrote it before configs had a version (version 1): one flat compression dict
# with every kind's fields.
V1_DSV4 = {
    "vocab_size": 1024, "hidden_size": 128, "num_layers": 2, "num_heads": 8, "num_kv_heads": 1, "head_dim": 32,
    "intermediate_size": 512, "rope": True, "rope_theta": 10000.0, "rope_dim": 16, "rope_style": "interleaved",
    "rms_norm_eps": 1e-06, "tie_embeddings": True, "attention_bias": False, "init_std": 0.02,
    "compression": {
        "window": 8, "stride": 4, "kind": "dsv4", "gate": "vector", "shared_kv": True, "local_window": 16,
        "entry_position": "last_stride_start", "pad_first_window": True, "attention_sink": True, "stagger": "none",
        "offsets": [], "token_shift": False, "offset_sharing": False, "gate_norm": "softmax", "tie_overlap_gate": False,
    },
    "dsv4": None, "name": "dsv4@tiny",
}  # fmt: skip
V1_PAPER_COMPRESSION = {
    "window": 9, "stride": 8, "kind": "paper", "gate": "scalar", "shared_kv": False, "local_window": 16,
    "entry_position": "window_start", "pad_first_window": False, "attention_sink": False, "stagger": "none",
    "offsets": [], "token_shift": False, "offset_sharing": False, "gate_norm": "softmax", "tie_overlap_gate": True,
}  # fmt: skip


def test_a_version_1_config_loads_as_the_same_config():
    assert ModelConfig.from_dict(V1_DSV4) == preset_config("dsv4")
    paper = {**V1_DSV4, "compression": V1_PAPER_COMPRESSION, "rope_dim": None, "rope_style": "half"}
    assert ModelConfig.from_dict(paper) == preset_config("w9s8-1kv-tied")
    without_kind = {k: v for k, v in V1_PAPER_COMPRESSION.items() if k != "kind"}  # "paper" when none is named
    assert ModelConfig.from_dict({**paper, "compression": without_kind}) == preset_config("w9s8-1kv-tied")


@pytest.mark.parametrize("name", ["dsv4", "dsv4-mix", "w8s8-4kv-head-stagger", "w8s8-1kv-sigmoid"])
def test_a_config_round_trips_through_its_dict_and_names_its_version_and_kind(name):
    cfg = preset_config(name)
    data = json.loads(json.dumps(cfg.to_dict()))
    assert data["config_version"] == CONFIG_VERSION and data["compression"]["kind"] == cfg.compression.kind
    assert ModelConfig.from_dict(data) == cfg


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(gate="scalar"), "gate='scalar' does not apply to kind 'dsv4'"),
        (dict(shared_kv=False), "shared_kv=False does not apply to kind 'dsv4'"),
        (dict(offset_sharing=True), "offset_sharing=True does not apply to kind 'dsv4'"),
        (dict(kind="nsa"), "unknown compressor kind 'nsa'"),
    ],
)
def test_a_version_1_config_that_version_1_refused_is_refused(change, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig.from_dict({**V1_DSV4, "compression": {**V1_DSV4["compression"], **change}})


def test_a_config_of_a_later_version_is_refused():
    with pytest.raises(ConfigError, match="config_version 99"):
        ModelConfig.from_dict({**preset_config("dsv4").to_dict(), "config_version": 99})
