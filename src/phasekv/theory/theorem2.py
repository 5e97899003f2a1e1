"""Theorem 2 numerically: gradient training of log-linear gates from a small ball.

Gates ``p^B_{h,l}(r) ∝ exp<c^B_{h,r}, x_{l,r}>`` start with every ``c`` uniform in the ball of
radius ``rho`` and are trained with a small step (Adam or plain gradient descent) on fresh seeded
batches of ``batch_size`` random contexts (a Monte Carlo estimate of the population gradient).
A fixed seeded set of ``n_eval_contexts`` contexts measures, every ``record_every`` steps, each
head's static and per-window effective numbers of positions for its key and value gates
(:mod:`phasekv.internals.concentration`, windows = all chunks of all evaluation contexts), and at the
end the loss, the accuracy by query position, and which position each head selects.

Selection and coverage: head ``h`` selects ``r_h = argmax_r E[p^K_h(r)]``. It *concentrates* when
all four of its effective numbers are ``<= concentration_threshold``. A non-final position ``r`` is
*covered* when some concentrating head selects ``r_h = r`` with its value gate peaking at ``r + 1``.
``collisions = m - #distinct r_h`` counts all heads.
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from phasekv.internals.concentration import effective_numbers
from phasekv.planning import Planner, Stage, WorkPlan, as_planner
from phasekv.theory.config import GateTrainingConfig
from phasekv.theory.geometry import near_equiangular_embeddings
from phasekv.theory.heads import LogLinearGates
from phasekv.theory.model import accuracy_by_position, induction_logits, query_loss
from phasekv.theory.task import sample_contexts

GATE_METRICS = ("key_static", "key_per_window", "value_static", "value_per_window")


def gate_metrics(p_key: torch.Tensor, p_value: torch.Tensor) -> dict[str, list[float]]:
    """Per-head effective numbers of gates ``[B, m, L, S]`` over all ``B L`` windows."""
    key = effective_numbers(p_key, dim=-1, window_dims=(0, 2))
    value = effective_numbers(p_value, dim=-1, window_dims=(0, 2))
    numbers = {
        "key_static": key.static,
        "key_per_window": key.per_window,
        "value_static": value.static,
        "value_per_window": value.per_window,
    }
    return {name: tensor.tolist() for name, tensor in numbers.items()}


def describe_heads(p_key: torch.Tensor, p_value: torch.Tensor, threshold: float) -> dict:
    """Selected positions, concentration, collisions and uncovered positions (module docstring)."""
    chunk_size = p_key.shape[-1]
    metrics = gate_metrics(p_key, p_value)
    mean_key = p_key.mean(dim=(0, 2))  # [m, S]
    mean_value = p_value.mean(dim=(0, 2))
    selected = mean_key.argmax(dim=-1).tolist()
    value_peak = mean_value.argmax(dim=-1).tolist()
    concentrated = [all(metrics[name][h] <= threshold for name in GATE_METRICS) for h in range(len(selected))]
    covered = {r for r, v, c in zip(selected, value_peak, concentrated, strict=True) if c and v == r + 1}
    uncovered = [r for r in range(chunk_size - 1) if r not in covered]
    return {
        **metrics,
        "mean_key_gate": mean_key.tolist(),
        "mean_value_gate": mean_value.tolist(),
        "selected_positions": selected,
        "value_peak_positions": value_peak,
        "head_concentrated": concentrated,
        "all_concentrated": all(concentrated),
        "collisions": len(selected) - len(set(selected)),
        "uncovered_positions": uncovered,
        "full_coverage": not uncovered,
    }


def evaluations(config: GateTrainingConfig) -> int:
    """Passes over the evaluation contexts in one run: at step 0, every `record_every` steps and the last, and
    the final description."""
    return 2 + config.steps // config.record_every + (config.steps % config.record_every != 0)


def training_stages(configs: list[GateTrainingConfig]) -> tuple[Stage, ...]:
    """The stages of Theorem 2 runs of these configs, one after the other (what `train_gates` walks); the
    units are read off the first."""
    first = configs[0]
    return (
        Stage("evaluation", sum(map(evaluations, configs)), f"passes over {first.n_eval_contexts} evaluation contexts"),
        Stage("training", sum(c.steps for c in configs), f"{first.optimizer} steps on {first.batch_size} contexts"),
    )


def gate_training_plan(config: GateTrainingConfig) -> WorkPlan:
    title = (
        f"Theorem 2: train {config.n_heads} heads' log-linear gates from a ball of radius {config.rho} "
        f"(N={config.n_tokens}, L={config.n_chunks}, S={config.chunk_size}, seed {config.seed})"
    )
    return WorkPlan(title, training_stages([config]))


def train_gates(config: GateTrainingConfig, progress: bool | Planner = False) -> dict:
    """Train log-linear gates and record their concentration (`progress`: a bar, or the `Planner` to walk
    the stages of `training_stages` with).

    Returns:
        ``{"params", "geometry", "trajectory", "final"}``. ``trajectory`` has ``step`` ``[T]``,
        ``loss`` ``[T]`` and the four :data:`GATE_METRICS` as ``[T][m]``; ``final`` has ``loss``,
        ``accuracy``, ``accuracy_by_position`` ``[S-1]`` and :func:`describe_heads`' keys.
    """
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    geometry = near_equiangular_embeddings(
        config.n_tokens, config.dim or config.n_tokens + 1, config.kappa, config.eps, config.seed
    )
    embeddings = geometry.embeddings.float()
    gates = LogLinearGates(config.n_heads, config.chunk_size, embeddings.shape[1], config.rho, generator)
    eval_contexts = sample_contexts(
        config.n_tokens, config.n_chunks, config.chunk_size, config.n_eval_contexts, generator
    )

    def forward(contexts: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p_key, p_value = gates(embeddings[contexts])
        logits, targets = induction_logits(embeddings, contexts, p_key, p_value, config.gamma, config.beta)
        return p_key, p_value, logits, targets

    trajectory: dict[str, list] = {"step": [], "loss": [], **{name: [] for name in GATE_METRICS}}

    def record(step: int) -> None:
        with torch.no_grad(), planner.step("evaluation"):
            p_key, p_value, logits, targets = forward(eval_contexts)
        trajectory["step"].append(step)
        trajectory["loss"].append(float(query_loss(logits, targets)))
        for name, values in gate_metrics(p_key, p_value).items():
            trajectory[name].append(values)

    optimisers = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}
    optimiser = optimisers[config.optimizer](gates.parameters(), lr=config.lr)
    planner = as_planner(progress)
    planner.start(gate_training_plan(config))
    record(0)
    for step in planner.steps("training", range(1, config.steps + 1)):
        contexts = sample_contexts(config.n_tokens, config.n_chunks, config.chunk_size, config.batch_size, generator)
        *_, logits, targets = forward(contexts)
        optimiser.zero_grad()
        query_loss(logits, targets).backward()
        optimiser.step()
        if step % config.record_every == 0 or step == config.steps:
            record(step)

    with torch.no_grad(), planner.step("evaluation"):
        p_key, p_value, logits, targets = forward(eval_contexts)
    by_position = accuracy_by_position(logits, targets, config.chunk_size)
    final = {
        "loss": trajectory["loss"][-1],
        "accuracy": float(by_position.mean()),
        "accuracy_by_position": by_position.tolist(),
        **describe_heads(p_key, p_value, config.concentration_threshold),
    }
    return {
        "params": asdict(config),
        "geometry": geometry.summary(),
        "trajectory": trajectory,
        "final": final,
    }
