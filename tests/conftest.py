import importlib.util
from pathlib import Path

import pytest
import torch

SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")


def pytest_collection_modifyitems(config, items):
    """Mark the tests measured as slow (tests/slow_tests.txt) `slow`, so `-m "not slow"` is the fast tier."""
    listed = {line.strip() for line in SLOW_TESTS.read_text().splitlines() if line.strip() and line[0] != "#"}
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
    # A renamed or moved test would silently fall into the fast tier: every listed test must still be defined.
    stale = sorted(test for test in listed if not _defined(Path(config.rootpath), test))
    if stale:
        raise pytest.UsageError(f"tests/slow_tests.txt lists tests that are not defined (renamed or moved?): {stale}")


def _defined(root: Path, node_id: str) -> bool:
    """Whether the test `path::name[params]` is a function defined in its file."""
    path, name = node_id.split("::")[0], node_id.split("::")[-1].split("[")[0]
    file = root / path
    return file.is_file() and f"def {name}(" in file.read_text()


torch.set_num_threads(1)

# transformers' DeepSeek-V4 arrived after 5.2 (the version the kvpress extra pins): tests of it skip without it.
HAS_DSV4 = importlib.util.find_spec("transformers.models.deepseek_v4") is not None
needs_dsv4 = pytest.mark.skipif(
    not HAS_DSV4, reason="this transformers has no models.deepseek_v4 (the main environment's 5.24 has it)"
)

# kvpress needs transformers < 5.3: its tests run in their own environment (scripts/test_kvpress.sh) and skip elsewhere.
HAS_KVPRESS = importlib.util.find_spec("kvpress") is not None


def needs_kvpress(test):
    """Marked `kvpress` (scripts/test_kvpress.sh runs these in the kvpress environment); skipped without it."""
    reason = "kvpress is not installed (the kvpress extra: scripts/kvpress_venv.sh)"
    return pytest.mark.kvpress(pytest.mark.skipif(not HAS_KVPRESS, reason=reason)(test))


def press_inputs(length: int, seed: int):
    """(hidden [1, T, 8], keys, values [1, 2, T, 4]) of one layer, random from `seed`: what a press compresses."""
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randn(1, 2, length, 4, generator=generator)
    values = torch.randn(1, 2, length, 4, generator=generator)
    hidden = torch.randn(1, length, 8, generator=generator)
    return hidden, keys, values


# Tiny Hugging Face models shared by the scoring, evaluation, analysis and compressor tests. The sizes are
# part of what those tests check (strides, parity numbers): change them only together with the tests.
QWEN3_TINY = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
)
DSV4_TINY = dict(
    hidden_size=64,
    head_dim=32,
    num_attention_heads=4,
    q_lora_rank=16,
    num_hidden_layers=2,
    index_n_heads=2,
    index_head_dim=16,
    index_topk=8,
    partial_rotary_factor=0.5,
    o_groups=2,
    o_lora_rank=16,
    n_routed_experts=4,
    num_experts_per_tok=2,
)
# What a whole DeepseekV4ForCausalLM adds: one CSA and one HCA layer, a hash-routed and a learned MoE.
DSV4_TINY_LAYERS = dict(
    moe_intermediate_size=32,
    sliding_window=16,
    hc_mult=2,
    layer_types=["compressed_sparse_attention", "heavily_compressed_attention"],
    mlp_layer_types=["hash_moe", "moe"],
)


def randomize(module: torch.nn.Module, seed: int = 0, std: float = 0.3) -> torch.nn.Module:
    """Give every parameter a random value (norm weights near 1), so tests are sensitive to every term."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * std
            p.copy_(1 + noise if "norm" in name else noise)
    return module


def word_tokenizer():
    """The built-in word tokenizer (the one every tiny model here is sized for)."""
    from phasekv.tasks.tokenizer import build_word_tokenizer

    return build_word_tokenizer()


def tiny_qwen3(vocab_size: int, seed: int = 0):
    """A tiny random `Qwen3ForCausalLM` (2 layers, 4 query and 2 KV heads of 8 channels) in eval mode."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    return Qwen3ForCausalLM(Qwen3Config(vocab_size=vocab_size, **QWEN3_TINY)).eval()


def tiny_dsv4_config(vocab_size: int, **overrides):
    """A `DeepseekV4Config` with `DSV4_TINY`'s attention sizes; `overrides` add or replace fields."""
    from transformers import DeepseekV4Config

    return DeepseekV4Config(**{**DSV4_TINY, "vocab_size": vocab_size, **overrides})


