import json

import pytest
import torch

from conftest import qwen3_pair, randomize
from phasekv.hooks import hook_names, hooks
from phasekv.model import PRESETS, CheckpointError, PhaseKVModel, load_checkpoint, preset_config, save_checkpoint


def test_full_attention_logits_match_transformers_qwen3():
    hf, ours = qwen3_pair()
    ids = torch.randint(0, 97, (3, 50), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (hf(ids).logits - ours(ids)).abs().max().item()
    print(f"Qwen3ForCausalLM vs phasekv full attention: max abs logit diff {diff:.2e}")
    assert diff < 1e-5


def test_paper_size_full_8kv_has_qwen3_0_6b_parameter_count():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = preset_config("full-8kv", "paper")
    with torch.device("meta"):
        ours = PhaseKVModel(cfg)
        hf = Qwen3ForCausalLM(
            Qwen3Config(
                vocab_size=cfg.vocab_size,
                hidden_size=cfg.hidden_size,
                num_hidden_layers=cfg.num_layers,
                num_attention_heads=cfg.num_heads,
                num_key_value_heads=cfg.num_kv_heads,
                head_dim=cfg.head_dim,
                intermediate_size=cfg.intermediate_size,
                tie_word_embeddings=True,
            )
        )
    hf_count = sum(p.numel() for p in hf.parameters())
    print(f"paper full-8kv: phasekv {ours.num_parameters():,} vs Qwen3ForCausalLM {hf_count:,}")
    assert ours.num_parameters() == hf_count == 596_049_920


@pytest.mark.parametrize("name", list(PRESETS))
def test_future_tokens_never_change_earlier_outputs(name):
    model = randomize(PhaseKVModel(preset_config(name, vocab_size=50)), seed=1).eval()
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 50, (1, 45), generator=gen)
    with torch.no_grad():
        base = model(ids)
        for t in (0, 6, 7, 8, 23, 30):
            changed = ids.clone()
            changed[:, t + 1 :] = torch.randint(0, 50, (1, 44 - t), generator=gen)
            out = model(changed)
            torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], rtol=1e-5, atol=1e-5)
            assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :])


def test_hook_z_replaces_per_head_outputs_at_chosen_positions():
    model = randomize(PhaseKVModel(preset_config("w8s8-1kv", vocab_size=50)), seed=3).eval()
    assert "layers.1.self_attn.hook_z" in hook_names(model)
    assert "layers.0.self_attn.compressor.hook_gate_key" in hook_names(model)
    ids = torch.randint(0, 50, (2, 20))

    def zero_last(z, name):
        z = z.clone()
        z[:, -1] = 0.0  # [B, T, heads, head_dim]: knock out every head at the final position
        return z

    with torch.no_grad():
        base = model(ids)
        with hooks(model, {"layers.0.self_attn.hook_z": zero_last}):
            knocked = model(ids)
    torch.testing.assert_close(knocked[:, :-1], base[:, :-1])
    assert (knocked[:, -1] - base[:, -1]).abs().max() > 1e-3


def test_checkpoint_round_trip(tmp_path):
    model = randomize(PhaseKVModel(preset_config("dsv4", vocab_size=40)), seed=4).eval()
    save_checkpoint(model, tmp_path / "ckpt", extra={"step": 7})
    loaded = load_checkpoint(tmp_path / "ckpt").eval()
    ids = torch.randint(0, 40, (1, 30))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids), rtol=0, atol=0)
    assert loaded.lm_head.weight is loaded.embed_tokens.weight
    assert not [p for p in (tmp_path / "ckpt").iterdir() if p.name.endswith(".tmp")]


def test_bad_checkpoints_raise_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="config.json is missing"):
        load_checkpoint(tmp_path / "empty")

    ckpt = save_checkpoint(PhaseKVModel(preset_config("w8s8-1kv", vocab_size=40)), tmp_path / "ok")
    weights = (ckpt / "model.safetensors").read_bytes()
    config = json.loads((ckpt / "config.json").read_text())

    (ckpt / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors is unreadable"):
        load_checkpoint(ckpt)

    (ckpt / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors is missing"):
        load_checkpoint(ckpt)

    (ckpt / "model.safetensors").write_bytes(weights)
    config["config"]["compression"]["window"] = 12
    config["config"]["compression"]["stride"] = 12
    (ckpt / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"does not match .*config.json.*shape mismatches .*payload"):
        load_checkpoint(ckpt)

    config["config"]["compression"]["stride"] = 13
    (ckpt / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"invalid model config: stride \(13\) > window \(12\)"):
        load_checkpoint(ckpt)

    (ckpt / "config.json").write_text('{"format": "phasekv", "config": {')
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(ckpt)

    (ckpt / "config.json").write_bytes(b"\xff\xfe not text")  # not UTF-8: the same one-line error
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(ckpt)

    (ckpt / "config.json").write_text('{"model_type": "qwen3"}')
    with pytest.raises(CheckpointError, match="Hugging Face"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("name", list(PRESETS))
def test_the_float64_naive_twin_computes_the_model_for_every_preset(name):
    """The twin `phasekv conformance` compares against: every attention layer from its definitions, equal to the
    fast paths in float64 (windows, visibility, top-k picks, sinks); a cache is not its business."""
    from phasekv.model.reference import reference_twin

    model = randomize(PhaseKVModel(preset_config(name, vocab_size=50)), seed=1, std=0.1).double().eval()
    ids = torch.randint(0, 50, (2, 41), generator=torch.Generator().manual_seed(3))
    twin = reference_twin(model)
    with torch.no_grad():
        torch.testing.assert_close(twin(ids), model(ids), rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="whole sequences from position 0, without a cache"):
        twin.layers[0].self_attn(torch.zeros(1, 1, model.config.hidden_size, dtype=torch.float64), start=3)
