"""Scoring an HF causal LM whose KV cache a kvpress press compressed after the context's prefill.

What is compressed. Every scored sequence is `prompt + answer[:-1]` (`score_answers`); its last
`question_tokens` prompt tokens are the *question* (the probe's query tail, see
`press_question.question_tokens`), everything before them is the *context*. As in kvpress's own
pipeline: the context is prefilled with the press active (`with press(model)`: each attention layer's
forward hook prunes that layer's cache right after the layer ran, so the prefill itself is exact and
only the cache is compressed), then the question and the teacher-forced answer tokens are run in one
forward against the compressed cache, at their true positions (`position_ids` continue the context,
not the shorter cache). The answer's log-probs are read from that second forward.

Rows whose context and question have the same lengths (every prompt of a prefix-protocol lookup) are prefilled
and decoded together when every press in the spec compresses each row from that row alone
(`press_spec.ROW_INDEPENDENT`: KNorm, SnapKV, StreamingLLM, ChunkPress, BlockPress); other rows, and every row
under any other press, are prefilled one at a time (batch 1, like kvpress's pipeline). ChunkKVPress selects the
chunks of the batch's first row for every row (kvpress 0.5.5), so a batched prefill would be wrong for it; letting
each row choose does not help: around SnapKV, every chunk inside its observation window scores the same (each window
token gets the batch's top score plus one), so which of those chunks are kept is decided by the rounding of the
chunk means, and that differs between a batch and one row (on SmolLM2, most prompts' answers changed).

Kept entries are counted from the cache's size per layer and KV head after each prefill (`KVEntryCounter`):
right for presses that remove entries (KNorm, SnapKV, StreamingLLM, ChunkKV, ChunkPress, BlockPress); presses
that only mask entries (AdaKVPress and other head-wise presses) would be counted as keeping everything.

kvpress is an optional dependency (`pip install phasekv[kvpress]`, in its own environment: it needs
transformers < 5.3); it is imported only when a press is built.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata

import torch

from .base import ScorerError
from .hf_scorer import HFScorer
from .press_grid import shifted_press_class
from .press_spec import (
    NATIVE_PRESSES,
    PressCall,
    PressSpecError,
    compresses_rows_apart,
    grid_call,
    grid_shift_refusal,
    press_stride,
)

KVPRESS_MISSING = (
    "--press with a kvpress press needs the kvpress package (kvpress 0.5.5 needs transformers < 5.3): "
    "run scripts/kvpress_venv.sh and use .venv-kvpress/bin/phasekv, or use phasekv's own pooling "
    "(--press pool:w=8,s=8,local=16)"
)


def build_press(spec: PressCall, grid_offset: int = 0):
    """The kvpress press object named by `spec` (nested presses built first; phasekv's own presses by their
    `NativePress.press_class`). With `grid_offset` > 0 the press that sets the chunk grid
    (`press_spec.grid_call`) is built with its cuts moved by that many tokens (`press_grid`; a staggered press's
    every layer): the grid-shift test. A press whose grid moves per prompt is refused (`grid_shift_refusal`)."""
    try:
        import kvpress
    except ImportError as err:
        raise ScorerError(f"{KVPRESS_MISSING} ({err})") from None
    shifted = grid_call(spec) if grid_offset else None
    if grid_offset and shifted is None:
        raise PressSpecError(f"{spec.name} has no chunk grid to move")
    if grid_offset and (refusal := grid_shift_refusal(spec)):
        raise PressSpecError(refusal)

    def make(call: PressCall):
        native = NATIVE_PRESSES.get(call.name)
        cls = native.press_class() if native and native.press_class else getattr(kvpress, call.name, None)
        if not (isinstance(cls, type) and issubclass(cls, kvpress.presses.base_press.BasePress)):
            own = [name for name, press in NATIVE_PRESSES.items() if press.press_class]
            known = sorted([*(n for n in dir(kvpress) if n.endswith("Press")), *own])
            raise PressSpecError(f"{call.name} is not a kvpress press; kvpress (and phasekv) have {', '.join(known)}")
        kwargs = {k: build(v) for k, v in call.kwargs.items()}
        if call is shifted and native:
            kwargs["grid_offset"] = int(kwargs.get("grid_offset", 0)) + grid_offset  # taken mod chunk_length
        elif call is shifted:
            cls, kwargs["grid_offset"] = shifted_press_class(call.name), grid_offset
        try:
            return cls(**kwargs)
        except (TypeError, AssertionError, ValueError) as err:
            raise PressSpecError(f"cannot build {call.name} with {call.kwargs}: {err}") from None

    def build(value):
        if isinstance(value, PressCall):
            return make(value)
        if isinstance(value, list):
            return [build(v) for v in value]
        return value

    return make(spec)


class KVEntryCounter:
    """Entries per layer and KV head left in the cache after each prefill, summed over prefills."""

    def __init__(self) -> None:
        self.prefills = 0
        self.context_tokens = 0
        self.kept: torch.Tensor | None = None  # [layers, kv heads], summed over prefills

    def add(self, context_tokens: int, cache) -> None:
        """Count one prefill of `context_tokens` per row of `cache` (keys [B, Hkv, n, D]: kvpress presses drop the
        same number of entries from every row and every head of a layer)."""
        rows = cache.layers[0].keys.shape[0]
        kept = rows * torch.tensor([[layer.keys.shape[2]] * layer.keys.shape[1] for layer in cache.layers])
        self.kept = kept if self.kept is None else self.kept + kept
        self.prefills += rows
        self.context_tokens += rows * context_tokens

    def record(self) -> dict:
        if self.kept is None:
            return {"prefills": 0}
        per_layer = (self.kept.double().mean(1) / self.context_tokens).tolist()
        return {
            "prefills": self.prefills,
            "mean_context_tokens": self.context_tokens / self.prefills,
            "kept_fraction_per_layer": [round(f, 6) for f in per_layer],
            "kept_fraction": round(sum(per_layer) / len(per_layer), 6),
            "counted": "cache entries per layer and KV head after each prefill / context tokens, over all prefills",
        }


class CutTieCounter:
    """How often a press that keeps its n_kept best-scored entries (a kvpress ScorerPress: KNorm, SnapKV,
    StreamingLLM, ...) has to cut inside a run of equal scores: the entries kept there are then picked by the order
    top-k breaks ties in, not by the press's scores. SnapKV gives every token of its observation window the same
    score (above all others), so on a context where its window (64 tokens by default) holds more tokens than it
    keeps, every row and head ties at the cut and SnapKV keeps a fixed subset of the most recent tokens."""

    def __init__(self) -> None:
        self.slices = 0  # (layer, row, head) selections seen
        self.tied = 0  # of which the n_kept-th and the next best score are equal

    @contextmanager
    def watching(self, press) -> Iterator[None]:
        """Count the ties at the cut of `press`'s selections while in the block (a press of another kind is not
        checked: ChunkKV, ChunkPress and BlockPress cut elsewhere than their inner press's scores)."""
        from kvpress.presses.scorer_press import ScorerPress
        from kvpress.utils import compute_n_kept

        if not isinstance(press, ScorerPress):
            yield
            return
        score = press.score

        def counting(*args, **kwargs):
            scores = score(*args, **kwargs)  # [B, H, n]
            kept = compute_n_kept(scores.shape[-1], press.compression_ratio)
            if 0 < kept < scores.shape[-1]:
                ranked = scores.float().sort(dim=-1, descending=True).values
                self.tied += int((ranked[..., kept - 1] == ranked[..., kept]).sum())
                self.slices += ranked[..., 0].numel()
            return scores

        press.score = counting
        try:
            yield
        finally:
            del press.score

    def record(self) -> dict:
        if not self.slices:
            return {"checked": False}
        return {
            "checked": True,
            "selections": self.slices,
            "tied_at_cut": self.tied,
            "fraction": round(self.tied / self.slices, 6),
            "meaning": "selections (layer, row, head) whose n_kept-th best score equals the next one: there the kept "
            "entries are picked by top-k's tie order, not by the scores",
        }


