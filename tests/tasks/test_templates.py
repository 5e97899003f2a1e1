"""Record templates tokenized in context, on three tokenizer families built here: a GPT-2-style
byte-level BPE (with SmolLM2's ",," merge), a SentencePiece-style BPE (Metaspace "▁", BOS
added), and our word-level tokenizer; every probe end to end on a tiny random Llama for each."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from phasekv.results.record import prompt_prefix
from phasekv.scoring import HFScorer
from phasekv.studies.flip import prompts as flip
from phasekv.studies.flip.options import FlipOptions
from phasekv.studies.flip.pattern import PhasePattern
from phasekv.studies.flip.result import format_flip
from phasekv.studies.flip.run import run_flip
from phasekv.studies.probe.run import run_lookup, run_needle
from phasekv.tasks import lookup, needle, templates, tokenizer, vocab, words

FLIP_CONTEXT = "y = T.Cast(FP"
# Text a pretrained tokenizer would have seen: every word of the prompts, the natural templates'
# sentences, code-like runs of punctuation (so ",," and ".;" become tokens, as in SmolLM2).
SENTENCES = [
    f"The owner of the {a} is {n}. The {a}'s owner is {n}. {a}: {n}, {a} {b}: {n} {m}."
    for a, b, n, m in zip(words.animals(), words.animals()[1:], words.names(), words.names()[1:], strict=False)
]
CORPUS = (SENTENCES + [" ".join(words.filler_words())] + ["x,, y;; z, w; v. u ,, t . . . ."] * 8) * 4
CORPUS += [f"{words.filler_text(family, 4)}\n{FLIP_CONTEXT}8" for family in words.filler_families()]


def _wrap(tok: Tokenizer, **special) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=tok, **special)


def build_bpe() -> PreTrainedTokenizerFast:
    """GPT-2-style byte-level BPE (no BOS added, like SmolLM2)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000, min_frequency=2, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<s>"]
    )
    tok.train_from_iterator(CORPUS, trainer)
    return _wrap(tok, bos_token="<s>", eos_token="<s>")


def build_sentencepiece() -> PreTrainedTokenizerFast:
    """SentencePiece-style BPE (as Llama's): spaces as "▁" (Metaspace), BOS put in front of every text."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # a newline stays one token (Llama's tokenizer writes it as the byte <0x0A>)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split("\n", "isolated"), pre_tokenizers.Metaspace(prepend_scheme="first")]
    )
    tok.decoder = decoders.Metaspace(prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, special_tokens=["<unk>", "<s>", "</s>"])
    # punctuation spaced apart in training, as a large corpus keeps it apart from most words
    tok.train_from_iterator([re.sub(r"([.,;:'])", r" \1", text) for text in CORPUS], trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return _wrap(tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module")
def tokenizers_by_family():
    return {"bpe": build_bpe(), "sentencepiece": build_sentencepiece(), "word": tokenizer.build_word_tokenizer()}


def tiny_llama(tok) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
    )
    return LlamaForCausalLM(config)


# ---------------------------------------------------------------- tokenizing in context


def test_separator_is_checked_where_it_occurs_not_before_another_comma(tokenizers_by_family):
    """SmolLM2's failure: ",," is one token, so the old check ("x," + "," + " y") rejected the
    record separator, although a prompt puts it after a name (" Bob," -> " Bob", ",")."""
    bpe = tokenizers_by_family["bpe"]
    assert bpe.convert_ids_to_tokens(bpe("x,, y", add_special_tokens=False)["input_ids"])[1] == ",,"
    found = vocab.task_vocab(bpe, n_animals=16, n_names=16)
    assert bpe.convert_ids_to_tokens([found.record_sep_id, found.query_sep_id, found.pad_id]) == [",", ";", "Ġ."]
    name = found.name_words[0]
    ids = bpe(f" cat {name}, dog", add_special_tokens=False)["input_ids"]
    assert found.record_sep_id in ids


def test_a_separator_that_merges_with_its_neighbour_is_rejected(tokenizers_by_family):
    """With "," as the pad, a record's "," and the pad after it would be read as one token ",,"."""
    bpe = tokenizers_by_family["bpe"]
    with pytest.raises(ValueError, match=r"paper layout .* does not fit this tokenizer: .*does not split"):
        vocab.task_vocab(bpe, pad=",")


