"""The GPU paths against the CPU float64 references (skipped without CUDA; benchmarks/gpu_check.sh runs them).

Checked on the device, in float32 and bfloat16: the pure-PyTorch compressed attention and the flex path
(values and gradients), the opt-in switch that routes the model's layers to flex (the same loss and
gradients as the pure-PyTorch path), the fused compressor pooling, and cached decoding.

Tolerances (|got - want| <= atol + rtol * |want|, inputs of unit scale): float32 2e-4 / 2e-4 (TF32 off).
bfloat16 (inputs rounded to bfloat16 first, so only the computation's rounding counts): attention outputs
3e-2 / 3e-2; gradients and model logits atol 3e-2 x max|want| (they are long sums whose rounding error
scales with the tensor, not with each element, which may cancel to near 0), rtol 0.

`PHASEKV_TEST_DEVICE=cpu` runs them on the CPU (flex unfused, slow): a check of this file itself.
"""

from __future__ import annotations

import os

import pytest
import torch

from conftest import randomize
from phasekv.attention import KVView, dispatch, reference_compressed_attention
from phasekv.attention.autograd import flash_compressed_attention
from phasekv.attention.flex import flex_compressed_attention
from phasekv.cache import KVCache
from phasekv.cache.generate import prefill
from phasekv.compress import PaperCompression, PaperCompressor, paper
from phasekv.model import PhaseKVModel, preset_config

DEVICE = os.environ.get("PHASEKV_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA GPU")

OUTPUT_TOL = {torch.float32: dict(atol=2e-4, rtol=2e-4), torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}
BF16_GRAD_SCALE = 3e-2


def assert_grads_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    """Gradients and logits: float32 elementwise; bfloat16 relative to the tensor's largest element."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)
    else:
        torch.testing.assert_close(got, want, atol=BF16_GRAD_SCALE * float(want.abs().max()), rtol=0)


DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(autouse=True)
def _no_tf32():
    if DEVICE == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def _attention_inputs(dtype, length=160, q_start=5, window=8, stride=4, local=16, heads=4, kv_heads=2, dim=32):
    """float64 CPU inputs (rounded to `dtype`, so both sides see the same numbers) of compressed attention."""
    gen = torch.Generator().manual_seed(0)
    exact_start = max(0, q_start - local + 1)
    n_exact = q_start + length - exact_start
    n_entries = max(0, (q_start + length - window) // stride + 1)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype).double().requires_grad_(True)

    return dict(
        q=rnd(1, length, heads, dim), q_start=q_start,
        entry_k=rnd(1, n_entries, kv_heads, dim), entry_v=rnd(1, n_entries, kv_heads, dim),
        entry_end=torch.arange(n_entries) * stride + window - 1,
        exact_k=rnd(1, n_exact, kv_heads, dim), exact_v=rnd(1, n_exact, kv_heads, dim),
        exact_start=exact_start, local_window=local, sink=torch.linspace(-1, 1, heads, dtype=torch.float64),
    )  # fmt: skip


def _output_and_grads(fn, args: dict, weight: torch.Tensor):
    """fn(q, q_start, KVView) of `args` and the gradients of sum(out * weight) with respect to every tensor
    that requires them."""
    out = fn(*_call(args))
    leaves = [v for v in args.values() if torch.is_tensor(v) and v.requires_grad]
    grads = torch.autograd.grad((out * weight.to(out)).sum(), leaves)
    return out, grads


def _call(args: dict) -> tuple:
    """(q, q_start, KVView) of `_attention_inputs`' named arguments."""
    view = {k: v for k, v in args.items() if k not in ("q", "q_start")}
    return args["q"], args["q_start"], KVView(**view)


