"""Tests of the prompt generators: word lists, tokenizers, moment-matched placement, lookup,
needle and flip probes."""

from __future__ import annotations

import json
import time
from fractions import Fraction

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from phasekv.studies.flip import prompts as flip
from phasekv.tasks import lookup, needle, placement, tokenizer, vocab, words

# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def word_tok():
    return tokenizer.build_word_tokenizer()


@pytest.fixture(scope="module")
def word_vocab(word_tok):
    return vocab.task_vocab(word_tok, n_animals=64, n_names=64)


@pytest.fixture(scope="module")
def bpe_tok():
    """A small byte-level BPE trained here: the first 60 animals and names are frequent and become
    single tokens, the rest are rare and mostly split."""
    frequent = " " + " ".join(words.animals()[:60] + words.names()[:60] + words.filler_words()) + " , ; ."
    rare = " ".join(words.animals()[60:] + words.names()[60:])
    corpus = [frequent] * 50 + [rare]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000,
        min_frequency=20,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<bos>"],
    )
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>")


def group_sums(prompts, modulus):
    """Per residue: (count, sum t_K, sum t_K^2) as exact integers."""
    sums = {}
    for p in prompts:
        c, s1, s2 = sums.get(p.residue, (0, 0, 0))
        sums[p.residue] = (c + 1, s1 + p.target_position, s2 + p.target_position**2)
    assert sorted(sums) == list(range(modulus))
    return sums


def assert_position_controls(prompt_set, modulus):
    prompts = list(prompt_set.prompts)
    sums = group_sums(prompts, modulus)
    assert len(set(sums.values())) == 1, "mean or variance of t_K differs between residue groups"
    query = {p.query_position for p in prompts}
    assert len(query) == 1 and {len(p.input_ids) for p in prompts} == {query.pop() + 1}
    for p in prompts:
        assert p.target_position % modulus == p.residue
    stats = prompt_set.position_stats
    json.dumps({"options": prompt_set.options, "stats": stats})
    assert len({(s["mean_target_position"], s["var_target_position"], s["query_position"]) for s in stats}) == 1


# ---------------------------------------------------------------- word lists and tokenizers


def test_word_lists():
    animals, names, filler = words.animals(), words.names(), words.filler_words()
    assert len(set(animals)) == len(animals) >= 200
    assert len(set(names)) == len(names) >= 200
    assert len(set(filler)) == len(filler) >= 200
    assert all(w.isalpha() and w.islower() for w in animals)
    assert all(w.isalpha() and w[0].isupper() and w[1:].islower() for w in names)
    lowered = [{w.lower() for w in group} for group in (animals, names, filler)]
    assert not (lowered[0] & lowered[1] or lowered[0] & lowered[2] or lowered[1] & lowered[2])
    assert len(words.filler_families()) >= 4
    with pytest.raises(ValueError, match="unknown filler family"):
        words.filler_text("nope", 1)


def test_word_tokenizer_is_deterministic_and_round_trips(tmp_path, word_tok):
    expected = len(tokenizer.word_vocabulary())
    assert len(word_tok) == expected == len(tokenizer.build_word_tokenizer())
    assert word_tok.get_vocab() == tokenizer.build_word_tokenizer().get_vocab()
    path = tokenizer.save_word_tokenizer(tmp_path, word_tok)
    assert path.name == "tokenizer.json"
    text = "<bos> cat Alice , dog Bob ; 1 2 3 = = the"
    loaded = PreTrainedTokenizerFast(tokenizer_file=str(path))
    assert loaded(text)["input_ids"] == word_tok(text)["input_ids"]
    again = tokenizer.load_word_tokenizer(tmp_path)
    assert (again.pad_token_id, again.bos_token_id) == (word_tok.pad_token_id, word_tok.bos_token_id)
    assert PreTrainedTokenizerFast.from_pretrained(tmp_path)("cat 42")["input_ids"] == word_tok("cat 42")["input_ids"]
    assert word_tok("cat,dog 42", add_special_tokens=False).input_ids == word_tok.convert_tokens_to_ids(
        ["cat", ",", "dog", "4", "2"]
    )


