"""Gate cycling: circularly shift the offset-specific gate parameters, keep the payload maps.

    Z~_i = Z_{(i - delta) mod W},   b~_i = b_{(i - delta) mod W}   ==>   A_delta(r) ~ A_0((r - delta) mod S)

Defined for paper-style compressors with W = S and learned gates only.
"""

from __future__ import annotations

import copy

import torch


def check_cyclable(model) -> None:
    """Raise ValueError unless every compressed layer has W = S and learned paper-style gates."""
    comps = [layer.self_attn.compressor for layer in model.layers if layer.self_attn.compressor is not None]
    if not comps:
        raise ValueError("gate cycling needs a compressed model; this one has full attention")
    for comp in comps:
        cfg = comp.cfg
        if cfg.kind != "paper":
            raise ValueError(f"gate cycling is defined for paper-style compressors, not {cfg.kind!r}")
        if cfg.window != cfg.stride:
            raise ValueError(
                f"gate cycling needs W = S (offset = phase); this model has W={cfg.window}, S={cfg.stride}"
            )
        if cfg.gate == "uniform":
            raise ValueError("gate cycling needs learned gates; uniform averaging has no gate parameters")


def cycle_gates(model, delta: int):
    """A copy of `model` whose gate parameters (Z_i, b_i) are cycled by `delta` offsets."""
    check_cyclable(model)
    cycled = copy.deepcopy(model)
    with torch.no_grad():
        for layer in cycled.layers:
            comp = layer.self_attn.compressor
            comp.gate_weight.copy_(torch.roll(comp.gate_weight, shifts=delta, dims=0))  # new[i] = old[i - delta]
            comp.gate_bias.copy_(torch.roll(comp.gate_bias, shifts=delta, dims=0))
    return cycled
