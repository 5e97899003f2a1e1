"""Gate cycling: circularly shift the offset-specific gate parameters, keep the payload maps.

    Z~_i = Z_{(i - delta) mod W},   b~_i = b_{(i - delta) mod W}   ==>   A_delta(r) ~ A_0((r - delta) mod S)

Defined for paper-style compressors with W = S and learned per-offset gates only.
"""

from __future__ import annotations

import copy

import torch


def cycling_problem(config) -> str | None:
    """Why gate cycling is not defined for a model of this ModelConfig (None: it is): it needs paper-style
    compressors with W = S (offset = phase) and learned gates."""
    comp = config.compression
    if comp is None:
        return "gate cycling needs a compressed model; this one has full attention"
    if comp.kind != "paper" or config.dsv4 is not None:
        return f"gate cycling is defined for paper-style compressors, not {comp.kind!r}"
    if comp.window != comp.stride:
        return f"gate cycling needs W = S (offset = phase); this model has W={comp.window}, S={comp.stride}"
    if comp.gate == "uniform":
        return "gate cycling needs learned gates; uniform averaging has no gate parameters"
    if comp.offset_sharing:
        return "gate cycling needs per-offset gates; an offset-shared compressor has one gate for every offset"
    return None


def check_cyclable(model) -> None:
    """Raise ValueError unless gate cycling is defined for `model` (`cycling_problem`)."""
    problem = cycling_problem(model.config)
    if problem:
        raise ValueError(problem)


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
