"""Scorers over phasekv checkpoints and HF causal LMs: dispatch, padding invariance, answer scoring."""

import json
import os

import numpy as np
import pytest
import torch

from conftest import needs_dsv4, save_with_tokenizer, tiny_dsv4
from phasekv.cache import KVCache
from phasekv.model import PhaseKVModel, preset_config, save_checkpoint
from phasekv.model.presets import PRESETS
from phasekv.scoring import (
    HFScorer,
    PhaseKVScorer,
    Scorer,
    ScorerError,
    hf_compression_stride,
    load_scorer,
    score_answers,
)
from phasekv.scoring.base import BatchedScorer, choose_parallelism, gather_positions, usable_cores
from phasekv.scoring.press import KVPressScorer
from phasekv.tasks.tokenizer import build_word_tokenizer

TOKENIZER = build_word_tokenizer()
V = len(TOKENIZER)


def random_sequences(n, seed=0, low=5, high=40):
    gen = np.random.default_rng(seed)
    return [gen.integers(0, V, size=int(gen.integers(low, high))).tolist() for _ in range(n)]


def test_load_scorer_picks_the_scorer_from_config_json(qwen_dir, phasekv_dir):
    hf, ours = load_scorer(qwen_dir), load_scorer(phasekv_dir)
    assert isinstance(hf, HFScorer) and isinstance(ours, PhaseKVScorer)
    assert isinstance(hf, Scorer) and isinstance(ours, Scorer)
    assert hf.describe()["model_type"] == "qwen3" and hf.compression_stride is None
    assert ours.compression_stride == 4 and ours.describe()["tokenizer"]["source"].endswith("tokenizer.json")
    assert not hf.model.training and not ours.model.training
    json.dumps(hf.describe()), json.dumps(ours.describe())


def test_load_scorer_errors_are_clear(tmp_path):
    with pytest.raises(ScorerError, match="does not exist"):
        load_scorer(tmp_path / "nowhere")
    with pytest.raises(ScorerError, match="config.json is missing"):
        load_scorer(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ScorerError, match="not valid JSON"):
        load_scorer(tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": 3}')
    with pytest.raises(ScorerError, match="neither a phasekv config"):
        load_scorer(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "no-such-model"}')
    with pytest.raises(ScorerError, match="cannot load"):
        load_scorer(tmp_path)


def test_phasekv_scorer_needs_a_vocabulary_that_fits_the_tokenizer(tmp_path):
    small = PhaseKVModel(preset_config("full-1kv", "tiny", vocab_size=100))
    with pytest.raises(ScorerError, match="only 100"):
        PhaseKVScorer(small)
    save_checkpoint(small, tmp_path)  # no tokenizer.json: the built-in word tokenizer is used
    with pytest.raises(ScorerError, match="tokenizer has 841 tokens"):
        load_scorer(tmp_path)


def _batched_vs_alone(scorer):
    sequences = random_sequences(7)
    scorer.batch_size = 4
    batched = scorer.logprobs(sequences, n_last=3)
    scorer.batch_size = 1
    alone = scorer.logprobs(sequences, n_last=3)
    return sequences, batched, alone


@pytest.mark.parametrize("kind", ["hf", "phasekv"])
def test_padding_does_not_change_log_probs(kind, qwen_dir, phasekv_dir):
    scorer = load_scorer(qwen_dir if kind == "hf" else phasekv_dir)
    sequences, batched, alone = _batched_vs_alone(scorer)
    assert batched.shape == (7, 3, V)
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=0)
    with torch.no_grad():  # and both equal a plain forward pass over the unpadded sequence
        logits = scorer.model(torch.tensor([sequences[2]]))
        logits = getattr(logits, "logits", logits)
    torch.testing.assert_close(batched[2], torch.log_softmax(logits[0, -3:], -1), atol=1e-5, rtol=0)
    torch.testing.assert_close(scorer.next_token_logprobs(sequences[:2]), alone[:2, -1])


