import pytest
import torch

from conftest import randomize
from phasekv.internals.gate_metrics import gate_metrics, head_metrics
from phasekv.model import PhaseKVModel, preset_config
from phasekv.studies.cycle.cycling import cycle_gates
from phasekv.studies.knockout.ablation import (
    final_position_means,
    knockout_logits,
    knockout_logits_reference,
)


def _model(name, seed=0):
    return randomize(PhaseKVModel(preset_config(name, vocab_size=50)), seed=seed, std=0.1).eval()


def test_knockout_from_a_cache_fork_equals_a_full_forward_with_the_hook():
    model = _model("w8s8-8kv")
    gen = torch.Generator().manual_seed(0)
    calib, ids = torch.randint(0, 50, (6, 27), generator=gen), torch.randint(0, 50, (3, 27), generator=gen)
    means = final_position_means(model, [calib[:3], calib[3:]])
    assert means.shape == (2, 8, 32)
    clean, knocked = knockout_logits(model, ids, means)
    torch.testing.assert_close(clean, model(ids)[:, -1], rtol=1e-5, atol=1e-5)
    assert len(knocked) == 2 * 8
    for (layer, head), logits in knocked.items():
        expected = knockout_logits_reference(model, ids, means, layer, head)
        torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(logits, clean)


def test_knocking_out_a_head_the_model_does_not_use_changes_nothing():
    model = _model("w8s8-8kv", seed=1)
    with torch.no_grad():
        model.layers[1].self_attn.o_proj.weight[:, 3 * 32 : 4 * 32] = 0  # query head 3 (KV head 3) is unread
    ids = torch.randint(0, 50, (4, 20))
    means = final_position_means(model, [torch.randint(0, 50, (4, 20))])
    clean, knocked = knockout_logits(model, ids, means, targets=[(1, 3), (1, 2)])
    torch.testing.assert_close(knocked[(1, 3)], clean, rtol=0, atol=1e-6)
    assert (knocked[(1, 2)] - clean).abs().max() > 1e-4


