"""The paper's chunked compressor: per-offset gates (Z_i, b_i) and per-offset payload maps C_i.

    s_{j,i} = Z_i h_{j,i} + b_i        alpha_{j,.} = softmax_i(s_{j,.})        K_j = sum_i alpha_{j,i} * C_i h_{j,i}

per KV head, with separate key and value branches unless K=V is shared. A scalar gate gives one
score per offset, a vector gate one per channel, a uniform gate alpha = 1/W with no parameters.
With token_shift, h_{j,i} is [h_p ; h_{p-1}] for the window's i-th position p.

With stagger="kv_head" KV head h's windows start o_h later (`Compressor.head_geometry`): the same weights, each
head's columns pooled over its own windows, one head per call.

Which stored (Z, b) and C slot i reads is `slot_rows`: its own (the paper's), one for every slot
(offset_sharing), or, with tie_overlap_gate, the gate of slot i mod S. gate_norm="sigmoid" replaces the
softmax by alpha_{j,i} = sigmoid(s_{j,i}) / W (offsets do not compete for weight).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from ..config import CompressionConfig, register_kind, require
from ..hooks import HookPoint
from .base import Compressor, Entries, cut_windows, window_rows
from .pooling import SlotLayout, gate_dtype, gated_pooling, normalise_gates

# "fused": the gated pooling as one autograd function that saves no window copy (pooling.py), used when
# autograd records and no hook reads the gates; "plain": always the autograd path (`_pool_plain`).
POOLING = "fused"

GATE_KINDS = ("scalar", "vector", "uniform")
GATE_NORMS = ("softmax", "sigmoid")


@dataclass(frozen=True)
class PaperCompression(CompressionConfig):
    """The paper's compressor (kind "paper"): per-offset gate Z_i, b_i and payload map C_i, per KV head.

    gate:            "scalar" (one score per offset), "vector" (one per channel) or "uniform"
                     (alpha = 1/window, no parameters).
    shared_kv:       one latent read as both key and value.
    offset_sharing:  one gate (Z, b) and one payload map C read at every offset, so nothing in the compressor
                     knows a token's offset (the paper's default has one of each per offset).
    gate_norm:       how gate logits become weights: "softmax" over the window's offsets (the paper's), or
                     "sigmoid": alpha_i = sigmoid(s_i) / W, each offset's weight on its own, so keeping one
                     offset costs no other offset weight. The 1/W keeps the weights' sum in [0, 1] like a
                     softmax's: all gates open is uniform averaging, so the entries stay on the scale of an
                     average of payloads whatever the gates do (at init, sigmoid(0) = 1/2: half of it).
    tie_overlap_gate: overlapping windows only: slot i >= S reads the gate (Z, b) of slot i mod S, the slot at
                     which the same token sits in a later window, so a token's gate logit is the same in every
                     window that holds it and an overlap slot cannot be switched off while its twin is on.
                     Payload maps stay per offset.
    """

    kind: ClassVar[str] = "paper"
    head_stagger: ClassVar[bool] = True

    gate: str = "scalar"
    shared_kv: bool = False
    offset_sharing: bool = False
    gate_norm: str = "softmax"
    tie_overlap_gate: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.gate in GATE_KINDS, f"unknown gate kind {self.gate!r}; choose one of {GATE_KINDS}")
        for key in ("shared_kv", "offset_sharing", "tie_overlap_gate"):
            require(isinstance(getattr(self, key), bool), f"{key} must be True or False, got {getattr(self, key)!r}")
        require(self.gate_norm in GATE_NORMS, f"unknown gate_norm {self.gate_norm!r}; choose one of {GATE_NORMS}")
        require(
            self.gate_norm == "softmax" or self.gate != "uniform",
            "gate_norm='sigmoid' needs learned gates; uniform averaging has no gate logits",
        )
        require(
            not self.tie_overlap_gate or self.window > self.stride,
            f"tie_overlap_gate needs overlapping windows (window > stride), got W={self.window}, S={self.stride}",
        )
        require(
            not (self.tie_overlap_gate and self.offset_sharing),
            "tie_overlap_gate with offset_sharing: a shared gate is already the same at every slot",
        )
        require(
            not (self.tie_overlap_gate and self.gate == "uniform"),
            "tie_overlap_gate needs learned gates; uniform averaging has none",
        )


def slot_rows(cfg: PaperCompression) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(payload rows, gate rows): the stored C and (Z, b) that each slot 0..W-1 reads."""
    w = cfg.window
    if cfg.offset_sharing:
        return (0,) * w, (0,) * w
    own = tuple(range(w))
    # slot i >= S holds the token that sits at slot i mod S of a later window
    return own, tuple(i % cfg.stride for i in own) if cfg.tie_overlap_gate else own


