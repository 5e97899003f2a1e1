"""Phase conformance end to end: run one implementation in every execution mode it has, compare each
mode's next-token distributions position by position with a reference's parallel forward, and report
the errors grouped by position mod S, and by position mod each compression ratio the layers use (a model with
CSA layers of ratio 4 and HCA layers of ratio 16 has its errors grouped both ways). A position where the candidate
outputs NaN or +inf fails, wherever it is: it is never "within tolerance".

A *runner* wraps one implementation. `PhaseKVRunner` (a `PhaseKVModel` and its `KVCache`) and
`HFRunner` (a transformers causal LM and its `DynamicCache`) have every local mode; `EndpointRunner`
(a served model, through `EndpointScorer`) has one, "served": the log-prob of every prompt token and the
top-1 at its position, from one echo request per prompt (or one request per position where the server
ignores echo). The reference is the candidate's own parallel forward unless another runner is given; a bug
that every mode shares (a window laid one token off in the compressor every path calls) is invisible against
it, so `independent_reference` gives, where phasekv has one, an implementation that shares none of the
candidate's phase-sensitive code: a phasekv model's float64 naive twin (`phasekv.model.reference`). The
result's `comparison` says which of the three each verdict rests on.

Before any mode runs, the reference's parallel forward is run a second time on the same prompts and compared
with the first, as a mode would be ("reference_repeat"). Where the two disagree beyond the tolerance, the
reference is not reproducible in this process and nothing measured against it would say anything about the
modes: no mode runs, and the verdict is "not judged" (`conforms` None, `not_judged` says by how much and from
where), distinct from "does not conform".

Modes (each is a list of scored rows: a sequence, the first position scored, log-probs from there):
- parallel: one call over the whole prompt (compared with the reference's parallel forward);
- decode: every token through the cache, one at a time;
- split@o (o = 0..S-1): chunks of S tokens whose boundaries all fall at phase o (the first chunk has o);
- chunk c: chunks of c tokens, c in S-1, S, S+1, an odd size, a large one;
- right-padded / left-padded: one batch of the prompts cut to different lengths, padded on that side
  (left padding needs an attention mask and per-row positions, and each row's windows laid from its own
  first token: HF models take the mask, phasekv models run each row as the mask leaves it, see
  `PhaseKVRunner`; a single layer has none of this, and the result says where a mode is not defined);
- fork: the prompt's first part prefilled once, the cache copied, and two continuations fed in one
  call each (the prompt's own rest, and other tokens).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from .options import SCHEMA, VERDICTS, ConformanceOptions

LOG_PROBS = "next-token log-prob"
HIDDEN = "layer output"  # one attention layer: rows hold its output vectors, compared channel by channel

__all__ = ["ConformanceOptions", "run_conformance"]


# ----------------------------------------------------------------------------------------------- rows


@dataclass
class Row:
    """One scored row of a mode: `tokens` (the whole sequence), log-probs [L, V] at positions first..
    first+L-1 (`full`), or only the actual next tokens' log-probs [L] and the top-1 ids [L] (`next_lp`,
    `top1`: a served model), and where a server answered one request per position, its top-k log-probs
    there (`top`, {token id: log-prob} per position)."""

    tokens: list[int]
    first: int
    full: torch.Tensor | None = None
    next_lp: np.ndarray | None = None
    top1: np.ndarray | None = None
    top: list[dict[int, float]] | None = None


@dataclass
class ModeOutcome:
    rows: list[Row] = field(default_factory=list)
    undefined: str | None = None  # why the mode is not defined for this implementation


def _log_probs(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1).cpu()


@contextmanager
def windows_moved(model, shift: int):
    """Within the block, every compressor of `model` (attention layers' and indexers') lays its windows
    `shift` tokens later (its window offset plus `shift`, mod its stride); the configured offsets return
    on exit. A shift of 0 changes nothing."""
    from phasekv.compress.base import Compressor

    compressors = [m for m in model.modules() if isinstance(m, Compressor)]
    configured = [c.geometry for c in compressors]
    try:
        for c in compressors:
            c.geometry = replace(c.geometry, offset=(c.geometry.offset + shift) % c.geometry.stride)
        yield
    finally:
        for c, geometry in zip(compressors, configured, strict=True):
            c.geometry = geometry


class LocalRunner:
    """What phasekv's and transformers' models share: every mode is made of cached calls; subclasses say
    how to make a cache, continue it with a chunk, copy it, and run a padded batch."""

    kind = "local"
    name = "model"
    independent = ""  # where the runner is an independent implementation of its candidate: of what kind
    stride: int | None = None
    ratios: tuple[int, ...] = ()  # every compression ratio among the layers, ascending
    left_padding: str | None = "not defined"
    output = LOG_PROBS  # what each position's row holds, so what `compare` measures
    max_positions: int | None = None  # the longest input the model declares, if it declares one

    def readout(self, out: torch.Tensor) -> torch.Tensor:
        return _log_probs(out)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def new_cache(self):
        raise NotImplementedError

    def step(self, ids: torch.Tensor, cache) -> torch.Tensor:
        raise NotImplementedError

    def fork_cache(self, cache):
        return copy.deepcopy(cache)

    def padded(self, rows: list[list[int]], side: str) -> list[torch.Tensor]:
        raise NotImplementedError

    @torch.no_grad()
    def parallel(self, ids: torch.Tensor) -> torch.Tensor:
        return self.readout(self.logits(ids))

    @torch.no_grad()
    def chunked(self, ids: torch.Tensor, bounds: Sequence[int]) -> torch.Tensor:
        """Log-probs of ids [B, T] fed through one cache in the chunks [bounds[i], bounds[i+1])."""
        cache = self.new_cache()
        parts = [self.step(ids[:, a:b], cache) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
        return self.readout(torch.cat(parts, dim=1))

    @torch.no_grad()
    def forked(self, ids: torch.Tensor, prefix: int, others: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefill ids[:, :prefix] once; continue one copy of the cache with ids' rest and another with
        `others` (same shape as the rest), each in one call -> their log-probs."""
        cache = self.new_cache()
        self.step(ids[:, :prefix], cache)
        copy_ = self.fork_cache(cache)
        own = self.readout(self.step(ids[:, prefix:], cache))
        other = self.readout(self.step(others, copy_))
        return own, other