@pytest.mark.parametrize("family", ["bpe", "sentencepiece", "word"])
def test_compiled_paper_template_equals_the_layout_from_ids(tokenizers_by_family, family):
    """The reference: the paper layout built from `task_vocab`'s ids equals the compiled template."""
    tok = tokenizers_by_family[family]
    v = vocab.task_vocab(tok)
    for probe, sizes in (("lookup", (1, 1)), ("needle", (2, 2))):
        compiled = templates.compile_template(tok, templates.get_template(probe, "paper"), probe, *sizes)
        from_ids = templates.paper_format(v, probe, True, *sizes)
        assert (compiled.record, compiled.query, compiled.demo, compiled.pad_id) == (
            from_ids.record,
            from_ids.query,
            from_ids.demo,
            from_ids.pad_id,
        )


@pytest.mark.parametrize("family", ["bpe", "sentencepiece"])
@pytest.mark.parametrize("protocol", ["prefix", "in-sequence"])
def test_natural_lookup_keeps_the_position_invariants_and_round_trips(tokenizers_by_family, family, protocol):
    tok = tokenizers_by_family[family]
    options = lookup.LookupOptions(
        n_records=12, n_demos=2, modulus=4, n_mappings=4, protocol=protocol, template="natural", seed=2
    )
    prefix = prompt_prefix(tok)
    ps = lookup.lookup_prompts(tok, options, prefix)  # includes the round-trip check
    form = lookup.lookup_format(tok, options)
    templates.check_round_trip(tok, ps.prompts, len(prefix), "natural", limit=len(ps.prompts), lead=form.lead)
    offset = ps.options["answer_offset"]
    assert offset == 2 and ps.options["template"] == "natural"  # "cat:"
    names, animals = set(form.words.name_ids), set(form.words.animal_ids)
    query = {p.query_position for p in ps.prompts}
    assert len(query) == 1
    sums = {}
    for p in ps.prompts:
        ids, t = p.input_ids, p.target_position
        assert t % 4 == p.residue and ids[: len(prefix)] == prefix
        assert ids[t + offset : t + offset + 1] == p.answer_ids and ids[-offset:] == ids[t : t + offset]
        assert ids[t] in animals and ids.count(ids[t]) == 2  # the target key: once in the records, once in the query
        assert ids.count(p.answer_ids[0]) == 1 and ids[t + offset] in names  # the answer occurs once
        c, s1, s2 = sums.get(p.residue, (0, 0, 0))
        sums[p.residue] = (c + 1, s1 + t, s2 + t * t)
    assert len(set(sums.values())) == 1  # equal count, mean and variance of t_K in every residue group
    # the padding is filler words (not one repeated token): the same words for every prompt of a mapping
    filler = set(form.words.filler_ids)
    assert form.filler_pad and filler and not filler & (names | animals)
    assert ps.options["padding_text"].startswith("filler words")
    words_of_unit = {}
    for p in ps.prompts:
        pads = sorted(i for i in p.input_ids[len(prefix) :] if i in filler)
        assert len(pads) == ps.options["padding"]
        assert words_of_unit.setdefault(p.unit, pads) == pads
    assert len({tuple(w) for w in words_of_unit.values()}) == len(words_of_unit)  # drawn per mapping


@pytest.mark.parametrize("family", ["bpe", "sentencepiece"])
def test_natural_needle_keeps_the_position_invariants(tokenizers_by_family, family):
    tok = tokenizers_by_family[family]
    options = needle.NeedleOptions(context_length=200, n_records=8, modulus=4, n_haystacks=4, template="natural")
    ps = needle.needle_prompts(tok, options, prompt_prefix(tok))
    offset = ps.options["answer_offset"]
    assert offset == 3  # "cat dog:"
    for p in ps.prompts:
        ids, t = p.input_ids, p.target_position
        assert len(ids) == 200 and p.query_position == 199 and t % 4 == p.residue
        assert ids[t + offset : t + offset + 2] == p.answer_ids and ids[-offset:] == ids[t : t + offset]


def test_natural_template_needs_its_words_in_the_vocabulary(tokenizers_by_family):
    with pytest.raises(ValueError, match=r"sentence template's record text .* unknown to tokenizer"):
        lookup.lookup_format(tokenizers_by_family["word"], lookup.LookupOptions(template="sentence"))
    with pytest.raises(ValueError, match="unknown lookup template 'prose'"):
        templates.get_template("lookup", "prose")
    with pytest.raises(ValueError, match="must end with the record's text"):
        bad = templates.Template("bad", "", record=" The {key}'s owner is {value}.", query=" The {key} is", pad=" .")
        templates.compile_template(tokenizers_by_family["bpe"], bad, "lookup")