def test_word_vocab_keeps_every_word(word_tok, word_vocab):
    assert len(word_vocab.animal_ids) == len(words.animals())
    assert len(word_vocab.name_ids) == len(words.names())
    assert set(word_vocab.animal_ids).isdisjoint(word_vocab.name_ids)
    assert word_tok.convert_ids_to_tokens(list(word_vocab.animal_ids[:3])) == list(words.animals()[:3])


def test_bpe_single_token_filtering_in_context(bpe_tok):
    found = vocab.task_vocab(bpe_tok)
    assert 60 <= len(found.animal_ids) < len(words.animals())
    assert 60 <= len(found.name_ids) < len(words.names())
    for word, tok_id in zip(found.animal_words, found.animal_ids, strict=True):
        ids = bpe_tok(f"x, {word} y", add_special_tokens=False)["input_ids"]
        assert tok_id in ids and bpe_tok.decode([tok_id]) == " " + word
    split_words = [w for w in words.animals() if w not in found.animal_words]
    assert all(len(bpe_tok(" " + w, add_special_tokens=False)["input_ids"]) > 1 for w in split_words)


def test_too_few_single_tokens_error(bpe_tok):
    have = len(vocab.task_vocab(bpe_tok).animal_ids)
    with pytest.raises(ValueError, match=rf"only {have} animals are single tokens.*needs 240 distinct animals"):
        vocab.task_vocab(bpe_tok, n_animals=240)
    small = vocab.task_vocab(bpe_tok)
    with pytest.raises(ValueError, match="needs 240 distinct"):
        lookup.make_lookup(small, lookup.LookupOptions(n_records=240, modulus=2, n_mappings=4))


def test_single_token_ids_rejects_tokens_that_reach_into_context(word_tok):
    assert vocab.single_token_ids(word_tok, [" cat", " catdog", " cat dog"]) == {
        " cat": word_tok.convert_tokens_to_ids("cat")
    }
    with pytest.raises(ValueError, match="record separator"):
        vocab.task_vocab(word_tok, record_sep=" ,,")


# ---------------------------------------------------------------- moment-matched placement


@pytest.mark.parametrize("modulus", [1, 2, 3, 4, 5, 7, 8, 12, 24, 31])
@pytest.mark.parametrize("blocks", [1, 2, 3])
def test_design_moments_exact(modulus, blocks):
    design = placement.moment_matched_design(modulus, blocks)
    positions = design.by_residue(origin=1000)
    assert sorted(positions) == list(range(modulus))
    for r, pos in positions.items():
        assert len(pos) == modulus**2 * blocks
        assert np.all(pos % modulus == r)
        assert placement.exact_moments(pos) == (design.mean + 1000, design.variance)
    assert design.variance == Fraction(modulus**2 - 1, 4) + Fraction(modulus**2 * (blocks**2 - 1), 12)


