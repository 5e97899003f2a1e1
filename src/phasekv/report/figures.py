"""Figures of the analyses, drawn from their result dicts (PNG): knockout map, gate plane and phase
preferences, gate trajectories, gate cycling, for `phasekv knockout|gates|cycle --plot` and the
reproduction. The knockout map and the gate plane are the report's own Vega-Lite specs; gate cycling is
still matplotlib."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import gates, knockout, vega
from .common import model_name, plt, save_figure


def _save(fig, path: str | Path) -> Path:
    return save_figure(fig, Path(path), dpi=120, bbox_inches="tight")


def plot_knockout(result: dict, path: str | Path) -> Path:
    """The report's knockout figure (`knockout.spec`) of one knockout result, as PNG."""
    return vega.write_png(knockout.spec(knockout.map_block(result, model_name(result, Path(path).stem))), path)


def plot_gates(rows: list[dict], path: str | Path) -> Path:
    """The report's gate plane figure (`gates.spec`) of one gate result's rows, as PNG: every KV head's
    key gate in the (static, per-window) plane, and the key and value gates' phase shares."""
    return vega.write_png(gates.spec(gates.plane_block(rows, Path(path).stem)), path)


def plot_gate_trajectory(trajectory: dict, path: str | Path) -> Path:
    """The report's gate plane figure of a training run, as PNG, every head traced from the first step
    (open circle) to the last (filled)."""
    block = gates.trajectory_block(trajectory, model_name(trajectory, Path(path).stem), traced=None)
    if block is None:
        raise ValueError("the gate trajectory has no key gates to plot")
    return vega.write_png(gates.spec(block), path)


def plot_cycle(result: dict, path: str | Path) -> Path:
    """Per delta: observed (solid, with its band) and predicted (dashed) accuracy by phase against the
    uncycled model (gray); last panel: the R^2 grid over deltas with intervals."""
    cycles, stride = result["cycles"], result["stride"]
    phases = np.arange(stride)
    base = 100 * np.array(result["base"]["accuracy_by_phase"])
    fig, axes = plt.subplots(1, len(cycles) + 1, figsize=(3.2 * (len(cycles) + 1), 3.2), squeeze=False)
    for ax, c in zip(axes[0], cycles, strict=False):
        observed = 100 * np.array(c["accuracy_by_phase"])
        band = 100 * np.array(c["band"])
        ax.plot(phases, base, color="0.6", label="uncycled")
        ax.plot(phases, np.roll(base, c["delta"]), "k--", label="predicted")
        ax.plot(phases, observed, color="C0", label="observed")
        ax.fill_between(phases, band[:, 0], band[:, 1], color="C0", alpha=0.2)
        ax.axvline(stride - 1, color="0.85", lw=6, zorder=0)
        r2 = "n/a" if c["r2"] is None else f"{c['r2']:.2f}"
        ax.set_title(f"delta {c['delta']:+d}: R² {r2}", fontsize=9)
        ax.set_xlabel("phase")
        ax.set_ylim(-2, 102)
    axes[0][0].set_ylabel("accuracy (%)")
    axes[0][0].legend(fontsize=6)
    grid = result["grid"]
    ax = axes[0][-1]
    r2 = np.array([np.nan if v is None else v for v in grid["r2"]])
    low = np.array([np.nan if v is None else v for v in grid["r2_low"]])
    high = np.array([np.nan if v is None else v for v in grid["r2_high"]])
    yerr = np.clip(np.nan_to_num([r2 - low, high - r2]), 0, None)  # percentile CIs need not contain R²
    ax.errorbar(grid["deltas"], r2, yerr=yerr, fmt="o", capsize=3)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("delta")
    ax.set_title("R² (boundary phase excluded), 95% CI", fontsize=9)
    return _save(fig, path)
