# ruff: noqa: E501  (embedded web assets: long lines of JavaScript, CSS and HTML)
"""The HTML page: one section per figure (present only with data), notes for missing ones. Figures
are embedded Vega-Lite specs (`vega.figure_html`); tables and captions are written here."""

from __future__ import annotations

import html
import json

from . import cycle, designs, flip, gates, knockout, positions, residues, theory
from .assets_css import CSS
from .assets_js import EARLY, JS
from .vega import figure_html, javascript_bundle


def _svg(fig_id: str, title: str, extra: str = "") -> str:
    return (
        f'<svg id="{fig_id}" data-figure="1" role="img" aria-label="{html.escape(title)}"{extra}>'
        f"<title>{html.escape(title)}</title></svg>"
    )


def residues_html(d: dict) -> str:
    probes = " and ".join(d["probes"])
    has_positions = any(s["positions"] is not None for s in d["series"])
    position_figure = ""
    if has_positions:
        spec = positions.spec(d["series"], residues.panel_names(d))
        position_figure = f"""<figure>{figure_html("fig-positions", spec, link="model")}
<figcaption>Accuracy against the absolute target position t<sub>K</sub>, in up to 12 bins of equal width, with
Wilson 95% bands (prompts counted as independent, so the bands are narrower than the residue plot's, which resample
whole units); dashed: the model's mean accuracy, thin bars: each bin's width. A smooth trend here (a step, a slope,
a dip in the middle) can leak into the residue pattern; a phase effect shows as a pattern by residue with no
matching trend here.{_positions_note(d)}</figcaption></figure>"""
    choices = residues.panel_names(d)
    rows = "".join(_residue_row(s, s["name"] in choices) for s in d["series"])
    return f"""
<section id="sec-residues"><h2>Accuracy by residue</h2>
<p class="sub">{html.escape(probes)} accuracy grouped by the target position modulo a multiple of the stride.</p>
<figure>{figure_html("fig-residues", residues.spec(d), link="model")}
<figcaption>Accuracy by target-key position (residue) with 95% bands ({html.escape(_interval(d))}), one panel per
compressed model (red) with full attention dashed in gray behind it. Dashed vertical rules mark the period boundaries
every S positions, triangles under the axis mark the boundary phase S−1. Choose a model (or click its row in the
table, or focus a row and use ↑/↓) to see its panel alone, beside its accuracy by position; “fold periods”
overlays the periods (first solid, later dashed).</figcaption></figure>
{position_figure}
<table class="data select" id="residue-table" aria-label="Models: click one to plot it alone">
<thead><tr><th>Model</th><th>S</th><th>val. loss</th><th>mean</th><th>worst</th><th>best</th><th>gap [95% CI]</th><th>p (uniform)</th><th>phase verdict</th></tr></thead>
<tbody>{rows}</tbody></table>
<p class="small">Accuracies in percent; gap is best minus worst residue in percentage points; p is the uniformity
test across residues (the paper's moment-matched figure, which a smooth effect of position can fool). The phase
verdict tests whether the phase pattern at the period replicates across windows of consecutive positions
(p beside it). Models whose mean is not clearly above guessing are marked “not shown above guessing”.</p>
</section>"""


