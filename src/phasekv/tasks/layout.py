"""Shared layout helpers: splitting padding into slots, and the window of target-record indices
for which every design position can be reached."""

from __future__ import annotations

import math

import numpy as np

PROTOCOLS = ("prefix", "in-sequence")


def check_protocol(protocol: str) -> None:
    """Raise ValueError unless `protocol` is one of PROTOCOLS."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown padding protocol {protocol!r}; choose one of {PROTOCOLS}")


def padding_slots(
    protocol: str, n_records: int, target: int, before: int, total: int, rng: np.random.Generator
) -> np.ndarray:
    """Padding counts for the n_records + 1 slots around the records (slot j precedes record j,
    slot n_records follows the last record); slots 0..target hold `before` tokens in all.

    `prefix`: all `before` tokens lead the records and the rest trail them, so every record
    shifts together. `in-sequence`: both parts are split at random (uniform multinomial) over
    their slots, so the gaps between records vary from prompt to prompt.
    """
    slots = np.zeros(n_records + 1, dtype=np.int64)
    if protocol == "prefix":
        slots[0], slots[n_records] = before, total - before
    else:
        slots[: target + 1] = rng.multinomial(before, np.full(target + 1, 1.0 / (target + 1)))
        after = n_records - target
        slots[target + 1 :] = rng.multinomial(total - before, np.full(after, 1.0 / after))
    return slots


def target_window(
    lowest: int, highest: int, padding: int, record_length: int, n_records: int, start: int
) -> tuple[int, int, int]:
    """Choose an origin and the range of target-record indices that reach every design offset.

    A target record k (its key first) starts at start + (padding before it) + k * record_length;
    the padding before it must lie in [0, padding] for every design
    position origin + offset, offset in [lowest, highest]. The origin centres the window of
    feasible k on the middle record. Returns (origin, k_min, k_max).
    """
    span = highest - lowest
    if padding < span + record_length - 1:
        raise ValueError(
            f"padding of {padding} tokens is too small: the target positions of the moment-matched "
            f"design span {span} tokens, so the padding must be at least {span + record_length - 1}"
        )
    middle = (n_records - 1) * record_length / 2
    origin = start + round(middle - (lowest + highest - padding) / 2)
    k_min = max(0, math.ceil((origin + highest - padding - start) / record_length))
    k_max = min(n_records - 1, (origin + lowest - start) // record_length)
    if k_min > k_max:
        raise ValueError(f"no target record reaches every design position with padding {padding}")
    return origin, k_min, k_max