class KVPressScorer(HFScorer):
    """An HF causal LM scored through a context prefill compressed by a kvpress press (module docstring).

    `question_tokens` (>= 1) is how many prompt tokens at the end are the uncompressed question; the
    probes set it (`press_question.bind_question`). Rows of equal lengths are prefilled together when the press
    compresses rows apart (module docstring), else one at a time; either under a lock: the press's hooks belong
    to the model, so concurrent workers would share them (one worker by default).
    """

    concurrent_batches = False

    def __init__(self, model, tokenizer, *, spec: PressCall, spec_text: str, question_tokens: int = 1, **options):
        super().__init__(model, tokenizer, **options)
        self.spec, self.spec_text = spec, spec_text
        self.press = build_press(spec)
        self.batches_rows = compresses_rows_apart(spec)
        self.question_tokens = question_tokens
        self.counter = KVEntryCounter()
        self.cut_ties = CutTieCounter()
        self._lock = threading.Lock()

    @property
    def compression_stride(self) -> int | None:
        return press_stride(self.spec)[0]

    unshifted_grid_offset = 0  # where the grid starts outside `grid_offset`

    @property
    def grid_shift_refusal(self) -> str | None:
        """Why the grid-shift test cannot move this press's grid though it has one (a dithered press), else None."""
        return grid_shift_refusal(self.spec)

    @contextmanager
    def grid_offset(self, offset: int) -> Iterator[None]:
        """Within the block the press's chunk grid is cut `offset` tokens later (`press_grid`; content and
        positions unchanged): the grid-shift test's other grids. ValueError for a press without a grid."""
        stride = self.compression_stride
        if self.grid_shift_refusal:
            raise ValueError(self.grid_shift_refusal)
        if stride is None or not 0 <= offset < stride:
            raise ValueError(f"{self.spec_text}: no chunk grid with an offset {offset} (stride {stride})")
        unshifted = self.press
        self.press = build_press(self.spec, grid_offset=offset) if offset else unshifted
        try:
            yield
        finally:
            self.press = unshifted

    def compressed_cache(self, context_ids: torch.Tensor):
        """Prefill `context_ids` [B, C] with the press active; returns the compressed DynamicCache."""
        from transformers import DynamicCache

        cache = DynamicCache()
        with self.press(self.model), self.cut_ties.watching(self.press):
            self.model.model(input_ids=context_ids, use_cache=True, **with_cache(self.model.model, cache))
        return cache

    def _logits(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        n_last = positions.shape[1]
        ends = (positions[:, -1] + 1).tolist()  # the rows' real lengths (rows are right-padded)
        groups: dict[tuple[int, int, int | None], list[int]] = {}
        for row, end in enumerate(ends):
            context = end - (n_last - 1) - self.question_tokens
            if context < 1:
                raise ScorerError(
                    f"a {end}-token sequence has no context before its {self.question_tokens} question tokens"
                )
            alone = None if self.batches_rows else row  # a row of its own group: prefilled by itself
            groups.setdefault((context, end, alone), []).append(row)
        out: list[torch.Tensor | None] = [None] * len(ends)
        for (context, end, _), rows in groups.items():
            ids = input_ids[rows]  # [G, T]: equal lengths, so no padding in the prefill
            with self._lock:
                cache = self.compressed_cache(ids[:, :context])
                self.counter.add(context, cache)
                logits = self._decode(ids[:, context:end], cache, context)  # [G, end - context, V]
            for g, row in enumerate(rows):
                out[row] = logits[g, positions[row] - context]  # [n_last, V]
        return torch.stack(out)

    def _decode(self, tail: torch.Tensor, cache, context: int) -> torch.Tensor:
        return decode_against(self.model, tail, cache, context)

    def describe(self) -> dict:
        stride, source = press_stride(self.spec)
        return {
            **super().describe(),
            "press": {
                "spec": self.spec_text,
                **self.spec.to_dict(),
                "built": repr(self.press),
                "library": f"kvpress {metadata.version('kvpress')}",
                "stride": {"value": stride, "source": source},
                "question_tokens": self.question_tokens,
                "semantics": (
                    "context = every prompt token before the last question_tokens (prefilled with the press, then its "
                    "KV cache compressed); question = the last question_tokens prompt tokens, decoded with the answer "
                    "tokens against the compressed cache at their true positions (one forward, a causal mask per "
                    "layer when layers kept different numbers of entries); "
                    + (
                        "rows of equal lengths prefilled together (every press compresses each row on its own)"
                        if self.batches_rows
                        else "prefill one row at a time"
                    )
                ),
                **({"grid": self.press.grid_record()} if hasattr(self.press, "grid_record") else {}),
                "kv_entries": self.counter.record(),
                "ties_at_cut": self.cut_ties.record(),
            },
        }


@functools.cache
def _cache_argument(forward) -> str:
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def with_cache(model, cache) -> dict:
    """The forward keyword for a KV cache: transformers renamed `past_key_values` to `cache` (the old name
    warns from 5.2x and goes in 5.40); kvpress needs a transformers from before the rename."""
    return {_cache_argument(type(model).forward): cache}


def decode_against(model, tail: torch.Tensor, cache, context: int) -> torch.Tensor:
    """Logits [1, N, V] of the `tail` tokens [1, N] run in one forward against a (compressed) `cache` at positions
    context .. context+N-1. HF builds one causal mask for all layers, sized by the first layer's cache; a press
    may keep a different number of entries per layer (ChunkKV does), so each decoder layer is handed a mask of
    its own (a forward pre-hook): every cached entry visible, the tail causal. `decode_token_by_token` is the
    plain reference."""
    positions = torch.arange(context, context + tail.shape[1], device=tail.device)[None]
    lengths = [layer.keys.shape[2] for layer in cache.layers]
    if len(set(lengths)) == 1:
        return model(input_ids=tail, position_ids=positions, **with_cache(model, cache)).logits
    if "sliding_attention" in (getattr(model.config, "layer_types", None) or ()):
        return decode_token_by_token(model, tail, cache, context)  # the masks below know no sliding window
    n = tail.shape[1]
    dtype = next(model.parameters()).dtype
    blocked = torch.finfo(dtype).min

    def mask_for(kept: int) -> torch.Tensor:
        future = torch.ones(n, n, dtype=torch.bool, device=tail.device).triu(1)  # [N, N] tail token j > i
        hidden = torch.cat([torch.zeros(n, kept, dtype=torch.bool, device=tail.device), future], dim=1)
        return torch.zeros(hidden.shape, dtype=dtype, device=tail.device).masked_fill(hidden, blocked)[None, None]

    masks = [mask_for(kept) for kept in lengths]  # [1, 1, N, kept + N] per layer

    def hook(layer_index: int):
        def use_own_mask(_module, args, kwargs):
            return args, {**kwargs, "attention_mask": masks[layer_index]}

        return use_own_mask

    handles = [layer.register_forward_pre_hook(hook(i), with_kwargs=True) for i, layer in enumerate(model.model.layers)]
    try:
        return model(input_ids=tail, position_ids=positions, **with_cache(model, cache)).logits
    finally:
        for handle in handles:
            handle.remove()


def decode_token_by_token(model, tail: torch.Tensor, cache, context: int) -> torch.Tensor:
    """`decode_against` one token at a time: a single query sees every cached entry, so HF's one mask, cut to
    each layer's length by its SDPA attention, is right for every layer (eager attention does not cut it)."""
    positions = torch.arange(context, context + tail.shape[1], device=tail.device)[None]
    steps = [
        model(input_ids=tail[:, i : i + 1], position_ids=positions[:, i : i + 1], **with_cache(model, cache)).logits
        for i in range(tail.shape[1])
    ]
    return torch.cat(steps, dim=1)
