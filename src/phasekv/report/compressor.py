"""The compressor illustration (the paper's first figure): one W = S window, offsets coloured, gate
scores, the stacked contribution per channel, and prepend buttons moving a followed token.

Illustrative numbers by default. With a phasekv checkpoint (`--model`), the gate bias b_i and the
content terms Z_i h of the layer whose key-gate bias varies most across offsets are used (KV head 0,
key branch), with h the RMS-normalised token embedding (exact inputs for layer 0, a stand-in for
deeper layers), and the payload channels are the first channels of C_i h.
"""

from __future__ import annotations

from pathlib import Path

from .common import model_name

TOKENS = ["the", "owl", "is", "Mia", "the", "cat", "is", "Ben"]
CHANNELS = 6

ILLUSTRATIVE = {
    "source": "illustrative numbers",
    "window": 4,
    "tokens": TOKENS,
    "bias": [0.0, 0.3, 1.5, -0.2],
    # content term Z_i h of token t at offset i: [token][offset]
    "content": [
        [0.1, 0.0, -0.1, 0.2],
        [0.6, 0.5, 0.4, 0.7],
        [-0.3, -0.2, -0.4, -0.1],
        [0.8, 0.9, 0.7, 0.6],
        [0.1, 0.0, -0.1, 0.2],
        [0.5, 0.6, 0.4, 0.5],
        [-0.3, -0.2, -0.4, -0.1],
        [0.7, 0.8, 0.9, 0.6],
    ],
    # |C_i h| per channel: [token][offset][channel]
    "payload": [
        [[0.3 + 0.1 * ((t + c + i) % 4) for c in range(CHANNELS)] for i in range(4)] for t in range(len(TOKENS))
    ],
}


def illustrative() -> dict:
    return dict(ILLUSTRATIVE)


def from_checkpoint(path: str | Path) -> dict:
    """Gate parameters of a phasekv checkpoint (see the module docstring); raises ValueError when
    the model has no learned scalar gate with W = S."""
    import torch

    from ..model.io import load_checkpoint

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


def section(model: str | Path | None) -> tuple[dict, str | None]:
    """(illustration data, a note when a given model could not be used)."""
    if model is None:
        return illustrative(), None
    try:
        return from_checkpoint(model), None
    except Exception as err:  # noqa: BLE001  (any unusable checkpoint falls back, with the reason shown)
        return illustrative(), f"the illustration uses illustrative numbers: {err}"
