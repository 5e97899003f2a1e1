"""The tiny DeepSeek-V4 written for the llama.cpp audit: transformers loads it whole, llama.cpp's converter writes
it to a GGUF losslessly (experts included, through MXFP4), and, where llama.cpp is built, llama.cpp runs it.

Converting needs the pinned llama.cpp source (its converter and gguf-py), which scripts/build_llama_cpp.sh
downloads; running needs the build. Neither is a CI dependency: those tests skip, saying which is missing."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from phasekv.studies.conformance.tiny_dsv4 import (
    CONFIG,
    MXFP4_VALUES,
    _mxfp4,
    llama_cpp_root,
    load_reference,
    tiny_dsv4_weights,
    write_gguf,
    write_tiny_dsv4,
)

ROOT = llama_cpp_root()
needs_source = pytest.mark.skipif(
    ROOT is None, reason="llama.cpp's source (converter, gguf-py) is not downloaded: scripts/build_llama_cpp.sh"
)


def test_mxfp4_codes_and_scales_encode_the_float_weights():
    packed, scale, values = _mxfp4((3, 64), torch.Generator().manual_seed(1))
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(3, 64).long()
    decoded = torch.tensor(MXFP4_VALUES)[codes] * torch.exp2(scale.float() - 127).repeat_interleave(32, 1)
    assert torch.equal(decoded, values)
    assert packed.dtype == scale.dtype == torch.uint8 and scale.shape == (3, 2)


def test_transformers_loads_every_weight_of_the_deepseek_form(tmp_path):
    paths = write_tiny_dsv4(tmp_path)
    model = load_reference(paths["hf"])  # raises if a weight is missing, unused or misshapen
    assert model.config.layer_types == [
        "sliding_attention",
        "compressed_sparse_attention",
        "heavily_compressed_attention",
    ]
    _, _, floats = tiny_dsv4_weights()
    expert = model.model.layers[1].mlp.experts.down_proj[2]
    assert torch.equal(expert, floats["layers.1.ffn.experts.2.w2.weight"])  # same experts on both sides
    logits = model(torch.arange(40)[None]).logits
    assert torch.isfinite(logits).all()


@needs_source
def test_the_converter_writes_every_weight_unchanged(tmp_path):
    """Every float32 source tensor is in the GGUF with the same values (F32), the experts dequantise to the
    float experts exactly (MXFP4 is lossless for them), and the hash routing table is kept."""
    paths = write_tiny_dsv4(tmp_path)
    gguf_path = write_gguf(paths["deepseek"], tmp_path / "model.gguf")
    sys.path.insert(0, str(ROOT / "gguf-py"))
    import gguf
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(gguf_path)
    assert reader.fields["general.architecture"].contents() == "deepseek4"
    assert list(reader.fields["deepseek4.attention.compress_ratios"].contents()) == CONFIG["compress_ratios"]
    tensors = {t.name: t for t in reader.tensors}
    _, _, floats = tiny_dsv4_weights()

    f32 = gguf.GGMLQuantizationType.F32
    stored = {name: np.asarray(t.data, np.float64).ravel() for name, t in tensors.items() if t.tensor_type == f32}
    unmatched = []
    for name, source in floats.items():
        if ".experts." in name or name.endswith("tid2eid"):  # checked below
            continue
        flat = source.double().numpy().ravel()
        if not any(v.shape == flat.shape and np.array_equal(v, flat) for v in stored.values()):
            unmatched.append(name)
    assert not unmatched, f"not in the GGUF unchanged: {unmatched}"
    for layer in range(CONFIG["num_hidden_layers"]):
        for proj, w in (("gate", "w1"), ("down", "w2"), ("up", "w3")):
            t = tensors[f"blk.{layer}.ffn_{proj}_exps.weight"]
            assert t.tensor_type == gguf.GGMLQuantizationType.MXFP4
            expected = torch.stack(
                [floats[f"layers.{layer}.ffn.experts.{e}.{w}.weight"] for e in range(CONFIG["n_routed_experts"])]
            )
            assert np.array_equal(dequantize(t.data, t.tensor_type), expected.numpy())
    tid2eid = floats["layers.0.ffn.gate.tid2eid"].numpy()
    assert np.array_equal(np.asarray(tensors["blk.0.ffn_gate_tid2eid.weight"].data), tid2eid)


def _built() -> bool:
    return ROOT is not None and any((ROOT / "build" / "bin").glob("libllama.*"))


needs_build = pytest.mark.skipif(not _built(), reason="llama.cpp is not built: scripts/build_llama_cpp.sh")


@needs_build
def test_llama_cpp_conforms_to_transformers_with_the_experts_at_zero(tmp_path):
    """The audit end to end at a small size: llama.cpp's modes (its cache carried between calls, a copied
    sequence, a saved and restored state, ubatch splits at every offset) against transformers' parallel
    forward. With the routed experts at zero the two agree to float32 rounding (llama.cpp rounds the activations
    of MXFP4 experts to 8 bits; see docs/results/conformance.md)."""
    from phasekv.studies.conformance.llama_cpp import LlamaCppRunner
    from phasekv.studies.conformance.run import ConformanceOptions, HFRunner, run_conformance

    paths = write_tiny_dsv4(tmp_path, zero_experts=True)
    candidate = LlamaCppRunner(write_gguf(paths["deepseek"], tmp_path / "model.gguf"))
    reference = HFRunner(load_reference(paths["hf"]))
    options = ConformanceOptions(
        length=40, modes=("parallel", "decode", "split@1", "fork", "state", "ubatch 5"), ubatch_sizes=(5,)
    )
    result = run_conformance(candidate, options, reference=reference)
    assert result["ratios"] == [4, 128]
    assert result["conforms"], result["failing_modes"]
    assert len(result["modes"]) == 6
