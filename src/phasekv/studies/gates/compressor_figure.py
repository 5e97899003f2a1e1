"""The compressor illustration (the paper's first figure): one W = S window, offsets coloured, gate
scores, the stacked contribution per channel, and a followed token that prepending moves to another offset.
One Vega-Lite spec (`spec`) draws it in the page and as PNG, from rows precomputed here for every
(tokens prepended, followed token's window, uniform gate) combination: the page only filters them.

Illustrative numbers by default; with a phasekv checkpoint (`phasekv report --model`), the numbers of
its gates (`phasekv.studies.gates.illustration`).
"""

from __future__ import annotations

import math
from pathlib import Path

import altair as alt

from phasekv.charts import vega
from phasekv.charts.labels import num

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
PAD_PAYLOAD = 0.05  # what a padding slot adds to each channel, before its score: visible, but small
FOLLOWED = 2  # the token followed at first (the last one in a shorter sequence)
# one colour per offset (cycled beyond 12)
PALETTE = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#1f78b4", "#b15928",
           "#6a3d9a", "#33a02c", "#fb9a99"]  # fmt: skip
CHIP = 76  # pixels per window slot, up to a window of 640
# the signal Vega-Lite binds the `follow` selection's token to: the select input sets it, so does a click on a chip
FOLLOW = "follow_token"


def illustrative() -> dict:
    return dict(ILLUSTRATIVE)


def section(illustration: dict | None) -> tuple[dict, str | None]:
    """(illustration data, a note when a given model could not be used): `illustration` comes from
    `phasekv.studies.gates.illustration.illustration` (None: the illustrative numbers)."""
    if illustration is None:
        return illustrative(), None
    data = dict(illustration)
    return data, data.pop("note", None)


def window_slots(d: dict, shift: int, window: int) -> list[int | None]:
    """The token index in each slot of window `window` after prepending `shift` padding tokens (None: padding,
    before the sequence or past its end)."""
    w, n = d["window"], len(d["tokens"])
    positions = range(window * w - shift, (window + 1) * w - shift)
    return [t if 0 <= t < n else None for t in positions]


def scores(d: dict, slots: list[int | None], uniform: bool) -> tuple[list[float], list[float]]:
    """(logits bias_i + content[t][i] with 0 content for padding, gate scores: their softmax or 1/W)."""
    logits = [
        b + (0.0 if t is None else d["content"][t][i]) for i, (b, t) in enumerate(zip(d["bias"], slots, strict=True))
    ]
    if uniform:
        return logits, [1 / len(slots)] * len(slots)
    top = max(logits)
    exp = [math.exp(v - top) for v in logits]
    total = sum(exp)
    return logits, [e / total for e in exp]


