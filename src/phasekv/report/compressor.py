"""The compressor illustration (the paper's first figure): one W = S window, offsets coloured, gate
scores, the stacked contribution per channel, and prepend buttons moving a followed token.

Illustrative numbers by default; with a phasekv checkpoint (`phasekv report --model`), the numbers of
its gates (`phasekv.analysis.gate_illustration`).
"""

from __future__ import annotations

TOKENS = ["the", "owl", "is", "Mia", "the", "cat", "is", "Ben"]
CHANNELS = 6

ILLUSTRATIVE = {
    "source": "illustrative numbers",
    "window": 4,
    "tokens": TOKENS,
    "bias": [0.0, 0.3, 1.5, -0.2],
    # content term Z_i h of token t at offset i: [token][offset]
    "content": [
        [0.1, 0.0, -0.1, 0.2],
        [0.6, 0.5, 0.4, 0.7],
        [-0.3, -0.2, -0.4, -0.1],
        [0.8, 0.9, 0.7, 0.6],
        [0.1, 0.0, -0.1, 0.2],
        [0.5, 0.6, 0.4, 0.5],
        [-0.3, -0.2, -0.4, -0.1],
        [0.7, 0.8, 0.9, 0.6],
    ],
    # |C_i h| per channel: [token][offset][channel]
    "payload": [
        [[0.3 + 0.1 * ((t + c + i) % 4) for c in range(CHANNELS)] for i in range(4)] for t in range(len(TOKENS))
    ],
}


def illustrative() -> dict:
    return dict(ILLUSTRATIVE)


def section(illustration: dict | None) -> tuple[dict, str | None]:
    """(illustration data, a note when a given model could not be used): `illustration` comes from
    `phasekv.analysis.gate_illustration.illustration` (None: the illustrative numbers)."""
    if illustration is None:
        return illustrative(), None
    data = dict(illustration)
    return data, data.pop("note", None)