@pytest.mark.parametrize("modulus", range(3, 13))
def test_no_exact_design_smaller_than_modulus_squared(modulus):
    """The necessary conditions of the placement docstring fail for every n = M m with m < M."""
    for m in range(1, modulus):
        for a in range(2 * modulus * m):
            g = [m * r * r - 2 * r * a for r in range(modulus)]
            if any(v % modulus for v in g):
                continue
            parities = {(v // modulus + m * r - a) % 2 for r, v in enumerate(g)}
            assert len(parities) > 1, (modulus, m, a)


def test_assign_needs_whole_designs():
    design = placement.moment_matched_design(4)
    rng = np.random.default_rng(0)
    assert placement.assign(design.offsets[0], 8, 2, rng).shape == (8, 2)
    with pytest.raises(ValueError, match="not a multiple of the design size 16"):
        placement.assign(design.offsets[0], 5, 1, rng)
    assert placement.placements_needed(64, 576) == 9


# ---------------------------------------------------------------- lookup


@pytest.mark.parametrize("protocol", ["prefix", "in-sequence"])
@pytest.mark.parametrize(("modulus", "n_mappings", "records"), [(3, 9, 16), (4, 8, 24), (8, 16, 32), (24, 24, 64)])
def test_lookup_position_controls(word_vocab, protocol, modulus, n_mappings, records):
    options = lookup.LookupOptions(
        n_records=records, n_demos=4, modulus=modulus, n_mappings=n_mappings, protocol=protocol, seed=3
    )
    prefix = [1, 7, 9]
    ps = lookup.make_lookup(word_vocab, options, prefix_ids=prefix)
    assert len(ps.prompts) == n_mappings * modulus * ps.options["placements_per_mapping"]
    assert_position_controls(ps, modulus)
    assert min(p.target_position for p in ps.prompts) >= len(prefix)
    animals, names = set(word_vocab.animal_ids), set(word_vocab.name_ids)
    for p in ps.prompts:
        ids, t = p.input_ids, p.target_position
        assert ids[: len(prefix)] == prefix
        assert ids[t] in animals and ids[t] == ids[-1]
        assert [ids[t + 1]] == p.answer_ids and ids[t + 1] in names
        assert ids.count(ids[-1]) == 2  # the target key appears once in the records, once as the query


def test_lookup_same_mapping_at_every_residue(word_vocab):
    options = lookup.LookupOptions(n_records=16, n_demos=3, modulus=4, n_mappings=4, placements_per_mapping=4)
    ps = lookup.make_lookup(word_vocab, options)
    pad = word_vocab.pad_id
    for unit in range(4):
        contents = {tuple(x for x in p.input_ids if x != pad) for p in ps.prompts if p.unit == unit}
        residues = {p.residue for p in ps.prompts if p.unit == unit}
        assert len(contents) == 1 and residues == set(range(4))


def _record_key_positions(prompt, animals, n_demos):
    records = prompt.input_ids[: -(3 * n_demos + 2)]
    return [i for i, x in enumerate(records) if x in animals]


def test_in_sequence_varies_distractor_gaps(word_vocab):
    animals = set(word_vocab.animal_ids)
    for protocol, lockstep in (("prefix", True), ("in-sequence", False)):
        options = lookup.LookupOptions(
            n_records=16, n_demos=2, modulus=4, n_mappings=2, placements_per_mapping=8, protocol=protocol
        )
        ps = lookup.make_lookup(word_vocab, options)
        relative = {
            tuple(np.array(_record_key_positions(p, animals, 2)) - p.target_position) for p in ps.prompts if p.unit == 0
        }
        assert (len(relative) == 1) is lockstep, protocol


def test_lookup_determinism_and_splits(word_vocab):
    options = lookup.LookupOptions(n_records=16, n_demos=2, modulus=4, n_mappings=4, protocol="in-sequence")
    a, b = lookup.make_lookup(word_vocab, options), lookup.make_lookup(word_vocab, options)
    assert [p.input_ids for p in a.prompts] == [p.input_ids for p in b.prompts]
    c = lookup.make_lookup(word_vocab, lookup.LookupOptions(**{**vars(options), "seed": 1}))
    assert [p.input_ids for p in a.prompts] != [p.input_ids for p in c.prompts]
    calibration = lookup.make_lookup(word_vocab, lookup.LookupOptions(**{**vars(options), "split": "calibration"}))

    def mappings(ps):
        return {tuple(x for x in p.input_ids if x in set(word_vocab.animal_ids)) for p in ps.prompts}

    assert mappings(a).isdisjoint(mappings(calibration))
    assert a.options["split"] == "eval" and calibration.options["split"] == "calibration"


@pytest.mark.parametrize("protocol", ["prefix", "in-sequence"])
def test_lookup_held_out_pairs_only(word_vocab, protocol):
    from phasekv.tasks.heldout import HeldOutPairs

    word_of = dict(zip(word_vocab.animal_ids, word_vocab.animal_words, strict=True))
    word_of |= dict(zip(word_vocab.name_ids, word_vocab.name_words, strict=True))
    animals, names = set(word_vocab.animal_ids), set(word_vocab.name_ids)

    def prompt_pairs(p):
        ids = p.input_ids
        return [(ids[j], ids[j + 1]) for j in range(len(ids) - 1) if ids[j] in animals and ids[j + 1] in names]

    def pairs(ps):
        return {pair for p in ps.prompts for pair in prompt_pairs(p)}

    base = dict(n_records=32, n_demos=4, modulus=4, n_mappings=8, protocol=protocol, seed=5)
    for seed, modulus in ((0, 4), (3, 5)):
        held = HeldOutPairs(seed=seed, modulus=modulus)
        options = lookup.LookupOptions(**base, held_out_seed=seed, held_out_modulus=modulus)
        eval_set = lookup.make_lookup(word_vocab, options)
        calibration = lookup.make_lookup(word_vocab, lookup.LookupOptions(**{**vars(options), "split": "calibration"}))
        for ps in (eval_set, calibration):
            assert all(len(prompt_pairs(p)) == 32 + 4 for p in ps.prompts)  # every record and demo
            assert all(held.contains(word_of[a], word_of[n]) for a, n in pairs(ps))
            for p in ps.prompts:
                assert held.contains(word_of[p.input_ids[-1]], word_of[p.answer_ids[0]])
            assert_position_controls(ps, 4)
        assert eval_set.options["held_out_seed"] == seed and eval_set.options["held_out_modulus"] == modulus
        assert eval_set.options["pairs"].startswith("held out of training")

        def mappings(ps):
            return {tuple(x for x in p.input_ids if x in animals or x in names) for p in ps.prompts}

        assert mappings(eval_set).isdisjoint(mappings(calibration))
    anywhere = pairs(lookup.make_lookup(word_vocab, lookup.LookupOptions(**base)))
    held = HeldOutPairs()
    assert not all(held.contains(word_of[a], word_of[n]) for a, n in anywhere)  # default: any pairs
    json.dumps(eval_set.options)


def test_lookup_held_out_too_few_names(word_tok):
    small = vocab.task_vocab(word_tok)
    small = vocab.TaskVocab(**{**vars(small), "name_words": small.name_words[:40], "name_ids": small.name_ids[:40]})
    with pytest.raises(ValueError, match="held-out pairs"):
        lookup.make_lookup(small, lookup.LookupOptions(n_records=32, modulus=4, n_mappings=4, held_out_seed=0))


def test_lookup_bad_options(word_vocab):
    with pytest.raises(ValueError, match="padding of 3 tokens is too small"):
        lookup.make_lookup(word_vocab, lookup.LookupOptions(n_records=16, modulus=4, n_mappings=4, padding=3))
    with pytest.raises(ValueError, match="not a multiple of the design size 16"):
        lookup.make_lookup(
            word_vocab, lookup.LookupOptions(n_records=16, modulus=4, n_mappings=4, placements_per_mapping=3)
        )
    with pytest.raises(ValueError, match="unknown padding protocol"):
        lookup.make_lookup(word_vocab, lookup.LookupOptions(protocol="suffix"))
    with pytest.raises(ValueError, match="n_demos"):
        lookup.make_lookup(word_vocab, lookup.LookupOptions(n_records=4, n_demos=4))
    with pytest.raises(ValueError, match="unknown split"):
        lookup.make_lookup(word_vocab, lookup.LookupOptions(n_records=16, modulus=4, n_mappings=4, split="test"))


def test_lookup_with_bpe_tokenizer(bpe_tok):
    v = vocab.task_vocab(bpe_tok, n_animals=32, n_names=32)
    ps = lookup.make_lookup(
        v,
        lookup.LookupOptions(n_records=32, n_demos=4, modulus=8, n_mappings=8),
        prefix_ids=[bpe_tok.bos_token_id],
    )
    assert_position_controls(ps, 8)
    text = bpe_tok.decode(ps.prompts[0].input_ids[1:])
    assert text.endswith(bpe_tok.decode([ps.prompts[0].input_ids[-1]]))


# ---------------------------------------------------------------- needle


@pytest.mark.parametrize("protocol", ["prefix", "in-sequence"])
@pytest.mark.parametrize("modulus", [4, 8])
def test_needle_position_controls(word_vocab, protocol, modulus):
    options = needle.NeedleOptions(
        context_length=1024, n_records=100, modulus=modulus, n_haystacks=modulus, protocol=protocol
    )
    ps = needle.make_needle(word_vocab, options, prefix_ids=[1])
    assert len(ps.prompts) == modulus * modulus * ps.options["placements_per_haystack"]
    assert_position_controls(ps, modulus)
    for p in ps.prompts:
        ids, t = p.input_ids, p.target_position
        key = ids[t : t + 2]
        assert ids[-2:] == key and ids[t + 2 : t + 4] == p.answer_ids and len(p.answer_ids) == 2
        assert ids[t - 1] == word_vocab.record_sep_id
        records = [tuple(ids[i + 1 : i + 3]) for i, x in enumerate(ids[:-3]) if x == word_vocab.record_sep_id]
        assert len(records) == 100 and records.count(tuple(key)) == 1
        assert abs(t - len(ids) / 2) < len(ids) / 8  # the target sits near the middle


def test_needle_same_haystack_at_every_residue_and_deterministic(word_vocab):
    options = needle.NeedleOptions(context_length=600, n_records=50, modulus=4, n_haystacks=4)
    a = needle.make_needle(word_vocab, options)
    b = needle.make_needle(word_vocab, options)
    assert [p.input_ids for p in a.prompts] == [p.input_ids for p in b.prompts]
    sep = word_vocab.record_sep_id
    for unit in range(4):
        records = {
            tuple(tuple(p.input_ids[i : i + 5]) for i, x in enumerate(p.input_ids) if x == sep)
            for p in a.prompts
            if p.unit == unit
        }
        assert len(records) == 1
    calibration = needle.make_needle(word_vocab, needle.NeedleOptions(**{**vars(options), "split": "calibration"}))
    eval_keys = {a.prompts.haystack(u).keys.tobytes() for u in range(4)}
    calibration_keys = {calibration.prompts.haystack(u).keys.tobytes() for u in range(4)}
    assert eval_keys.isdisjoint(calibration_keys)


def test_needle_bad_options(word_vocab):
    with pytest.raises(ValueError, match="filler tokens"):
        needle.make_needle(word_vocab, needle.NeedleOptions(context_length=520, n_records=100))
    with pytest.raises(ValueError, match="distinct 2-token keys"):
        needle.make_needle(word_vocab, needle.NeedleOptions(context_length=10**6, n_records=70000))


def test_needle_128k_builds_fast(word_vocab):
    options = needle.NeedleOptions(context_length=131072, n_records=16000, n_haystacks=64)
    ps = needle.make_needle(word_vocab, options, prefix_ids=[1])
    start = time.perf_counter()
    prompt = ps.prompts[5]
    elapsed = time.perf_counter() - start
    assert len(prompt.input_ids) == 131072 and prompt.query_position == 131071
    assert elapsed < 1.0, f"a 128K-token needle prompt took {elapsed:.2f} s"


# ---------------------------------------------------------------- flip


def test_flip_prompts_grow_one_token(word_tok):
    context = word_tok("T . Cast ( FP", add_special_tokens=False)["input_ids"]
    sets = flip.make_flip_families(word_tok, context, range(10, 26), prefix_ids=[word_tok.bos_token_id])
    assert len(sets) >= 4
    for family, fs in sets.items():
        assert [p.filler_length for p in fs.prompts] == list(range(10, 26))
        for shorter, longer in zip(fs.prompts, fs.prompts[1:], strict=False):
            assert len(longer.input_ids) == len(shorter.input_ids) + 1
            assert longer.input_ids[: len(shorter.input_ids) - len(context)] == shorter.input_ids[: -len(context)]
        for p in fs.prompts:
            assert p.input_ids[-len(context) :] == context and p.input_ids[0] == word_tok.bos_token_id
            assert p.query_position == len(p.input_ids) - 1 and p.family == family
            assert word_tok.unk_token_id not in p.input_ids[1 : 1 + p.filler_length]
    with pytest.raises(ValueError, match="filler lengths"):
        flip.make_flip(context, [5, 5], [3])


@pytest.mark.parametrize("template", ["paper", "natural"])
@pytest.mark.parametrize("n_records", [1, 2, 3, 4, 5])
def test_the_default_padding_fits_every_record_count(n_records, template):
    """Fewer than 4 records once left the default padding below what the design needs."""
    tok = tokenizer.build_word_tokenizer()
    options = lookup.LookupOptions(n_records=n_records, n_demos=0, modulus=24, n_mappings=2, template=template)
    prompts = lookup.lookup_prompts(tok, options)
    assert {p.residue for p in prompts.prompts} == set(range(24))