def test_multi_token_answers_match_a_manual_loop(qwen_dir):
    scorer = load_scorer(qwen_dir, batch_size=3)
    contexts = random_sequences(5, seed=1)
    answers = [[7, 8, 9], [10], [11, 12], [13, 14, 15], [16]]
    with torch.no_grad():  # the greedy continuation of context 0 must count as correct
        greedy = list(contexts[0])
        for _ in range(3):
            greedy.append(int(scorer.model(torch.tensor([greedy])).logits[0, -1].argmax()))
    answers[0] = greedy[len(contexts[0]) :]
    scores = score_answers(scorer, contexts, answers)
    for i, (ctx, ans) in enumerate(zip(contexts, answers, strict=True)):
        total, all_top = 0.0, True
        for j, token in enumerate(ans):
            with torch.no_grad():
                lp = torch.log_softmax(scorer.model(torch.tensor([ctx + ans[:j]])).logits[0, -1], -1)
            total += lp[token].item()
            all_top &= int(lp.argmax()) == token
            if j == 0:
                assert scores.first_argmax[i] == int(lp.argmax())
        assert scores.logprob[i] == pytest.approx(total, abs=1e-4)
        assert scores.correct[i] == all_top
    assert scores.correct[0]


class CountingScorer:
    """Wraps a scorer and records how many sequences it was asked to score."""

    def __init__(self, inner):
        self.inner, self.seen = inner, 0
        self.tokenizer, self.batch_size, self.compression_stride = inner.tokenizer, inner.batch_size, None

    def logprobs(self, sequences, n_last=1):
        self.seen += len(sequences)
        return self.inner.logprobs(sequences, n_last)


def test_identical_prompts_are_scored_once(phasekv_dir):
    scorer = CountingScorer(load_scorer(phasekv_dir))
    contexts = random_sequences(3, seed=2)
    answers = [[5], [6, 7], [8]]
    once = score_answers(scorer, contexts, answers)
    scorer.seen = 0
    twice = score_answers(scorer, contexts * 2, answers * 2)
    assert scorer.seen == 3
    np.testing.assert_allclose(twice.logprob, np.tile(once.logprob, 2), atol=1e-6)
    np.testing.assert_array_equal(twice.correct, np.tile(once.correct, 2))
    with pytest.raises(ScorerError, match="empty"):
        score_answers(scorer, contexts[:1], [[]])


@needs_dsv4
def test_deepseek_v4_scores_through_the_hf_scorer(tmp_path):
    scorer = load_scorer(save_with_tokenizer(tiny_dsv4(V), tmp_path), batch_size=4)
    assert isinstance(scorer, HFScorer) and scorer.describe()["model_type"] == "deepseek_v4"
    assert scorer.compression_stride == 4 == hf_compression_stride(scorer.model.config)
    sequences, batched, alone = _batched_vs_alone(scorer)
    assert torch.isfinite(batched).all()
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=0)
    scores = score_answers(scorer, sequences[:3], [[1, 2], [3], [4, 5]])
    assert np.isfinite(scores.logprob).all()


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_forward_at_matches_the_plain_forward(preset):
    """The fast path (drop the tail, last layer from the first requested position on) equals the
    full forward gathered at the positions, for every preset and ragged positions, including a
    first position inside the first compression window and position 0."""
    torch.manual_seed(1)
    model = PhaseKVModel(preset_config(preset, "tiny", vocab_size=V)).eval()
    ids = torch.randint(0, V, (3, 45))
    cases = [
        torch.tensor([[40, 41], [20, 21], [43, 44]]),
        torch.tensor([[3], [30], [44]]),
        torch.tensor([[0, 1, 2], [44, 43, 42], [17, 5, 33]]),
        torch.full((3, 1), 44),
    ]
    with torch.inference_mode():
        full = model(ids)
        for positions in cases:
            plain = full.gather(1, positions[..., None].expand(-1, -1, full.shape[-1]))
            torch.testing.assert_close(model(ids, positions=positions), plain, atol=2e-5, rtol=1e-5)


