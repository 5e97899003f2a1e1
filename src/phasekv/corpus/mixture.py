"""A synthetic pretraining mixture that teaches in-context retrieval with every phase equally likely.

One sequence (T+1 tokens) is drawn like this:

1. A template (`token_patterns.TEMPLATES`, chosen with the `templates` weights): the evaluation's own
   lookup format is one part of the mixture, beside other formats and multi-token records.
2. R records, R from a curriculum (`records_start` growing linearly to `records` over the first
   `curriculum_fraction` of training; validation always uses `records`). Keys in a sequence are
   distinct. Single-token animal→name records never use a pair of the held-out partition
   (`heldout.HeldOutPairs`), so evaluation mappings built from held-out pairs are unseen.
3. Queries after the records: every record once, plus extra queries of uniformly drawn records up
   to `max_queries` in all, in random order. Only answer tokens (the value tokens of a query) are
   scored: the loss mask is part of the batch.
4. Filler: gaps of pad tokens or random filler words (per sequence, pad with
   `pad_gap_probability`) split at random before the records and between them; the rest of the
   sequence after the queries is filler too (never scored).
5. Phase: the whole content is shifted by U ~ Uniform{0, ..., phase_modulus-1} tokens of filler,
   drawn independently of everything else. Any position p of the unshifted layout lands at p + U,
   so every record's (and every target's) position mod `phase_modulus` is exactly uniform. The
   layout budget reserves the largest shift, so U never changes what fits.

When the records and queries do not fit T+1 tokens, extra queries are dropped first, then whole
records (with their queries); this depends only on the drawn lengths, never on U.

Sequence i of global batch b of a split is drawn from numpy's generator seeded with
(seed, split, b, i): deterministic, independent of the model, and resumable from b alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from phasekv.corpus.batch import Batch, split_index
from phasekv.corpus.token_patterns import KEY, TEMPLATES, VALUE, MixtureVocab, Template, mixture_vocab
from phasekv.tasks.heldout import HeldOutPairs, assign_names
from phasekv.tasks.tokenizer import build_word_tokenizer


@dataclass(frozen=True)
class MixtureConfig:
    """Options of the synthetic mixture (see the module docstring). `tokenizer`: a local HF tokenizer
    directory, or None for phasekv's word-level tokenizer."""

    templates: dict[str, float] = field(default_factory=lambda: {"lookup": 0.5, "pairs": 0.25, "multi": 0.25})
    records: int = 16
    records_start: int | None = 4
    curriculum_fraction: float = 0.4
    max_queries: int = 24
    phase_modulus: int = 24
    pad_gap_probability: float = 0.5
    held_out_seed: int = 0
    held_out_modulus: int = 4
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.templates) - set(TEMPLATES))
        if unknown or not self.templates:
            raise ValueError(f"unknown templates {unknown}; choose among {sorted(TEMPLATES)}")
        if any(w < 0 for w in self.templates.values()) or sum(self.templates.values()) <= 0:
            raise ValueError(f"template weights must be >= 0 with a positive sum, got {self.templates}")
        start = self.records if self.records_start is None else self.records_start
        if not 1 <= start <= self.records:
            raise ValueError(f"need 1 <= records_start ({start}) <= records ({self.records})")
        if not 0 <= self.curriculum_fraction <= 1:
            raise ValueError(f"curriculum_fraction must be in [0, 1], got {self.curriculum_fraction}")
        if self.max_queries < 1 or self.phase_modulus < 1:
            raise ValueError("max_queries and phase_modulus must be >= 1")

    def records_at(self, step: int, total_steps: int) -> int:
        """Number of records at training step `step` of `total_steps` (the curriculum)."""
        start = self.records if self.records_start is None else self.records_start
        ramp = self.curriculum_fraction * total_steps
        progress = 1.0 if ramp <= 0 else min(1.0, step / ramp)
        return int(round(start + (self.records - start) * progress))


@dataclass(frozen=True)
class SyntheticSequence:
    """tokens [L] int64, answer_mask [L] bool (True on scored answer tokens), target_positions
    [n_queries] (first key token of each query's record), the template name and the record count."""

    tokens: np.ndarray
    answer_mask: np.ndarray
    target_positions: np.ndarray
    template: str
    n_records: int


