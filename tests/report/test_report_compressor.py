"""The report's compressor illustration: rows precomputed for every (tokens prepended, followed token,
gate) combination agree with a plain softmax of bias + content (uniform: 1/W), and one Vega-Lite spec
with its params draws the page's view and the PNG. The page's interactions are checked in headless
Chromium by tests/report/test_report.py (the page's self-test)."""

from __future__ import annotations

import math
import random

import pytest

from phasekv.studies.gates import compressor_figure as compressor


def _checkpoint_like(w: int = 8, n: int = 16, channels: int = 3) -> dict:
    """Numbers of the shape `phasekv.studies.gates.illustration` reads from a checkpoint."""
    rng = random.Random(0)
    return {
        "source": "model run · step 10, layer 0, KV head 0, key gate",
        "window": w,
        "tokens": [f"#{t}" for t in range(1, n + 1)],
        "bias": [rng.gauss(0, 2) for _ in range(w)],
        "content": [[rng.gauss(0, 1) for _ in range(w)] for _ in range(n)],
        "payload": [[[abs(rng.gauss(0, 1)) for _ in range(channels)] for _ in range(w)] for _ in range(n)],
    }


def _softmax(logits: list[float]) -> list[float]:
    exp = [math.exp(v) for v in logits]
    return [e / sum(exp) for e in exp]


def _window(rows: list[dict], kind: str, shift: int, window: int, uniform: bool) -> list[dict]:
    return [
        r for r in rows if r["kind"] == kind and (r["shift"], r["window"], r["uniform"]) == (shift, window, uniform)
    ]


@pytest.mark.parametrize(
    ("d", "shift", "window", "tokens"),
    [
        (compressor.illustrative(), 0, 0, [0, 1, 2, 3]),
        (compressor.illustrative(), 3, 0, [None, None, None, 0]),  # prepending pads the first window
        (compressor.illustrative(), 1, 2, [7, None, None, None]),  # and runs the last past the sequence's end
        (_checkpoint_like(), 5, 1, list(range(3, 11))),
    ],
)
def test_scores_are_the_softmax_of_bias_plus_content_or_uniform(d, shift, window, tokens):
    rows = compressor.rows(d)
    w = d["window"]
    slots = _window(rows, "slot", shift, window, False)
    assert [r["offset"] for r in slots] == list(range(w)) and [r["token"] for r in slots] == tokens
    logits = [
        b + (0.0 if t is None else d["content"][t][i]) for i, (b, t) in enumerate(zip(d["bias"], tokens, strict=True))
    ]
    assert [r["alpha"] for r in slots] == pytest.approx(_softmax(logits), abs=1e-6)
    assert [r["logit"] for r in slots] == pytest.approx(logits, abs=1e-6)
    assert [r["alpha"] for r in _window(rows, "slot", shift, window, True)] == pytest.approx([1 / w] * w, abs=1e-6)
    for uniform in (False, True):  # each channel's part from each offset: its score times its payload
        alpha = {r["offset"]: r["alpha"] for r in _window(rows, "slot", shift, window, uniform)}
        parts = _window(rows, "part", shift, window, uniform)
        channels = len(d["payload"][0][0])
        assert len(parts) == w * channels
        for r in parts:
            t, c = tokens[r["offset"]], int(r["channel"][1:])
            payload = compressor.PAD_PAYLOAD if t is None else d["payload"][t][r["offset"]][c]
            assert r["value"] == pytest.approx(alpha[r["offset"]] * payload, abs=2e-6)


@pytest.mark.parametrize("d", [compressor.illustrative(), _checkpoint_like()])
def test_every_shift_followed_token_and_gate_has_its_window_and_caption(d):
    rows = compressor.rows(d)
    w, n = d["window"], len(d["tokens"])
    for shift in range(w):
        for token in range(n):
            for uniform in (False, True):
                (follow,) = [
                    r
                    for r in rows
                    if r["kind"] == "follow" and (r["shift"], r["token"], r["uniform"]) == (shift, token, uniform)
                ]
                slots = _window(rows, "slot", shift, (shift + token) // w, uniform)
                (slot,) = [r for r in slots if r["token"] == token]  # the followed token is in the window shown
                assert follow["offset"] == slot["offset"] == (shift + token) % w
                assert follow["alpha"] == slot["alpha"]
                assert follow["text"] == (
                    f'followed token "{d["tokens"][token]}" is at offset {slot["offset"]} after prepending {shift}; '
                    f"its score is {follow['alpha']:.3f}."
                )
    caption = next(r["text"] for r in rows if r["kind"] == "follow" and (r["shift"], r["token"]) == (0, 2))
    if d["source"] == "illustrative numbers":  # the number the page's former script showed first
        assert caption == 'followed token "is" is at offset 2 after prepending 0; its score is 0.384.'


def test_spec_binds_shift_uniform_and_the_followed_token_and_renders_to_png(tmp_path):
    d = _checkpoint_like()
    spec = compressor.spec(d)
    assert spec["data"]["values"] == compressor.rows(d)
    params = {p["name"]: p for p in spec["params"]}
    assert params["shift"]["value"] == 0 and params["shift"]["bind"]["options"] == list(range(8))
    assert params["uniform"]["value"] is False and params["uniform"]["bind"]["input"] == "checkbox"
    (follow,) = [p for p in _params(spec) if p["name"] == "follow"]  # a click on a chip, or the select input
    assert follow["select"]["fields"] == ["token"] and follow["select"]["on"].startswith("click[")
    assert follow["value"] == compressor.FOLLOWED and follow["bind"]["options"] == list(range(16))
    assert "W = S = 8" in spec["description"]
    (png,) = compressor.png(d, None, tmp_path / "figures")
    assert png.name == "compressor.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000


def _params(spec) -> list[dict]:
    """Every param of a spec, at any depth."""
    if isinstance(spec, dict):
        return spec.get("params", []) + [p for v in spec.values() for p in _params(v)]
    if isinstance(spec, list):
        return [p for v in spec for p in _params(v)]
    return []


def test_section_keeps_the_illustration_and_pops_its_note():
    assert compressor.section(None) == (compressor.illustrative(), None)
    given = {**_checkpoint_like(), "note": "why"}
    data, note = compressor.section(given)
    assert note == "why" and data == _checkpoint_like() and "note" in given