class PhaseKVRunner(LocalRunner):
    """A `PhaseKVModel`: the cache is `KVCache`, forks are `KVCache.fork`. Right padding is exact (causal).
    A left-padded batch is run as a masking engine must run it: each row's pads masked out and its positions
    starting after them. phasekv models take no mask, so what that leaves of a row is the row unpadded, with
    its compression windows laid from `grid_origin(pad)`, the padded index where they begin (its first real
    token). An engine that cuts windows on the padded index (origin 0, pads masked out of the pooling) is the
    same model with every layer's window offset moved by -pad mod S: the grid-offset mechanism computes it
    exactly."""

    kind = "phasekv"
    left_padding = None

    def __init__(self, model, name: str = "phasekv model", pad_id: int = 0):
        from phasekv.compress.base import Compressor

        self.model, self.name, self.pad_id = model.eval(), name, pad_id
        # each layer's own: a DeepSeek-V4 model's HCA layers compress at their rate, not the config's CSA stride
        self.ratios = tuple(sorted({m.geometry.stride for m in model.modules() if isinstance(m, Compressor)}))
        self.stride = self.ratios[0] if self.ratios else None
        self.vocab_size = model.config.vocab_size

    def logits(self, ids):
        return self.model(ids)

    def new_cache(self):
        from phasekv.cache import KVCache

        return KVCache.for_model(self.model)

    def step(self, ids, cache):
        return self.model(ids, cache)

    def fork_cache(self, cache):
        return cache.fork()

    def grid_origin(self, pad: int) -> int:
        """The padded index where the windows of a row left-padded by `pad` tokens begin: its first token."""
        return pad

    @torch.no_grad()
    def padded(self, rows, side):
        if side == "right":
            width = max(map(len, rows))
            ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
            for i, row in enumerate(rows):
                ids[i, : len(row)] = torch.tensor(row)
            out = self.readout(self.model(ids))
            return [out[i, : len(row)] for i, row in enumerate(rows)]
        width = max(map(len, rows))
        by_shift: dict[int, list[int]] = {}  # rows whose windows move by the same number of tokens
        for i, row in enumerate(rows):
            pad = width - len(row)
            by_shift.setdefault(self.grid_origin(pad) - pad, []).append(i)
        scored: list[torch.Tensor | None] = [None] * len(rows)
        for shift, members in by_shift.items():
            with windows_moved(self.model, shift):
                for i, lp in zip(members, self.padded([rows[i] for i in members], "right"), strict=True):
                    scored[i] = lp
        return scored

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name, "config": self.model.config.to_dict()}


