"""The scoring interface and the batching every model-backed scorer shares.

Batching never shifts positions: prompts are sorted by length and cut into batches of
`batch_size`, and shorter rows are padded on the right. A causal model's output at position t
depends only on tokens 0..t, so padding after a row's last real token cannot change the
log-probs read at that row's own positions, and every prompt starts at position 0. Equal-length
prompts (lookup, needle) need no padding at all.

Parallelism: `threads` sets torch's intra-op threads (every op split across cores, with a barrier
per op); `workers` > 1 instead scores that many batches at once, each on `threads` threads (Python
threads; torch releases the GIL inside ops). On a CPU shared with other jobs the per-op barriers stall
whenever one core is busy elsewhere, so workers keep going where intra-op threads wait
(benchmarks/README.md measures both). Hence the defaults (`choose_parallelism`): one worker per usable
core, one thread each, on the CPU; `threads` given alone means that many intra-op threads in one worker.
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ScorerError(ValueError):
    """A model directory or a scoring request is unusable; the message says why."""


class NonFiniteOutput(ScorerError):
    """A model gave a NaN or +inf log-prob. Every statistic computed from it would be meaningless (a NaN is never
    the argmax, never beyond a tolerance), so scoring stops at the first one. `position` is where the model
    predicted it (its output at token `position`, the next-token distribution after it), in the prompt of
    `length` tokens, `prompt` its index in the scoring call (None: a call of one prompt)."""

    def __init__(self, model: str, value: float, position: int, length: int, prompt: int | None = None):
        self.model, self.value, self.position, self.length, self.prompt = model, value, position, length, prompt
        which = f"a {length}-token prompt" if prompt is None else f"prompt {prompt} ({length} tokens)"
        super().__init__(
            f"{model} gave a non-finite log-prob ({value}) at position {position} of {which}: its weights or "
            "activations hold NaN or inf, so no score from it means anything and nothing was written; check the "
            "checkpoint for NaN/inf weights (a diverged training run), or score in float32 where a lower dtype "
            "overflows"
        )


def non_finite(values: torch.Tensor) -> torch.Tensor:
    """Where `values` (log-probs or logits) are NaN or +inf. -inf passes: a log-prob of -inf is a probability of 0
    (a masked token), which a distribution may hold."""
    return values.isnan() | (values == math.inf)


def check_finite(
    logprobs: torch.Tensor, lengths: Sequence[int], model: str, prompts: Sequence[int] | None = None
) -> None:
    """Raise `NonFiniteOutput` at the first prompt and position where `logprobs` [N, K, ...] (predicted at the last
    K positions of N prompts of `lengths` tokens) hold NaN or +inf. `prompts`: the N prompts' indices in the
    caller's call (default 0..N-1)."""
    bad = non_finite(logprobs).flatten(2).any(-1)  # [N, K]
    if not bad.any():
        return
    row, k = (int(i) for i in bad.nonzero()[0])
    position = lengths[row] - logprobs.shape[1] + k
    value = logprobs[row, k].flatten()[non_finite(logprobs[row, k].flatten())][0].item()
    index = row if prompts is None else prompts[row]
    raise NonFiniteOutput(model, value, position, lengths[row], index)


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity mask where the OS has one (taskset, cgroup
    cpusets, a batch scheduler's allocation), else every core."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def choose_parallelism(
    threads: int | None, workers: int | None, cores: int, concurrent: bool = True
) -> tuple[int, int]:
    """(threads per worker, workers) for scoring; explicit values win.

    Default: one single-threaded worker per usable core (`cores`), since independent workers keep going on a
    busy machine where intra-op threads wait at every op (module docstring); `threads` given alone keeps one
    worker with that many intra-op threads. A scorer that cannot score batches at once (`concurrent` False:
    one whose model state is shared between batches, or a GPU, which runs one batch at a time anyway) gets
    one worker. The number of batches caps the workers when scoring."""
    if workers is None:
        workers = cores if threads is None and concurrent else 1
    return (1 if threads is None else threads), workers


