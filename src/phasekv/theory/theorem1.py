"""Theorem 1 numerically: minimisers over free query-independent coefficient rules.

Each random start gives every head, chunk and context its own free softmax over the ``S``
positions for ``p^K`` and ``p^V`` (:class:`~phasekv.theory.heads.FreeCoefficients`) and minimises
the population loss with Adam. At ``eps = 0`` the loss is the exact closed form
(:func:`~phasekv.theory.model.equiangular_loss`) and one context stands for all; at ``eps > 0``
``n_contexts`` seeded random contexts are drawn once and each gets its own rule (the rule may
depend on the context), the loss averaging over them.

At ``eps = 0`` the result also lists every one-hot assignment "head h keys position r_h and
values r_h + 1" (the same in every chunk) with its exact loss, and the best assignment with
distinct positions next to the best one with a repeated position.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict

import torch
import torch.nn.functional as F

from phasekv.planning import Planner, Stage, WorkPlan, as_planner
from phasekv.theory.config import Theorem1Config
from phasekv.theory.geometry import near_equiangular_embeddings
from phasekv.theory.heads import FreeCoefficients
from phasekv.theory.model import equiangular_loss, induction_logits
from phasekv.theory.task import sample_contexts


def one_hot_assignment(positions: tuple[int, ...], n_chunks: int, chunk_size: int) -> tuple[torch.Tensor, ...]:
    """``p^K = e_{r_h}``, ``p^V = e_{r_h + 1}`` in every chunk: ``(p_key, p_value)`` ``[m, L, S]``."""
    keys = F.one_hot(torch.tensor(positions), chunk_size).to(torch.float64)
    values = F.one_hot(torch.tensor(positions) + 1, chunk_size).to(torch.float64)
    return (keys.unsqueeze(1).expand(-1, n_chunks, -1), values.unsqueeze(1).expand(-1, n_chunks, -1))


def n_assignments(config: Theorem1Config) -> int:
    """One-hot assignments up to permuting heads: multisets of ``m`` key positions among the ``S - 1`` non-final."""
    return math.comb(config.chunk_size - 1 + config.n_heads - 1, config.n_heads)


def theorem1_plan(config: Theorem1Config) -> WorkPlan:
    rules = config.n_starts * (1 if config.eps == 0 else config.n_contexts)
    stages = [Stage("optimisation", config.steps, f"Adam steps on {rules} free coefficient rules")]
    if config.eps == 0:
        stages.append(Stage("assignments", n_assignments(config), "exact losses of one-hot assignments"))
    title = (
        f"Theorem 1: minimise over free coefficient rules from {config.n_starts} random starts "
        f"(N={config.n_tokens}, L={config.n_chunks}, S={config.chunk_size}, m={config.n_heads}, eps={config.eps})"
    )
    return WorkPlan(title, tuple(stages))


def assignment_losses(config: Theorem1Config, progress: bool | Planner = False) -> dict:
    """Exact ``eps = 0`` loss of every one-hot assignment (up to permuting heads).

    Returns:
        ``{"assignments": [{"positions", "distinct", "loss"}...], "best_distinct",
        "best_non_distinct"}`` (the two bests are entries of the list, or ``None`` if none exist).
    """
    rows = []
    every = itertools.combinations_with_replacement(range(config.chunk_size - 1), config.n_heads)
    for positions in as_planner(progress).steps("assignments", every):
        p_key, p_value = one_hot_assignment(positions, config.n_chunks, config.chunk_size)
        loss = equiangular_loss(p_key, p_value, config.gamma, config.beta, config.n_tokens)
        rows.append(
            {
                "positions": list(positions),
                "distinct": len(set(positions)) == len(positions),
                "loss": float(loss),
            }
        )
    rows.sort(key=lambda row: row["loss"])
    return {
        "assignments": rows,
        "best_distinct": next((row for row in rows if row["distinct"]), None),
        "best_non_distinct": next((row for row in rows if not row["distinct"]), None),
    }


def _describe_start(p_key: torch.Tensor, p_value: torch.Tensor, loss: float, tol: float) -> dict:
    """Summary of one start's minimiser; ``p_key, p_value`` are ``[C, m, L, S]``."""
    key_positions = p_key.argmax(dim=-1)  # [C, m, L]
    value_positions = p_value.argmax(dim=-1)
    min_key_weight = float(p_key.max(dim=-1).values.min())
    min_value_weight = float(p_value.max(dim=-1).values.min())
    n_heads = p_key.shape[1]
    distinct = all(
        len(set(key_positions[c, :, l].tolist())) == n_heads
        for c in range(key_positions.shape[0])
        for l in range(key_positions.shape[2])
    )
    return {
        "loss": loss,
        "min_key_weight": min_key_weight,
        "min_value_weight": min_value_weight,
        "one_hot": min(min_key_weight, min_value_weight) >= 1 - tol,
        "value_follows_key": bool((value_positions == key_positions + 1).all()),
        "distinct_positions": distinct,
        "key_positions": key_positions.tolist(),
    }