class HFRunner(LocalRunner):
    """A transformers causal LM: the cache is a `DynamicCache` built from the model's config (DeepSeek-V4
    gets its compressor caches), forks are deep copies; padded batches pass an attention mask and per-row
    positions (a left pad of p tokens starts the row's positions at 0 after the pad)."""

    kind = "hf"
    left_padding = None

    def __init__(self, model, name: str = "hf model", pad_id: int = 0):
        from phasekv.scoring.hf_scorer import hf_compression_ratios

        self.model, self.name, self.pad_id = model.eval(), name, pad_id
        self.ratios = hf_compression_ratios(model.config)
        self.stride = self.ratios[0] if self.ratios else None
        self.vocab_size = model.config.vocab_size
        declared = getattr(model.config, "max_position_embeddings", None)
        self.max_positions = declared if isinstance(declared, int) and declared > 0 else None

    def logits(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def step(self, ids, cache):
        from phasekv.scoring.press import with_cache

        return self.model(input_ids=ids, use_cache=True, **with_cache(self.model, cache)).logits

    @torch.no_grad()
    def padded(self, rows, side):
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            lo = width - len(row) if side == "left" else 0
            ids[i, lo : lo + len(row)] = torch.tensor(row)
            mask[i, lo : lo + len(row)] = 1
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        out = self.readout(
            self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
        )
        result = []
        for i, row in enumerate(rows):
            lo = width - len(row) if side == "left" else 0
            result.append(out[i, lo : lo + len(row)])
        return result

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name, "config": self.model.config.to_diff_dict()}


class EndpointRunner:
    """A served model (`phasekv.serve.EndpointScorer`): only the "served" mode (prompt-token log-probs
    and the top-1 at each position; no full distributions, so no KL). Where the server ignores echo, each
    position is its own request, and every top-k log-prob it returns is compared."""

    kind = "endpoint"
    output = LOG_PROBS

    def __init__(self, scorer):
        self.scorer, self.name = scorer, f"{scorer.served_model} at {scorer.transport.url}"
        self.stride = scorer.compression_stride
        self.ratios = () if self.stride is None else (self.stride,)  # all a server says
        self.vocab_size = scorer.vocab_size

    def served(self, sequences: list[list[int]]) -> list[Row]:
        """One row per prompt; a prompt whose answer held NaN or +inf (the scorer refuses it, naming the first
        such position) is one row at that position with a NaN log-prob, so it fails there like any error."""
        from phasekv.scoring import NonFiniteOutput

        rows = []
        for s in sequences:
            try:
                (record,) = self.scorer.prompt_token_logprobs([s])
            except NonFiniteOutput as err:
                rows.append(Row(list(s), err.position, next_lp=np.array([math.nan]), top1=np.array([-1])))
                continue
            rows.append(
                Row(
                    list(s),
                    0,
                    next_lp=np.asarray([math.nan if v is None else v for v in record["logprobs"]]),
                    top1=np.asarray(record["top_ids"]),
                    top=record.get("top"),
                )
            )
        return rows

    def describe(self) -> dict:
        return self.scorer.describe()


# ---------------------------------------------------------------------------------------------- modes


def chunk_sizes(options: ConformanceOptions, stride: int) -> list[int]:
    sizes = options.chunk_sizes or (stride - 1, stride, stride + 1, options.odd_chunk, options.large_chunk)
    return sorted({c for c in sizes if c >= 1})


def mode_names(runner, options: ConformanceOptions, stride: int) -> list[str]:
    """The modes a runner has, in report order (all of them unless `options.modes` picks some)."""
    if isinstance(runner, EndpointRunner):
        names = ["served"]
    else:
        names = ["parallel", "decode", *(f"split@{o}" for o in range(stride))]
        names += [f"chunk {c}" for c in chunk_sizes(options, stride)]
        names += ["right-padded", "left-padded", "fork"]
        if hasattr(runner, "extra_modes"):  # an engine's own modes (llama.cpp: ubatch sizes, saved state)
            names += runner.extra_modes(options)
    if options.modes is not None:
        unknown = [m for m in options.modes if m not in names]
        if unknown:
            raise ValueError(f"unknown or unavailable modes {unknown}; this implementation has {names}")
        names = [m for m in names if m in options.modes]
    return names


