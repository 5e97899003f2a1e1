"""The animal-to-name lookup probe (paper, "Controlled pretraining").

Token layout (ids; P = len(prefix_ids), L = record length, A = padding):

    prefix | slot_0 pads | a_0 n_0 , | slot_1 pads | a_1 n_1 , | ... | a_{R-1} n_{R-1} , | slot_R pads
           | ; a n ; a n ... (D demonstrations) | ; a_k

This is the `paper` template: each record is an animal key followed directly by its name (then
the record separator, unless `record_separator=False`). The prompt ends with the target animal
a_k; the answer is n_k, the token right after the target key in the records. Other templates
(`templates.LOOKUP_TEMPLATES`, e.g. `natural`: " cat: Bob,") write records, demonstrations and
the query as other text; the query then ends with the record's key phrase (" cat:") and the
answer follows it. The padding slots hold A pad tokens in all (the
template's pad token, or filler words drawn per mapping for `natural` and `sentence`), so
the query position P + A + R L + (demonstrations and query) - 1 is the same for every prompt.

Held-out pairs: with `held_out_seed` set, every record's (animal, name) pair (hence every
demonstration and the target) is one the training mixture held out
(`phasekv.tasks.heldout.HeldOutPairs(held_out_seed, held_out_modulus)`), so a model trained on that
mixture never saw the pairs it is asked about. Use the training run's held-out seed and modulus.

Placement: target-key positions come from `placement.moment_matched_design` (exact equal mean
and variance of t_K across the M residue groups); a mapping (records, their order, the target
record k and the demonstrations) is fixed, and for every residue it is placed at
`placements_per_mapping` design positions by choosing how much padding precedes record k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from phasekv.memory import PER_PROMPT_BYTES, check_fits
from phasekv.tasks import layout, placement
from phasekv.tasks.heldout import HeldOutPairs, assign_names
from phasekv.tasks.prompts import Prompt, PromptSet, content_rng, filler_rng, placement_rng
from phasekv.tasks.templates import PromptFormat, check_round_trip, compile_template, get_template, paper_format
from phasekv.tasks.vocab import TaskVocab


@dataclass(frozen=True)
class LookupOptions:
    """Options of a lookup run (JSON-serialisable through `dataclasses.asdict`).

    `padding` is the total number of pad tokens per prompt (None: the design span plus a quarter
    of the records, so the target record varies over the middle half of the list, and at least what
    the design needs, see `default_padding`);
    `placements_per_mapping` None picks the fewest that make the groups exact. `held_out_seed`
    None draws names from any pairs; an integer draws every (animal, name) pair from the pairs
    `HeldOutPairs(held_out_seed, held_out_modulus)` holds out of training (both splits).
    `template` names the record template (`templates.LOOKUP_TEMPLATES`).
    """

    n_records: int = 64
    n_demos: int = 8
    modulus: int = 24
    n_mappings: int = 64
    placements_per_mapping: int | None = None
    protocol: str = "prefix"
    padding: int | None = None
    spread_blocks: int = 1
    record_separator: bool = True
    seed: int = 0
    split: str = "eval"
    held_out_seed: int | None = None
    held_out_modulus: int = 4
    template: str = "paper"


@dataclass(frozen=True)
class Mapping:
    """The content of one lookup unit: record keys and names in order, target record, demos."""

    animal_ids: np.ndarray
    name_ids: np.ndarray
    target: int
    demos: np.ndarray


def held_out_matrix(vocab: TaskVocab, options: LookupOptions) -> np.ndarray | None:
    """[animals, names] bool over `vocab`'s words: True where the pair is held out of training;
    None when `options.held_out_seed` is None (any pair allowed)."""
    if options.held_out_seed is None:
        return None

    pairs = HeldOutPairs(seed=options.held_out_seed, modulus=options.held_out_modulus)
    return pairs.matrix(vocab.animal_words, vocab.name_words)


def draw_mapping(
    vocab: TaskVocab,
    options: LookupOptions,
    index: int,
    k_min: int,
    k_max: int,
    held: np.ndarray | None = None,
) -> Mapping:
    """Mapping `index` of `options.split`, reproducible from (seed, split, index) alone.

    `held` (from `held_out_matrix`) restricts every record's pair to held-out pairs.
    """
    rng = content_rng(options.seed, options.split, index)
    r = options.n_records
    animal_ids, name_ids = np.asarray(vocab.animal_ids), np.asarray(vocab.name_ids)
    rows = rng.choice(len(animal_ids), size=r, replace=False)
    animals = animal_ids[rows]
    if held is None:
        names = name_ids[rng.choice(len(name_ids), size=r, replace=False)]
    else:
        try:
            names = name_ids[assign_names(rng, held, rows, held_out=True)]
        except ValueError as err:
            raise ValueError(
                f"cannot draw {r} records from held-out pairs (held_out_seed={options.held_out_seed}, "
                f"modulus {options.held_out_modulus}) with {len(animal_ids)} animals and {len(name_ids)} names: {err}"
            ) from None
    target = int(rng.integers(k_min, k_max + 1))
    others = np.delete(np.arange(r), target)
    demos = rng.choice(others, size=options.n_demos, replace=False)
    return Mapping(animals, names, target, demos)


def _check(vocab: TaskVocab, o: LookupOptions) -> None:
    layout.check_protocol(o.protocol)
    if o.n_records < 1 or o.n_mappings < 1 or o.modulus < 1:
        raise ValueError("n_records, n_mappings and modulus must be >= 1")
    if o.held_out_seed is not None and o.held_out_modulus < 2:
        raise ValueError(f"held_out_modulus must be >= 2, got {o.held_out_modulus}")
    if not 0 <= o.n_demos <= o.n_records - 1:
        raise ValueError(f"n_demos must be in 0..n_records-1 = {o.n_records - 1}, got {o.n_demos}")
    vocab.require(o.n_records, o.n_records)


def lookup_format(tokenizer, options: LookupOptions) -> PromptFormat:
    """`options.template` compiled for `tokenizer` (`templates.compile_template`)."""
    template = get_template("lookup", options.template, options.record_separator)
    return compile_template(tokenizer, template, "lookup")


def lookup_prompts(tokenizer, options: LookupOptions, prefix_ids: Sequence[int] = ()) -> PromptSet:
    """`make_lookup` with the template compiled for `tokenizer`; the prompts' text must re-encode
    to the same ids (`templates.check_round_trip`)."""
    form = lookup_format(tokenizer, options)
    prompt_set = make_lookup(form, options, prefix_ids)
    check_round_trip(tokenizer, prompt_set.prompts, len(prefix_ids), options.template, lead=form.lead)
    return prompt_set


def make_lookup(
    vocab: TaskVocab | PromptFormat, options: LookupOptions = LookupOptions(), prefix_ids: Sequence[int] = ()
) -> PromptSet:
    """All lookup prompts of a run: n_mappings x modulus residues x placements_per_mapping.

    `vocab` is a compiled template (`lookup_format`), or for the paper template the ids of
    `task_vocab`. `prefix_ids` (BOS, chat-template opening) start every prompt; positions count them.
    """
    o = options
    form = _format(vocab, o)
    vocab = form.words
    _check(vocab, o)
    design = placement.moment_matched_design(o.modulus, o.spread_blocks)
    per_mapping = o.placements_per_mapping or placement.placements_needed(o.n_mappings, design.size)
    rec_len = form.record_length
    padding = default_padding(design.span, rec_len, o.n_records) if o.padding is None else o.padding
    start = len(prefix_ids)
    key_start = start + form.key_offset  # where record 0's key sits when no padding precedes it
    origin, k_min, k_max = layout.target_window(
        design.low, design.low + design.span, padding, rec_len, o.n_records, key_start
    )
    tail_length = o.n_demos * form.demo.length(form.sizes) + form.query.length(form.sizes)
    length = start + padding + o.n_records * rec_len + tail_length
    # every prompt is built now: its token ids, its dealt position (twice over) and later its score
    check_fits(
        (8 * length + 16 + PER_PROMPT_BYTES) * o.n_mappings * o.modulus * per_mapping,
        f"{o.n_mappings} mappings x {o.modulus} residues x {per_mapping} placements of {length} tokens",
        "lower --mappings (or --modulus, --records)",
    )
    positions = design.by_residue(origin)
    dealing = placement_rng(o.seed, o.split, 0)
    dealt = {r: placement.assign(positions[r], o.n_mappings, per_mapping, dealing) for r in sorted(positions)}
    gaps = placement_rng(o.seed, o.split, 1)
    held = held_out_matrix(vocab, o)
    prompts = []
    for i in range(o.n_mappings):
        mapping = draw_mapping(vocab, o, i, k_min, k_max, held)
        records = form.record.render({"key": mapping.animal_ids, "value": mapping.name_ids})
        tail = _tail(form, mapping)
        pads = _padding_ids(form, o, i, padding)
        for r in sorted(dealt):
            for p, t in enumerate(dealt[r][i]):
                before = int(t) - key_start - mapping.target * rec_len
                slots = layout.padding_slots(o.protocol, o.n_records, mapping.target, before, padding, gaps)
                ids = _assemble(prefix_ids, records, slots, tail, pads, length)
                prompts.append(
                    Prompt(
                        input_ids=ids,
                        answer_ids=[int(mapping.name_ids[mapping.target])],
                        target_position=int(t),
                        query_position=length - 1,
                        residue=r,
                        unit=i,
                        placement=p,
                    )
                )
    record = {
        **asdict(o),
        "placements_per_mapping": per_mapping,
        "padding": padding,
        **form.describe(),
        "prefix_length": start,
        "design_size": design.size,
        "design_mean_offset": str(design.mean),
        "design_variance": str(design.variance),
        "target_record_range": [k_min, k_max],
        "query_position": length - 1,
        "pairs": "any"
        if held is None
        else f"held out of training: HeldOutPairs(seed={o.held_out_seed}, modulus={o.held_out_modulus})",
    }
    stats = placement.position_stats({r: dealt[r].ravel() for r in dealt}, length - 1)
    return PromptSet(task="lookup", options=record, prompts=prompts, position_stats=stats)


def _format(source: TaskVocab | PromptFormat, options: LookupOptions) -> PromptFormat:
    if isinstance(source, PromptFormat):
        if source.template != options.template:
            raise ValueError(
                f"the prompt format is the {source.template!r} template but options ask for {options.template!r}"
            )
        return source
    if options.template != "paper":
        raise ValueError(f"the {options.template!r} template must be compiled for the tokenizer: use lookup_format")
    return paper_format(source, "lookup", options.record_separator)


def default_padding(span: int, record_length: int, n_records: int) -> int:
    """The design span plus a quarter of the records, and never less than every design position needs
    (the span and one record less a token): a list of fewer than 4 records still reaches them all."""
    return span + max(record_length * (n_records // 4), record_length - 1)


def _padding_ids(form: PromptFormat, options: LookupOptions, unit: int, padding: int) -> int | np.ndarray:
    """What fills a unit's `padding` positions, in order: the template's pad token, or filler words drawn
    for this unit (the same words at every residue: only their split before and after the records moves)."""
    if not form.filler_pad:
        return form.pad_id
    if not form.words.filler_ids:
        raise ValueError(f"the {form.template} template pads with filler words, but none is a single token here")
    rng = filler_rng(options.seed, options.split, unit)
    return rng.choice(np.asarray(form.words.filler_ids), size=padding)


def _tail(form: PromptFormat, mapping: Mapping) -> np.ndarray:
    """Demonstrations then the query, as one id array."""
    demos = form.demo.render({"key": mapping.animal_ids[mapping.demos], "value": mapping.name_ids[mapping.demos]})
    query = form.query.render({"key": mapping.animal_ids[[mapping.target]]})
    return np.concatenate([demos.ravel(), query.ravel()])


def unpadded_ids(vocab: TaskVocab | PromptFormat, options: LookupOptions, mapping: Mapping) -> list[int]:
    """The content of a mapping's prompt without any padding: records, demonstrations, query."""
    form = _format(vocab, options)
    records = form.record.render({"key": mapping.animal_ids, "value": mapping.name_ids})
    return [int(i) for i in (*records.ravel(), *_tail(form, mapping))]


def _assemble(
    prefix_ids: Sequence[int],
    records: np.ndarray,
    slots: np.ndarray,
    tail: np.ndarray,
    pads: int | np.ndarray,
    length: int,
) -> list[int]:
    n, rec_len = records.shape
    ids = np.full(length, -1, dtype=np.int64)
    start = len(prefix_ids)
    ids[:start] = prefix_ids
    record_starts = start + np.cumsum(slots[:n]) + rec_len * np.arange(n)
    ids[record_starts[:, None] + np.arange(rec_len)] = records
    ids[length - len(tail) :] = tail
    ids[ids < 0] = pads  # the padding positions, in order
    return ids.tolist()