def test_cycling_by_delta_then_minus_delta_restores_the_parameters():
    model = _model("w8s8-1kv")
    there_and_back = cycle_gates(cycle_gates(model, 3), -3)
    for a, b in zip(model.state_dict().values(), there_and_back.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    shifted = cycle_gates(model, 2)
    comp, new = model.layers[0].self_attn.compressor, shifted.layers[0].self_attn.compressor
    assert torch.equal(new.gate_bias[5], comp.gate_bias[3]) and torch.equal(new.payload, comp.payload)
    assert torch.equal(new.gate_weight, torch.cat([comp.gate_weight[-2:], comp.gate_weight[:-2]]))  # Z~_i = Z_(i-2)
    assert not torch.equal(new.gate_weight, comp.gate_weight)


@pytest.mark.parametrize(
    "preset, problem",
    [
        ("full-1kv", "gate cycling needs a compressed model; this one has full attention"),
        ("w8s8-1kv-uniform", "gate cycling needs learned gates; uniform averaging has no gate parameters"),
        (
            "w8s8-1kv-offset-shared",
            "gate cycling needs per-offset gates; an offset-shared compressor has one gate for every offset",
        ),
        ("w9s8-1kv", "gate cycling needs W = S (offset = phase); this model has W=9, S=8"),
    ],
)
def test_why_gate_cycling_is_undefined_is_said_exactly(preset, problem):
    from phasekv.studies.cycle.cycling import cycling_problem

    assert cycling_problem(preset_config(preset, vocab_size=50)) == problem


def test_cycling_moves_a_planted_gate_preference():
    model = _model("w8s8-1kv")
    with torch.no_grad():
        for layer in model.layers:
            layer.self_attn.compressor.gate_bias[2] += 8.0  # every window prefers offset 2
    ids = torch.randint(0, 50, (4, 64))

    def peaks(m, branch):
        rows = [row for row in gate_metrics(m, [ids]) if row["branch"] == branch]
        return {max(range(8), key=lambda r: row["phase_share"][r]) for row in rows}

    assert peaks(model, "key") == {2} and peaks(model, "value") == {1}  # values are shown shifted back by one
    assert peaks(cycle_gates(model, 3), "key") == {5}


@pytest.mark.parametrize(
    "name, message",
    [
        ("w8s4-1kv", "W = S"),
        ("w8s8-1kv-uniform", "learned gates"),
        ("full-1kv", "full attention"),
        ("dsv4", "paper-style"),
    ],
)
def test_cycling_refuses_models_where_it_is_undefined(name, message):
    with pytest.raises(ValueError, match=message):
        cycle_gates(_model(name), 1)


def test_effective_numbers_and_phase_shares_of_planted_gates():
    windows, w = 16, 8
    one_hot = torch.zeros(windows, w, 1, 1)
    one_hot[:, 3] = 1
    row = head_metrics(one_hot, 8, "key")[0]
    assert row["static_offsets"] == pytest.approx(1) and row["per_window_offsets"] == pytest.approx(1)
    assert row["phase_share"][3] == pytest.approx(8)
    value = head_metrics(one_hot, 8, "value")[0]
    assert value["phase_share"][2] == pytest.approx(8)  # shifted back by one offset
    moving = torch.zeros(windows, w, 1, 1)
    moving[torch.arange(windows), torch.arange(windows) % w] = 1
    row = head_metrics(moving, 8, "key")[0]
    assert row["static_offsets"] == pytest.approx(8) and row["per_window_offsets"] == pytest.approx(1)
    overlap = head_metrics(torch.full((windows, 8, 1, 1), 1 / 8), 4, "key")[0]
    assert overlap["static_phases"] == pytest.approx(4) and overlap["phase_share"] == pytest.approx([1] * 4)


def test_gate_metrics_cover_every_layer_head_and_branch():
    rows = gate_metrics(_model("w12s12-4kv"), [torch.randint(0, 50, (2, 48))])
    assert {(r["layer"], r["kv_head"], r["branch"]) for r in rows} == {
        (layer, head, branch) for layer in range(2) for head in range(4) for branch in ("key", "value")
    }
    assert all(1 <= r["per_window_offsets"] <= r["static_offsets"] + 1e-6 <= 12 + 1e-6 for r in rows)


def test_knockout_means_and_logits_equal_a_plain_loop_over_prompts():
    """Expected values from torch's own hooks on the output projection's input (z flattened), one prompt at a
    time: the knockout helpers (hook points, `final_position_means`, `_replace_final`) play no part in them."""
    model = _model("w12s12-4kv", seed=2)  # two query heads per KV head: the knocked-out slice is a group
    config = model.config
    heads, hd = config.num_heads, config.head_dim
    gen = torch.Generator().manual_seed(3)
    calib, ids = torch.randint(0, 50, (5, 29), generator=gen), torch.randint(0, 50, (2, 29), generator=gen)
    layer, kv_head = 1, 2
    group = heads // config.num_kv_heads

    seen = {}

    def keep(i):
        return lambda _module, args: seen.__setitem__(i, args[0][0, -1].reshape(heads, hd).clone())

    handles = [m.self_attn.o_proj.register_forward_pre_hook(keep(i)) for i, m in enumerate(model.layers)]
    total = torch.zeros(len(model.layers), heads, hd)
    with torch.no_grad():
        for prompt in calib:
            model(prompt[None])
            total += torch.stack([seen[i] for i in range(len(model.layers))])
    for h in handles:
        h.remove()
    expected_means = total / len(calib)
    means = final_position_means(model, [calib[:2], calib[2:]])
    torch.testing.assert_close(means, expected_means, rtol=1e-5, atol=1e-6)

    def knock(_module, args):
        z = args[0].clone()
        z[:, -1, kv_head * group * hd : (kv_head + 1) * group * hd] = expected_means[
            layer, kv_head * group : (kv_head + 1) * group
        ].reshape(-1)
        return (z,)

    handle = model.layers[layer].self_attn.o_proj.register_forward_pre_hook(knock)
    with torch.no_grad():
        expected = torch.stack([model(prompt[None])[0, -1] for prompt in ids])
    handle.remove()
    _, knocked = knockout_logits(model, ids, means, targets=[(layer, kv_head)])
    assert list(knocked) == [(layer, kv_head)]  # only the heads asked for
    torch.testing.assert_close(knocked[(layer, kv_head)], expected, rtol=1e-5, atol=1e-5)
    for length in (1, 2):  # prompts too short to prefill a cache, or with a one-token prefix
        clean, knocked = knockout_logits(model, ids[:, :length], means, targets=[(layer, kv_head)])
        torch.testing.assert_close(clean, model(ids[:, :length])[:, -1], rtol=1e-5, atol=1e-5)
        reference = knockout_logits_reference(model, ids[:, :length], means, layer, kv_head)
        torch.testing.assert_close(knocked[(layer, kv_head)], reference, rtol=1e-5, atol=1e-5)


def test_an_empty_calibration_set_is_refused():
    with pytest.raises(
        ValueError, match="^the calibration set is empty: the mean to replace with needs at least one prompt$"
    ):
        final_position_means(_model("w8s8-1kv"), [])


def test_head_metrics_rows_in_full():
    alpha = torch.zeros(4, 8, 2, 2)  # 4 windows of W = 8, 2 KV heads, 2 channels (a vector gate)
    alpha[:, 3, 0] = 1  # head 0 always on offset 3
    alpha[:, 6, 1] = 1  # head 1 always on offset 6
    key, other = head_metrics(alpha, 8, "key")
    assert key == {"kv_head": 0, "branch": "key", "window": 8, "stride": 8, "channels": 2, "per_channel_mean": True,
                   "static_offsets": pytest.approx(1), "per_window_offsets": pytest.approx(1),
                   "phase_share": [0.0, 0.0, 0.0, 8.0, 0.0, 0.0, 0.0, 0.0], "value_shifted_back": False}  # fmt: skip
    assert other["phase_share"] == [0.0] * 6 + [8.0, 0.0]
    value = head_metrics(alpha, 8, "value")
    assert [v["phase_share"] for v in value] == [[0.0, 0.0, 8.0] + [0.0] * 5, [0.0] * 5 + [8.0, 0.0, 0.0]]
    assert value[0]["value_shifted_back"] and value[0]["branch"] == "value"
    scalar = head_metrics(alpha[..., :1], 4, "key")[0]  # W = 8 > S = 4: phases too
    assert scalar["channels"] == 1 and not scalar["per_channel_mean"]
    assert scalar["static_phases"] == pytest.approx(1) and scalar["per_window_phases"] == pytest.approx(1)


def test_gate_metrics_of_sigmoid_gates_are_shares_and_models_without_gates_are_refused():
    rows = gate_metrics(_model("w8s8-1kv-sigmoid"), [torch.randint(0, 50, (2, 40))])
    assert rows and all(sum(r["phase_share"]) == pytest.approx(8, abs=1e-4) for r in rows)  # shares, not raw gates
    for name in ("w8s8-1kv-uniform", "full-1kv"):
        with pytest.raises(ValueError, match=r"^this model has no learned gates \(full attention or uniform"):
            gate_metrics(_model(name), [torch.randint(0, 50, (1, 16))])