def run_mode(runner, mode: str, ids: torch.Tensor, options: ConformanceOptions, stride: int) -> ModeOutcome:
    """The rows of one mode over prompts ids [N, T]."""
    n, length = ids.shape
    seqs = ids.tolist()
    if mode == "served":
        return ModeOutcome(runner.served(seqs))
    if mode == "parallel":
        return ModeOutcome([Row(s, 0, lp) for s, lp in zip(seqs, runner.parallel(ids), strict=True)])
    if mode == "decode" or mode.startswith(("split@", "chunk ")):
        if mode == "decode":
            bounds = list(range(length + 1))
        elif mode.startswith("split@"):
            offset = int(mode[len("split@") :])
            bounds = [0, *range(offset or stride, length, stride), length]
        else:
            size = int(mode[len("chunk ") :])
            bounds = [*range(0, length, size), length]
        return ModeOutcome([Row(s, 0, lp) for s, lp in zip(seqs, runner.chunked(ids, bounds), strict=True)])
    if mode in ("right-padded", "left-padded"):
        side = mode.split("-")[0]
        if side == "left" and runner.left_padding is not None:
            return ModeOutcome(undefined=runner.left_padding)
        if n == 1:
            return ModeOutcome(undefined="not defined for one prompt: a batch of one has no padding")
        rows = [s[: max(2, length - (i * options.pad_shortening + 3) % length)] for i, s in enumerate(seqs)]
        if len({len(r) for r in rows}) == 1 and n > 1:
            rows[-1] = rows[-1][:-1]
        scored = runner.padded(rows, side)
        return ModeOutcome([Row(s, 0, lp[: len(r)]) for s, r, lp in zip(seqs, rows, scored, strict=True)])
    prefix = round(length * options.fork_at)
    prefix += prefix % stride == 0  # end the shared prefix inside a window: a fork at a window edge tests less
    prefix = max(1, min(length - 1, prefix))
    gen = torch.Generator().manual_seed(options.seed + 1)
    others = torch.randint(0, runner.vocab_size, (n, length - prefix), generator=gen)
    if hasattr(runner, "run_extra") and mode in runner.extra_modes(options):
        return runner.run_extra(mode, ids, prefix, others)
    if mode == "fork":
        own, other = runner.forked(ids, prefix, others)
        rows = [Row(s, prefix, lp) for s, lp in zip(seqs, own, strict=True)]
        other_ids = torch.cat([ids[:, :prefix], others], dim=1).tolist()
        rows += [Row(s, prefix, lp) for s, lp in zip(other_ids, other, strict=True)]
        return ModeOutcome(rows)
    raise ValueError(f"unknown mode {mode!r}")


# ------------------------------------------------------------------------------------------ comparing


@dataclass
class Compared:
    """Per scored position of one mode: sequence row, position t (predicting token t+1), |delta log-prob|
    of the actual next token, KL (NaN where a distribution is missing), top-1 agreement, and whether the outputs
    there are finite (a NaN or +inf in either side's row, or a NaN difference, is not)."""

    row: list[int] = field(default_factory=list)
    position: list[int] = field(default_factory=list)
    delta: list[float] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    agree: list[bool] = field(default_factory=list)
    finite: list[bool] = field(default_factory=list)