def test_round_trip_failure_names_tokenizer_and_template(tokenizers_by_family):
    bpe = tokenizers_by_family["bpe"]
    comma = bpe.convert_tokens_to_ids(",")
    prompt = lookup.Prompt([comma, comma], [comma], 0, 1, 0, 0, 0)
    with pytest.raises(ValueError, match=r"natural template's prompts do not survive .* with tokenizer"):
        templates.check_round_trip(bpe, [prompt], 0, "natural")


def test_needle_values_are_distinct_within_every_haystack(tokenizers_by_family):
    """Values used to be drawn with replacement: 3 of the 64 default haystacks repeated the
    target's value in another record."""
    v = vocab.task_vocab(tokenizers_by_family["word"])
    prompts = needle.NeedlePrompts(v, needle.NeedleOptions())
    for unit in range(64):
        values = prompts.haystack(unit).values
        assert len({tuple(row) for row in values}) == len(values)
    few = vocab.TaskVocab(**{**vars(v), "name_ids": v.name_ids[:3], "name_words": v.name_words[:3]})
    with pytest.raises(ValueError, match="3 names give only 9 distinct 2-token values"):
        needle.NeedlePrompts(few, needle.NeedleOptions(context_length=200, n_records=10))


def test_constant_flip_pattern_says_so():
    pattern = PhasePattern(period=4, favoured=[0, 0, 0, 0], agree=16, total=16)
    assert pattern.describe(["8", "32"]) == "8 at every length (constant: no phase pattern)"
    mixed = PhasePattern(period=4, favoured=[1, 1, 0, None], agree=12, total=16)
    assert mixed.describe(["8", "32"]) == "8 when L mod 4 in {2}; 32 when L mod 4 in {0, 1}"


def test_flip_natural_template_starts_the_context_on_a_new_line(tokenizers_by_family):
    bpe = tokenizers_by_family["bpe"]
    newline, context = flip.seam_ids(bpe, "natural", FLIP_CONTEXT)
    assert bpe.decode(newline + context) == "\n" + FLIP_CONTEXT
    sets = flip.make_flip_families(bpe, context, [3, 4], ["lorem"], separator=newline)
    p = sets["lorem"].prompts[1]
    assert p.input_ids[4 : 4 + len(newline)] == newline and p.input_ids[-len(context) :] == context
    with pytest.raises(ValueError, match="unknown flip template"):
        flip.seam_ids(bpe, "prose", FLIP_CONTEXT)


# ---------------------------------------------------------------- every probe on every family


CASES = [(f, t) for f in ("bpe", "sentencepiece") for t in ("paper", "natural", "sentence")] + [("word", "paper")]


@pytest.mark.parametrize(("family", "template"), CASES)
def test_every_probe_runs_end_to_end(tokenizers_by_family, family, template):
    tok = tokenizers_by_family[family]
    scorer = HFScorer(tiny_llama(tok), tok, batch_size=64)
    for protocol in ("prefix", "in-sequence"):
        options = lookup.LookupOptions(
            n_records=8, n_demos=1, modulus=2, n_mappings=2, protocol=protocol, template=template
        )
        result = run_lookup(scorer, options, n_resamples=50, progress=False)
        assert result["options"]["template"] == template and result["n_prompts"] == 2 * 2 * 2
        checks = {k: v for k, v in result["controls"].items() if k != "query_positions"}
        assert all(checks.values()), result["controls"]
    options = needle.NeedleOptions(context_length=96, n_records=4, n_haystacks=2, modulus=2, template=template)
    result = run_needle(scorer, options, progress=False)
    assert result["options"]["template"] == template
    assert all(v for k, v in result["controls"].items() if k != "query_positions"), result["controls"]
    options = FlipOptions(
        context=FLIP_CONTEXT,
        min_length=2,
        n_lengths=4,
        families=("lorem", "equals"),
        n_permutations=20,
        template=template,
    )
    result = run_flip(scorer, options, progress=False)
    assert result["options"]["template"] == template and np.isfinite(result["families"]["lorem"]["logprobs"]).all()
    assert "the model's own next token is no candidate at" in format_flip(result)  # a random model's top-1
