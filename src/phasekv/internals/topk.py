"""How often a DeepSeek-V4 CSA layer's lightning indexer picks the target record's entry, by phase.

For each lookup prompt and CSA layer: the indexer's picks at the query position (hook_index_selection)
"hit" when one of them is an entry whose window covers the target key's position. With overlapping
windows (W = 2S) two entries cover each position; a hit needs one. Rows group the prompts by residue
(target position mod the lookup modulus, as the residue table does) and by phase (mod the CSA stride).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from phasekv.attention.dsv4_indexer import NO_ENTRY
from phasekv.hooks import capture
from phasekv.internals.probe_prompts import batches, unique_ids
from phasekv.planning import Planner, as_planner
from phasekv.tasks.prompts import Prompt


def csa_layers(model) -> list[int]:
    """Indices of the layers with a lightning indexer (phasekv DeepSeek-V4 CSA layers)."""
    return [i for i, layer in enumerate(getattr(model, "layers", [])) if getattr(layer.self_attn, "indexer", None)]


@torch.no_grad()
def target_picked(
    model, prompts: Sequence[Prompt], batch_size: int = 16, progress: bool | Planner = False
) -> dict[int, np.ndarray]:
    """layer -> bool [N]: whether that layer's picks at prompt i's query position include an entry covering
    its target position. Empty for models without an indexer. `progress`: the planner whose "top-k hits"
    stage the batches are."""
    layers = csa_layers(model)
    if not layers:
        return {}
    ids, rows = unique_ids(prompts)
    names = {i: f"layers.{i}.self_attn.indexer.hook_index_selection" for i in layers}
    picks: dict[int, list[torch.Tensor]] = {i: [] for i in layers}
    query = prompts[0].query_position
    device = next(model.parameters()).device
    for part in as_planner(progress).steps("top-k hits", batches(ids, batch_size)):
        with capture(model, list(names.values())) as seen:
            model(part.to(device))
        for i, name in names.items():
            picks[i].append(seen[name][0][:, query].cpu())  # [b, k] entry rows
    targets = torch.tensor([p.target_position for p in prompts])
    hit = {}
    for i in layers:
        geometry = model.layers[i].self_attn.compressor.geometry
        chosen = torch.cat(picks[i])[torch.from_numpy(rows)]  # [N, k]
        first = geometry.window_start(chosen + geometry.first_index)
        covers = (first <= targets[:, None]) & (targets[:, None] < first + geometry.window) & (chosen != NO_ENTRY)
        hit[i] = covers.any(-1).numpy()
    return hit


def topk_hits_by_phase(
    model, prompts: Sequence[Prompt], batch_size: int = 16, progress: bool | Planner = False
) -> list[dict]:
    """Rows {layer, group ("residue" or "phase"), value, n, hits, rate} per CSA layer (see the module doc)."""
    hit = target_picked(model, prompts, batch_size, progress)
    residues = np.array([p.residue for p in prompts])
    rows = []
    for layer, picked in hit.items():
        stride = model.layers[layer].self_attn.compressor.geometry.stride
        phases = np.array([p.target_position for p in prompts]) % stride
        for group, values in (("residue", residues), ("phase", phases)):
            for value in sorted(set(values.tolist())):
                chosen = picked[values == value]
                rows.append(
                    {
                        "layer": layer,
                        "group": group,
                        "value": int(value),
                        "n": int(chosen.size),
                        "hits": int(chosen.sum()),
                        "rate": float(chosen.mean()),
                    }
                )
    return rows


def format_topk_hits(rows: list[dict]) -> str:
    """Text: per CSA layer, the hit rate by phase, then by residue."""
    lines = []
    for layer in sorted({r["layer"] for r in rows}):
        for group in ("phase", "residue"):
            part = [r for r in rows if r["layer"] == layer and r["group"] == group]
            rates = " ".join(f"{r['value']}:{r['rate']:.2f}" for r in part)
            lines.append(f"layer {layer} indexer picks the target's entry, by {group}: {rates}")
    return "\n".join(lines)
