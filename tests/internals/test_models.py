"""The model views: the same questions of phasekv and HF models, final logits that own their memory."""

import torch

from conftest import tiny_qwen3
from phasekv.internals.models import HFView, PhaseKVView, view
from phasekv.model import PhaseKVModel, preset_config


def test_model_views_answer_the_same_questions_for_phasekv_and_hf_models():
    ours, hf = PhaseKVModel(preset_config("w8s8-1kv", vocab_size=50)), tiny_qwen3(50)
    ids = torch.randint(0, 50, (2, 24))
    for model, kind, layers in ((ours, PhaseKVView, len(ours.layers)), (hf, HFView, 2)):
        seen = view(model)
        assert type(seen) is kind and len(seen.attention_sites()) == layers
        with torch.no_grad():
            assert seen.final_logits(ids).shape == (2, 50)
    assert view(ours).head_knockouts and view(ours).gate_cycling
    assert not view(hf).head_knockouts and not view(hf).gate_cycling and view(hf).topk_hits([]) == []


class _NoKeepLM(torch.nn.Module):
    """An HF-style causal LM whose forward takes no `logits_to_keep` (it always returns every position)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, input_ids, use_cache=False):
        return self.inner(input_ids=input_ids, use_cache=use_cache)


def test_final_logits_equal_the_full_forward_and_own_only_their_row():
    # A whole-layer knockout keeps one final-logit tensor per layer: each must not pin the [B, T, V] logits it was
    # sliced from (SmolLM2: 30 layers x 16 x 400 x 49,152 floats ran a 24 GB machine out of memory).
    ours, hf = PhaseKVModel(preset_config("w8s8-1kv", vocab_size=50)), tiny_qwen3(50)
    ids = torch.randint(0, 50, (3, 40))
    with torch.no_grad():
        full = {
            "ours": ours(ids)[:, -1],
            "hf": hf(input_ids=ids, use_cache=False).logits[:, -1],
        }
        for name, model in (("ours", ours), ("hf", hf), ("hf", _NoKeepLM(hf))):
            logits = view(model).final_logits(ids)
            assert logits.shape == (3, 50)
            assert logits.untyped_storage().nbytes() == 3 * 50 * logits.element_size(), type(model).__name__
            torch.testing.assert_close(logits, full[name], rtol=1e-5, atol=1e-5)