def compare(rows: list[Row], reference: Callable[[list[int]], torch.Tensor], output: str = LOG_PROBS) -> Compared:
    """Each row against the reference's log-probs [T, V] of its sequence, at positions with a next token; for
    layer outputs [T, d], at every position, |delta| the largest over channels (no KL, no top-1)."""
    from phasekv.scoring import non_finite

    out = Compared()
    for i, row in enumerate(rows):
        ref = reference(row.tokens)
        size = len(row.full) if row.full is not None else len(row.next_lp)
        last = row.first + size if output == HIDDEN else min(row.first + size, len(row.tokens) - 1)
        if last <= row.first:
            continue
        positions = torch.arange(row.first, last)
        if output == HIDDEN:
            cand = row.full[: last - row.first].double()
            diff = (ref[positions].double() - cand).abs().amax(-1)
            out.row += [i] * len(positions)
            out.position += positions.tolist()
            out.delta += diff.tolist()
            out.kl += [math.nan] * len(positions)
            out.finite += (~(cand.isnan() | cand.isinf()).any(-1) & ~diff.isnan()).tolist()  # an output: inf too
            continue
        nxt = torch.tensor(row.tokens)[positions + 1]
        ref_rows = ref[positions].double()
        ref_lp = ref_rows.gather(-1, nxt[:, None])[:, 0]
        if row.full is not None:
            cand = row.full[: last - row.first].double()
            cand_lp = cand.gather(-1, nxt[:, None])[:, 0]
            finite = ~non_finite(cand).any(-1)  # the KL below counts NaN terms as 0 and argmax picks NaN: checked here
            p = ref_rows.exp()
            kl = (p * (ref_rows - cand)).nan_to_num(0.0).sum(-1).clamp_min(0.0)
            agree = ref_rows.argmax(-1) == cand.argmax(-1)
        else:
            cand_lp = torch.as_tensor(row.next_lp[: last - row.first], dtype=torch.float64)
            kl = torch.full((len(positions),), math.nan, dtype=torch.float64)
            agree = ref_rows.argmax(-1) == torch.as_tensor(row.top1[: last - row.first])
            finite = torch.ones(len(positions), dtype=torch.bool)  # a served NaN is its delta's, below
        delta = (ref_lp - cand_lp).abs()
        if row.top is not None:  # one request per position: every log-prob the server gave there, not only the
            # next token's (often outside its top k, so unknown)
            delta = torch.tensor(
                [
                    max(abs(ref_rows[p, t].item() - v) for t, v in top.items())
                    for p, top in enumerate(row.top[: len(delta)])
                ],
                dtype=torch.float64,
            )
        out.row += [i] * len(positions)
        out.position += positions.tolist()
        out.delta += delta.tolist()
        out.kl += kl.tolist()
        out.agree += agree.tolist()
        out.finite += (finite & ~non_finite(ref_rows).any(-1) & ~delta.isnan()).tolist()
    return out


def _finite(values) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def _stat(values, how) -> float | None:
    values = _finite(values)
    return float(how(values)) if values else None


def _agreement(agree) -> float | None:
    return float(np.mean(agree)) if len(agree) else None  # None: nothing scored, or no top-1 (layer outputs)


def summarise(compared: Compared, stride: int, tolerance: float, ratios: Sequence[int] = ()) -> dict:
    """One mode's report: overall and per phase (t mod S) max/mean |delta log-prob|, max/mean KL, top-1
    agreement; the first position beyond tolerance or with a non-finite output (a NaN is never "within" it, and
    the statistics, over finite values only, would not show it); where the errors concentrate; and the same
    phases for each compression ratio in `ratios` (`by_ratio`)."""
    delta, kl = np.asarray(compared.delta), np.asarray(compared.kl, dtype=float)
    position = np.asarray(compared.position, dtype=int)
    finite = np.asarray(compared.finite, dtype=bool)
    agree = np.asarray(compared.agree) if compared.agree else None
    bad = ~finite | (delta > tolerance) | (np.nan_to_num(kl, nan=0.0) > tolerance)

    def errors(at: np.ndarray) -> dict:
        return {
            "positions": int(at.sum()),
            "max_abs_delta": _stat(delta[at], max),
            "mean_abs_delta": _stat(delta[at], np.mean),
            "max_kl": _stat(kl[at], max),
            "mean_kl": _stat(kl[at], np.mean),
            "top1_agreement": _agreement([] if agree is None else agree[at]),
            "beyond_tolerance": int(bad[at].sum()),
            "non_finite": int((~finite[at]).sum()),
        }

    def phases(modulus: int) -> list[dict]:
        return [{"phase": phase, **errors(position % modulus == phase)} for phase in range(modulus)]

    first = int(position[bad].min()) if bad.any() else None
    by_phase = phases(stride)
    return {
        **errors(np.ones(len(delta), dtype=bool)),
        "first_failure": first,
        "first_failure_phase": None if first is None else first % stride,
        "conforms": not bad.any(),
        "by_phase": by_phase,
        "by_ratio": [
            {"ratio": r, "first_failure_phase": None if first is None else first % r, "by_phase": phases(r)}
            for r in ratios
        ],
        "concentration": concentration(by_phase, first, stride, ratios),
    }


