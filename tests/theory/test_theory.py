import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from phasekv.cli.theory import app
from phasekv.studies.theory.result import SweepResult, Theorem1Result, Theorem2Result
from phasekv.theory.geometry import equiangular_deviation, near_equiangular_embeddings
from phasekv.theory.model import equiangular_loss, induction_logits, query_loss
from phasekv.theory.sweep import TABLE_KEYS, run_sweep
from phasekv.theory.task import all_contexts, count_contexts, sample_contexts
from phasekv.theory.theorem1 import Theorem1Config, assignment_losses, one_hot_assignment, run_theorem1
from phasekv.theory.theorem2 import GATE_METRICS, GateTrainingConfig, train_gates


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("eps", [0.0, 0.05, 0.3])
def test_embeddings_meet_the_equiangular_bound(eps):
    geometry = near_equiangular_embeddings(n_tokens=20, dim=21, kappa=0.5, eps=eps, seed=3)
    gram = geometry.embeddings @ geometry.embeddings.T
    off_diagonal = gram[~torch.eye(20, dtype=torch.bool)]
    assert (off_diagonal - 0.5).abs().max() <= eps + 1e-12
    assert (gram.diagonal() - 1.5).abs().max() <= eps + 1e-12
    assert geometry.max_deviation == pytest.approx(equiangular_deviation(geometry.embeddings, 0.5))
    if eps == 0:
        assert geometry.max_deviation < 1e-12
    else:
        assert geometry.max_deviation > eps / 10  # actually perturbed


def test_embeddings_that_miss_the_bound_are_refused():
    with pytest.raises(ValueError, match="deviation"):
        near_equiangular_embeddings(n_tokens=50, dim=10, kappa=0.5, eps=0.01, seed=0)


def test_contexts_have_distinct_tokens():
    contexts = sample_contexts(12, 3, 4, 50, torch.Generator().manual_seed(0))
    assert all(len(set(context.flatten().tolist())) == 12 for context in contexts)
    assert len(all_contexts(5, 2, 2)) == count_contexts(5, 2, 2) == 120


def brute_force_loss(embeddings, contexts, p_key, p_value, gamma, beta):
    """The population loss with explicit loops over contexts, queries, heads and chunks."""
    x = embeddings.numpy()
    p_key, p_value = p_key.numpy(), p_value.numpy()
    n_heads, n_chunks, chunk_size = p_key.shape
    total, count = 0.0, 0
    for context in contexts.tolist():
        keys = [
            [sum(p_key[h, l, r] * x[context[l][r]] for r in range(chunk_size)) for l in range(n_chunks)]
            for h in range(n_heads)
        ]
        values = [
            [sum(p_value[h, l, r] * x[context[l][r]] for r in range(chunk_size)) for l in range(n_chunks)]
            for h in range(n_heads)
        ]
        for query_chunk in range(n_chunks):
            for position in range(chunk_size - 1):
                query = x[context[query_chunk][position]]
                output = np.zeros(x.shape[1])
                for h in range(n_heads):
                    scores = np.array([gamma * query @ keys[h][l] for l in range(n_chunks)])
                    weights = np.exp(scores - scores.max())
                    weights /= weights.sum()
                    output += sum(weights[l] * values[h][l] for l in range(n_chunks))
                logits = beta * x @ output
                target = context[query_chunk][position + 1]
                total += math.log(np.exp(logits - logits.max()).sum()) + logits.max() - logits[target]
                count += 1
    return total / count


@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_loss_is_exact_against_brute_force_enumeration(eps):
    n_tokens, n_chunks, chunk_size, n_heads = 6, 2, 3, 2
    generator = torch.Generator().manual_seed(1)
    p_key = torch.randn(n_heads, n_chunks, chunk_size, generator=generator, dtype=torch.float64).softmax(-1)
    p_value = torch.randn(n_heads, n_chunks, chunk_size, generator=generator, dtype=torch.float64).softmax(-1)
    geometry = near_equiangular_embeddings(n_tokens, n_tokens + 1, kappa=0.4, eps=eps, seed=2)
    contexts = all_contexts(n_tokens, n_chunks, chunk_size)
    vectorised = query_loss(*induction_logits(geometry.embeddings, contexts, p_key[None], p_value[None], 3.0, 2.5))
    reference = brute_force_loss(geometry.embeddings, contexts, p_key, p_value, 3.0, 2.5)
    assert float(vectorised) == pytest.approx(reference, rel=1e-10)
    closed_form = float(equiangular_loss(p_key, p_value, 3.0, 2.5, n_tokens))
    if eps == 0:
        assert closed_form == pytest.approx(reference, rel=1e-10)
    else:
        assert closed_form != pytest.approx(reference, rel=1e-6)  # the closed form needs eps = 0


