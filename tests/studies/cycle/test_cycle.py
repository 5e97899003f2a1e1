"""Gate cycling: the planted preference moves, and the R^2 grid of the predicted move."""

import json

import numpy as np
import pytest

from analysis_helpers import LOOKUP, PNG, TOKENIZER, planted_model, random_model, spec_marks, spec_rows
from phasekv.scoring import PhaseKVScorer
from phasekv.studies.cycle import figure as cycle_figure
from phasekv.studies.cycle.figure import plot_cycle
from phasekv.studies.cycle.options import parse_deltas
from phasekv.studies.cycle.run import cycle_statistics, fold_cells, run_cycle


def test_cycling_moves_the_planted_preference_and_reports_the_r2_grid(tmp_path):
    scorer = PhaseKVScorer(planted_model(key_offset=2, value_offset=3), TOKENIZER, batch_size=64)
    result = run_cycle(scorer, [-1, 1, 3], LOOKUP, n_resamples=50, progress=False)
    assert int(np.argmax(result["base"]["gate_key_phase_share"])) == 2
    for c in result["cycles"]:
        assert int(np.argmax(c["gate_key_phase_share"])) == (2 + c["delta"]) % 8
        assert len(c["observed_change"]) == len(c["predicted_change"]) == 8
    grid = result["grid"]
    assert grid["deltas"] == [-1, 1, 3] and all(len(grid[k]) == 3 for k in ("r2", "r2_low", "r2_high"))
    assert result["boundary_phase"] == 7 and result["schema"] == "phasekv.cycle/1"
    json.dumps(result)
    # the planted model's accuracies are flat, so the figure is checked on the same result with distinct ones
    result = json.loads(json.dumps(result))
    result["base"]["accuracy_by_phase"] = [0.1 * p for p in range(8)]
    for c in result["cycles"]:
        c["accuracy_by_phase"] = [0.05 * p + 0.01 * c["delta"] + 0.2 for p in range(8)]
    spec = cycle_figure.spec(cycle_figure.model_block(result, "planted"))
    assert {"line", "area", "point"} <= spec_marks(spec)
    drawn = spec_rows(spec)
    base = [r["accuracy"] for r in sorted((r for r in drawn if r["kind"] == "base"), key=lambda r: r["phase"])]
    assert base == pytest.approx([100 * a for a in result["base"]["accuracy_by_phase"]], abs=6e-4)
    for c in result["cycles"]:
        rows = sorted((r for r in drawn if r["kind"] == "cycle" and r["delta"] == c["delta"]), key=lambda r: r["phase"])
        assert [r["accuracy"] for r in rows] == pytest.approx([100 * a for a in c["accuracy_by_phase"]], abs=6e-4)
        assert [r["prediction"] for r in rows] == [
            base[(p - c["delta"]) % 8] for p in range(8)
        ]  # A0((r - delta) mod S)
        assert [r["boundary"] for r in rows] == [p == 7 for p in range(8)]
    assert [r["phase"] for r in drawn if r["kind"] == "boundary"] == [7]
    assert plot_cycle(result, tmp_path / "c.png").read_bytes()[:8] == PNG
    with pytest.raises(ValueError, match="W = S"):
        run_cycle(PhaseKVScorer(random_model("w8s4-1kv"), TOKENIZER), [1], LOOKUP, progress=False)


def test_cycle_statistics_of_an_exactly_moved_pattern():
    rng = np.random.default_rng(0)
    base = rng.uniform(size=(12, 16))  # [mappings, residues]
    folded = fold_cells(base, 8)
    np.testing.assert_allclose(folded[:, 3], (base[:, 3] + base[:, 11]) / 2)
    stats = cycle_statistics(folded, np.roll(folded, 2, axis=1), 2, n_resamples=100)
    assert stats["r2"] == pytest.approx(1.0) and stats["r2_interval"] == pytest.approx([1.0, 1.0])
    np.testing.assert_allclose(stats["observed_change"], stats["predicted_change"], atol=1e-6)
    assert parse_deltas("-3..3") == [-3, -2, -1, 0, 1, 2, 3] and parse_deltas("-2..-1,1,2,1") == [-2, -1, 1, 2]
    with pytest.raises(ValueError, match="deltas"):
        parse_deltas("1..x")
