# ruff: noqa: E501  (embedded web assets: long lines of JavaScript, CSS and HTML)
"""The HTML page: a summary of the findings (each study's `figure.summary_html`, where it has one), then each
study's section (its `figure.section_html`, present only with data) in the registry's order, the residue figure
first, then the compressor illustration where there is one; last, notes for the studies left out (the page opens on
the finding, not on what it lacks)."""

from __future__ import annotations

import html

from phasekv.studies import registry

from ..charts.vega import figure_html, javascript_bundle
from ..studies.gates import compressor_figure as compressor
from .assets_css import CSS
from .assets_js import EARLY, JS


def compressor_html(d: dict) -> str:
    w = d["window"]
    return f"""
<section id="sec-compressor"><h2>The compressor</h2>
<figure>{figure_html("fig-compressor", compressor.spec(d))}
<figcaption>One window with W = S = {w}, so a token's offset is its phase; colors mark offsets. Each token gets a
logit, a content term Z<sub>i</sub>h plus a bias b<sub>i</sub> that belongs to the offset; a softmax over the window
turns logits into scores; each payload C<sub>i</sub>h is scaled by its score and summed into one cache entry (the
stacked bars show how much of each channel comes from each offset). Click a token (or its score bar), or choose it
under “follow”, to follow it; prepending tokens moves it to a new offset without changing any content, and the panel
at the top right shows its score for each number of tokens prepended. Dashed chips are padding. Only keys are drawn.
Source: {html.escape(d["source"])}.</figcaption></figure></section>"""


def page(data: dict, notes: list[str], title: str, subtitle: str, selftest: bool = True) -> str:
    present = [study for study in registry.STUDIES if data.get(study.key)]
    summarised = [study for study in present if hasattr(study.figure, "summary_html")]
    summaries = [study.figure.summary_html(data[study.key]) for study in summarised]
    summary = f'<section id="sec-summary"><h2>Summary</h2>{"".join(summaries)}</section>' if summaries else ""
    studies = "".join(study.figure.section_html(data[study.key]) for study in present)
    body = summary + studies + (compressor_html(data["compressor"]) if "compressor" in data else "")
    # Vega, Vega-Lite and vega-embed, once, for every figure drawn from a Vega-Lite spec
    vega_script = f"<script>{javascript_bundle()}</script>" if 'data-vega="1"' in body else ""
    notes_html = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{CSS}</style><script>{EARLY}</script></head>
<body><main><h1>{html.escape(title)}</h1><p class="sub">{html.escape(subtitle)}</p>
{body}
{f'<h2>Not in this report</h2><ul class="notes" id="report-notes">{notes_html}</ul>' if notes else ""}
<pre id="selftest-result" aria-hidden="true"></pre>
</main>
{vega_script}<script>{JS}</script></body></html>
"""