@runtime_checkable
class Scorer(Protocol):  # pragma: no mutate block (mutmut's trampolines would add members to the protocol)
    """Next-token log-probabilities over the full vocabulary for batches of token-id prompts.

    `tokenizer` is a fast Hugging Face tokenizer for the model; `compression_stride` is the
    model's compression stride S when its config has one (None for full attention).
    """

    tokenizer: Any
    batch_size: int
    compression_stride: int | None

    def logprobs(
        self, sequences: Sequence[Sequence[int]], n_last: int = 1, progress: Callable[[int], None] | None = None
    ) -> torch.Tensor:
        """Log-probs [N, n_last, V] predicted at the last `n_last` positions of each sequence;
        `progress` (optional) is called with the number of sequences scored after each batch."""
        ...

    def next_token_logprobs(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """Log-probs [N, V] of the token after each sequence."""
        ...

    def describe(self) -> dict:
        """JSON-ready record of the model: path, kind, config, parameter count, tokenizer."""
        ...


class BatchedScorer(ABC):
    """Length-grouped, right-padded batching over a model; subclasses supply `_logits`.

    The model is put in eval mode on `device` in `dtype` (a key of DTYPES); `threads` and `workers`
    default as `choose_parallelism` says (see the module docstring). `threads`, if given, also sets
    torch's CPU threads for the process (the analyses run the model directly); otherwise the scoring
    threads apply while scoring only. Log-probs are always computed in float32.
    """

    concurrent_batches = True  # False where batches share model state and must be scored one at a time
    answer_cache = None  # a `CachedAnswers` where answers are kept as they are scored (see `answers`)

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        batch_size: int = 16,
        threads: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        pad_id: int = 0,
        workers: int | None = None,
    ):
        if batch_size < 1:
            raise ScorerError(f"batch_size must be >= 1, got {batch_size}")
        if workers is not None and workers < 1:
            raise ScorerError(f"workers must be >= 1, got {workers}")
        if threads is not None:
            if threads < 1:
                raise ScorerError(f"threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        if dtype not in DTYPES:
            raise ScorerError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        self.model = model.eval().to(device=device, dtype=DTYPES[dtype])
        self.dtype = dtype
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.pad_id = pad_id
        concurrent = self.concurrent_batches and self.device.type == "cpu"
        self.threads, self.workers = choose_parallelism(threads, workers, usable_cores(), concurrent)

    @abstractmethod
    def _logits(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits [B, K, V] at `positions` [B, K] (row-wise indices) of `input_ids` [B, T]."""

    def logprobs(
        self, sequences: Sequence[Sequence[int]], n_last: int = 1, progress: Callable[[int], None] | None = None
    ) -> torch.Tensor:
        """Log-probs [N, n_last, V] (float32, CPU) at the last `n_last` positions of each sequence,
        in input order. `progress(rows)` is called after each batch (in this thread, in batch order)."""
        with torch.inference_mode():  # not a decorator: mutmut leaves decorated functions unmutated
            if n_last < 1:
                raise ScorerError(f"n_last must be >= 1, got {n_last}")
            lengths = [len(s) for s in sequences]
            if any(n < n_last for n in lengths):
                raise ScorerError(f"every sequence needs at least n_last = {n_last} tokens")
            order = sorted(range(len(sequences)), key=lengths.__getitem__)
            batches = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]
            if not batches:
                raise ScorerError("no sequences to score")

            def score(rows: list[int]) -> torch.Tensor:
                with torch.inference_mode():  # grad mode is per thread
                    width = max(lengths[i] for i in rows)
                    ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
                    for row, i in enumerate(rows):
                        ids[row, : lengths[i]] = torch.as_tensor(sequences[i], dtype=torch.long)
                    ends = torch.tensor([lengths[i] for i in rows])
                    positions = ends[:, None] - n_last + torch.arange(n_last)
                    logits = self._logits(ids.to(self.device), positions.to(self.device))
                    scored = torch.log_softmax(logits.float(), dim=-1).cpu()
                    check_finite(scored, [lengths[i] for i in rows], self.model_label, rows)  # before any is used
                    return scored

            def collect(scored: Iterable[torch.Tensor]) -> list[torch.Tensor]:
                parts = []
                for part in scored:
                    parts.append(part)
                    if progress is not None:
                        progress(len(part))
                return parts

            workers = min(self.workers, len(batches))
            process_threads = torch.get_num_threads()
            try:
                torch.set_num_threads(self.threads)
                if workers == 1:
                    parts = collect(score(rows) for rows in batches)
                else:
                    with ThreadPoolExecutor(
                        workers, initializer=torch.set_num_threads, initargs=(self.threads,)
                    ) as pool:
                        parts = collect(pool.map(score, batches))
            finally:
                torch.set_num_threads(process_threads)
            out = torch.cat(parts)
            inverse = torch.empty(len(order), dtype=torch.long)
            inverse[torch.tensor(order)] = torch.arange(len(order))
            return out[inverse]

    def next_token_logprobs(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """Log-probs [N, V] of the token after each sequence."""
        return self.logprobs(sequences, 1)[:, 0]

    @property
    def model_label(self) -> str:
        """What errors call the model: its directory, else its class (a model built in memory)."""
        return getattr(self, "path", None) or type(self.model).__name__

    def num_parameters(self) -> int:
        """Parameters of the model, shared (tied) tensors counted once."""
        return sum(p.numel() for p in self.model.parameters())


def gather_positions(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """values [B, T, D], positions [B, K] -> values at each row's positions, [B, K, D]."""
    return values.gather(1, positions[..., None].expand(-1, -1, values.shape[-1]))
