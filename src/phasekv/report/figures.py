"""Figures of the analyses, drawn from their result dicts (PNG): knockout map, gate plane and phase
preferences, gate trajectories, gate cycling, for `phasekv knockout|gates|cycle --plot` and the
reproduction. The knockout map is the report's own Vega-Lite spec; the others are still matplotlib."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import knockout, vega
from .common import model_name, plt, save_figure


def _save(fig, path: str | Path) -> Path:
    return save_figure(fig, Path(path), dpi=120, bbox_inches="tight")


def plot_knockout(result: dict, path: str | Path) -> Path:
    """The report's knockout figure (`knockout.spec`) of one knockout result, as PNG."""
    return vega.write_png(knockout.spec(knockout.map_block(result, model_name(result, Path(path).stem))), path)


def _plane(ax, window: int, title: str) -> None:
    ax.plot([1, window], [1, window], "k--", lw=1)
    ax.set_xlim(0.9, window + 0.1)
    ax.set_ylim(0.9, window + 0.1)
    ax.set_xlabel("static exp(H(E[alpha]))")
    ax.set_ylabel("per window E[exp(H(alpha))]")
    ax.set_title(title, fontsize=9)


def _layer_colors(rows: list[dict]):
    layers = sorted({r["layer"] for r in rows})
    cmap = plt.get_cmap("viridis")
    return {layer: cmap(i / max(1, len(layers) - 1)) for i, layer in enumerate(layers)}


def plot_gates(rows: list[dict], path: str | Path) -> Path:
    """(static, per-window) plane of every KV head's key gate colored by layer, and the phase shares of
    key and (shifted) value gates as heatmaps (rows = layer/head)."""
    keys = [r for r in rows if r["branch"] == "key"]
    values = [r for r in rows if r["branch"] == "value"]
    window = max(r["window"] for r in keys)
    colors = _layer_colors(keys)
    panels = 2 + bool(values)
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4.5))
    vector = any(r.get("per_channel_mean") for r in keys)
    _plane(axes[0], window, "key gates" + (" (per channel, averaged)" if vector else ""))
    for r in keys:
        axes[0].scatter(r["static_offsets"], r["per_window_offsets"], color=colors[r["layer"]], s=25)
    for layer, color in colors.items():
        axes[0].scatter([], [], color=color, label=f"layer {layer}")
    axes[0].legend(fontsize=6, ncol=2)
    shares = [(axes[1], keys, "key gate: phase share / uniform")]
    if values:
        shares.append((axes[2], values, "value gate, shifted back by one"))
    for ax, group, title in shares:
        width = max(len(r["phase_share"]) for r in group)  # layers of different strides (DeepSeek-V4 CSA / HCA)
        data = np.array([r["phase_share"] + [np.nan] * (width - len(r["phase_share"])) for r in group])
        image = ax.imshow(data, cmap="magma", aspect="auto", interpolation="nearest", vmin=0)
        ax.set_yticks(range(len(group)), [f"L{r['layer']}H{r['kv_head']}" for r in group], fontsize=6)
        ax.set_xlabel("phase")
        ax.set_title(title, fontsize=9)
        fig.colorbar(image, ax=ax)
    return _save(fig, path)


def plot_gate_trajectory(trajectory: dict, path: str | Path) -> Path:
    """Paths of every KV head's key gate in the (static, per-window) plane, open circle at the first
    step, filled at the last."""
    steps = trajectory["steps"]
    first = [r for r in steps[0]["rows"] if r["branch"] == "key"]
    window = max(r["window"] for r in first)
    colors = _layer_colors(first)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    _plane(ax, window, f"key gates, steps {steps[0]['step']}..{steps[-1]['step']} ({trajectory['source']})")
    for layer, head in sorted({(r["layer"], r["kv_head"]) for r in first}):
        points = [
            (r["static_offsets"], r["per_window_offsets"])
            for s in steps
            for r in s["rows"]
            if r["branch"] == "key" and (r["layer"], r["kv_head"]) == (layer, head)
        ]
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, color=colors[layer], lw=1)
        ax.scatter(xs[0], ys[0], facecolors="none", edgecolors=colors[layer], s=25)
        ax.scatter(xs[-1], ys[-1], color=colors[layer], s=25)
    return _save(fig, path)


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