def concentration(phases: list[dict], first: int | None, stride: int, ratios: Sequence[int] = ()) -> dict:
    """Where a failing mode's errors sit: `peak_phase` (largest mean |delta|), `phases` whose mean |delta| is
    over twice the median of the phase means (errors concentrated there; empty when spread evenly), whether
    the boundary phase S-1 is among them, and whether the errors start in the first window (position < S). The
    text names the first failure's phase mod S and mod every other compression ratio in `ratios`."""
    if first is None:
        return {"peak_phase": None, "phases": [], "boundary_phase": False, "from_first_window": False, "text": "none"}
    means = [p["mean_abs_delta"] or 0.0 for p in phases]
    median = float(np.median(means))
    peak = int(np.argmax(means))
    hot = [p["phase"] for p, m in zip(phases, means, strict=True) if m > 2 * median and p["beyond_tolerance"]]
    if len(hot) == stride:
        hot = []
    others = "".join(f", {first % r} mod {r}" for r in ratios if r != stride)
    text = f"from position {first} (phase {first % stride}{others}); "
    text += f"concentrated at phase{'s' * (len(hot) > 1)} {', '.join(map(str, hot))}" if hot else "spread over phases"
    text += f", largest at phase {peak}"
    return {
        "peak_phase": peak,
        "phases": hot,
        "boundary_phase": stride - 1 in hot,
        "from_first_window": first < stride,
        "text": text,
    }


# ---------------------------------------------------------------------------------------------- run