def tiny_dsv4(vocab_size: int, seed: int = 0, **overrides):
    """A tiny random `DeepseekV4ForCausalLM` (`DSV4_TINY` + `DSV4_TINY_LAYERS`, then `overrides`) in eval mode."""
    from transformers import DeepseekV4ForCausalLM

    torch.manual_seed(seed)
    return DeepseekV4ForCausalLM(tiny_dsv4_config(vocab_size, **{**DSV4_TINY_LAYERS, **overrides})).eval()


def save_with_tokenizer(model, directory):
    """Save an HF model (`save_pretrained`) or a phasekv model (checkpoint) with the word tokenizer beside it."""
    from phasekv.model import PhaseKVModel, save_checkpoint
    from phasekv.tasks.tokenizer import save_word_tokenizer

    if isinstance(model, PhaseKVModel):
        save_checkpoint(model, directory)
    else:
        model.save_pretrained(directory)
    save_word_tokenizer(directory)
    return directory


def qwen3_pair(**overrides):
    """A random tiny Qwen3ForCausalLM and the phasekv model with its weights (full attention): the same function."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from phasekv.config import ModelConfig
    from phasekv.model import PhaseKVModel

    kw = dict(
        vocab_size=97,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=96,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    )
    kw.update(overrides)
    hf = Qwen3ForCausalLM(Qwen3Config(**kw, attn_implementation="eager")).eval()
    randomize(hf, seed=0, std=0.2)
    ours = PhaseKVModel(
        ModelConfig(
            vocab_size=kw["vocab_size"],
            hidden_size=kw["hidden_size"],
            num_layers=kw["num_hidden_layers"],
            num_heads=kw["num_attention_heads"],
            num_kv_heads=kw["num_key_value_heads"],
            head_dim=kw["head_dim"],
            intermediate_size=kw["intermediate_size"],
            rope_theta=kw["rope_theta"],
            rms_norm_eps=kw["rms_norm_eps"],
            tie_embeddings=kw["tie_word_embeddings"],
        )
    ).eval()
    state = {k.removeprefix("model."): v for k, v in hf.state_dict().items()}
    ours.load_state_dict(state)
    return hf, ours


SMALL_MODEL = {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "head_dim": 16, "intermediate_size": 64}


def small_config(preset: str = "w8s8-1kv", **changes):
    """A training run (RunConfig) whose model and data are small enough for many steps per second on one thread."""
    from dataclasses import replace

    from phasekv.corpus.mixture import MixtureConfig
    from phasekv.train import DataConfig, ModelSpec, OptimConfig, RunConfig

    base = RunConfig(
        model=ModelSpec(preset, "tiny", SMALL_MODEL),
        data=DataConfig(mixture=MixtureConfig(records=4, records_start=2, max_queries=6)),
        optim=OptimConfig(warmup_steps=2),
        steps=8,
        batch_size=4,
        seq_len=64,
        threads=1,
        checkpoint_every=0,
        log_every=1,
        val_every=0,
        val_batches=1,
    )
    return replace(base, **changes)


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(1234)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    """A saved `tiny_qwen3` (seed 0) with the word tokenizer."""
    return save_with_tokenizer(tiny_qwen3(len(word_tokenizer())), tmp_path_factory.mktemp("qwen3"))


@pytest.fixture(scope="module")
def phasekv_dir(tmp_path_factory):
    """A saved untrained w8s4-1kv tiny phasekv checkpoint (seed 0) with the word tokenizer."""
    from phasekv.model import PhaseKVModel, preset_config

    torch.manual_seed(0)
    model = PhaseKVModel(preset_config("w8s4-1kv", "tiny", vocab_size=len(word_tokenizer())))
    return save_with_tokenizer(model, tmp_path_factory.mktemp("phasekv"))


# The smallest audit design: one template, two mappings, no needle; seconds on a tiny model.
SMALL_AUDIT = dict(
    templates=("paper",),
    screen_prompts=4,
    n_records=8,
    n_demos=2,
    spread_blocks=2,
    mappings=(2,),
    needle=False,
    n_resamples=50,
)


@pytest.fixture(scope="module")
def pretrained_audit(qwen_dir, tmp_path_factory):
    """`phasekv.audit` of `qwen_dir`, a pretrained-style model (Hugging Face, full attention, no compressor), at
    `SMALL_AUDIT`: its folder (`.out`) holds lookup.json, audit.json and report.html."""
    import phasekv

    # two mappings cannot reach the MDE bound: `anyway` scores them, as the report is what is tested
    out = tmp_path_factory.mktemp("audit") / "qwen"
    return phasekv.audit(qwen_dir, out=out, budget="10m", anyway=True, **SMALL_AUDIT)


@pytest.fixture(autouse=True)
def _own_cache_home(tmp_path_factory, monkeypatch):
    """Each test its own ~/.cache: answers one test kept (of a model another test patches) never reach another, and
    no test writes into the real one."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache-home")))
