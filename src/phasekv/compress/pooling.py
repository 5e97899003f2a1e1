"""The paper compressor's gated pooling as one autograd function that never copies the windows.

    y_{j,i} = x_{j,i} @ [C_i | Z_i] + [0 | b_i]        alpha_{j,.} = softmax_i(gate columns of y_{j,i})
    K_j = sum_i alpha_{j,i} * (payload columns of y_{j,i})

The plain path (`PaperCompressor._pool_plain`) cuts windows with `unfold`, permutes them slot-first into
a [W, windows, d] copy (W/S x the features) and lets autograd save that copy, the payloads and the
softmax's intermediates. Here slot i of every window is a strided view of the features (rows
first_row + i, + S, + 2S, ...): forward runs one matmul per slot on that view and saves only the
features (already alive: the layer's input), the weights, the small per-slot products y [W, B, n, cols]
and alpha; backward recomputes nothing big and adds each slot's input gradient into a strided view of
dx. Tests check it against the plain path (float64, values and gradients) and with gradcheck.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SlotLayout:
    """Window m's slot i reads row first_row + m*stride + i of the features; rows < 0 are padding
    (slots before position 0: gate weight 0). count windows of `window` slots.

    groups: (branches, kv_heads, head_dim, gate_width) of the payload and gate columns; gate_width 0
    means a uniform gate (no gate columns). gate_norm: "softmax" over the slots, or "sigmoid" (alpha_i =
    sigmoid(s_i) / W, each slot on its own)."""

    first_row: int
    count: int
    stride: int
    window: int
    groups: tuple[int, int, int, int]
    gate_norm: str = "softmax"

    def first_valid(self, slot: int) -> int:
        """The first window whose `slot` lies at a row >= 0."""
        return max(0, -((self.first_row + slot) // self.stride))

    def rows(self, x: torch.Tensor, slot: int) -> torch.Tensor:
        """x: [B, Tx, F] -> the rows `slot` reads in windows first_valid(slot).. (a view [B, count - lo, F])."""
        lo = self.first_valid(slot)
        row = self.first_row + lo * self.stride + slot
        return x[:, row :: self.stride][:, : self.count - lo]


def gated_pooling(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, layout: SlotLayout) -> torch.Tensor:
    """x: [B, Tx, F] features; weight: [W, F, cols] per-slot [payload | gate] columns; bias: [W, gate cols]
    (None for a uniform gate) -> pooled entries [B, n, branches, kv_heads, head_dim]."""
    return _GatedPooling.apply(x, weight, bias, layout)


class _GatedPooling(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layout: SlotLayout):
        y = _slot_products(x, weight, layout)  # [W, B, n, cols]
        payload, alpha = _split(y, bias, layout)
        ctx.layout = layout
        ctx.save_for_backward(x, weight, y, alpha)
        return (alpha.to(payload.dtype) * payload).sum(0)  # [B, n, br, kv, hd]

    @staticmethod
    def backward(ctx, grad):
        x, weight, y, alpha = ctx.saved_tensors
        layout = ctx.layout
        branches, kv_heads, head_dim, gate_width = layout.groups
        window, batch, count = y.shape[:3]
        payload_cols = branches * kv_heads * head_dim
        payload = y[..., :payload_cols].view(window, batch, count, branches, kv_heads, head_dim)
        d_payload = alpha.to(grad.dtype) * grad  # [W, B, n, br, kv, hd]
        d_y = d_payload.reshape(window, batch, count, payload_cols)
        d_bias = None
        if gate_width:
            d_alpha = (grad * payload).to(alpha.dtype)
            if gate_width == 1:
                d_alpha = d_alpha.sum(-1, keepdim=True)
            if layout.gate_norm == "sigmoid":  # alpha = sigmoid(s) / W: d alpha / d s = alpha (1 - W alpha)
                d_logits = d_alpha * alpha * (1 - window * alpha)
            else:  # softmax backward in gate_dtype
                d_logits = alpha * (d_alpha - (alpha * d_alpha).sum(0, keepdim=True))
            d_logits = d_logits.to(y.dtype).reshape(window, batch, count, -1)
            d_y = torch.cat([d_y, d_logits], dim=-1)
            d_bias = d_logits.sum((1, 2)) if ctx.needs_input_grad[2] else None
        d_x = torch.zeros_like(x) if ctx.needs_input_grad[0] else None
        d_weight = torch.empty_like(weight) if ctx.needs_input_grad[1] else None
        for slot in range(window):
            rows = layout.rows(x, slot)  # [B, n', F]
            d_slot = d_y[slot, :, layout.first_valid(slot) :]  # [B, n', cols]
            if d_weight is not None:
                d_weight[slot] = torch.matmul(rows.transpose(1, 2), d_slot).sum(0)
            if d_x is not None:
                layout.rows(d_x, slot).add_(torch.matmul(d_slot, weight[slot].T))
        return d_x, d_weight, d_bias, None


def gate_dtype(dtype: torch.dtype) -> torch.dtype:
    """The gate softmax runs in float32, or wider for wider features."""
    return torch.promote_types(dtype, torch.float32)


def normalise_gates(logits: torch.Tensor, dim: int, gate_norm: str) -> torch.Tensor:
    """Gate weights from logits along the offset axis `dim` (-inf: a padding slot, weight 0)."""
    if gate_norm == "sigmoid":
        return torch.sigmoid(logits) / logits.shape[dim]
    return torch.softmax(logits, dim=dim)


def _slot_products(x: torch.Tensor, weight: torch.Tensor, layout: SlotLayout) -> torch.Tensor:
    """[W, B, n, cols]: each slot's rows times its weights; zero where the slot is padding."""
    y = x.new_zeros(layout.window, x.shape[0], layout.count, weight.shape[-1])
    for slot in range(layout.window):
        y[slot, :, layout.first_valid(slot) :] = torch.matmul(layout.rows(x, slot), weight[slot])
    return y


def _split(y: torch.Tensor, bias: torch.Tensor | None, layout: SlotLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """y [W, B, n, cols] -> payloads [W, B, n, br, kv, hd] (a view) and gate weights alpha [W, B, n, br, kv, g]
    (gate_dtype, softmax over the W slots or sigmoid / W, 0 on padding slots)."""
    branches, kv_heads, head_dim, gate_width = layout.groups
    window, batch, count = y.shape[:3]
    payload_cols = branches * kv_heads * head_dim
    payload = y[..., :payload_cols].view(window, batch, count, branches, kv_heads, head_dim)
    if gate_width:
        logits = (y[..., payload_cols:] + bias[:, None, None, :]).to(gate_dtype(y.dtype))
        logits = logits.view(window, batch, count, branches, kv_heads, gate_width)
    else:
        logits = y.new_zeros(window, batch, count, branches, kv_heads, 1, dtype=gate_dtype(y.dtype))
    for slot in range(window):
        logits[slot, :, : layout.first_valid(slot)] = float("-inf")
    return payload, normalise_gates(logits, 0, layout.gate_norm)
