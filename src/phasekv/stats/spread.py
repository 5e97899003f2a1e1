"""How accuracy spreads across residues: mean, worst, best and gap."""

from __future__ import annotations

import numpy as np


def spread_stats(accuracy) -> dict[str, np.ndarray]:
    """Mean, worst, best and gap of per-residue accuracy, over the last axis.

    ``accuracy``: shape [..., M], proportions in [0, 1]. Returns arrays of shape [...]:
    ``mean`` (unweighted mean over the M residues, so every residue counts equally even when
    group sizes differ), ``worst``, ``best`` (proportions) and ``gap_points``
    (100 * (best - worst), in percentage points).
    """
    acc = np.asarray(accuracy, dtype=float)
    if acc.ndim == 0 or acc.shape[-1] == 0:
        raise ValueError(f"accuracy needs a non-empty last (residue) axis, got shape {acc.shape}")
    worst = acc.min(axis=-1)
    best = acc.max(axis=-1)
    return {
        "mean": acc.mean(axis=-1),
        "worst": worst,
        "best": best,
        "gap_points": 100.0 * (best - worst),
    }
