"""A tiny random DeepSeek-V4 in DeepSeek's own checkpoint form, for auditing engines against transformers.

`write_tiny_dsv4(directory)` writes three things from one set of float32 weights:
- `deepseek/`: config.json (DeepSeek's keys: `compress_ratios`, `num_hash_layers`, `qk_rope_head_dim`, ...) and
  model.safetensors with DeepSeek's tensor names (`embed.weight`, `layers.N.attn.compressor.ape`, ...), routed
  experts packed as MXFP4 (`weight` uint8 codes two to a byte, `scale` one E8M0 exponent per 32 values), which is
  what llama.cpp's converter reads (it always writes experts as MXFP4);
- `hf/`: the same config and weights with the experts dequantised, which transformers' `DeepseekV4ForCausalLM`
  loads under its own names through its `deepseek_v4` conversion mapping (the name map between the two
  implementations is that mapping; `load_reference` fails if a weight is left unloaded or unused);
- `model.gguf` (`write_gguf`, needs llama.cpp's converter: `scripts/build_llama_cpp.sh`).

Every routed expert weight is drawn as an MXFP4 code times a power-of-two scale, so the converter's repack is
lossless and both implementations multiply by exactly the same expert weights. Layer ratios 0, 4 and 128 are the
only ones llama.cpp runs (its CSA and HCA ratios are compile-time constants); `hc_mult` is 4 for the same reason.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

# FP4 E2M1 value of each 4-bit code (ggml's `kvalues_mxfp4` order, halved: ggml doubles the values and halves the
# scale, so the products are the same)
MXFP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
MXFP4_GROUP = 32

CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "vocab_size": 256,
    "hidden_size": 64,
    "num_hidden_layers": 3,
    "compress_ratios": [0, 4, 128],  # one sliding, one CSA, one HCA layer
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "qk_rope_head_dim": 16,
    "q_lora_rank": 32,
    "o_groups": 2,
    "o_lora_rank": 16,
    "index_n_heads": 2,
    # llama.cpp ropes its last qk_rope_head_dim dims and rotates it by a Hadamard matrix of a power of 2 >= 64
    "index_head_dim": 64,
    # at least the number of CSA entries a few-hundred-token prompt has: the indexer keeps every entry, so no
    # top-k choice among tied scores (sums of ReLUs are often exactly 0) can make two implementations differ
    "index_topk": 128,
    "sliding_window": 16,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "moe_intermediate_size": 32,
    "num_hash_layers": 1,
    "scoring_func": "sqrtsoftplus",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0,
    "rope_theta": 10000.0,
    "compress_rope_theta": 160000.0,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "num_nextn_predict_layers": 0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}


def _shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every non-expert tensor of DeepSeek's checkpoint and its shape (experts: `_expert_shapes`)."""
    d, hc, v = config["hidden_size"], config["hc_mult"], config["vocab_size"]
    hd, heads, q = config["head_dim"], config["num_attention_heads"], config["q_lora_rank"]
    groups, o_rank = config["o_groups"], config["o_lora_rank"]
    ihd, iheads = config["index_head_dim"], config["index_n_heads"]
    experts, inter = config["n_routed_experts"], config["moe_intermediate_size"]
    mix = (2 + hc) * hc  # hyper-connection mixing: pre (hc) + post (hc) + residual (hc x hc)
    shapes = {
        "embed.weight": (v, d),
        "head.weight": (v, d),
        "norm.weight": (d,),
        "hc_head_fn": (hc, hc * d),
        "hc_head_base": (hc,),
        "hc_head_scale": (1,),
    }
    for i, ratio in enumerate(config["compress_ratios"]):
        p = f"layers.{i}."
        shapes |= {
            p + "hc_attn_fn": (mix, hc * d),
            p + "hc_attn_base": (mix,),
            p + "hc_attn_scale": (3,),
            p + "hc_ffn_fn": (mix, hc * d),
            p + "hc_ffn_base": (mix,),
            p + "hc_ffn_scale": (3,),
            p + "attn_norm.weight": (d,),
            p + "ffn_norm.weight": (d,),
            p + "attn.wq_a.weight": (q, d),
            p + "attn.q_norm.weight": (q,),
            p + "attn.wq_b.weight": (heads * hd, q),
            p + "attn.wkv.weight": (hd, d),
            p + "attn.kv_norm.weight": (hd,),
            p + "attn.wo_a.weight": (groups * o_rank, heads * hd // groups),
            p + "attn.wo_b.weight": (d, groups * o_rank),
            p + "attn.attn_sink": (heads,),
            p + "ffn.gate.weight": (experts, d),
            p + "ffn.shared_experts.w1.weight": (inter, d),
            p + "ffn.shared_experts.w2.weight": (d, inter),
            p + "ffn.shared_experts.w3.weight": (inter, d),
        }
        if i >= config["num_hash_layers"]:
            shapes[p + "ffn.gate.bias"] = (experts,)
        if ratio:
            overlap = 2 if ratio == 4 else 1  # CSA windows overlap (2 x ratio tokens): two halves per entry
            c = p + "attn.compressor."
            shapes |= {
                c + "ape": (ratio, overlap * hd),
                c + "wkv.weight": (overlap * hd, d),
                c + "wgate.weight": (overlap * hd, d),
                c + "norm.weight": (hd,),
            }
        if ratio == 4:
            x = p + "attn.indexer."
            shapes |= {
                x + "wq_b.weight": (iheads * ihd, q),
                x + "weights_proj.weight": (iheads, d),
                x + "compressor.ape": (ratio, 2 * ihd),
                x + "compressor.wkv.weight": (2 * ihd, d),
                x + "compressor.wgate.weight": (2 * ihd, d),
                x + "compressor.norm.weight": (ihd,),
            }
    return shapes


def _expert_shapes(config: dict) -> dict[str, tuple[int, int]]:
    d, inter = config["hidden_size"], config["moe_intermediate_size"]
    return {
        f"layers.{i}.ffn.experts.{e}.{w}": shape
        for i in range(config["num_hidden_layers"])
        for e in range(config["n_routed_experts"])
        for w, shape in (("w1", (inter, d)), ("w2", (d, inter)), ("w3", (inter, d)))
    }


def _dense(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """A random float32 weight whose scale keeps activations near 1: matrices ~ N(0, 1/fan_in), norms near 1
    (never exactly 1, so a norm weight that is skipped shows)."""
    noise = torch.randn(shape, generator=gen)
    if name.endswith(("norm.weight",)):
        return 1 + 0.1 * noise
    if len(shape) == 2:
        return noise / math.sqrt(shape[1])
    return 0.5 * noise


def _mxfp4(
    shape: tuple[int, int], gen: torch.Generator, zero: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random MXFP4 weights [rows, cols] (all 0 with `zero`): (packed uint8 [rows, cols/2], element 2i in the low
    nibble; E8M0 scale uint8 [rows, cols/32]; the float32 values they encode)."""
    rows, cols = shape
    if cols % MXFP4_GROUP:
        raise ValueError(f"MXFP4 rows hold multiples of {MXFP4_GROUP} values, not {cols}")
    codes = torch.randint(0, 16, (rows, cols), generator=gen, dtype=torch.uint8) * (not zero)
    # exponents around 2^-3 / sqrt-ish of the fan-in: code values reach 6, so products stay below ~1
    exponents = torch.randint(-6, -3, (rows, cols // MXFP4_GROUP), generator=gen)
    scale = (exponents + 127).to(torch.uint8)
    values = torch.tensor(MXFP4_VALUES)[codes.long()] * torch.exp2(exponents.float()).repeat_interleave(MXFP4_GROUP, 1)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed, scale, values


def tiny_dsv4_weights(seed: int = 0, config: dict | None = None, zero_experts: bool = False) -> tuple[dict, dict, dict]:
    """(config, DeepSeek-form tensors with MXFP4 experts, the same with float32 experts). `zero_experts`: routed
    experts that output exactly 0 (a diagnostic: llama.cpp multiplies MXFP4 weights by activations it first
    rounds to 8 bits, which no float32 reference does)."""
    from safetensors.torch import save_file  # noqa: F401  (fail here, before any work, if safetensors is missing)

    config = dict(CONFIG if config is None else config)
    gen = torch.Generator().manual_seed(seed)
    dense = {name: _dense(name, shape, gen).float() for name, shape in _shapes(config).items()}
    for i in range(config["num_hash_layers"]):  # hash routing: a fixed expert set per token id
        k, e = config["num_experts_per_tok"], config["n_routed_experts"]
        dense[f"layers.{i}.ffn.gate.tid2eid"] = torch.stack(
            [torch.randperm(e, generator=gen)[:k] for _ in range(config["vocab_size"])]
        ).to(torch.int32)
    packed, floats = dict(dense), dict(dense)
    for name, shape in _expert_shapes(config).items():
        codes, scale, values = _mxfp4(shape, gen, zero_experts)
        packed[name + ".weight"], packed[name + ".scale"] = codes, scale
        floats[name + ".weight"] = values
    return config, packed, floats


def write_tiny_dsv4(directory: Path | str, seed: int = 0, zero_experts: bool = False) -> dict[str, Path]:
    """Write `deepseek/` (the converter's input) and `hf/` (transformers') under `directory` -> their paths."""
    from safetensors.torch import save_file

    directory = Path(directory)
    config, packed, floats = tiny_dsv4_weights(seed, zero_experts=zero_experts)
    paths = {"deepseek": directory / "deepseek", "hf": directory / "hf"}
    for key, tensors in (("deepseek", packed), ("hf", floats)):
        paths[key].mkdir(parents=True, exist_ok=True)
        (paths[key] / "config.json").write_text(json.dumps(config, indent=1) + "\n")
        save_file({n: t.contiguous() for n, t in tensors.items()}, paths[key] / "model.safetensors")
    return paths


def load_reference(hf_dir: Path | str):
    """transformers' `DeepseekV4ForCausalLM` from `hf/`, every weight accounted for (none left at its random
    initialisation, none in the file unused): otherwise the two implementations would not share weights."""
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(
        hf_dir, local_files_only=True, dtype=torch.float32, output_loading_info=True
    )
    missing = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if missing:
        raise ValueError(f"{hf_dir}: transformers did not load the checkpoint whole: {missing}")
    return model.eval()


def llama_cpp_root(pin: str | None = None) -> Path | None:
    """The pinned llama.cpp build folder that scripts/build_llama_cpp.sh makes, or None when it is not built."""
    import os

    pin = pin or os.environ.get("LLAMA_CPP_PYTHON_VERSION", "0.3.36")
    cache = Path(os.environ.get("PHASEKV_LLAMA_CPP_CACHE", Path.home() / ".cache" / "phasekv"))
    root = cache / f"llama.cpp-{pin}"
    return root if (root / "convert_hf_to_gguf.py").is_file() and (root / "gguf-py").is_dir() else None


def write_gguf(deepseek_dir: Path | str, out: Path | str, root: Path | None = None) -> Path:
    """Convert `deepseek/` to a float32 GGUF (experts MXFP4) with llama.cpp's own converter, from the pinned
    source tree. The converter's vocabulary step needs a tokenizer whose pre-tokenizer it recognises; prompts
    here are token ids, so the GGUF gets a placeholder byte-level vocabulary of the config's size instead."""
    root = root or llama_cpp_root()
    if root is None:
        raise FileNotFoundError("llama.cpp's converter is not there: run scripts/build_llama_cpp.sh first")
    for path in (str(root), str(root / "gguf-py")):
        if path not in sys.path:
            sys.path.insert(0, path)
    import gguf
    from conversion.deepseek import DeepseekV4Model

    class TinyDeepseekV4(DeepseekV4Model):
        model_arch = DeepseekV4Model.model_arch  # the converter's subclasses must each name it

        def set_vocab(self):
            size = self.hparams["vocab_size"]
            self.gguf_writer.add_tokenizer_model("gpt2")
            self.gguf_writer.add_tokenizer_pre("default")
            self.gguf_writer.add_token_list([f"<{i}>" for i in range(size)])
            self.gguf_writer.add_token_types([gguf.TokenType.NORMAL] * size)
            self.gguf_writer.add_token_merges(["< 0"])  # llama.cpp refuses a BPE vocabulary with no merges
            self.gguf_writer.add_bos_token_id(self.hparams["bos_token_id"])
            self.gguf_writer.add_eos_token_id(self.hparams["eos_token_id"])

    out = Path(out)
    model = TinyDeepseekV4(Path(deepseek_dir), gguf.LlamaFileType.ALL_F32, out, eager=True)
    model.write()
    return out
