"""A small tour of a compressed model: windows, phases, visibility, gate scores and the decode cache."""

from __future__ import annotations

import torch

from .cache import KVCache, generate
from .hooks import capture
from .model import PhaseKVModel, preset_config


def run_demo(preset: str, length: int, new_tokens: int, seed: int) -> str:
    torch.manual_seed(seed)
    cfg = preset_config(preset)
    model = PhaseKVModel(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, length), generator=torch.Generator().manual_seed(seed))
    lines = [
        f"model {cfg.name}: {model.num_parameters():,} parameters, {cfg.num_layers} layers, "
        f"{cfg.num_heads} query heads, {cfg.num_kv_heads} KV head(s) (untrained, seed {seed})"
    ]
    comp = cfg.compression
    if comp is None:
        lines.append("full attention: every query sees every earlier token exactly; no compressed entries.")
    else:
        lines += _entry_table(model, ids, comp)
    tokens = generate(model, ids, new_tokens)
    cache = KVCache.for_model(model)
    with torch.no_grad():
        model(tokens, cache)
    full_bytes = 2 * cfg.num_layers * tokens.shape[1] * cfg.num_kv_heads * cfg.head_dim * 4
    lines.append(
        f"\ngreedy continuation ({new_tokens} tokens, compressed-cache decoding): {tokens[0, length:].tolist()}"
    )
    lines.append(
        f"cache after {tokens.shape[1]} tokens: entries per layer {cache.num_entries()}, "
        f"{cache.nbytes():,} bytes vs {full_bytes:,} for a full KV cache ({cache.nbytes() / full_bytes:.2f}x)"
    )
    return "\n".join(lines)


def _entry_table(model: PhaseKVModel, ids: torch.Tensor, comp) -> list[str]:
    geometry = model.layers[0].self_attn.compressor.geometry
    w, s = comp.window, comp.stride
    with torch.no_grad(), capture(model, ["layers.0.self_attn.compressor.hook_gate_key"]) as seen:
        model(ids)
    alpha = seen["layers.0.self_attn.compressor.hook_gate_key"][0][0, :, :, 0].mean(-1)  # [n, W], head 0
    t = ids.shape[1]
    lines = [
        f"compression: {comp.kind}, window W={w}, stride S={s}, gate={comp.gate}, local window L={comp.local_window}",
        f"phase of a token = position mod {s}; prompt of {t} tokens -> "
        f"{geometry.num_complete(t)} entries per layer and KV head",
        "",
        f"{'entry j':>7}  {'covers':>9}  {'visible from t >=':>17}  {'RoPE pos':>8}  "
        "layer-0 key gate by offset (head 0)",
    ]
    for n, j in enumerate(range(geometry.first_index, geometry.last_complete(t) + 1)):
        lo, hi = max(0, j * s), j * s + w - 1
        scores = " ".join(f"{a:.2f}" for a in alpha[n].tolist())
        rope = int(geometry.rope_position(torch.tensor(j)))
        lines.append(f"{j:>7}  {lo:>4}-{hi:<4}  {hi:>17}  {rope:>8}  {scores}")
    pending = t - (geometry.last_complete(t) + 1) * s
    lines.append(f"the last {max(0, pending)} token(s) wait in the local window for their window to complete")
    lines.append("\nphases of the prompt positions:")
    lines.append("  " + " ".join(str(p % s) for p in range(t)))
    return lines
