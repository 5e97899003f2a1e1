"""Lookup prompts for the analyses: evaluation and calibration splits, disjointness, batching.

All prompts of one lookup run have the same length (fixed query position), so they batch without
padding. Identical prompts (the prefix protocol repeats some) are run once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np
import torch

from ..results.record import prompt_prefix
from ..tasks.lookup import LookupOptions
from ..tasks.lookup import lookup_prompts as tasks_lookup_prompts
from ..tasks.prompts import Prompt, PromptSet


def lookup_prompts(tokenizer, options: LookupOptions) -> PromptSet:
    """The lookup prompts of `options` for this tokenizer (with its BOS prefix, as `run_lookup`)."""
    return tasks_lookup_prompts(tokenizer, options, prompt_prefix(tokenizer))


def calibration_options(options: LookupOptions, n_mappings: int) -> LookupOptions:
    """The same prompt design drawn from the calibration split with `n_mappings` mappings."""
    return replace(options, split="calibration", n_mappings=n_mappings)


def check_disjoint(evaluation: Sequence[Prompt], calibration: Sequence[Prompt]) -> None:
    """Raise ValueError if any calibration prompt (its token ids) is also an evaluation prompt."""
    shared = {tuple(p.input_ids) for p in evaluation} & {tuple(p.input_ids) for p in calibration}
    if shared:
        raise ValueError(f"{len(shared)} calibration prompts are also evaluation prompts: the sets must be disjoint")


def unique_ids(prompts: Sequence[Prompt]) -> tuple[torch.Tensor, np.ndarray]:
    """(distinct prompts [U, T], index [N] of each prompt's row in them)."""
    index: dict[tuple[int, ...], int] = {}
    rows = np.array([index.setdefault(tuple(p.input_ids), len(index)) for p in prompts], dtype=np.int64)
    if len({len(key) for key in index}) > 1:
        raise ValueError("the prompts differ in length; the analyses need one query position")
    return torch.tensor(list(index), dtype=torch.long), rows


def batches(ids: torch.Tensor, batch_size: int) -> Iterator[torch.Tensor]:
    """Consecutive row blocks [<= batch_size, T] of ids [N, T]."""
    for start in range(0, ids.shape[0], batch_size):
        yield ids[start : start + batch_size]
