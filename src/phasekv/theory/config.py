"""The parameters of the theory runs: those Theorems 1 and 2 share (the idealized induction task and its geometry)
and each run's own; torch-free, so a command's options can read their defaults without loading torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InductionConfig:
    """Vocabulary, context layout, heads, scales and embedding geometry (recorded first in every result)."""

    n_tokens: int = 64
    n_chunks: int = 8
    chunk_size: int = 4
    n_heads: int = 2
    gamma: float = 4.0
    beta: float = 4.0
    kappa: float = 0.5
    eps: float = 0.0
    dim: int | None = None  # None: N + 1, the exact construction


@dataclass(frozen=True)
class Theorem1Config(InductionConfig):
    """Every parameter of a Theorem 1 run (all recorded in the result)."""

    n_starts: int = 32
    n_contexts: int = 4  # Monte Carlo contexts, used only when eps > 0
    steps: int = 2000
    lr: float = 0.1
    init_scale: float = 1.0  # std of the initial logits
    one_hot_tol: float = 0.05  # one-hot: every largest weight >= 1 - tol
    seed: int = 0


@dataclass(frozen=True)
class GateTrainingConfig(InductionConfig):
    """Every parameter of a Theorem 2 run (all recorded in the result)."""

    rho: float = 0.01
    optimizer: str = "adam"  # "adam" or "sgd" (plain gradient descent)
    lr: float = 0.01
    steps: int = 1500
    batch_size: int = 256
    n_eval_contexts: int = 512
    record_every: int = 50
    concentration_threshold: float = 1.25
    seed: int = 0
