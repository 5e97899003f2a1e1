"""The report's compressor illustration drawn with a trained checkpoint's own gates.

The gate bias b_i and the content terms Z_i h of the layer whose key-gate bias varies most across offsets
(KV head 0, key branch), with h the RMS-normalised token embedding (exact inputs for layer 0, a stand-in
for deeper layers); the payload channels are the first channels of C_i h.
"""

from __future__ import annotations

from pathlib import Path

import torch

from phasekv.charts.labels import model_name
from phasekv.model.io import load_checkpoint
from phasekv.studies.gates.compressor_figure import CHANNELS, illustrative


def from_checkpoint(path: str | Path) -> dict:
    """Gate parameters of a phasekv checkpoint (see the module docstring); raises ValueError when
    the model has no learned scalar gate with W = S."""
    model = load_checkpoint(path)
    cfg = model.config.compression
    if cfg is None:
        raise ValueError(f"{path}: the model has no compressor (full attention)")
    if cfg.gate != "scalar" or cfg.window != cfg.stride:
        raise ValueError(
            f"{path}: the illustration needs a learned scalar gate with W = S (gate {cfg.gate}, "
            f"W={cfg.window}, S={cfg.stride})"
        )
    w = cfg.window
    model.requires_grad_(False)
    comps = [layer.self_attn.compressor for layer in model.layers]
    spreads = [float(c.gate_bias[:, 0].max() - c.gate_bias[:, 0].min()) for c in comps]
    layer = max(range(len(comps)), key=lambda i: spreads[i])
    comp = comps[layer]
    ids = torch.arange(1, 2 * w + 1) % model.config.vocab_size
    with torch.no_grad():
        h = model.embed_tokens.weight[ids].float()
        h = h / h.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
        content = torch.einsum("td,wd->tw", h, comp.gate_weight[:, :, 0].float())  # Z_i h, key head 0
        payload = torch.einsum("td,wdc->twc", h, comp.payload[:, :, :CHANNELS].float()).abs()
    name = model_name({"model": {"path": str(path)}}, Path(path).name)
    return {
        "source": f"model {name}, layer {layer}, KV head 0, key gate",
        "window": w,
        "tokens": [f"#{int(i)}" for i in ids],
        "bias": [round(float(b), 4) for b in comp.gate_bias[:, 0]],
        "content": content.round(decimals=4).tolist(),
        "payload": payload.round(decimals=4).tolist(),
    }


def illustration(model: str | Path | None) -> dict | None:
    """The illustration data for `phasekv.report.build_report(compressor=...)`: from `model`'s gates, else
    the illustrative numbers with a "note" saying why the model could not be used; None without a model."""
    if model is None:
        return None
    try:
        return from_checkpoint(model)
    except Exception as err:  # noqa: BLE001  (any unusable checkpoint falls back, with the reason shown)
        return {**illustrative(), "note": f"the illustration uses illustrative numbers: {err}"}