class PaperCompressor(Compressor):
    """Hook points: hook_gate_key / hook_gate_value: alpha [B, n, W, kv_heads, g] (g = 1 for scalar and
    uniform gates, head_dim for vector gates; hook_gate_value does not fire when K=V is shared);
    hook_entry_key / hook_entry_value: entries [B, n, kv_heads, head_dim]. A head-staggered compressor fires
    each once per KV head and call, with kv_heads = 1 (`join_head_calls` puts one forward's calls together)."""

    normalizes_entries = False

    def __init__(
        self, hidden_size: int, kv_heads: int, head_dim: int, cfg: PaperCompression, offset: int = 0, eps: float = 1e-6
    ):
        super().__init__(hidden_size, kv_heads, head_dim, cfg, offset, eps)
        self.gate_width = head_dim if cfg.gate == "vector" else 1
        d_in = self.in_features
        self.payload_rows, self.gate_rows = slot_rows(cfg)
        # C_i for every stored row (one per offset unless shared), stacked: [rows, d_in, branches * kv_heads * head_dim]
        self.payload = nn.Parameter(torch.empty(len(set(self.payload_rows)), d_in, self.branches * kv_heads * head_dim))
        if cfg.gate != "uniform":
            # Z_i and b_i for every stored row: [rows, d_in, branches * kv_heads * g] and [rows, ...]
            gates = len(set(self.gate_rows))
            self.gate_weight = nn.Parameter(torch.empty(gates, d_in, self.branches * kv_heads * self.gate_width))
            self.gate_bias = nn.Parameter(torch.empty(gates, self.branches * kv_heads * self.gate_width))
        self.hook_gate_key = HookPoint()
        self.hook_gate_value = HookPoint()
        self.hook_entry_key = HookPoint()
        self.hook_entry_value = HookPoint()

    def reset_parameters(self, std: float) -> None:
        nn.init.normal_(self.payload, std=std)
        if self.cfg.gate != "uniform":
            nn.init.normal_(self.gate_weight, std=std)
            nn.init.zeros_(self.gate_bias)

    def forward(self, h: torch.Tensor, start: int = 0, emit_from: int = 0, head: int | None = None) -> Entries:
        """h: [B, T, d_model] hidden states of positions start..start+T-1 -> entries of the windows
        ending in [emit_from, start+T), of every KV head, or of KV head `head` alone ([B, n, 1, hd]) on its
        own grid (`head_geometry`; a staggered compressor takes one head per call)."""
        if head is None and self.staggered:
            raise ValueError("the KV heads of a head-staggered compressor have different windows: pass head=")
        geometry = self.head_geometry(head)
        x, first = self.features(h, start)
        js, first_row = window_rows(geometry, x.shape[1], first, emit_from)
        if POOLING == "fused" and len(js) and self._records_gradients(x) and not self._gates_hooked():
            layout = SlotLayout(
                first_row, len(js), self.cfg.stride, self.cfg.window, self._groups(head), self.cfg.gate_norm
            )
            pooled = gated_pooling(x, *self._slot_weights(head), layout)  # [B, n, br, kv, hd]
            index = torch.arange(js.start, js.stop, device=x.device)
        else:
            pooled, index = self._pool_plain(x, first, emit_from, head)
        key = self.hook_entry_key(pooled[:, :, 0])  # [B, n, kv, hd]
        value = key if self.branches == 1 else self.hook_entry_value(pooled[:, :, 1])
        return Entries(key, value, index)

    def _records_gradients(self, x: torch.Tensor) -> bool:
        """Whether autograd keeps this call's intermediates (the fused pooling exists to shrink them)."""
        return torch.is_grad_enabled() and (x.requires_grad or self.payload.requires_grad)

    def _gates_hooked(self) -> bool:
        """A hook on the gate scores may replace them: only the plain path routes alpha through its hook."""
        return self.hook_gate_key.has_hooks or self.hook_gate_value.has_hooks

    def _groups(self, head: int | None = None) -> tuple[int, int, int, int]:
        gate_width = 0 if self.cfg.gate == "uniform" else self.gate_width
        return self.branches, self.kv_heads if head is None else 1, self.head_dim, gate_width

    def _slot_weights(self, head: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-slot [C_i | Z_i] as one matrix [W, d_in, cols] (one matmul per slot) and b_i (None: uniform),
        of every KV head or of `head` alone."""
        payload = self._head_columns(self._per_slot(self.payload, self.payload_rows), self.head_dim, head)
        if self.cfg.gate == "uniform":
            return payload, None
        gate_weight, gate_bias = self._gates(head)
        return torch.cat([payload, gate_weight], dim=2), gate_bias

    def _gates(self, head: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Z_i [W, d_in, gate cols] and b_i [W, gate cols] of every slot (of every KV head, or of `head`)."""
        weight = self._per_slot(self.gate_weight, self.gate_rows)
        bias = self._per_slot(self.gate_bias, self.gate_rows)
        return self._head_columns(weight, self.gate_width, head), self._head_columns(bias, self.gate_width, head)

    def _head_columns(self, param: torch.Tensor, width: int, head: int | None) -> torch.Tensor:
        """The columns of KV head `head` (None: all) of a per-slot parameter [..., branches * kv_heads * width]."""
        if head is None:
            return param
        return param.unflatten(-1, (self.branches, self.kv_heads, width))[..., head, :].flatten(-2)

    @staticmethod
    def _per_slot(param: torch.Tensor, rows: tuple[int, ...]) -> torch.Tensor:
        """The stored rows of `param` that slots 0..W-1 read: [W, ...] (the parameter itself when each slot has
        its own row)."""
        if rows == tuple(range(len(rows))) and param.shape[0] == len(rows):
            return param
        return param[list(rows)]  # a gather: gradients of slots that share a row add up

    def _pool_plain(
        self, x: torch.Tensor, first: int, emit_from: int, head: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows cut as a slot-first copy, one batched matmul, autograd throughout; the gate hooks fire
        here (once per call: once per KV head for a staggered compressor).
        -> (pooled entries [B, n, br, kv, hd], window indices [n]); kv = 1 for one `head`."""
        win = cut_windows(x, self.head_geometry(head), first, emit_from)
        batch, n, w, d = win.x.shape
        shape = (w, batch, n, self.branches, self.kv_heads if head is None else 1)
        x = win.x.permute(2, 0, 1, 3).reshape(w, batch * n, d)  # offsets first: one matmul per C_i
        payload_weight = self._head_columns(self._per_slot(self.payload, self.payload_rows), self.head_dim, head)
        payload = torch.bmm(x, payload_weight).view(*shape, self.head_dim)
        if self.cfg.gate == "uniform":
            logits = x.new_zeros(*shape, 1)
        else:
            gate_weight, gate_bias = self._gates(head)
            logits = (torch.bmm(x, gate_weight) + gate_bias[:, None, :]).view(*shape, self.gate_width)
        logits = logits.masked_fill(~win.valid.T[:, None, :, None, None, None], float("-inf"))
        # over the W offsets
        alpha = normalise_gates(logits.to(gate_dtype(logits.dtype)), 0, self.cfg.gate_norm).to(payload.dtype)
        alpha = alpha.permute(1, 2, 0, 3, 4, 5)  # [B, n, W, br, kv, g]
        key_alpha = self.hook_gate_key(alpha[:, :, :, 0])
        value_alpha = key_alpha if self.branches == 1 else self.hook_gate_value(alpha[:, :, :, 1])
        payload = payload.permute(1, 2, 0, 3, 4, 5)  # [B, n, W, br, kv, hd]
        key = (key_alpha * payload[:, :, :, 0]).sum(2)  # [B, n, kv, hd]
        if self.branches == 1:
            return key[:, :, None], win.index
        return torch.stack([key, (value_alpha * payload[:, :, :, 1]).sum(2)], dim=2), win.index

    def reference_terms(self, x: torch.Tensor, slot: int, branch: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
        """From the formulas: the gate logit(s) s_i = Z_i x + b_i [B, g] and the payload C_i x [B, head_dim] of one
        token x [B, d_in] at slot i, with the stored Z, b and C that slot i reads (`slot_rows`)."""
        hd = self.head_dim
        col = branch * self.kv_heads + head
        payload_row, gate_row = (rows[slot] for rows in slot_rows(self.cfg))
        payload = x @ self.payload[payload_row][:, col * hd : (col + 1) * hd]
        if self.cfg.gate == "uniform":
            return x.new_zeros(x.shape[0], 1), payload
        g = self.gate_width
        cols = slice(col * g, (col + 1) * g)
        gate = x @ self.gate_weight[gate_row][:, cols] + self.gate_bias[gate_row, cols]
        return gate, payload


register_kind(PaperCompression, PaperCompressor)
