"""Models and arguments the analysis tests share: a word tokenizer, random tiny phasekv models, and one whose gates
prefer known offsets (so a gate analysis has a right answer)."""

import torch

from conftest import randomize
from phasekv.model import PhaseKVModel, preset_config
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