def _draw_kv(
    rng: np.random.Generator, vocab: MixtureVocab, t: Template, n: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """n distinct keys and their values as lists of token arrays."""
    if t.single_animal_name:
        rows = rng.choice(len(vocab.task.animal_ids), size=n, replace=False)
        cols = assign_names(rng, vocab.held, rows, held_out=False)
        animals, names = vocab.pool("animals"), vocab.pool("names")
        return [animals[[r]] for r in rows], [names[[c]] for c in cols]
    key_pool = vocab.pool("animals" if t.keys == "animals" else "mixed_keys")
    value_pool = vocab.pool("names" if t.values == "names" else "mixed_values")
    keys: dict[tuple[int, ...], None] = {}
    while len(keys) < n:
        keys.setdefault(tuple(rng.choice(key_pool, size=rng.integers(t.key_len[0], t.key_len[1] + 1)).tolist()))
    values = [rng.choice(value_pool, size=rng.integers(t.value_len[0], t.value_len[1] + 1)) for _ in range(n)]
    return [np.asarray(k, dtype=np.int64) for k in keys], values


def _render(pattern: tuple[str, ...], key: np.ndarray, value: np.ndarray, vocab: MixtureVocab, score: bool):
    """Tokens of one record or query, its answer mask, and the offset of its first key token."""
    parts, masks, key_offset, offset = [], [], 0, 0
    for sym in pattern:
        ids = key if sym == KEY else value if sym == VALUE else np.array([vocab.literal_ids[sym]])
        if sym == KEY:
            key_offset = offset
        parts.append(ids)
        masks.append(np.full(len(ids), score and sym == VALUE))
        offset += len(ids)
    return np.concatenate(parts), np.concatenate(masks), key_offset


def _fit(records: list, queries: list, queue: list[tuple[int, bool]], budget: int) -> tuple[int, list]:
    """Drop extra queries (last first), then whole records with their queries, until the rendered
    records and queries fit `budget` tokens; returns (records kept, queries kept), 0 if none fits."""
    n = len(records)

    def size() -> int:
        return sum(len(records[r][0]) for r in range(n)) + sum(len(queries[q][0]) for q, _ in queue)

    while size() > budget and any(extra for _, extra in queue):
        queue.pop(max(i for i, (_, extra) in enumerate(queue) if extra))
    while size() > budget and n > 0:
        n -= 1
        queue = [(q, extra) for q, extra in queue if q < n]
    return n, queue


def make_sequence(
    rng: np.random.Generator,
    vocab: MixtureVocab,
    template_name: str,
    n_records: int,
    max_queries: int,
    length: int,
    phase_modulus: int,
    pad_gaps: bool,
) -> SyntheticSequence:
    """One sequence of `length` tokens (see the module docstring for the layout)."""
    t = TEMPLATES[template_name]
    keys, values = _draw_kv(rng, vocab, t, n_records)
    records = [_render(t.record, k, v, vocab, score=False) for k, v in zip(keys, values, strict=True)]
    queries = [_render(t.query, k, v, vocab, score=True) for k, v in zip(keys, values, strict=True)]
    extra = rng.integers(n_records, size=max(0, max_queries - n_records))
    planned = [(r, False) for r in range(n_records)] + [(int(r), True) for r in extra]
    queue = [planned[i] for i in rng.permutation(len(planned))]  # (record, is an extra query)
    budget = length - (phase_modulus - 1)  # room for the largest shift
    n_records, queue = _fit(records, queries, queue, budget)
    if n_records == 0:
        raise ValueError(f"a sequence of {length} tokens cannot hold one {template_name!r} record and its query")
    content = sum(len(records[r][0]) for r in range(n_records)) + sum(len(queries[q][0]) for q, _ in queue)
    slack = budget - content
    shift = int(rng.integers(phase_modulus))
    gaps = rng.multinomial(int(rng.integers(slack + 1)), np.full(n_records + 1, 1.0 / (n_records + 1)))
    if pad_gaps:
        tokens = np.full(length, vocab.task.pad_id, dtype=np.int64)
    else:
        filler = np.asarray(vocab.task.filler_ids, dtype=np.int64)
        tokens = filler[rng.integers(len(filler), size=length)]
    mask = np.zeros(length, dtype=bool)
    record_start = np.empty(n_records, dtype=np.int64)
    pos = shift
    for r in range(n_records):
        pos += int(gaps[r])
        ids, _, key_offset = records[r]
        tokens[pos : pos + len(ids)] = ids
        record_start[r] = pos + key_offset
        pos += len(ids)
    pos += int(gaps[n_records])
    targets = []
    for q, _ in queue:
        ids, answer, _ = queries[q]
        tokens[pos : pos + len(ids)] = ids
        mask[pos : pos + len(ids)] = answer
        targets.append(record_start[q])
        pos += len(ids)
    return SyntheticSequence(tokens, mask, np.asarray(targets, dtype=np.int64), template_name, n_records)


def load_tokenizer(directory: str | None):
    """phasekv's word-level tokenizer (None) or a local HF tokenizer directory (no network)."""
    if directory is None:
        return build_word_tokenizer()
    from transformers import AutoTokenizer

    if not Path(directory).is_dir():
        raise FileNotFoundError(f"tokenizer directory {directory} does not exist")
    return AutoTokenizer.from_pretrained(directory, local_files_only=True)


class MixtureSource:
    """The mixture as a `DataSource`: sequences of `seq_len + 1` tokens, curriculum over `total_steps`,
    drawn with data seed `seed`; `tokenizer` (optional) replaces loading `config.tokenizer`."""

    def __init__(self, config: MixtureConfig, seq_len: int, total_steps: int, seed: int = 0, tokenizer=None):
        self.config = config
        self.seed = seed
        self.seq_len = seq_len
        self.total_steps = total_steps
        self.tokenizer = load_tokenizer(config.tokenizer) if tokenizer is None else tokenizer
        self.vocab = mixture_vocab(self.tokenizer, HeldOutPairs(config.held_out_seed, config.held_out_modulus))
        self.vocab_size = self.vocab.vocab_size
        names = sorted(config.templates)
        weights = np.array([config.templates[n] for n in names], dtype=float)
        self._templates, self._weights = names, weights / weights.sum()

    def check_fits(self, draws: int = 8) -> None:
        """ValueError when some template's record and query cannot fit a sequence (tried with `draws`
        seeded draws of each weighted template), so a run fails before it writes anything."""
        c = self.config
        for name, weight in zip(self._templates, self._weights, strict=True):
            if weight > 0:
                for draw in range(draws):
                    rng = np.random.default_rng([self.seed, 99, draw])
                    make_sequence(rng, self.vocab, name, 1, 1, self.seq_len + 1, c.phase_modulus, False)

    def records_at(self, split: str, position: int) -> int:
        """Records per sequence of global batch `position` (validation: the final count)."""
        if split == "val":
            return self.config.records
        return self.config.records_at(position, self.total_steps)

    def sequence(self, split: str, position: int, index: int) -> SyntheticSequence:
        """Sequence `index` of global batch `position` of `split`."""
        c = self.config
        rng = np.random.default_rng([self.seed, split_index(split), position, index])
        template = self._templates[rng.choice(len(self._templates), p=self._weights)]
        pad_gaps = bool(rng.random() < c.pad_gap_probability)
        n = self.records_at(split, position)
        return make_sequence(rng, self.vocab, template, n, c.max_queries, self.seq_len + 1, c.phase_modulus, pad_gaps)

    def batch(self, split: str, position: int, indices: range) -> Batch:
        seqs = [self.sequence(split, position, i) for i in indices]
        return Batch.from_numpy(np.stack([s.tokens for s in seqs]), np.stack([s.answer_mask for s in seqs]))

    def describe(self) -> dict:
        return {
            "kind": "mixture",
            "seq_len": self.seq_len,
            "seed": self.seed,
            "vocab_size": self.vocab_size,
            **asdict(self.config),
        }