def run_theorem1(config: Theorem1Config, progress: bool | Planner = False) -> dict:
    """Optimise ``n_starts`` free rules and describe the minimisers (`progress`: bars, or the `Planner` to walk
    the stages of `theorem1_plan` with).

    Returns:
        ``{"params", "geometry" (eps > 0 only), "starts": [per-start summary], "summary",
        "assignments" (eps = 0 only)}``. A start summary has ``loss``, ``min_key_weight``,
        ``min_value_weight``, ``one_hot``, ``value_follows_key``, ``distinct_positions`` and
        ``key_positions`` ``[C][m][L]``; ``summary`` counts the starts that end one-hot with values
        one after keys, and of those with distinct positions, and gives the lowest loss found.
    """
    generator = torch.Generator().manual_seed(config.seed)
    exact = config.eps == 0
    n_contexts = 1 if exact else config.n_contexts
    shape = (config.n_starts * n_contexts, config.n_heads, config.n_chunks, config.chunk_size)
    rules = FreeCoefficients(shape, config.init_scale, generator)
    result: dict = {"params": asdict(config)}
    if exact:

        def per_rule_losses() -> torch.Tensor:
            return equiangular_loss(*rules(), config.gamma, config.beta, config.n_tokens)
    else:
        geometry = near_equiangular_embeddings(
            config.n_tokens, config.dim or config.n_tokens + 1, config.kappa, config.eps, config.seed
        )
        result["geometry"] = geometry.summary()
        contexts = sample_contexts(config.n_tokens, config.n_chunks, config.chunk_size, n_contexts, generator)
        contexts = contexts.repeat(config.n_starts, 1, 1)

        def per_rule_losses() -> torch.Tensor:
            logits, targets = induction_logits(geometry.embeddings, contexts, *rules(), config.gamma, config.beta)
            return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none").mean(dim=1)

    planner = as_planner(progress)
    planner.start(theorem1_plan(config))
    optimiser = torch.optim.Adam(rules.parameters(), lr=config.lr)
    for _ in planner.steps("optimisation", range(config.steps)):
        optimiser.zero_grad()
        per_rule_losses().sum().backward()
        optimiser.step()

    with torch.no_grad():
        losses = per_rule_losses().reshape(config.n_starts, n_contexts).mean(dim=1)
        p_key, p_value = (p.reshape(config.n_starts, n_contexts, *shape[1:]) for p in rules())
    starts = [
        _describe_start(p_key[s], p_value[s], float(losses[s]), config.one_hot_tol) for s in range(config.n_starts)
    ]
    aligned = [s for s in starts if s["one_hot"] and s["value_follows_key"]]
    result["starts"] = starts
    result["summary"] = {
        "n_starts": config.n_starts,
        "n_one_hot_value_after_key": len(aligned),
        "n_of_those_distinct": sum(s["distinct_positions"] for s in aligned),
        "best_loss": min(s["loss"] for s in starts),
    }
    if exact:
        result["assignments"] = assignment_losses(config, planner)
    planner.close()
    return result