def _fmt(value, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _residue_row(s: dict, selectable: bool) -> str:
    """A row of the residue table; a selectable one (a model with a panel) sets the figures' `model`."""
    chance = ' <span class="chance">not shown above guessing</span>' if s["learned"] is False else ""
    gap = _fmt(s["gap"]) + (f" [{_fmt(s['gap_ci'][0])}, {_fmt(s['gap_ci'][1])}]" if s["gap_ci"] else "")
    cells = [
        "–" if s["stride"] is None else str(s["stride"]),
        _fmt(s["val_loss"], 3),
        _fmt(s["mean"]),
        _fmt(s["worst"]),
        _fmt(s["best"]),
        gap,
        "–" if s["p_value"] is None else f"{s['p_value']:.2g}",
        s["verdict"] or "–",
    ]
    name = html.escape(s["name"])
    foldable = ' data-foldable="1"' if s["stride"] and s["stride"] < s["modulus"] else ""
    value = html.escape(json.dumps(s["name"]))  # data-value holds the param's value as JSON
    select = f' data-param="model" data-value="{value}" tabindex="0"{foldable}' if selectable else ""
    return f"<tr{select}><td>{name}{chance}</td>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"


def _positions_note(d: dict) -> str:
    if not d["without_records"]:
        return ""
    names = ", ".join(d["without_records"])
    return (
        f' <span class="small">No position plot for {html.escape(names)}: {html.escape(d["no_records_note"])}.</span>'
    )


def _interval(d: dict) -> str:
    methods = sorted({s["interval"] for s in d["series"]})
    return ", ".join(methods)


def flip_html(d: dict) -> str:
    figures = "".join(_flip_figure(i, run) for i, run in enumerate(d["runs"]))
    return f"""
<section id="sec-flip"><h2>Flip probe</h2>{figures}</section>"""


def _flip_figure(i: int, run: dict) -> str:
    def agreeing(rec: dict, unit: str) -> str:
        return f" ({rec['agree']} of {rec['total']} {unit} agree)" if rec["agree"] is not None else ""

    families = "".join(
        f"<li>{html.escape(family)}: {html.escape(rec['pattern'])}{agreeing(rec, 'lengths')}</li>"
        for family, rec in run["families"].items()
    )
    p_value = f" (permutation p = {run['p_value']})" if run["p_value"] is not None else ""
    return f"""
<figure>{figure_html("fig-flip" + (f"-{i}" if i else ""), flip.spec(run))}
<figcaption>Probability of each candidate completion as the filler before an unchanged context grows one token
at a time; the strip above each plot shows which candidate is on top at each length, dashed lines separate cycles
of the period P = {run["period"]} (from {html.escape(run["period_source"])}). Choose a filler family to see it alone.
<ul class="small">{families}<li>pooled over families: {html.escape(run["pooled"])}, {run["agree"]} of {run["total"]}
rankings follow it{p_value}</li></ul></figcaption></figure>"""


def knockout_html(d: dict) -> str:
    figures = "".join(_knockout_figure(i, m) for i, m in enumerate(d["maps"]))
    return f"""
<section id="sec-knockout"><h2>Knockout map and gate preferences</h2>{figures}</section>"""


def _knockout_figure(i: int, m: dict) -> str:
    if any(row["gate"] for row in m["rows"]):
        gates = f"""; beside it, the same head's mean gate score by phase relative to a uniform share (dashed = 1×,
gate results matched by {html.escape(m["gates_from"])}; “gate” switches to the value gate, shifted back by one)"""
    else:
        gates = " (no gate result for this model: run `phasekv gates` on it to see its gate preferences beside the knockouts)"
    return f"""
<figure>{figure_html("fig-knockout" + (f"-{i}" if i else ""), knockout.spec(m))}
<figcaption>{html.escape(m["name"])}: each row knocks out one KV head (or a whole layer) by mean replacement at the
final position; columns are target positions by residue (left) and folded by the stride S (right); color is the
accuracy change relative to clean: red lost, blue gained, clipped at ±100% (gray: clean accuracy 0). Click a row to
see its change by phase below{gates}.</figcaption></figure>"""


def gates_html(d: dict) -> str:
    figures = "".join(
        f"""<figure>{figure_html("fig-gates" + (f"-{i}" if i else ""), gates.spec(plane))}</figure>"""
        for i, plane in enumerate(d["planes"])
    )
    return f"""
<section id="sec-gates"><h2>Gate plane</h2>{figures}
<p class="small">Each point is one KV head's key gate, placed by its static effective number of offsets exp(H(E[α]))
(horizontal) and its per-window effective number E[exp(H(α))] (vertical), both from 1 (one offset) to W (uniform);
color marks layer depth, diamonds mark vector gates (measured per channel, averaged). On the dashed diagonal a gate
gives each offset the same score in every window. Beside a gate result, its gates' phase shares relative to uniform
(the value gate shifted back by one). For a training run the points are the heads at the chosen snapshot and the lines
trace the most statically concentrated heads from the first snapshot (open circle) to it (filled): drag the step
slider to replay training (the figures are Vega-Lite, which has no timer, so there is no play button).</p></section>"""


def cycle_html(d: dict) -> str:
    figures = "".join(
        f"""<figure>{figure_html("fig-cycle" + (f"-{i}" if i else ""), cycle.spec(m), link="delta")}</figure>"""
        for i, m in enumerate(d["models"])
    )
    head = "".join(f"<th>{delta:+d}</th>" for delta in d["deltas"])
    body = "".join(
        f"<tr><td>{html.escape(m['name'])}</td>{''.join(_r2_cell(m, delta) for delta in d['deltas'])}</tr>"
        for m in d["models"]
    )
    return f"""
<section id="sec-cycle"><h2>Gate cycling</h2>{figures}
<p class="small">Observed accuracy after cycling the gate parameters by δ (red, 95% band), the uncycled model (gray),
and the prediction A₀((r−δ) mod S) (dashed); the triangle marks the boundary phase. Beside it, predicted against
observed change per phase (the boundary phase, hollow, is excluded from R²) and R² with its 95% interval for every δ.
Choose δ above a figure or click a cell of the grid below: every model's figure moves to that δ.</p>
<table class="data r2grid" id="cycle-grid" aria-label="R squared over models and deltas: click a cell to show that delta">
<thead><tr><th>model \\ δ</th>{head}</tr></thead><tbody>{body}</tbody></table></section>"""


def _r2_cell(m: dict, delta: int) -> str:
    c = next((c for c in m["cycles"] if c["delta"] == delta), None)
    if c is None or c["r2"] is None:
        return "<td>–</td>"
    shade = f"rgba(31,95,168,{0.1 + 0.6 * max(0.0, c['r2']):.2f})"
    ci = f' title="95% CI [{c["r2_interval"][0]:.2f}, {c["r2_interval"][1]:.2f}]"' if c["r2_interval"] else ""
    return (
        f'<td class="cell" data-param="delta" data-value="{delta}" tabindex="0" style="background:{shade}"{ci}>'
        f"{c['r2']:.2f}</td>"
    )


def theory_html(d: dict) -> str:
    figures = "".join(
        f"""<figure>{figure_html("fig-theory" + (f"-{i}" if i else ""), theory.spec(run))}
<figcaption>Log-linear gates of the idealized induction model trained from a small ball: per head, the static (solid)
and per-window (dashed) effective number of positions of its key gate, from S (uniform) down to 1 (one position).
Final loss {_fmt(run["loss"], 4)}; key positions selected {run["selected"]}; uncovered non-final positions:
{run["uncovered"] or "none"}.</figcaption></figure>"""
        for i, run in enumerate(d["runs"])
    )
    tables = ""
    if d["sweeps"]:
        tables = """<p class="sub">Coverage over a sweep: the fraction of runs whose heads all concentrate, the fraction
whose concentrated heads cover all S−1 non-final positions, mean collisions, loss and accuracy.</p>"""
        tables += "".join(_sweep_table(sweep) for sweep in d["sweeps"])
    return f"""
<section id="sec-theory"><h2>Theory</h2>{figures}{tables}</section>"""


def _sweep_table(sweep: dict) -> str:
    def cell(value) -> str:
        return html.escape(f"{value:.4g}" if isinstance(value, float) else str(value))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in sweep["columns"])
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in sweep["rows"])
    return f"""<p class="small">{html.escape(sweep["name"])} (seeds {json.dumps(sweep["seeds"])})</p>
<table class="data"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"""