def prompts(options: ConformanceOptions, vocab_size: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(options.seed)
    return torch.randint(0, vocab_size, (options.prompts, options.length), generator=gen)


def independent_reference(candidate) -> LocalRunner | None:
    """An implementation of the candidate's function that shares none of its phase-sensitive code, where
    phasekv has one: a phasekv model's float64 naive twin (its attention layers from their definitions).
    None for other candidates (a served model is compared with its local reference, given separately)."""
    if not isinstance(candidate, PhaseKVRunner):
        return None
    from phasekv.model.reference import reference_twin

    twin = PhaseKVRunner(reference_twin(candidate.model), name=f"{candidate.name}, float64 naive twin")
    twin.independent = "its float64 naive twin: attention from the definitions, no fast path"
    return twin


def comparison(candidate, reference) -> dict:
    """What a verdict rests on: `against` "independent" (a reference sharing none of the candidate's
    phase-sensitive code), "given" (a reference the user named: independent only if it is) or "self" (the
    candidate's own parallel forward), with a sentence that says so."""
    if reference is None:
        why = (
            "its float64 naive twin was turned off (--no-twin)"
            if isinstance(candidate, PhaseKVRunner)
            else "phasekv has no independent implementation of this model; give --reference"
        )
        text = (
            f"each mode against {candidate.name}'s own parallel forward: a bug that every mode shares, the "
            f"parallel forward included, is invisible ({why})"
        )
        return {"against": "self", "text": text}
    if reference.independent:
        text = (
            f"each mode, the parallel forward included, against {reference.independent}: a bug that every mode "
            "of the candidate shares is visible"
        )
        return {"against": "independent", "text": text}
    text = f"each mode, the parallel forward included, against {reference.name}'s parallel forward (--reference)"
    return {"against": "given", "text": text}


def resolve_stride(options: ConformanceOptions, candidate, reference) -> tuple[int, str]:
    if options.period is not None:
        return options.period, "--period"
    for who, runner in (("candidate", candidate), ("reference", reference)):
        if runner is not None and runner.stride:
            return int(runner.stride), f"the {who}'s compression stride"
    return 4, "default (no compression stride known)"


def check_fits(candidate, options: ConformanceOptions, reference=None) -> None:
    """ValueError, before any forward pass, when the run cannot be done: two local models of different vocabularies
    (their distributions cannot be compared), prompts longer than a model declares it reads, or log-probs that
    cannot fit in memory (the reference's of every prompt are kept, and one mode's beside them)."""
    from phasekv.memory import check_fits as fits_memory

    ref_runner = reference if reference is not None else candidate
    if not isinstance(candidate, EndpointRunner) and candidate.output == LOG_PROBS:
        if candidate.vocab_size != ref_runner.vocab_size:
            raise ValueError(
                f"the candidate {candidate.name} has a vocabulary of {candidate.vocab_size} tokens and the reference "
                f"{ref_runner.name} one of {ref_runner.vocab_size}: their next-token distributions cannot be "
                "compared; give a reference with the candidate's vocabulary"
            )
    for runner in {id(r): r for r in (candidate, ref_runner)}.values():
        limit = getattr(runner, "max_positions", None)
        if limit is not None and options.length > limit:
            raise ValueError(
                f"length {options.length} is longer than the {limit} positions {runner.name} reads: lower it (--length)"
            )
    if candidate.output == LOG_PROBS:  # a layer's outputs are hidden states, far narrower
        fits_memory(
            4 * options.length * ref_runner.vocab_size * (2 * options.prompts + 6),
            f"{options.prompts} prompts x {options.length} tokens x {ref_runner.vocab_size} log-probs",
            "lower --length (or --prompts)",
        )


def run_conformance(candidate, options: ConformanceOptions, reference=None, echo=None) -> dict:
    """Every mode of `candidate` against `reference`'s parallel forward (the candidate's own when None); `echo`
    (a function of one line) is told what starts and how long each step took, so a long run is not silent."""
    if options.length < 3 or options.prompts < 1:
        raise ValueError("conformance needs prompts of at least 3 tokens and at least one prompt")
    if options.tolerance <= 0:
        raise ValueError(f"tolerance must be > 0, got {options.tolerance}")
    ref_runner = reference if reference is not None else candidate
    if isinstance(ref_runner, EndpointRunner):
        raise ValueError("the reference must be a local model (its parallel forward): a served model is a candidate")
    if candidate.output != ref_runner.output:
        raise ValueError(f"cannot compare a candidate's {candidate.output} with a reference's {ref_runner.output}")
    check_fits(candidate, options, reference)
    say = echo or (lambda line: None)
    stride, stride_source = resolve_stride(options, candidate, reference)
    vocab = min(candidate.vocab_size, ref_runner.vocab_size)
    ids = prompts(options, vocab)
    cache: dict[tuple, torch.Tensor] = {}

    def reference_lp(tokens: list[int]) -> torch.Tensor:
        key = tuple(tokens)
        if key not in cache:
            cache[key] = ref_runner.parallel(torch.tensor([tokens]))[0]
        return cache[key]

    started = time.perf_counter()
    say(f"reference: parallel forward of {options.prompts} prompts x {options.length} tokens, twice")
    cache.update({tuple(s): lp for s, lp in zip(ids.tolist(), ref_runner.parallel(ids), strict=True)})
    # the same forward again: every mode is measured against the first, so a reference that does not give the
    # same answer twice in this process would make each mode look wrong by its own irreproducibility
    again = run_mode(ref_runner, "parallel", ids, options, stride).rows
    repeat = summarise(compare(again, reference_lp, ref_runner.output), stride, options.tolerance)
    # every layer's own ratio, the reference's too (a server reports one stride at most)
    ratios = sorted({*candidate.ratios, *(reference.ratios if reference is not None else ())})
    say(f"reference: done in {time.perf_counter() - started:.1f} s")
    modes, undefined, errored = {}, {}, {}
    names = mode_names(candidate, options, stride) if repeat["conforms"] else []
    for number, mode in enumerate(names, 1):
        say(f"mode {number} of {len(names)}: {mode} ...")
        started = time.perf_counter()
        try:
            outcome = run_mode(candidate, mode, ids, options, stride)
        except Exception as err:  # an implementation that crashes in a mode does not conform there
            errored[mode] = f"{type(err).__name__}: {err}"
            continue
        if outcome.undefined is not None:
            undefined[mode] = outcome.undefined
            continue
        summary = summarise(compare(outcome.rows, reference_lp, candidate.output), stride, options.tolerance, ratios)
        modes[mode] = {**summary, "seconds": round(time.perf_counter() - started, 3)}
    judged = repeat["conforms"]
    conforms = (all(m["conforms"] for m in modes.values()) and not errored) if judged else None
    return {
        "schema": SCHEMA,
        "candidate": candidate.describe() | {"label": candidate.name},
        "reference": None if reference is None else reference.describe() | {"label": reference.name},
        "reference_mode": f"{'the candidate' if reference is None else 'the reference'}'s parallel forward",
        "comparison": comparison(candidate, reference),
        "label": candidate.name if reference is None else f"{candidate.name} vs {reference.name}",
        "stride": {"value": stride, "source": stride_source},
        "ratios": ratios,
        "compared": candidate.output,
        "options": asdict(options),
        "tolerance": options.tolerance,
        "modes": modes,
        "undefined_modes": undefined,
        "errored_modes": errored,
        "reference_repeat": repeat,
        "not_judged": None if judged else not_reproducible(repeat, ref_runner, options.tolerance),
        "verdict": VERDICTS[conforms],
        "conforms": conforms,
        "failing_modes": [m for m, s in modes.items() if not s["conforms"]] + list(errored),
    }


def not_reproducible(repeat: dict, reference, tolerance: float) -> str:
    """Why a run is not judged: the reference's parallel forward, run twice on the same prompts, disagreed."""
    kl = "" if repeat["max_kl"] is None else f", KL up to {repeat['max_kl']:.1e}"
    if repeat["non_finite"]:
        return (
            f"the reference ({reference.name}) outputs NaN or inf at {repeat['non_finite']} positions, from position "
            f"{repeat['first_failure']}: nothing can be compared against it (not judged); check its weights"
        )
    return (
        f"the reference ({reference.name}) is not reproducible in this process: a second parallel forward of the "
        f"same prompts differs from the first by up to {repeat['max_abs_delta']:.1e} in the {reference.output}"
        f"{kl}, beyond the tolerance {tolerance:g}, from position {repeat['first_failure']}; no mode was compared "
        "against it (not judged)"
    )


def format_conformance(result: dict) -> str:
    """The terminal table: one line per mode."""
    stride = result["stride"]["value"]
    lines = [
        f"conformance of {result['label']} (reference: {result['reference_mode']}; S = {stride} from "
        f"{result['stride']['source']}; tolerance {result['tolerance']:g})",
        *([f"compared: {result['comparison']['text']}"] if result.get("comparison") else []),
        f"{'mode':<14} {'max|dlp|':>9} {'mean|dlp|':>9} {'max KL':>9} {'top-1':>6} {'first':>5}  verdict",
    ]
    if result.get("compared") == HIDDEN:
        lines[0] += "; |d| is the largest difference of the layer's output over channels"
        lines[1] = lines[1].replace("|dlp|", " |d| ")

    def g(v):
        return "-" if v is None else f"{v:.1e}"

    def top1(v):
        return "-" if v is None else f"{100 * v:.1f}%"

    for mode, m in result["modes"].items():
        verdict = "ok" if m["conforms"] else "FAILS " + m["concentration"]["text"]
        if m.get("non_finite"):  # the columns hold finite values only
            verdict += f"; NaN or inf at {m['non_finite']} position{'s' * (m['non_finite'] > 1)}"
        first = "-" if m["first_failure"] is None else str(m["first_failure"])
        lines.append(
            f"{mode:<14} {g(m['max_abs_delta']):>9} {g(m['mean_abs_delta']):>9} {g(m['max_kl']):>9} "
            f"{top1(m['top1_agreement']):>6} {first:>5}  {verdict}"
        )
    for mode, why in result["undefined_modes"].items():
        lines.append(f"{mode:<14} {why}")
    for mode, why in result["errored_modes"].items():
        lines.append(f"{mode:<14} FAILS: raised {why}")
    if result["conforms"] is None:
        lines.append(f"not judged: {result['not_judged']}")
    else:
        lines.append("conforms" if result["conforms"] else f"does not conform: {', '.join(result['failing_modes'])}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- loading


def load_runner(spec: str, dtype: str = "float32", seed: int = 0):
    """A runner for `spec`: `preset:NAME` (a tiny phasekv preset with random weights from `seed`), a
    phasekv checkpoint directory, a Hugging Face model directory, or a GGUF file (run by the pinned llama.cpp
    build, `scripts/build_llama_cpp.sh`; float32 whatever `dtype` says)."""
    from pathlib import Path

    if spec.endswith(".gguf"):
        from .llama_cpp import LlamaCppRunner

        return LlamaCppRunner(spec)

    dtypes = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}
    if dtype not in dtypes:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(dtypes)}")
    if spec.startswith("preset:"):
        from phasekv.model import PhaseKVModel, preset_config

        torch.manual_seed(seed)
        model = PhaseKVModel(preset_config(spec[len("preset:") :]))
        _jitter(model, seed)
        return PhaseKVRunner(model.to(dtypes[dtype]), name=spec)
    directory = Path(spec)
    from phasekv.model.io import CONFIG_FILE, FORMAT

    config = directory / CONFIG_FILE
    if not config.is_file():
        raise ValueError(f"{spec}: not preset:NAME and no {config}")
    import json

    meta = json.loads(config.read_text())
    if meta.get("format") == FORMAT:
        from phasekv.model import load_checkpoint

        return PhaseKVRunner(load_checkpoint(directory).to(dtypes[dtype]), name=str(directory))
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype=dtypes[dtype])
    return HFRunner(model, name=str(directory))


@torch.no_grad()
def _jitter(model, seed: int, std: float = 0.1) -> None:
    """Random weights that make every term matter: an untrained preset's zero biases and unit norms (the
    init) would hide bugs in what they multiply."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=gen) * std
        p.copy_(1 + noise if "norm" in name else noise)
