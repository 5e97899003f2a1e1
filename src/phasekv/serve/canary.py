"""A behavioural fingerprint of what answers behind an endpoint: the top log-probs after a few canary prompts.

A model card says what a server calls its model, not which weights answer: a folder retrained in
place, a `checkpoints/final` link moved to a later step, or a third-party server (vLLM, llama.cpp)
whose card never changes, all keep the card. The canaries are a small fixed set of token-id prompts
drawn (with a fixed seed) from the tokenizer's vocabulary; the top CANARY_TOP next-token log-probs
after each are asked for at the start of every audit and stored with the results cache, and asked again
after any failed request and before a result is recorded (see `client`). A cache whose canaries disagree
with the server's now by more than the tolerance (in nats) is refused, and so is every further answer of
an audit during which they came to disagree.

What this guarantees: changed weights that move any canary's top log-probs by more than the
tolerance are detected, whatever the card says. What it does not: a change that leaves those
log-probs within the tolerance (weights that differ only where the canaries do not reach) goes
unnoticed, and a server that is not deterministic needs a tolerance above its own noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .errors import EndpointError

CANARY_COUNT = 3
CANARY_LENGTH = 12
CANARY_TOP = 5  # OpenAI's legacy completions API caps logprobs at 5: every server gives this many
CANARY_SEED = 7919
DEFAULT_TOLERANCE = 1e-3  # nats; float32 CPU servers repeat to ~1e-6, other weights move by far more
MAX_DRAWS = 200  # bounded search for prompts a text-only server can be sent


def canary_prompts(tokenizer, vocab_size: int, usable: Callable[[list[int]], bool] | None = None) -> list[list[int]]:
    """CANARY_COUNT prompts of CANARY_LENGTH ordinary token ids (< `vocab_size`), the same for the same
    tokenizer every time; `usable` (e.g. a text round trip) filters the candidates."""
    special = set(getattr(tokenizer, "all_special_ids", None) or ())
    pool = [t for t in range(min(vocab_size, len(tokenizer))) if t not in special]
    if not pool:
        raise EndpointError("the tokenizer has no ordinary tokens to make canary prompts of")
    rng = np.random.default_rng(CANARY_SEED)
    prompts: list[list[int]] = []
    for _ in range(MAX_DRAWS):
        ids = [pool[i] for i in rng.integers(len(pool), size=CANARY_LENGTH).tolist()]
        if usable is None or usable(ids):
            prompts.append(ids)
            if len(prompts) == CANARY_COUNT:
                return prompts
    raise EndpointError(f"no {CANARY_COUNT} canary prompts in {MAX_DRAWS} draws can be sent to this server")


def canary_difference(stored: dict, now: dict) -> float:
    """The largest log-prob difference (nats) between two canary records {"prompts", "top"}; inf when the
    prompts differ. A token in one top list but not the other differs by at least how far it stands
    above the other list's lowest entry (it ranks below that entry there)."""
    if stored.get("prompts") != now.get("prompts") or len(stored.get("top", ())) != len(now.get("top", ())):
        return math.inf
    largest = 0.0
    for a_list, b_list in zip(stored["top"], now["top"], strict=True):
        a, b = {int(t): float(v) for t, v in a_list}, {int(t): float(v) for t, v in b_list}
        if not a or not b:
            return math.inf
        for token in a.keys() | b.keys():
            if token in a and token in b:
                gap = abs(a[token] - b[token])
            elif token in a:
                gap = max(0.0, a[token] - min(b.values()))
            else:
                gap = max(0.0, b[token] - min(a.values()))
            largest = max(largest, gap)
    return largest
