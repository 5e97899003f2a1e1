"""Outcomes of a probe whose units (key-name mappings, haystacks) are each placed at every residue:
the per-(unit, residue) cells, the paired residue summary and the phase verdict, computed alike for
every such probe."""

from __future__ import annotations

import numpy as np

from ..stats import ResidueSummary, phase_verdict, summarize_mappings
from ..stats.verdict import PhaseVerdict
from .scored import PromptScores


def correctness_cube(scores: PromptScores, n_units: int, modulus: int, placements: int) -> np.ndarray:
    """correct[i, r, p] as a float array [n_units, M, P]; every cell must be filled once."""
    cube = np.full((n_units, modulus, placements), np.nan)
    cube[scores.unit, scores.residue, scores.placement] = scores.correct
    if np.isnan(cube).any() or len(scores.correct) != cube.size:
        raise ValueError("the prompts do not cover every (unit, residue, placement) exactly once")
    return cube


def unit_residue_cells(scores: PromptScores, n_units: int, modulus: int, placements: int) -> np.ndarray:
    """cells[i, r]: accuracy of unit i over its placements at residue r."""
    return correctness_cube(scores, n_units, modulus, placements).mean(axis=2)


def phase_period(stride: int | None, model_stride: int | None, modulus: int) -> int:
    """The period the phase verdict tests: the period-check stride, else the model's compression
    stride, else the modulus; a period below 2 has no phase, so it falls back to the modulus too."""
    period = stride or model_stride or modulus
    return period if period >= 2 else modulus


def summarize_units(
    scores: PromptScores,
    n_units: int,
    modulus: int,
    placements: int,
    *,
    stride: int | None,
    model_stride: int | None,
    seed: int,
    n_resamples: int,
) -> tuple[np.ndarray, ResidueSummary, PhaseVerdict]:
    """(cells [n_units, M], the paired residue summary, the phase verdict) of one run.

    The summary resamples whole units and permutes residue labels within units
    (`stats.summarize_mappings`); the verdict treats units as blocks (`stats.phase_verdict`).
    """
    cells = unit_residue_cells(scores, n_units, modulus, placements)
    summary = summarize_mappings(
        cells, stride=stride, n_resamples=n_resamples, n_permutations=n_resamples, seed=seed, trials_per_cell=placements
    )
    period = phase_period(stride, model_stride, modulus)
    verdict = phase_verdict(
        scores.unit, scores.target_position, scores.correct, period, seed=seed, n_resamples=n_resamples
    )
    return cells, summary, verdict