def test_forward_at_rejects_bad_positions():
    model = PhaseKVModel(preset_config("w8s8-1kv", "tiny", vocab_size=V)).eval()
    ids = torch.randint(0, V, (2, 10))
    with pytest.raises(ValueError, match="positions must lie"):
        model(ids, positions=torch.tensor([[10], [3]]))
    with pytest.raises(ValueError, match=r"\[B, K\]"):
        model(ids, positions=torch.tensor([3, 4]))
    with pytest.raises(ValueError, match="either a cache or positions"):
        model(ids, KVCache.for_model(model), positions=torch.tensor([[3], [4]]))


@pytest.mark.parametrize("kind", ["hf", "phasekv"])
def test_fast_paths_agree_with_plain_scoring(kind, qwen_dir, phasekv_dir):
    """forward_at (phasekv) and concurrent workers give the log-probs of plain one-thread scoring."""
    directory = qwen_dir if kind == "hf" else phasekv_dir
    sequences = random_sequences(23, seed=5, low=4, high=60)
    options = {"plain": True} if kind == "phasekv" else {}
    reference = load_scorer(directory, batch_size=4, **options).logprobs(sequences, 2)
    threads = torch.get_num_threads()
    for workers in (1, 3):
        scorer = load_scorer(directory, batch_size=4, workers=workers)
        torch.testing.assert_close(scorer.logprobs(sequences, 2), reference, atol=2e-5, rtol=0)
        assert torch.get_num_threads() == threads  # workers leave the caller's thread count alone
    with pytest.raises(ScorerError, match="workers"):
        load_scorer(directory, workers=0)


class CumulativeScorer(BatchedScorer):
    """A causal toy model without training: the logits at position t are the sum of the embeddings of tokens
    0..t. Records every batch of token ids it is given."""

    def __init__(self, **options):
        torch.manual_seed(0)
        super().__init__(torch.nn.Embedding(V, 16), TOKENIZER, **options)
        self.batches = []

    def _logits(self, input_ids, positions):
        self.batches.append(input_ids)
        return gather_positions(self.model(input_ids).cumsum(dim=1), positions)  # [B, K, 16]


def test_batching_sorts_by_length_pads_on_the_right_and_keeps_the_input_order():
    scorer = CumulativeScorer(batch_size=3, workers=1, pad_id=V - 1)
    sequences = random_sequences(7, seed=3, low=2, high=12)
    seen = []
    scored = scorer.logprobs(sequences, 2, progress=seen.append)  # [7, 2, 16]
    with torch.no_grad():
        alone = [torch.log_softmax(scorer.model(torch.tensor(s)).cumsum(0)[-2:], -1) for s in sequences]
    torch.testing.assert_close(scored, torch.stack(alone), atol=1e-5, rtol=0)
    by_length = sorted(sequences, key=len)
    padded = [[s + [V - 1] * (len(group[-1]) - len(s)) for s in group] for group in (by_length[:3], by_length[3:6])]
    assert [ids.tolist() for ids in scorer.batches] == [*padded, by_length[6:]] and seen == [3, 3, 1]
    default = scorer.logprobs(sequences)  # one position, the last
    assert default.shape == (7, 1, 16) and torch.equal(default[:, 0], scorer.next_token_logprobs(sequences))
    torch.testing.assert_close(default[:, 0], scored[:, 1], atol=1e-5, rtol=0)
    assert scorer.logprobs([[4, 5]], n_last=2).shape == (1, 2, 16)  # a sequence of exactly n_last tokens