def compressor_html(d: dict) -> str:
    w = d["window"]
    return f"""
<section id="sec-compressor"><h2>The compressor</h2>
<div class="controls"><span>prepend tokens:</span><span id="compressor-prepend"></span>
<button type="button" id="compressor-uniform" aria-pressed="false">Uniform gate</button></div>
<figure>{_svg("fig-compressor", "Compressor illustration")}
<figcaption>One window with W = S = {w}, so a token's offset is its phase; colors mark offsets. Each token gets a
logit, a content term Z<sub>i</sub>h plus a bias b<sub>i</sub> that belongs to the offset; a softmax over the window
turns logits into scores; each payload C<sub>i</sub>h is scaled by its score and summed into one cache entry (the
stacked bars show how much of each channel comes from each offset). Click a token to follow it; prepending tokens
moves it to a new offset without changing any content, and the small bars on the buttons show its score for each
shift. Dashed chips are padding. Only keys are drawn. Source: {html.escape(d["source"])}.</figcaption></figure></section>"""


def designs_html(d: dict) -> str:
    def seeds(values) -> str:
        return " / ".join("-" if v is None else f"{v:.1f}" for v in values)

    def verdict(row) -> str:
        if row["role"] != "candidate":
            return row["role"]
        return "target met" if row["meets_target"] else "missed: " + "; ".join(row["misses"])

    body = "".join(
        f"<tr><td>{html.escape(r['design'])}</td><td>{' / '.join(map(str, r['seeds']))}</td>"
        f"<td>{r['cache_bytes_per_token']:g}</td><td>{seeds(r['mean'])}</td><td>{seeds(r['worst'])}</td>"
        f"<td>{seeds(r['gap'])}</td><td>{seeds(r['period_diff'])}</td><td>{html.escape(verdict(r))}</td></tr>"
        for r in d["rows"]
    )
    knocked = d.get("knockout_run")
    knock = f" The knockout map above includes the best design's run, {html.escape(knocked)}." if knocked else ""
    return f"""
<section id="sec-designs"><h2>Designs against the weak spots</h2>
<figure>{figure_html("fig-designs", designs.spec(d))}
<figcaption>Each design's mean accuracy over residues against its gap (best − worst residue), one point per seed
(hollow: not learned, so a small gap is flatness for the wrong reason), a cross at the seed mean; the shape marks
the control, the baseline and the candidates. Lower right is better; click a design in the legend to pick it out.
</figcaption></figure>
<table class="data" id="designs-table"><thead><tr><th>design</th><th>seeds</th><th>cache B/token</th><th>mean</th>
<th>worst</th><th>gap</th><th>period diff.</th><th>target</th></tr></thead><tbody>{body}</tbody></table>
<p class="sub">One value per seed, accuracies in percent, gap = best - worst residue in points. Target: every seed
learned, and on seed means a gap within 5 points of full attention's, a mean at least W8/S8's, the same cache bytes per
token.{knock} Source: {html.escape(d["file"])}.</p></section>"""


