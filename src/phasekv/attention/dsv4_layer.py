"""DeepSeek-V4's attention layers (sliding, CSA with the lightning indexer, HCA), as transformers'
`DeepseekV4Attention` computes them; `ModelConfig.dsv4` describes them (see `DSV4Layers`).

Per layer: q = RoPE(rms(q_b_proj(q_a_norm(q_a_proj(x))))) per head; one shared key = value head
kv = RoPE(kv_norm(kv_proj(x))); partial interleaved RoPE on the trailing rope_dim channels. Each query
attends, in one softmax with a per-head sink, to the exact tokens t-L+1..t and to compressed entries:
none (sliding), its indexer's top-k picks among the visible CSA entries (csa), or every visible HCA
entry (hca). Since the values carry the keys' rotation, the output's rope slice is rotated back by the
query's position; a grouped low-rank projection (o_a_proj per group of heads, then o_b_proj) mixes heads.

The attention (`gathered_attention`) gathers each query's keys ([its picks || its L exact tokens]), so
work and memory are O(T * (k + L)) and no T x T tensor is built; `reference.reference_gathered_attention`
is its plain twin. Module names match transformers' (`transformers_state_dict` maps a transformers layer's
weights onto these modules).
"""

from __future__ import annotations

import torch
from torch import nn

from ..compress import DSV4Compression, DSV4Compressor
from ..config import ModelConfig
from ..hooks import HookPoint
from ..norm import RMSNorm
from .dsv4_indexer import NO_ENTRY, LightningIndexer, indexer_loss
from .rope import Rotary
from .state import KVView, LayerState, append_rows, keep_last


def hca_windows(cfg: ModelConfig) -> DSV4Compression:
    """HCA windows: non-overlapping, `hca_rate` tokens each, RoPE'd at their first token."""
    rate = cfg.dsv4.hca_rate
    return DSV4Compression(window=rate, stride=rate, local_window=cfg.compression.local_window)


class GroupedLinear(nn.Linear):
    """Block-diagonal projection: group g of the input [.., groups, in] goes through its own [out, in] block.
    weight: [groups * out, in] (transformers' `DeepseekV4GroupedLinear` layout)."""

    def __init__(self, in_per_group: int, out_total: int, groups: int):
        super().__init__(in_per_group, out_total, bias=False)
        self.groups = groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., groups, in] -> [..., groups, out_total / groups]."""
        w = self.weight.view(self.groups, -1, x.shape[-1])  # [G, out, in]
        return torch.einsum("...gi,goi->...go", x, w)


def unit_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without a weight (the per-head query norm)."""
    wide = x.to(torch.promote_types(x.dtype, torch.float32))
    return x * torch.rsqrt(wide.square().mean(-1, keepdim=True) + eps).to(x.dtype)


