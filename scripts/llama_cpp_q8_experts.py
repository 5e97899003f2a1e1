#!/usr/bin/env python3
# llama.cpp vs transformers on the tiny DeepSeek-V4 (one batch of 2 x 160 tokens), with transformers as it is and with
# its routed experts fed Q8_0-rounded inputs, as ggml's CPU MXFP4 matmul feeds them (vec_dot_type Q8_0): run with
# PYTHONPATH=src after scripts/build_llama_cpp.sh; prints the largest |delta log-prob| both ways.
import sys

import torch

from phasekv.studies.conformance.llama_cpp import LlamaCppRunner
from phasekv.studies.conformance.tiny_dsv4 import load_reference

d = sys.argv[1] if len(sys.argv) > 1 else "runs/tiny-dsv4"
r = LlamaCppRunner(f"{d}/model.gguf")
ref = load_reference(f"{d}/hf")
ids = torch.randint(0, 256, (2, 160), generator=torch.Generator().manual_seed(0))
lp = r.parallel(ids)


def q8(x):  # ggml block_q8_0: 32 values, scale max|x|/127 stored as f16, round to nearest
    s = x.shape
    b = x.reshape(-1, 32)
    d = (b.abs().amax(-1, keepdim=True) / 127).half().float()
    q = torch.round(b / torch.where(d > 0, d, torch.ones_like(d)))
    return (q * d).reshape(s)


def run():
    with torch.no_grad():
        return torch.log_softmax(ref(ids).logits.float(), -1)


base = run()
calls = [0]  # the wrapper must be reached, or the comparison below would be of nothing
for layer in ref.model.layers:
    e = layer.mlp.experts
    e.register_forward_pre_hook(
        lambda m, a, k: ((q8(a[0]), *a[1:]), k) if a else (a, {**k, "hidden_states": q8(k["hidden_states"])}),
        with_kwargs=True,
    )
    g = e._apply_gate

    def wrapped(x, g=g):
        calls[0] += 1
        return q8(g(x))

    e._apply_gate = wrapped
qd = run()
print("gate wrapper calls", calls[0])
for name, x in (("float32 experts", base), ("expert inputs rounded to Q8_0", qd)):
    e = (lp - x).abs().amax(-1)
    print(
        f"{name}: llama.cpp vs transformers max {e.max().item():.2e} mean {e.mean().item():.2e} "
        f"position 0 {e[:, 0].max().item():.2e}"
    )