def rows(d: dict) -> list[dict]:
    """The figure's data: for every shift (tokens prepended, 0..W-1), window of it holding a token and gate
    (learned or uniform), a "slot" row per offset (chip, logit, score) and a "part" row per offset and
    channel (score x payload); for every shift, followed token and gate, a "follow" row (its offset,
    score and the caption); and the "source" line."""
    w, n, tokens = d["window"], len(d["tokens"]), d["tokens"]
    out = [{"kind": "source", "text": f"source: {d['source']}"}]
    for shift in range(w):
        for uniform in (False, True):
            at = {"shift": shift, "uniform": uniform}
            for window in range((shift + n + w - 1) // w):
                slots = window_slots(d, shift, window)
                logits, alpha = scores(d, slots, uniform)
                for i, (t, logit, a) in enumerate(zip(slots, logits, alpha, strict=True)):
                    where = {**at, "window": window, "offset": i}
                    label = "pad" if t is None else tokens[t]
                    below = f"i={i} · {logit:.2f}"
                    out.append(
                        {
                            **where,
                            "kind": "slot",
                            "token": t,
                            "label": label,
                            "below": below,
                            "bias": d["bias"][i],
                            "logit": num(logit, 6),
                            "alpha": num(a, 6),
                        }
                    )
                    payload = [PAD_PAYLOAD] * len(d["payload"][0][0]) if t is None else d["payload"][t][i]
                    out += [
                        {**where, "kind": "part", "channel": f"c{c}", "value": num(a * p, 6)}
                        for c, p in enumerate(payload)
                    ]
            for t in range(n):
                offset = (shift + t) % w
                _, alpha = scores(d, window_slots(d, shift, (shift + t) // w), uniform)
                caption = (
                    f'followed token "{tokens[t]}" is at offset {offset} after prepending {shift}; '
                    f"its score is {alpha[offset]:.3f}."
                )
                score = num(alpha[offset], 6)
                out.append(
                    {
                        **at,
                        "kind": "follow",
                        "token": t,
                        "offset": offset,
                        "at": f"i={offset}",
                        "alpha": score,
                        "text": caption,
                    }
                )
    return out


def spec(d: dict) -> dict:
    """The illustration of one W = S window: chips of its tokens coloured by offset (the followed token
    outlined, padding dashed) with their logits; their gate scores; the entry's contribution per channel
    stacked by offset; the followed token's score for each number of tokens prepended; the caption and
    source. Params: `shift` (tokens prepended), `uniform` (uniform gate) and the `follow` selection (a
    click on a chip or the select input sets its token)."""
    w, n = d["window"], len(d["tokens"])
    channels = len(d["payload"][0][0])
    followed = min(FOLLOWED, n - 1)
    shift = alt.param(name="shift", value=0, bind=alt.binding_radio(options=list(range(w)), name="prepend tokens "))
    uniform = alt.param(name="uniform", value=False, bind=alt.binding_checkbox(name="uniform gate "))
    clicked = "event.item.datum"
    follow = alt.selection_point(
        name="follow",
        fields=["token"],
        value=followed,
        # a click on a token's chip or score bar follows it; one on padding or elsewhere keeps the token
        on=f"click[event.item && {clicked} && {clicked}.kind == 'slot' && isValid({clicked}.token)]",
        clear=False,
        toggle=False,
        bind=alt.binding_select(
            options=list(range(n)), labels=[f"{t} {token}" for t, token in enumerate(d["tokens"])], name="follow "
        ),
    )
    in_window = f"datum.shift == shift && datum.uniform == uniform && datum.window == floor((shift + {FOLLOW}) / {w})"
    followed_rows = f"datum.kind == 'follow' && datum.uniform == uniform && datum.token == {FOLLOW}"
    offsets = alt.Scale(domain=list(range(w)), range=[PALETTE[i % len(PALETTE)] for i in range(w)])
    colour = alt.Color("offset:O", scale=offsets, legend=None)
    x = alt.X("offset:O", title="offset i", scale=alt.Scale(domain=list(range(w)), paddingInner=0.12))
    x = x.axis(labelAngle=0)
    slots = alt.Chart().transform_filter(f"datum.kind == 'slot' && {in_window}")
    width = min(CHIP * w, 640)

    outlined = f"datum.token === {FOLLOW}"
    tooltip = [
        "label:N",
        "offset:O",
        alt.Tooltip("bias:Q", format=".2f"),
        alt.Tooltip("logit:Q", format=".2f"),
        alt.Tooltip("alpha:Q", format=".3f"),
    ]
    box = {"x": x.axis(None), "y": alt.value(2), "y2": alt.value(36), "fill": colour, "tooltip": tooltip}
    chip = slots.transform_filter("isValid(datum.token)").mark_rect(cornerRadius=5, fillOpacity=0.3, cursor="pointer")
    chip = chip.encode(
        **box,
        stroke=alt.condition(outlined, alt.value("#000"), colour),
        strokeWidth=alt.condition(outlined, alt.value(3), alt.value(1.2)),
    )
    pad = slots.transform_filter("!isValid(datum.token)").mark_rect(cornerRadius=5, fillOpacity=0.12, strokeDash=[4, 3])
    pad = pad.encode(**box, stroke=colour)
    label = slots.mark_text(fontSize=12, cursor="pointer").encode(x=x.axis(None), y=alt.value(19), text="label:N")
    below = slots.mark_text(fontSize=10, color="#444").encode(x=x.axis(None), y=alt.value(48), text="below:N")
    chips = alt.layer(chip.add_params(follow), pad, label, below).properties(
        width=width, height=56, title=_title("1  logits = content + bias (click a token to follow it)")
    )

    bars = slots.mark_bar().encode(
        x=x, y=alt.Y("alpha:Q", title="α", scale=alt.Scale(domain=[0, 1])), color=colour, tooltip=tooltip
    )
    values = slots.mark_text(dy=-7, fontSize=10).encode(x=x, y="alpha:Q", text=alt.Text("alpha:Q", format=".2f"))
    gate_title = f"uniform ? '2  scores α: uniform 1/{w}' : '2  scores α (softmax over the window)'"
    alphas = alt.layer(bars, values).properties(width=width, height=110, title=_title(alt.ExprRef(gate_title)))

    parts = alt.Chart().transform_filter(f"datum.kind == 'part' && {in_window}").mark_bar()
    parts = parts.encode(
        x=alt.X("channel:N", title="channel", sort=None, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("value:Q", title="αᵢ · payload", stack="zero"),
        color=colour,
        order=alt.Order("offset:O"),
        tooltip=["channel:N", "offset:O", alt.Tooltip("value:Q", format=".3f")],
    ).properties(width=28 * channels, height=110, title=_title("3  entry: contribution per channel"))

    by_shift = alt.Chart().transform_filter(followed_rows)
    now = alt.condition("datum.shift == shift", alt.value(vega.SELECTED), alt.value("#bbb"))
    shift_x = alt.X("shift:O", title="tokens prepended", axis=alt.Axis(labelAngle=0))
    shift_bars = by_shift.mark_bar().encode(
        x=shift_x,
        y=alt.Y("alpha:Q", title="α", scale=alt.Scale(domain=[0, 1])),
        color=now,
        tooltip=["shift:O", "at:N", alt.Tooltip("alpha:Q", format=".3f")],
    )
    shift_at = by_shift.mark_text(dy=-7, fontSize=10).encode(x=shift_x, y="alpha:Q", text="at:N")
    shifts = alt.layer(shift_bars, shift_at).properties(
        width=28 * channels, height=56, title=_title(["the followed token's score", "by tokens prepended"])
    )

    lines = alt.Chart().mark_text(align="left", fontSize=12).encode(x=alt.value(0), text="text:N")
    caption = lines.transform_filter(f"{followed_rows} && datum.shift == shift").encode(y=alt.value(8))
    source = lines.transform_filter("datum.kind == 'source'").mark_text(align="left", fontSize=10, color="#555")
    text = alt.layer(caption, source.encode(y=alt.value(28))).properties(width=width, height=36)

    chart = alt.vconcat(alt.hconcat(chips, shifts), alt.hconcat(alphas, parts), text, data=vega.values(rows(d)))
    title = (
        f"Compressor illustration (W = S = {w}): token chips coloured by offset, gate scores, and each channel's "
        f"contribution by offset, for a followed token that prepending moves to another offset; {d['source']}"
    )
    return vega.finish(chart.add_params(shift, uniform).properties(description=title))


def _title(text) -> alt.Title:
    return alt.Title(text, anchor="start", frame="group", fontSize=13)


def png(data: dict, inputs, out_dir: Path) -> list[Path]:
    """The illustration at its first state (nothing prepended, learned gate) as PNG; `inputs` is unused (the
    section's data does not come from result files), kept for the sections' common signature."""
    return [vega.write_png(spec(data), out_dir / "compressor.png")]
