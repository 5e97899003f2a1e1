"""Named hook points (TransformerLens style) and helpers to read or replace what passes through them.

Every tensor an analysis needs (per-head attention outputs, gate scores, compressed entries) flows
through a `HookPoint`, an identity module. Its dotted name in the model (for example
``layers.3.self_attn.hook_z``) is the handle: analyses attach functions to names and never thread flags
through the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import nn

HookFn = Callable[[torch.Tensor, str], torch.Tensor | None]


class HookPoint(nn.Module):
    """Identity. A forward hook on it can read the tensor or return a replacement."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @property
    def has_hooks(self) -> bool:
        """Whether a hook is attached (fast paths that bypass this point must not run then)."""
        return bool(self._forward_hooks or self._forward_pre_hooks)


def hook_names(model: nn.Module) -> list[str]:
    """All hook point names in `model`, in module order."""
    return [name for name, module in model.named_modules() if isinstance(module, HookPoint)]


def _hook_point(model: nn.Module, name: str) -> HookPoint:
    try:
        module = model.get_submodule(name)
    except AttributeError as err:
        raise KeyError(f"no hook point named {name!r}; see phasekv.hooks.hook_names(model)") from err
    if not isinstance(module, HookPoint):
        raise KeyError(f"{name!r} is a {type(module).__name__}, not a HookPoint")
    return module


@contextmanager
def hooks(model: nn.Module, fns: Mapping[str, HookFn]) -> Iterator[None]:
    """Attach `fn(tensor, name) -> replacement or None` to each named hook point while in the block."""
    handles = []
    try:
        for name, fn in fns.items():
            point = _hook_point(model, name)
            handles.append(point.register_forward_hook(lambda _m, _inp, out, fn=fn, name=name: fn(out, name)))
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def capture(model: nn.Module, names: list[str] | None = None) -> Iterator[dict[str, list[torch.Tensor]]]:
    """Record (detached) every tensor passing the named hook points; all of them when `names` is None.

    Values are lists because a hook point fires once per forward call (for example once per
    decoding step).
    """
    names = hook_names(model) if names is None else names
    store: dict[str, list[torch.Tensor]] = {name: [] for name in names}

    def record(tensor: torch.Tensor, name: str) -> None:
        store[name].append(tensor.detach())

    with hooks(model, {name: record for name in names}):
        yield store