class DSV4Attention(nn.Module):
    """One DeepSeek-V4 attention layer of type `cfg.dsv4.layer_types[layer]`.

    Hook points: hook_z, the per-head outputs [B, T, heads, head_dim] before the output rotation and
    projection; the compressor's gate and entry hooks; the indexer's score and selection hooks (csa).
    """

    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        layers = cfg.dsv4
        self.cfg, self.kind = cfg, layers.layer_types[layer]
        d, h, hd = cfg.hidden_size, cfg.num_heads, cfg.head_dim
        self.local_window = cfg.compression.local_window
        self.q_a_proj = nn.Linear(d, layers.q_lora_rank, bias=False)
        self.q_a_norm = RMSNorm(layers.q_lora_rank, cfg.rms_norm_eps)
        self.q_b_proj = nn.Linear(layers.q_lora_rank, h * hd, bias=False)
        self.kv_proj = nn.Linear(d, hd, bias=False)
        self.kv_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.o_a_proj = GroupedLinear(h * hd // layers.o_groups, layers.o_groups * layers.o_lora_rank, layers.o_groups)
        self.o_b_proj = nn.Linear(layers.o_groups * layers.o_lora_rank, d, bias=False)
        self.sinks = nn.Parameter(torch.zeros(h))
        theta = cfg.rope_theta if self.kind == "sliding" else layers.compress_rope_theta
        self.rotary = Rotary(cfg.rotary_dim, theta, "interleaved")
        self.compressor = None
        if self.kind != "sliding":
            windows = cfg.compression if self.kind == "csa" else hca_windows(cfg)
            self.compressor = DSV4Compressor(d, 1, hd, windows, eps=cfg.rms_norm_eps)
        self.indexer = LightningIndexer(cfg, cfg.compression) if self.kind == "csa" else None
        self.dense = False  # csa: read every visible entry (the indexer still scores them and learns); see
        # PhaseKVModel.dense_indexer
        self.hook_z = HookPoint()

    @torch.no_grad()
    def reset_parameters(self, std: float) -> None:
        """What the model's generic init (normal linears, unit norms) leaves out: zero sinks and offset biases."""
        nn.init.zeros_(self.sinks)
        for module in self.modules():
            if isinstance(module, DSV4Compressor):
                nn.init.zeros_(module.position_bias)

    def forward(self, x: torch.Tensor, start: int = 0, state: LayerState | None = None) -> torch.Tensor:
        """x: [B, T, d_model] (normalised layer input) at positions start..start+T-1 -> [B, T, d_model].

        With `state`, attends to what earlier calls left there and updates it (incremental decoding)."""
        batch, length, _ = x.shape
        cfg = self.cfg
        positions = torch.arange(start, start + length, device=x.device)
        q_residual = self.q_a_norm(self.q_a_proj(x))
        q = self.q_b_proj(q_residual).view(batch, length, cfg.num_heads, cfg.head_dim)
        q = self.rotary(unit_rms(q, cfg.rms_norm_eps), positions)
        mem = self._memory(x, start, state)
        picks, scores = self._picks(x, q_residual, positions, mem)
        z, probs = gathered_attention(q, start, KVView.of(mem, self.local_window, self.sinks), picks)
        if state is not None:
            vars(state).update(vars(self._trim(mem)))
        z = self.rotary(self.hook_z(z), -positions)  # undo the values' rotation at the query position
        out = self.o_b_proj(self.o_a_proj(z.reshape(batch, length, self.o_a_proj.groups, -1)).flatten(2))
        weight = cfg.dsv4.indexer_loss_weight
        if scores is not None and weight > 0 and self.training and torch.is_grad_enabled():
            loss = indexer_loss(scores, picks, probs[..., : picks.shape[-1]])
            out = _AddAuxiliaryLoss.apply(out, weight * loss)
        return out

    def prefill_state(self, x: torch.Tensor) -> LayerState:
        """The state a cached call on x (positions 0..T-1) would leave, without its queries or outputs."""
        return self._trim(self._memory(x, 0, None))

    def _learning(self) -> bool:
        return self.training and torch.is_grad_enabled()

    def _picks(self, x, q_residual, positions, mem: LayerState) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Entry rows each query reads [B, T, k] (NO_ENTRY: none) and, for csa, the indexer's scores [B, T, n]."""
        batch, length = x.shape[:2]
        rows = torch.arange(mem.num_entries, device=x.device)
        visible = mem.entry_end.to(x.device)[None, :] <= positions[:, None]  # [T, n]
        every = torch.where(visible, rows, NO_ENTRY).expand(batch, length, -1)
        if self.indexer is None:
            return every, None
        if self._learning():  # picks are not differentiable: the indexer learns from its own loss only
            x, q_residual = x.detach(), q_residual.detach()
        picks, scores = self.indexer(x, q_residual, positions, mem.index_k, mem.entry_end)
        return (every, scores) if self.dense else (picks, scores)

    def _memory(self, x: torch.Tensor, start: int, state: LayerState | None) -> LayerState:
        """What queries at positions start.. can read: `state`'s memory extended by x's K=V rows (normed,
        RoPE'd; exact_v stays None), the entries (and indexer keys) of windows completed within x."""
        batch, length, _ = x.shape
        cfg = self.cfg
        positions = torch.arange(start, start + length, device=x.device)
        kv = self.rotary(self.kv_norm(self.kv_proj(x)).view(batch, length, 1, cfg.head_dim), positions)
        past = state if state is not None else LayerState()
        mem = LayerState(
            exact_k=append_rows(past.exact_k, kv), exact_start=start if past.exact_k is None else past.exact_start
        )
        comp = self.compressor
        if comp is None:
            return mem
        mem.extend_hidden(past, x, start)
        entries = comp(mem.hidden, mem.hidden_start, emit_from=start)  # windows completed inside x
        entry_k = self.rotary(entries.key, comp.geometry.rope_position(entries.index))
        mem.entry_k = append_rows(past.entry_k, entry_k)
        mem.entry_end = append_rows(past.entry_end.to(x.device), comp.geometry.window_end(entries.index), dim=0)
        if self.indexer is not None:
            hidden = mem.hidden.detach() if self._learning() else mem.hidden
            mem.index_k = append_rows(past.index_k, self.indexer.keys(hidden, mem.hidden_start, start))
        return mem

    def _trim(self, mem: LayerState) -> LayerState:
        """Drop what no later query can reach: exact rows beyond the last L-1, hidden rows of finished windows."""
        exact_k, dropped = keep_last(mem.exact_k, self.local_window - 1)
        trimmed = LayerState(exact_k=exact_k, exact_start=mem.exact_start + dropped)
        if self.compressor is not None:
            hidden, hidden_dropped = keep_last(mem.hidden, self.compressor.context)
            trimmed.entry_k, trimmed.entry_end, trimmed.index_k = mem.entry_k, mem.entry_end, mem.index_k
            trimmed.hidden, trimmed.hidden_start = hidden, mem.hidden_start + hidden_dropped
        return trimmed


class _AddAuxiliaryLoss(torch.autograd.Function):
    """Identity on x whose backward also starts `loss`'s gradient (as if loss were added to the objective),
    so the indexer trains without the training loop knowing about it (DeepSeek-V2's AddAuxiliaryLoss)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
        ctx.loss_shape, ctx.loss_dtype = loss.shape, loss.dtype
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, torch.ones(ctx.loss_shape, dtype=ctx.loss_dtype, device=grad.device)


def gathered_attention(
    q: torch.Tensor, q_start: int, kv: KVView, picks: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One shared K=V head (kv's values are its keys, Hkv = 1). q: [B, T, H, hd] at positions q_start..;
    picks: [B, T, k] entry rows per query (NO_ENTRY: empty slot); kv's exact rows must reach back to
    q_start - L + 1 (or 0). Each query attends to its picks and its exact tokens t-L+1..t in one softmax
    (plus exp(sink) per head in the denominator). Returns (z [B, T, H, hd], probabilities [B, T, H, k + L])."""
    if kv.entry_v is not kv.entry_k or kv.exact_v is not kv.exact_k or kv.exact_k.shape[2] != 1:
        raise ValueError("gathered_attention reads one shared K=V head: the view's values must be its keys")
    batch, length, heads, dim = q.shape
    positions = q_start + torch.arange(length, device=q.device)
    local_window, exact_start, sink = kv.local_window, kv.exact_start, kv.sink
    band = positions[:, None] - local_window + 1 + torch.arange(local_window, device=q.device)  # [T, L]
    if exact_start > max(0, q_start - local_window + 1):
        raise ValueError(f"exact rows start at position {exact_start}; queries from {q_start} need earlier ones")
    local = kv.exact_k[:, (band - exact_start).clamp_min(0), 0]  # [B, T, L, hd]
    keys, valid = local, (band >= 0).expand(batch, length, local_window)
    if picks.shape[-1]:
        rows = torch.arange(batch, device=q.device)[:, None, None]
        picked = kv.entry_k[rows, picks.clamp_min(0), 0]  # [B, T, k, hd]
        keys, valid = torch.cat([picked, keys], dim=2), torch.cat([picks != NO_ENTRY, valid], dim=2)
    logits = torch.einsum("bthd,btkd->bthk", q, keys) * dim**-0.5
    logits = logits.masked_fill(~valid[:, :, None, :], float("-inf"))
    if sink is not None:
        logits = torch.cat([logits, sink.to(logits.dtype).view(1, 1, heads, 1).expand(batch, length, heads, 1)], -1)
    # at least float32 (bf16 logits are upcast), never below the input's precision (float64 stays float64)
    probs = torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1).to(q.dtype)
    probs = probs[..., :-1] if sink is not None else probs
    return torch.einsum("bthk,btkd->bthd", probs, keys), probs


def transformers_state_dict(hf_attention_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A transformers `DeepseekV4Attention` state dict renamed to this layer's modules (rotary buffers dropped)."""
    renamed = {}
    for name, value in hf_attention_state.items():
        if "rotary_emb" in name:
            continue
        name = name.replace("compressor.indexer.", "indexer.").replace("scorer.weights_proj", "weights_proj")
        if name.split(".")[:1] == ["indexer"] and name.split(".")[1] in ("kv_proj", "gate_proj", "position_bias"):
            name = "indexer.compressor." + name[len("indexer.") :]
        if name.startswith("indexer.kv_norm"):
            name = "indexer.compressor." + name[len("indexer.") :]
        renamed[name] = value
    return renamed