def test_planted_distinct_assignment_beats_a_repeated_one_at_eps_zero():
    n_tokens, n_chunks, chunk_size = 64, 8, 4
    distinct = equiangular_loss(*one_hot_assignment((0, 1), n_chunks, chunk_size), 4.0, 4.0, n_tokens)
    repeated = equiangular_loss(*one_hot_assignment((0, 0), n_chunks, chunk_size), 4.0, 4.0, n_tokens)
    geometry = near_equiangular_embeddings(n_tokens, n_tokens + 1, kappa=0.5, eps=0.0)
    contexts = sample_contexts(n_tokens, n_chunks, chunk_size, 3, torch.Generator().manual_seed(0))
    with_embeddings = query_loss(
        *induction_logits(
            geometry.embeddings,
            contexts,
            *(p[None] for p in one_hot_assignment((0, 1), n_chunks, chunk_size)),
            4.0,
            4.0,
        )
    )
    assert float(with_embeddings) == pytest.approx(float(distinct), rel=1e-10)
    assert float(repeated - distinct) > 0.1  # at N = 64 a repeated position costs a lot ...
    gaps = [
        float(equiangular_loss(*one_hot_assignment(positions, n_chunks, chunk_size), 4.0, 4.0, n))
        for n in (10_000, 100_000)
        for positions in ((0, 0), (0, 1))
    ]
    scaled_gaps = [10_000 * (gaps[0] - gaps[1]), 100_000 * (gaps[2] - gaps[3])]
    assert scaled_gaps[1] == pytest.approx(scaled_gaps[0], rel=0.1)  # ... but only O(1/N) at large N
    table = assignment_losses(Theorem1Config(n_tokens=n_tokens, n_chunks=n_chunks, chunk_size=chunk_size))
    assert table["best_distinct"]["loss"] < table["best_non_distinct"]["loss"]
    assert table["assignments"][0]["distinct"]


def test_theorem1_minimisers_are_one_hot_value_after_key():
    config = Theorem1Config(n_tokens=16, n_chunks=4, chunk_size=3, n_heads=2, n_starts=4, steps=1000, seed=0)
    result = run_theorem1(config)
    summary = result["summary"]
    assert summary["n_one_hot_value_after_key"] == summary["n_of_those_distinct"] == 4
    best_distinct = result["assignments"]["best_distinct"]["loss"]
    assert best_distinct - 1e-9 < summary["best_loss"] < best_distinct + 1e-3
    json.dumps(result)


def test_two_heads_from_a_small_ball_end_one_hot_and_leave_a_position_uncovered():
    # the regime (N=64, S=4, L=8, kappa=0.5, eps=0, gamma=beta=4, rho=0.01), shorter training
    config = GateTrainingConfig(n_heads=2, steps=600, batch_size=64, n_eval_contexts=128, record_every=200, seed=0)
    result = train_gates(config)
    final = result["final"]
    for name in GATE_METRICS:
        assert max(final[name]) < 1.1, (name, final[name])
        assert min(result["trajectory"][name][0]) > 3.9  # started near uniform
    assert final["all_concentrated"]
    for head, position in enumerate(final["selected_positions"]):
        assert final["value_peak_positions"][head] == position + 1
        assert final["mean_value_gate"][head][position + 1] > 0.95
    assert len(final["uncovered_positions"]) == 1  # two heads, three non-final positions
    assert final["accuracy_by_position"][final["uncovered_positions"][0]] < 0.5
    assert result["trajectory"]["step"] == [0, 200, 400, 600]
    json.dumps(result)


def test_sweep_has_the_documented_keys():
    base = GateTrainingConfig(n_tokens=16, n_chunks=2, chunk_size=3, steps=5, batch_size=8, n_eval_contexts=16)
    result = run_sweep(base, {"gamma": [1.0, 2.0], "n_heads": [1]}, seeds=[0, 1], progress=False)
    assert set(result) == {"base", "grid", "seeds", "runs", "table"}
    assert len(result["runs"]) == 4 and len(result["table"]) == 2
    for row in result["table"]:
        assert set(row) == {"gamma", "n_heads", *TABLE_KEYS}
        assert row["n_runs"] == 2 and 0 <= row["frac_concentrated"] <= 1
    json.dumps(result)


TINY = ["--n-tokens", "16", "--n-chunks", "2", "--chunk-size", "3", "--seed", "1"]


def test_cli_commands_write_results_and_print_what_their_typed_results_say(tmp_path):
    runner = CliRunner()
    out = tmp_path / "t2.json"
    done = runner.invoke(app, ["theorem2", *TINY, "--steps", "10", "--batch-size", "8", "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "uncovered positions" in done.output
    result = json.loads(out.read_text())
    assert result["params"]["seed"] == 1 and result["params"]["n_tokens"] == 16
    assert out.with_suffix(".png").stat().st_size > 1000

    done = runner.invoke(
        app, ["theorem1", *TINY, "--n-starts", "2", "--steps", "20", "--out", str(tmp_path / "t1.json")]
    )
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "t1.json").read_text())["params"]["n_starts"] == 2
    assert Theorem1Result.load(tmp_path / "t1.json").summary.n_starts == 2  # the report's typed formats read both
    assert Theorem2Result.load(out).params.chunk_size == 3
    assert str(Theorem1Result.load(tmp_path / "t1.json")) in done.output  # the command prints the result's text

    done = runner.invoke(
        app,
        [
            "sweep",
            "--n-tokens",
            "16",
            "--n-chunks",
            "2",
            "--chunk-size",
            "3",
            "--n-heads",
            "1",
            "--gamma",
            "2",
            "--beta",
            "2,4",
            "--seeds",
            "0",
            "--steps",
            "3",
            "--batch-size",
            "4",
            "--out",
            str(tmp_path / "sweep.json"),
        ],
    )
    assert done.exit_code == 0, done.output
    assert len(json.loads((tmp_path / "sweep.json").read_text())["table"]) == 2
    sweep = SweepResult.load(tmp_path / "sweep.json")
    assert str(sweep) in done.output and "beta" in sweep.summary.splitlines()[0]
    assert "uncovered positions" in str(Theorem2Result.load(out))
