"""Models and arguments the analysis tests share: a word tokenizer, random tiny phasekv models, and one whose gates
prefer known offsets (so a gate analysis has a right answer)."""

import torch

from conftest import randomize, tiny_dsv4
from phasekv.model import PhaseKVModel, preset_config
from phasekv.tasks.lookup import LookupOptions
from phasekv.tasks.tokenizer import build_word_tokenizer

TOKENIZER = build_word_tokenizer()
V = len(TOKENIZER)
SMALL = ["--records", "8", "--demos", "2", "--modulus", "8", "--mappings", "2", "--quiet"]  # a small probe design


def random_model(name, seed=0):
    torch.manual_seed(seed)
    return randomize(PhaseKVModel(preset_config(name, "tiny", vocab_size=V)), seed=seed, std=0.1).eval()


def planted_model(name="w8s8-1kv", key_offset=2, value_offset=3):
    """Every key gate prefers `key_offset`, every value gate `value_offset` (one KV head, scalar gates)."""
    model = random_model(name)
    with torch.no_grad():
        for layer in model.layers:
            bias = layer.self_attn.compressor.gate_bias  # [W, (key, value) x kv_heads]
            bias[key_offset, 0] += 8.0
            bias[value_offset, 1] += 8.0
    return model


LOOKUP = LookupOptions(n_records=8, n_demos=2, modulus=8, n_mappings=2)


PNG = b"\x89PNG\r\n\x1a\n"


def spec_rows(spec: dict) -> list[dict]:
    """Every inline data row of a Vega-Lite spec: top-level values, or altair's named `datasets`."""
    rows = list(spec.get("data", {}).get("values", []))
    return rows + [row for named in spec.get("datasets", {}).values() for row in named]


def spec_marks(spec) -> set[str]:
    """The mark types anywhere in a Vega-Lite spec."""
    if isinstance(spec, list):
        return set().union(*map(spec_marks, spec)) if spec else set()
    if not isinstance(spec, dict):
        return set()
    found = {spec["mark"] if isinstance(spec["mark"], str) else spec["mark"]["type"]} if "mark" in spec else set()
    return found.union(*(spec_marks(v) for k, v in spec.items() if k != "mark"))


def _dsv4(hca_rate=8):
    rates = {"compressed_sparse_attention": 4, "heavily_compressed_attention": hca_rate}
    model = tiny_dsv4(V, compress_rates=rates)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("position_bias"):
                p.normal_(0, 1.0)
    return model
