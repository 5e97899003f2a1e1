"""Training data: the synthetic mixture (phases, loss mask, held-out pairs, curriculum, determinism),
token files (round trip, windows) and the tokenize command."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from phasekv.cli.train import data_app
from phasekv.corpus import HeldOutPairs, MixtureConfig, MixtureSource, TokenWindowSource, assign_names, open_split
from phasekv.corpus.tokens import read_header, write_header
from phasekv.tasks.tokenizer import build_word_tokenizer, save_word_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_word_tokenizer()


def source(tokenizer, seq_len=256, steps=100, seed=0, **options) -> MixtureSource:
    return MixtureSource(MixtureConfig(**options), seq_len, steps, seed=seed, tokenizer=tokenizer)


def test_target_phases_are_uniform(tokenizer):
    """One target per sequence (targets within a sequence share the shift, so they are not independent)."""
    src = source(tokenizer, steps=2400)
    residues = []
    for i in range(2400):
        seq = src.sequence("train", i, 0)  # positions sweep the whole curriculum
        residues.append(seq.target_positions[i % len(seq.target_positions)] % 24)
    counts = np.bincount(residues, minlength=24)
    assert stats.chisquare(counts).pvalue > 1e-3, counts


def test_lookup_mask_covers_exactly_the_answers(tokenizer):
    src = source(tokenizer, templates={"lookup": 1.0})
    v = src.vocab.task
    for i in range(20):
        seq = src.sequence("train", 50, i)
        t, m = seq.tokens, seq.answer_mask
        records = {
            int(t[p]): int(t[p + 1]) for p in np.flatnonzero(np.isin(t, v.animal_ids)) if t[p - 1] != v.query_sep_id
        }
        expected = np.zeros_like(m)
        query_keys = np.flatnonzero(t == v.query_sep_id) + 1
        expected[query_keys + 1] = True
        assert np.array_equal(m, expected)
        assert m.sum() == len(seq.target_positions) == src.config.max_queries
        for p in np.flatnonzero(m):  # the scored token is the name recorded for the queried animal
            assert records[int(t[p - 1])] == t[p]


def test_multi_mask_covers_only_values(tokenizer):
    src = source(tokenizer, templates={"multi": 1.0})
    values = set(src.vocab.pool("mixed_values").tolist())
    eq, ask = src.vocab.literal_ids["="], src.vocab.literal_ids["?"]
    for i in range(20):
        seq = src.sequence("train", 99, i)
        t, m = seq.tokens, seq.answer_mask
        assert set(t[m].tolist()) <= values
        starts = np.flatnonzero(m & ~np.roll(m, 1))
        assert len(starts) == len(seq.target_positions) and np.all(t[starts - 1] == eq)
        first_query = np.flatnonzero(t == ask)[0]
        assert not m[:first_query].any()  # records are never scored


def test_batch_alignment_and_determinism(tokenizer):
    src = source(tokenizer, seq_len=64)
    a = src.batch("train", 7, range(0, 4))
    b = src.batch("train", 7, range(2, 4))
    assert a.tokens.shape == (4, 65) and a.inputs.shape == a.targets.shape == a.target_mask.shape == (4, 64)
    assert (a.tokens[2:] == b.tokens).all() and (a.loss_mask[2:] == b.loss_mask).all()
    assert (a.target_mask == a.loss_mask[:, 1:]).all() and (a.targets == a.tokens[:, 1:]).all()
    assert not (a.tokens == src.batch("train", 8, range(4)).tokens).all()
    assert not (a.tokens == src.batch("val", 7, range(4)).tokens).all()
    assert not (a.tokens == source(tokenizer, seq_len=64, seed=1).batch("train", 7, range(4)).tokens).all()


def test_curriculum(tokenizer):
    cfg = MixtureConfig(records=16, records_start=4, curriculum_fraction=0.4)
    assert [cfg.records_at(s, 1000) for s in (0, 200, 400, 999)] == [4, 10, 16, 16]
    src = source(tokenizer, steps=1000)
    assert src.sequence("train", 0, 0).n_records == 4 and src.sequence("val", 0, 0).n_records == 16
    assert MixtureConfig(records_start=None).records_at(0, 10) == 16


def test_held_out_pairs_never_trained(tokenizer):
    held = HeldOutPairs()
    src = source(tokenizer, templates={"lookup": 0.5, "pairs": 0.5})
    v = src.vocab.task
    word = dict(zip(v.animal_ids, v.animal_words, strict=True)) | dict(zip(v.name_ids, v.name_words, strict=True))
    colon = src.vocab.literal_ids[":"]
    seen = 0
    for i in range(50):
        t = src.sequence("train", 3, i).tokens
        for p in np.flatnonzero(np.isin(t[:-2], v.animal_ids)):
            name = t[p + 2] if t[p + 1] == colon else t[p + 1]  # "a n ," / "; a n" or "( a : n )" / "? a : n"
            assert name in v.name_ids
            assert not held.contains(word[int(t[p])], word[int(name)])
            seen += 1
    assert seen > 500
    matrix = src.vocab.held
    assert abs(matrix.mean() - 0.25) < 0.02
    rng = np.random.default_rng(0)
    rows = rng.choice(matrix.shape[0], 64, replace=False)
    cols = assign_names(rng, matrix, rows, held_out=True)
    assert matrix[rows, cols].all() and len(set(cols.tolist())) == 64


def test_sequences_fit_when_records_are_long(tokenizer):
    src = source(tokenizer, seq_len=96, templates={"multi": 1.0}, records=16, records_start=None)
    for i in range(10):
        seq = src.sequence("train", 0, i)
        assert len(seq.tokens) == 97 and 1 <= seq.n_records <= 16 and len(seq.target_positions) >= seq.n_records


def write_tokens(directory, splits: dict[str, np.ndarray], vocab_size: int):
    for split, ids in splits.items():
        ids.astype(np.uint16 if vocab_size <= 2**16 else np.uint32).tofile(directory / f"{split}.bin")
    write_header(directory, vocab_size, {s: len(v) for s, v in splits.items()}, {})


def test_token_files_round_trip_and_windows(tmp_path):
    rng = np.random.default_rng(0)
    train, val = rng.integers(0, 1000, 5000), rng.integers(0, 1000, 300)
    write_tokens(tmp_path, {"train": train, "val": val}, 1000)
    assert read_header(tmp_path)["dtype"] == "uint16"
    assert np.array_equal(open_split(tmp_path, "train"), train)
    src = TokenWindowSource(tmp_path, seq_len=32, seed=3)
    batch = src.batch("train", 5, range(4))
    starts = src.starts("train", 5, range(4))
    for row, start in zip(batch.tokens.numpy(), starts, strict=True):
        assert np.array_equal(row, train[start : start + 33])
    assert batch.loss_mask.all()
    again = TokenWindowSource(tmp_path, seq_len=32, seed=3).batch("train", 5, range(2, 4))
    assert (again.tokens == batch.tokens[2:]).all()
    assert not (TokenWindowSource(tmp_path, 32, seed=4).batch("train", 5, range(4)).tokens == batch.tokens).all()
    assert src.batch("val", 0, range(2)).tokens.max() < 1000


def test_token_files_uint32_and_truncation(tmp_path):
    ids = np.arange(100_000, 100_050)
    write_tokens(tmp_path, {"train": ids}, 151_936)
    assert read_header(tmp_path)["dtype"] == "uint32"
    assert np.array_equal(open_split(tmp_path, "train"), ids)
    with open(tmp_path / "train.bin", "r+b") as handle:
        handle.truncate(10)
    with pytest.raises(ValueError, match="truncated"):
        read_header(tmp_path)


def test_tokenize_command(tmp_path, tokenizer):
    tok_dir = tmp_path / "tok"
    save_word_tokenizer(tok_dir, tokenizer)
    rng = np.random.default_rng(0)
    from phasekv.tasks import words

    lines = [" ".join(rng.choice(words.filler_words(), 12)) + " ." for _ in range(200)]
    text = tmp_path / "a.txt"
    text.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(
        data_app, ["tokenize", str(text), "--tokenizer", str(tok_dir), "--out", str(tmp_path / "out"), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    header = json.loads((tmp_path / "out" / "tokens.json").read_text())
    expected = tokenizer(lines, add_special_tokens=False)["input_ids"]
    flat = [i for ids in expected for i in ids] + [tokenizer.eos_token_id]
    n_val = int(len(flat) * 0.05)
    assert header["splits"]["val"]["count"] == n_val and header["vocab_size"] == len(tokenizer)
    assert open_split(tmp_path / "out", "train").tolist() == flat[: len(flat) - n_val]
    assert open_split(tmp_path / "out", "val").tolist() == flat[len(flat) - n_val :]
    missing = CliRunner().invoke(data_app, ["tokenize", "nope.txt", "--tokenizer", str(tok_dir), "--out", "x"])
    assert missing.exit_code == 2 and "no such text files" in missing.output
