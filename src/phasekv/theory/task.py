"""The idealized induction task: contexts of L chunks of S tokens and their queries.

A context is an integer tensor ``[L, S]`` of token ids in ``0..N-1``. All ``L * S`` tokens of a
context are distinct (so a repeated token identifies one chunk and position, and ``N >= L * S``).
A query repeats the token at chunk ``l`` and non-final position ``r`` (``0 <= r <= S - 2``,
0-based offsets) and its target is the successor at ``r + 1``. Every context is asked all
``Q = L * (S - 1)`` queries, ordered ``q = l * (S - 1) + r``; the population loss weights them
equally, i.e. the query chunk and position are uniform.
"""

from __future__ import annotations

import itertools
import math

import torch


def query_positions(n_chunks: int, chunk_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunk and position of every query: two LongTensors ``[Q]``, ``Q = L * (S - 1)``."""
    chunks = torch.arange(n_chunks).repeat_interleave(chunk_size - 1)
    positions = torch.arange(chunk_size - 1).repeat(n_chunks)
    return chunks, positions


def _check_sizes(n_tokens: int, n_chunks: int, chunk_size: int) -> None:
    if chunk_size < 2:
        raise ValueError("a chunk needs at least two positions (a key and its successor)")
    if n_tokens < n_chunks * chunk_size:
        raise ValueError(f"N={n_tokens} tokens cannot fill {n_chunks} x {chunk_size} distinct slots")


def sample_contexts(
    n_tokens: int, n_chunks: int, chunk_size: int, n_contexts: int, generator: torch.Generator
) -> torch.Tensor:
    """``n_contexts`` uniform random contexts ``[n_contexts, L, S]`` (distinct tokens in each)."""
    _check_sizes(n_tokens, n_chunks, chunk_size)
    keys = torch.rand(n_contexts, n_tokens, generator=generator)
    tokens = keys.argsort(dim=1)[:, : n_chunks * chunk_size]
    return tokens.reshape(n_contexts, n_chunks, chunk_size)


def count_contexts(n_tokens: int, n_chunks: int, chunk_size: int) -> int:
    """Number of distinct contexts, ``N! / (N - L S)!``."""
    return math.perm(n_tokens, n_chunks * chunk_size)


def all_contexts(n_tokens: int, n_chunks: int, chunk_size: int, limit: int = 100_000) -> torch.Tensor:
    """Every context ``[N!/(N-LS)!, L, S]``, for exact population averages on tiny tasks.

    Raises:
        ValueError: if there are more than ``limit`` contexts.
    """
    _check_sizes(n_tokens, n_chunks, chunk_size)
    count = count_contexts(n_tokens, n_chunks, chunk_size)
    if count > limit:
        raise ValueError(f"{count} contexts exceed the enumeration limit {limit}; sample instead")
    tokens = torch.tensor(list(itertools.permutations(range(n_tokens), n_chunks * chunk_size)))
    return tokens.reshape(count, n_chunks, chunk_size)