def _on_device(args: dict, dtype) -> dict:
    moved = {}
    for key, value in args.items():
        if torch.is_tensor(value) and value.is_floating_point():
            value = value.detach().to(DEVICE, dtype).requires_grad_(value.requires_grad)
        elif torch.is_tensor(value):
            value = value.to(DEVICE)
        moved[key] = value
    return moved


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path", ["pytorch", "flex"])
def test_compressed_attention_on_device_matches_the_float64_reference(path, dtype):
    args = _attention_inputs(dtype)
    weight = torch.randn(args["q"].shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    want, want_grads = _output_and_grads(reference_compressed_attention, args, weight)
    fn = flash_compressed_attention if path == "pytorch" else flex_compressed_attention
    device_args = _on_device(args, dtype)
    if path == "flex" and DEVICE == "cpu":  # flex_attention has no backward on the CPU: values only
        got = fn(*_call({k: v.detach() if torch.is_tensor(v) else v for k, v in device_args.items()}))
        torch.testing.assert_close(got.double().cpu(), want.detach(), **OUTPUT_TOL[dtype])
        return
    got, got_grads = _output_and_grads(fn, device_args, weight.to(DEVICE))
    torch.testing.assert_close(got.double().cpu(), want.detach(), **OUTPUT_TOL[dtype])
    for g, w in zip(got_grads, want_grads, strict=True):
        assert_grads_close(g, w, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flex_switch_gives_the_pytorch_path_loss_and_gradients(dtype, monkeypatch):
    """The model's layers with flex switched on (PHASEKV_FLEX=1) against the default pure-PyTorch path."""
    torch.manual_seed(0)
    model = randomize(PhaseKVModel(preset_config("w8s8-1kv", vocab_size=64)), seed=2, std=0.1).to(DEVICE, dtype)
    ids = torch.randint(0, 64, (2, 2 * dispatch.FLEX_MIN_QUERIES), generator=torch.Generator().manual_seed(0))
    ids = ids.to(DEVICE)
    results = {}
    for use in (False, True):
        monkeypatch.setattr(dispatch, "USE_ON_CUDA", use)
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(ids[:, :-1]).flatten(0, 1).float(), ids[:, 1:].flatten())
        loss.backward()
        results[use] = [loss.detach()] + [p.grad.clone() for p in model.parameters()]
    for got, want in zip(results[True], results[False], strict=True):
        assert_grads_close(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_pooling_on_device_matches_the_float64_plain_path(dtype, monkeypatch):
    comp = randomize(PaperCompressor(64, 2, 32, PaperCompression(8, 4, pad_first_window=True)), seed=1)
    comp = comp.to(dtype).double()  # weights rounded to dtype
    h = torch.randn(2, 300, 64, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype).double()
    weight = torch.randn(2, comp.geometry.num_complete(300), 2, 32, generator=torch.Generator().manual_seed(3))
    runs = {}
    for pooling, module, device, dt in (("plain", comp, "cpu", torch.float64), ("fused", comp, DEVICE, dtype)):
        monkeypatch.setattr(paper, "POOLING", pooling)
        module = module.to(device, dt)
        module.zero_grad()
        x = h.to(device, dt, copy=True).requires_grad_(True)
        entries = module(x)
        ((entries.key.double().cpu() + 2 * entries.value.double().cpu()) * weight.double()).sum().backward()
        runs[pooling] = [entries.key, entries.value, x.grad] + [p.grad for p in module.parameters()]
        runs[pooling] = [t.detach().double().cpu() for t in runs[pooling]]
    for got, want in zip(runs["fused"], runs["plain"], strict=True):
        assert_grads_close(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["full-1kv", "w8s8-1kv", "w8s4-1kv", "dsv4"])
def test_decode_on_device_equals_the_parallel_forward(name, dtype):
    model = randomize(PhaseKVModel(preset_config(name, vocab_size=64)), seed=11, std=0.1).eval().to(DEVICE, dtype)
    ids = torch.randint(0, 64, (2, 300), generator=torch.Generator().manual_seed(0)).to(DEVICE)
    with torch.no_grad():
        parallel = model(ids)
        cache = KVCache.for_model(model)
        steps = [prefill(model, ids[:, :280], cache, 64)]
        steps += [model(ids[:, t : t + 1], cache) for t in range(280, 300)]
    assert_grads_close(torch.cat(steps, dim=1), parallel, dtype)