def test_batching_refuses_what_it_cannot_score_word_for_word():
    scorer = CumulativeScorer()
    assert (scorer.batch_size, scorer.pad_id, scorer.dtype) == (16, 0, "float32")  # the defaults
    for call, message in (
        (lambda: scorer.logprobs([[1, 2]], n_last=0), "n_last must be >= 1, got 0"),
        (lambda: scorer.logprobs([[1, 2], [3]], n_last=2), "every sequence needs at least n_last = 2 tokens"),
        (lambda: scorer.logprobs([]), "no sequences to score"),
    ):
        with pytest.raises(ScorerError) as refused:
            call()
        assert str(refused.value) == message


def test_bad_scorer_settings_are_rejected_word_for_word():
    for options, message in (
        (dict(batch_size=0), "batch_size must be >= 1, got 0"),
        (dict(workers=0), "workers must be >= 1, got 0"),
        (dict(threads=0), "threads must be >= 1, got 0"),
        (dict(dtype="float8"), "unknown dtype 'float8'; choose one of float32, bfloat16, float16"),
    ):
        with pytest.raises(ScorerError) as refused:
            CumulativeScorer(**options)
        assert str(refused.value) == message
    process_threads = torch.get_num_threads()
    try:  # the smallest settings are allowed
        edge = CumulativeScorer(batch_size=1, workers=1, threads=1, dtype="bfloat16")
        assert (edge.batch_size, edge.workers, edge.threads, torch.get_num_threads()) == (1, 1, 1, 1)
        assert edge.dtype == "bfloat16"
    finally:
        torch.set_num_threads(process_threads)
    assert edge.model.weight.dtype == torch.bfloat16 and edge.logprobs([[1, 2]]).dtype == torch.float32
    assert CumulativeScorer(workers=3).workers == 3  # asked for, whatever the cores


def test_batches_go_to_the_device_of_the_model(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)  # one worker all the same

    class DeviceRecorder(BatchedScorer):  # "meta" stands in for a GPU: tensors there hold no data
        def _logits(self, input_ids, positions):
            self.devices.append((input_ids.device.type, positions.device.type))
            return torch.zeros(*positions.shape, 4)

    scorer = DeviceRecorder(torch.nn.Linear(1, 1), TOKENIZER, device="meta")
    scorer.devices = []
    assert scorer.logprobs([[1, 2, 3]]).shape == (1, 1, 4) and scorer.devices == [("meta", "meta")]
    assert next(scorer.model.parameters()).device.type == "meta" and scorer.workers == 1


@pytest.mark.parametrize("cores", [1, 2, 16])
def test_default_parallelism_is_one_single_thread_worker_per_usable_core(cores):
    assert choose_parallelism(None, None, cores) == (1, cores)
    assert choose_parallelism(None, None, cores, concurrent=False) == (1, 1)
    # explicit flags win: --threads alone is one worker with that many intra-op threads
    assert choose_parallelism(4, None, cores) == (4, 1)
    assert choose_parallelism(None, 3, cores) == (1, 3)
    assert choose_parallelism(2, 5, cores) == (2, 5)


