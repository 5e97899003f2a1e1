"""DeepSeek-V4's lightning indexer: which compressed entries each query of a CSA layer reads.

The indexer compresses the same windows as its layer's CSA compressor, at its own small width
(`index_head_dim`, one shared key per entry, RoPE'd at the entry's position), and scores entry s for
the query at t as

    I[t, s] = sum_h w[t, h] * ReLU(q[t, h] . k[s]) / sqrt(index_head_dim),   w = weights_proj(x) / sqrt(heads)

with q from the layer's low-rank query residual. Each query keeps the `index_topk` visible entries of
highest score, ties going to the lower row (`select_top_k`; `reference.reference_select_top_k` is its
per-query twin). Given the same weights, scores and picks equal transformers' `DeepseekV4Indexer`, except
where scores tie at the cut: its `torch.topk` then picks by no stated rule.

The picks are not differentiable, so the language-model loss never reaches the indexer. It learns from
`indexer_loss`: KL(main attention over its picks, summed over heads || softmax of its scores over the
picks), on detached inputs (DeepSeek-V3.2's sparse-stage objective, which V4 inherits).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..compress import DSV4Compression, DSV4Compressor
from ..config import ModelConfig
from ..hooks import HookPoint
from .rope import Rotary

NO_ENTRY = -1  # a pick slot left empty (fewer than index_topk entries visible)


class LightningIndexer(nn.Module):
    """Hook points: hook_index_scores, the scores [B, T, n] of every entry for every query (-inf where the
    entry is not yet visible); hook_index_selection, the picks [B, T, k] (entry rows, NO_ENTRY where
    empty). A hook may replace either (a replaced selection is what the layer attends to)."""

    def __init__(self, cfg: ModelConfig, windows: DSV4Compression):
        super().__init__()
        layers = cfg.dsv4
        self.heads, self.head_dim, self.top_k = layers.index_heads, layers.index_head_dim, layers.index_topk
        self.compressor = DSV4Compressor(cfg.hidden_size, 1, self.head_dim, windows, eps=cfg.rms_norm_eps)
        self.q_b_proj = nn.Linear(layers.q_lora_rank, self.heads * self.head_dim, bias=False)
        self.weights_proj = nn.Linear(cfg.hidden_size, self.heads, bias=False)
        self.rotary = Rotary(cfg.rotary_dim, layers.compress_rope_theta, "interleaved")
        self.hook_index_scores = HookPoint()
        self.hook_index_selection = HookPoint()

    def keys(self, hidden: torch.Tensor, hidden_start: int, emit_from: int) -> torch.Tensor:
        """Keys [B, n, index_head_dim] of the windows ending in [emit_from, hidden_start + T) (see
        `DSV4Compressor.forward`), RoPE'd at their entry positions."""
        entries = self.compressor(hidden, hidden_start, emit_from)
        return self.rotary(entries.key, self.compressor.geometry.rope_position(entries.index))[:, :, 0]

    def scores(self, x: torch.Tensor, q_residual: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor):
        """x: [B, T, d_model]; q_residual: [B, T, q_lora_rank]; positions: [T]; keys: [B, n, dI] -> [B, T, n]
        scores in float32 (float64 for float64 inputs), of every entry, visible or not."""
        batch, length, _ = x.shape
        q = self.q_b_proj(q_residual).view(batch, length, self.heads, self.head_dim)
        q = self.rotary(q, positions)
        dtype = torch.promote_types(q.dtype, torch.float32)  # float32 at least, float64 stays float64
        dots = torch.einsum("bthd,bnd->bthn", q.to(dtype), keys.to(dtype))
        weights = self.weights_proj(x).to(dtype) * self.heads**-0.5  # [B, T, heads]
        return (F.relu(dots) * self.head_dim**-0.5 * weights[..., None]).sum(dim=2)

    def forward(
        self,
        x: torch.Tensor,
        q_residual: torch.Tensor,
        positions: torch.Tensor,
        keys: torch.Tensor,
        entry_end: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(picks [B, T, min(k, n)] as entry rows or NO_ENTRY, masked scores [B, T, n])."""
        visible = entry_end[None, None, :] <= positions[None, :, None]  # [1, T, n]
        scores = self.scores(x, q_residual, positions, keys).masked_fill(~visible, float("-inf"))
        scores = self.hook_index_scores(scores)
        return self.hook_index_selection(select_top_k(scores, visible, self.top_k)), scores


def select_top_k(scores: torch.Tensor, visible: torch.Tensor, k: int) -> torch.Tensor:
    """scores: [B, T, n] (any value where not visible); visible: [B or 1, T, n] -> picks [B, T, min(k, n)]:
    the rows of the k highest-scoring visible entries per query, NO_ENTRY in slots beyond the visible ones.

    Ties go to the lower row, and the picks are ordered by (score descending, row ascending). The indexer's
    scores are sums of ReLUs, so exact zeros tie often; `torch.topk` breaks ties by no stated rule, and its
    choice depends on the tensor's shape, so the parallel forward (n = every entry of the sequence) and a
    decoding step (n = the entries so far) would read different entries. This rule depends only on the
    visible entries' scores, so every execution mode picks the same entries."""
    k = min(k, scores.shape[-1])
    if k == 0:
        return scores.new_zeros(scores.shape[:-1] + (0,), dtype=torch.long)
    masked = scores.masked_fill(~visible, float("-inf"))
    threshold = masked.topk(k, dim=-1).values[..., -1:]  # the k-th highest score per query
    above, tied = masked > threshold, masked == threshold
    room = k - above.sum(-1, keepdim=True)  # slots left for entries at the threshold: the lowest rows get them
    chosen = above | (tied & (tied.to(torch.int32).cumsum(-1, dtype=torch.int32) <= room))
    picks = chosen.to(torch.int8).topk(k, dim=-1).indices.sort(dim=-1).values  # the chosen rows, ascending
    order = masked.gather(-1, picks).sort(dim=-1, descending=True, stable=True).indices
    picks = picks.gather(-1, order)
    valid = visible.expand_as(scores).gather(-1, picks)
    return picks.masked_fill(~valid, NO_ENTRY)


def indexer_loss(scores: torch.Tensor, picks: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """KL(p || softmax(indexer scores)) over each query's picks, averaged over queries that picked any.

    scores: [B, T, n] indexer scores (with their graph); picks: [B, T, k]; attention: [B, T, H, k] the main
    attention's probabilities of the picked entries (detached here), p = their head sum, renormalised."""
    valid = picks != NO_ENTRY
    picked = scores.gather(-1, picks.clamp_min(0)).masked_fill(~valid, float("-inf"))  # [B, T, k]
    target = attention.detach().float().sum(dim=2).masked_fill(~valid, 0.0)
    rows = valid.any(-1)
    if not rows.any():
        return scores.new_zeros(())
    target = target[rows] / target[rows].sum(-1, keepdim=True).clamp_min(1e-30)
    log_q = torch.log_softmax(picked[rows], dim=-1)
    terms = torch.where(target > 0, target * (target.clamp_min(1e-30).log() - log_q), torch.zeros_like(target))
    return terms.sum(-1).mean()