SECTIONS = [
    ("compressor", compressor_html),
    ("flip", flip_html),
    ("residues", residues_html),
    ("knockout", knockout_html),
    ("gates", gates_html),
    ("cycle", cycle_html),
    ("theory", theory_html),
    ("designs", designs_html),
]


# sections whose figures the page's hand-written script draws from `report-data` (the others embed a Vega-Lite spec)
DRAWN_BY_SCRIPT = ("compressor",)


def page(data: dict, notes: list[str], title: str, subtitle: str, selftest: bool = True) -> str:
    body = "".join(render(data[key]) for key, render in SECTIONS if data.get(key))
    # Vega, Vega-Lite and vega-embed, once, for every figure drawn from a Vega-Lite spec
    vega_script = f"<script>{javascript_bundle()}</script>" if 'data-vega="1"' in body else ""
    notes_html = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    scripted = {key: block for key, block in data.items() if key in DRAWN_BY_SCRIPT}
    payload = json.dumps(scripted, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{CSS}</style><script>{EARLY}</script></head>
<body><main><h1>{html.escape(title)}</h1><p class="sub">{html.escape(subtitle)}</p>
{f'<ul class="notes" id="report-notes">{notes_html}</ul>' if notes else ""}
{body}
<pre id="selftest-result" aria-hidden="true"></pre>
</main>
<script type="application/json" id="report-data">{payload}</script>
{vega_script}<script>{JS}</script></body></html>
"""