def test_without_an_affinity_mask_every_core_is_usable(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # macOS, Windows
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert usable_cores() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # the count is unknown
    assert usable_cores() == 1


def test_scorers_default_to_the_cores_of_their_affinity_mask(phasekv_dir, monkeypatch):
    """The process's affinity mask, not the machine's core count, sizes the default; workers are capped by the
    batches; a press that scores one row at a time gets one worker."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert usable_cores() == 3
    scorer = load_scorer(phasekv_dir, batch_size=4)
    assert (scorer.threads, scorer.workers) == (1, 3)
    assert (load_scorer(phasekv_dir, threads=2).threads, load_scorer(phasekv_dir, threads=2).workers) == (2, 1)
    used = []
    monkeypatch.setattr("phasekv.scoring.base.ThreadPoolExecutor", _recording_pool(used))
    scorer.logprobs(random_sequences(5), 1)  # 2 batches of 4
    scorer.logprobs(random_sequences(13), 1)  # 4 batches
    assert used == [2, 3]
    assert KVPressScorer.concurrent_batches is False


def _recording_pool(used):
    from concurrent.futures import ThreadPoolExecutor

    def pool(workers, **options):
        used.append(workers)
        return ThreadPoolExecutor(workers, **options)

    return pool


def test_bad_scorer_settings_are_rejected(qwen_dir):
    with pytest.raises(ScorerError, match="batch_size"):
        load_scorer(qwen_dir, batch_size=0)
    with pytest.raises(ScorerError, match="unknown dtype"):
        load_scorer(qwen_dir, dtype="float8")
    with pytest.raises(ScorerError, match="at least n_last"):
        load_scorer(qwen_dir).logprobs([[1, 2]], n_last=3)


def test_kept_answers_are_not_scored_again_and_a_run_stopped_part_way_keeps_what_it_scored(phasekv_dir, tmp_path):
    """Answers go into the cache as each group is scored: a run that fails part way (here the second answer length's
    forward) resumes from the first group, and the answers read back equal those computed."""
    from phasekv.scoring import CachedAnswers
    from phasekv.serve.cache import ResultCache

    contexts, answers = random_sequences(5, seed=3), [[5], [6, 7], [8], [9, 10], [11]]
    plain = score_answers(load_scorer(phasekv_dir), contexts, answers)

    class FailsOnSecondCall(CountingScorer):
        def logprobs(self, sequences, n_last=1):
            if self.seen:
                raise OSError("interrupted")
            return super().logprobs(sequences, n_last)

    path, fingerprint = tmp_path / "answers.jsonl", {"model": "m"}
    failing = FailsOnSecondCall(load_scorer(phasekv_dir))
    failing.answer_cache = CachedAnswers(ResultCache(path, fingerprint))
    with pytest.raises(OSError, match="interrupted"):
        score_answers(failing, contexts, answers)
    first_group = failing.seen
    assert first_group in (2, 3) and len(path.read_text().splitlines()) == 1 + first_group  # header + answers

    resumed = CountingScorer(load_scorer(phasekv_dir))
    resumed.answer_cache = CachedAnswers(ResultCache(path, fingerprint))
    again = score_answers(resumed, contexts, answers)
    assert resumed.seen == 5 - first_group
    assert resumed.answer_cache.describe() == {"from_cache": first_group, "scored": 5 - first_group, "cache": str(path)}
    np.testing.assert_array_equal(again.logprob, plain.logprob)  # exact: JSON keeps a float64 as it was
    np.testing.assert_array_equal(again.correct, plain.correct)
    np.testing.assert_array_equal(again.first_argmax, plain.first_argmax)
    with pytest.raises(ScorerError, match="another server or model"):
        ResultCache(path, {"model": "other"})


def test_a_long_group_is_kept_a_few_batches_at_a_time(phasekv_dir, tmp_path):
    """Interrupted inside one answer length's group, the answers of the slices already scored are kept."""
    from phasekv.scoring import CachedAnswers
    from phasekv.scoring.answers import CACHED_BATCHES
    from phasekv.serve.cache import ResultCache

    class FailsOnSecondCall(CountingScorer):
        workers = 1

        def logprobs(self, sequences, n_last=1):
            if self.seen:
                raise OSError("interrupted")
            return super().logprobs(sequences, n_last)

    scorer = FailsOnSecondCall(load_scorer(phasekv_dir, batch_size=1))
    scorer.answer_cache = CachedAnswers(ResultCache(tmp_path / "a.jsonl", {"model": "m"}))
    contexts = random_sequences(3 * CACHED_BATCHES, seed=4)
    with pytest.raises(OSError, match="interrupted"):
        score_answers(scorer, contexts, [[5]] * len(contexts))
    assert scorer.seen == CACHED_BATCHES and len(scorer.answer_cache.store) == CACHED_BATCHES
