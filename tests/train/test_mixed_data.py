"""Real text mixed with the retrieval mixture at a stated ratio, and the paper profile's token budget."""

import numpy as np
import pytest

from phasekv.corpus.mixed import MixedSource, is_text
from phasekv.corpus.mixture import MixtureConfig, MixtureSource
from phasekv.corpus.tokens import TokenWindowSource, write_header
from phasekv.reproduce import get_profile
from phasekv.reproduce.training_plan import write_plan
from phasekv.train.config import DataConfig, RunConfig, RunConfigError
from phasekv.train.loop import build_source

SEQ_LEN = 64
TEXT_TOKEN = 7  # every text window is this token: a row is text iff it is constant


def _text_dir(tmp_path, vocab_size: int):
    for split, n in (("train", 4000), ("val", 400)):
        np.full(n, TEXT_TOKEN, dtype=np.uint16).tofile(tmp_path / f"{split}.bin")
    write_header(tmp_path, vocab_size, {"train": 4000, "val": 400}, {"tokenizer": None})
    return tmp_path


def _sources(tmp_path, fraction: float):
    mixture = MixtureSource(MixtureConfig(records=4, records_start=None), SEQ_LEN, total_steps=10, seed=1)
    text = TokenWindowSource(_text_dir(tmp_path, mixture.vocab_size), SEQ_LEN, seed=1)
    return mixture, text, MixedSource(mixture, text, fraction)


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_each_batch_holds_the_stated_share_of_text_in_place(tmp_path, fraction):
    mixture, _, mixed = _sources(tmp_path, fraction)
    batch = mixed.batch("train", 3, range(20))
    text_rows = [i for i in range(20) if (batch.tokens[i] == TEXT_TOKEN).all()]
    assert len(text_rows) == round(20 * fraction)
    assert text_rows == [i for i in range(20) if is_text(i, fraction)]
    assert batch.loss_mask[text_rows].all()  # text is scored everywhere
    others = [i for i in range(20) if i not in text_rows]
    plain = mixture.batch("train", 3, others)  # mixture rows are the mixture's own sequences, masks and all
    assert (batch.tokens[others] == plain.tokens).all() and (batch.loss_mask[others] == plain.loss_mask).all()


def test_a_batch_split_across_ranks_is_the_same_batch(tmp_path):
    _, _, mixed = _sources(tmp_path, 0.3)
    whole = mixed.batch("train", 2, range(10))
    halves = [mixed.batch("train", 2, range(0, 5)), mixed.batch("train", 2, range(5, 10))]
    assert (whole.tokens == np.concatenate([h.tokens for h in halves])).all()


def test_mismatched_vocabularies_and_bad_fractions_are_refused(tmp_path):
    mixture, text, _ = _sources(tmp_path, 0.5)
    with pytest.raises(ValueError, match="same tokenizer"):
        (tmp_path / "other").mkdir()
        MixedSource(mixture, TokenWindowSource(_text_dir(tmp_path / "other", 999), SEQ_LEN), 0.5)
    with pytest.raises(ValueError, match="text_fraction"):
        MixedSource(mixture, text, 1.0)
    with pytest.raises(RunConfigError, match="text_fraction"):
        DataConfig(kind="mixed", tokens_dir="x", text_fraction=0.0)
    with pytest.raises(RunConfigError, match="text_fraction"):
        DataConfig(kind="mixture", text_fraction=0.5)
    with pytest.raises(RunConfigError, match="needs tokens_dir"):
        DataConfig(kind="mixed", text_fraction=0.5)


def test_a_mixed_run_config_round_trips_and_builds_its_source(tmp_path):
    mixture, _, _ = _sources(tmp_path, 0.5)
    data = DataConfig(kind="mixed", tokens_dir=str(tmp_path), text_fraction=0.25, mixture=MixtureConfig(records=4))
    config = RunConfig.from_dict(RunConfig(data=data, seq_len=SEQ_LEN, steps=4, batch_size=4).to_dict())
    source = build_source(config)
    assert isinstance(source, MixedSource) and source.describe()["text_fraction"] == 0.25


def test_paper_profile_trains_every_model_on_100b_tokens_with_a_stated_text_share(tmp_path):
    paper = get_profile("paper")
    for run in paper.runs:
        assert 100e9 <= paper.tokens_per_run(run) < 100e9 + paper.batch_size * paper.seq_len
    config = paper.run_config(paper.runs[0])
    assert config.data.kind == "mixed" and config.data.text_fraction == paper.text_fraction == 0.9
    text = write_plan(paper, tmp_path)
    assert "budget: 100B tokens per run" in text and "90% of every batch real text from data/tokens" in text
    quick = get_profile("quick")
    assert quick.run_config(quick.runs[0]).data.kind == "mixture"  # the CPU profiles: the mixture alone
