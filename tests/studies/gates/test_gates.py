"""Gate metrics of phasekv and DeepSeek-V4 HF models, and gate trajectories."""

import numpy as np
import pytest
import torch

from analysis_helpers import LOOKUP, PNG, TOKENIZER, V, _dsv4, planted_model, spec_marks, spec_rows
from conftest import needs_dsv4
from phasekv.internals.hf_gates import collect_hf_gates, hf_gate_metrics
from phasekv.scoring import PhaseKVScorer
from phasekv.studies.gates import figure as gates_figure
from phasekv.studies.gates.figure import plot_gates
from phasekv.studies.gates.run import run_gates


def test_gate_metrics_of_planted_gate_biases(tmp_path):
    result = run_gates(PhaseKVScorer(planted_model(key_offset=5, value_offset=6), TOKENIZER, batch_size=64), LOOKUP)
    rows = result["rows"]
    assert {(r["layer"], r["branch"]) for r in rows} == {(0, "key"), (0, "value"), (1, "key"), (1, "value")}
    for r in rows:
        assert int(np.argmax(r["phase_share"])) == 5  # value gates peak at 6, shown shifted back by one
        assert r["static_offsets"] < 1.2 and r["per_window_offsets"] <= r["static_offsets"] + 1e-6
    assert result["n_windows_from"]["prompts"] > 0 and result["schema"] == "phasekv.gates/1"
    spec = gates_figure.spec(gates_figure.plane_block(rows, "planted"))
    assert {"point", "line", "rect"} <= spec_marks(spec)
    drawn = spec_rows(spec)
    heads = {r["label"]: (r["x"], r["y"]) for r in drawn if r["kind"] == "head"}
    keys = [r for r in rows if r["branch"] == "key"]
    assert heads == {
        f"L{r['layer']}H{r['kv_head']}": (pytest.approx(r["static_offsets"], abs=6e-4),
                                          pytest.approx(r["per_window_offsets"], abs=6e-4))
        for r in keys
    }  # fmt: skip
    for r in rows:
        shares = [s for s in drawn if s["kind"] == "share" and s["branch"] == r["branch"]
                  and s["label"] == f"L{r['layer']}H{r['kv_head']}"]  # fmt: skip
        assert [s["share"] for s in sorted(shares, key=lambda s: s["phase"])] == pytest.approx(
            r["phase_share"], abs=6e-4
        )
    assert plot_gates(rows, tmp_path / "g.png").read_bytes()[:8] == PNG


@needs_dsv4
def test_deepseek_v4_gates_equal_the_compressor_formula():
    model = _dsv4()
    seen = {}
    for i, layer in enumerate(model.model.layers):
        layer.self_attn.compressor.register_forward_pre_hook(lambda _m, args, i=i: seen.__setitem__(i, args[0]))
    ids = torch.randint(5, V, (2, 21), generator=torch.Generator().manual_seed(1))
    gates = collect_hf_gates(model, [ids])
    csa = model.model.layers[0].self_attn.compressor
    hd, rate = csa.head_dim, csa.compress_rate
    with torch.no_grad():  # transformers' layout: slots 0..3 = previous block's first half, 4..7 = this block's second
        chunk = csa.gate_proj(seen[0][:, :20]).view(2, 5, rate, 2 * hd) + csa.position_bias
        logits = torch.full((2, 5, 2 * rate, hd), float("-inf"))
        logits[:, :, rate:] = chunk[..., hd:]
        logits[:, 1:, :rate] = chunk[:, :-1, :, :hd]
        expected = logits.softmax(dim=2).reshape(-1, 2 * rate, 1, hd)
    alpha, stride = gates[0]
    assert stride == 4 and alpha.shape == (10, 8, 1, hd)
    torch.testing.assert_close(alpha, expected, rtol=1e-5, atol=1e-6)
    hca = model.model.layers[1].self_attn.compressor
    with torch.no_grad():
        hca_expected = (hca.gate_proj(seen[1][:, :16]).view(2, 2, 8, hd) + hca.position_bias).softmax(dim=2)
    torch.testing.assert_close(gates[1][0], hca_expected.reshape(-1, 8, 1, hd), rtol=1e-5, atol=1e-6)
    rows = hf_gate_metrics(model, [ids])
    assert [(r["layer"], r["compressor"]) for r in rows] == [(0, "csa"), (1, "hca")]
    assert rows[0]["per_channel_mean"] and 1 <= rows[0]["static_phases"] <= 4 and len(rows[0]["phase_share"]) == 4
