"""Gate scores of transformers' `DeepseekV4ForCausalLM` compressors, for the gate metrics.

Each compressor's `hidden_states` input is captured with a forward pre-hook while the model runs
(without a cache, so every prompt starts a fresh compression), and alpha is recomputed from it:

* CSA layers (`DeepseekV4CSACompressor`, S = 4, W = 8): phasekv's `DSV4Compressor` loaded with the
  same weights (indexer and rotary excluded) gives alpha through its `hook_gate_key`
  ([B, n, W, 1, head_dim]; the first window's missing half has weight 0, as in transformers);
* HCA layers (`DeepseekV4HCACompressor`, W = S = 128): softmax over the window of
  gate_proj(h) + position_bias, per channel.

Keys and values share one latent, so there is only a key gate. The gate is per channel: metrics are
computed per channel and averaged (`per_channel_mean`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from phasekv.compress.dsv4 import DSV4Compression, DSV4Compressor
from phasekv.hooks import capture
from phasekv.internals.gate_metrics import head_metrics

CSA, HCA = "DeepseekV4CSACompressor", "DeepseekV4HCACompressor"


def dsv4_compressors(model: nn.Module) -> dict[int, nn.Module]:
    """layer index -> CSA or HCA compressor module of a DeepseekV4ForCausalLM."""
    found = {}
    for name, module in model.named_modules():
        if type(module).__name__ in (CSA, HCA):
            parts = name.split(".")
            found[int(parts[parts.index("layers") + 1])] = module
    if not found:
        raise ValueError(f"{type(model).__name__} has no DeepSeek-V4 compressors (CSA/HCA layers): no gates to read")
    return found


def phasekv_csa(hf_compressor: nn.Module, eps: float) -> DSV4Compressor:
    """A `DSV4Compressor` with the weights of a transformers `DeepseekV4CSACompressor`."""
    rate, head_dim = hf_compressor.compress_rate, hf_compressor.head_dim
    cfg = DSV4Compression(
        window=2 * rate,
        stride=rate,
        pad_first_window=True,
        entry_position="last_stride_start",
    )
    ours = DSV4Compressor(hf_compressor.kv_proj.in_features, 1, head_dim, cfg, eps=eps)
    state = {k: v for k, v in hf_compressor.state_dict().items() if not k.startswith(("indexer", "rotary"))}
    ours.load_state_dict(state)
    return ours.to(hf_compressor.kv_proj.weight.device).float()


def _hca_alpha(compressor: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """[B, T, d] -> alpha [B, n, S, 1, head_dim] of the complete windows."""
    rate = compressor.compress_rate
    usable = (h.shape[1] // rate) * rate
    gate = compressor.gate_proj(h[:, :usable]).float()
    gate = gate.view(h.shape[0], usable // rate, rate, -1) + compressor.position_bias.float()
    return gate.softmax(dim=2)[:, :, :, None]


def _csa_alpha(ours: DSV4Compressor, h: torch.Tensor) -> torch.Tensor:
    with capture(ours, ["hook_gate_key"]) as seen:
        ours(h.float())
    return seen["hook_gate_key"][0]


@torch.no_grad()
def collect_hf_gates(model: nn.Module, batches: Iterable[torch.Tensor]) -> dict[int, tuple[torch.Tensor, int]]:
    """layer -> (alpha [windows, W, 1, head_dim], stride S) of every compressor with a complete window."""
    compressors = dsv4_compressors(model)
    eps = model.config.rms_norm_eps
    csa = {layer: phasekv_csa(c, eps) for layer, c in compressors.items() if type(c).__name__ == CSA}
    inputs: dict[int, torch.Tensor] = {}

    def keep(layer: int):
        def hook(_module, args, kwargs):
            inputs[layer] = args[0] if args else kwargs["hidden_states"]

        return hook

    handles = [c.register_forward_pre_hook(keep(layer), with_kwargs=True) for layer, c in compressors.items()]
    parts: dict[int, list[torch.Tensor]] = {}
    try:
        for ids in batches:
            model(input_ids=ids, use_cache=False)
            for layer, h in inputs.items():
                alpha = _csa_alpha(csa[layer], h) if layer in csa else _hca_alpha(compressors[layer], h)
                if alpha.shape[1]:
                    parts.setdefault(layer, []).append(alpha.reshape(-1, *alpha.shape[2:]))
    finally:
        for handle in handles:
            handle.remove()
    return {layer: (torch.cat(parts[layer]), compressors[layer].compress_rate) for layer in sorted(parts)}


def hf_gate_metrics(model: nn.Module, batches: Iterable[torch.Tensor]) -> list[dict]:
    """`gates.gate_metrics` rows for a DeepseekV4ForCausalLM: one key-gate row per compressed layer
    (one shared KV head), with `compressor` "csa" or "hca"."""
    rows = []
    for layer, (alpha, stride) in collect_hf_gates(model, batches).items():
        kind = "csa" if alpha.shape[1] > stride else "hca"
        rows += [{"layer": layer, "compressor": kind, **row} for row in head_metrics(alpha, stride, "key")]
    if not rows:
        raise ValueError("no compressor completed a window: use longer prompts")
    return rows
