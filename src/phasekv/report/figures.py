"""Figures of the analyses drawn from their result dicts as PNG, for `phasekv knockout|gates|cycle --plot`,
`phasekv theory theorem2 --out` and the reproduction: the report's own Vega-Lite specs (knockout map, gate
plane with phase shares or training trajectories, gate cycling, Theorem 2's gates), so the command line and
the report draw the same figures."""

from __future__ import annotations

from pathlib import Path

from . import cycle, gates, knockout, theory, vega
from .common import model_name


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
    """The report's gate cycling figure (`cycle.spec`) of one cycling result, as PNG."""
    return vega.write_png(cycle.spec(cycle.model_block(result, model_name(result, Path(path).stem))), path)


def plot_theorem2(result: dict, path: str | Path) -> Path:
    """The report's Theorem 2 figure (`theory.spec`) of one `train_gates` result, as PNG."""
    return vega.write_png(theory.spec(theory.run_block(result, Path(path).stem)), path)
