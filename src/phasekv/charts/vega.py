"""One Vega-Lite spec per figure, used twice: rendered to PNG here (`write_png`, via vl-convert) and
embedded in the HTML page (`figure_html`), where the Vega/Vega-Lite/vega-embed bundle of the same
Vega-Lite version (`javascript_bundle`) draws it in the browser without network access."""

from __future__ import annotations

import html
import json
from functools import cache
from pathlib import Path

import altair as alt
import vl_convert

from ..files import write_atomic

# the Vega-Lite version altair writes specs for, e.g. "6.4": the PNG renderer and the page's bundle use it too
VEGALITE_VERSION = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
PNG_SCALE = 2  # PNG pixels per spec pixel: sharp on high-DPI screens and in print
SELECTED = "#c0392b"  # the page's colour for the selected / observed series
FONT = "system-ui, -apple-system, Segoe UI, sans-serif"


def values(rows: list[dict]) -> alt.Data:
    """Inline list-of-dict data (no pandas)."""
    return alt.Data(values=rows)


def finish(chart: alt.TopLevelMixin) -> dict:
    """The chart as a Vega-Lite spec dict with the report's shared look."""
    chart = chart.configure(font=FONT).configure_axis(labelFontSize=11, titleFontSize=12, grid=True, gridColor="#eee")
    return chart.configure_view(stroke=None).to_dict()


def axis_title(spec: dict, channel: str, expr: str) -> dict:
    """`spec` with the axis title of `channel` set by the expression `expr` (of the spec's params) in every view
    that encodes it, so a title can follow what a param draws. Vega-Lite takes an expression there; altair's schema
    types the title as text only, hence the edit of the finished spec."""

    def visit(node):
        if isinstance(node, dict):
            encoded = (node.get("encoding") or {}).get(channel)
            if isinstance(encoded, dict) and "field" in encoded:
                encoded.setdefault("axis", {})["title"] = {"expr": expr}
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(spec)
    return spec


def write_png(spec: dict, path: str | Path) -> Path:
    """Render `spec` (its params at their initial values) to a PNG at `path`, atomically."""
    path = Path(path)
    png = vl_convert.vegalite_to_png(spec, vl_version=VEGALITE_VERSION, scale=PNG_SCALE)
    write_atomic(path, lambda tmp: Path(tmp).write_bytes(png))
    return path


def write_pngs(specs, out_dir: Path, stem: str) -> list[Path]:
    """One PNG per spec: `stem`.png, `stem`_1.png, ... in `out_dir`."""
    return [write_png(spec, out_dir / f"{stem}{'' if i == 0 else f'_{i}'}.png") for i, spec in enumerate(specs)]


def runs_section(key: str, heading: str, runs: list[dict], figure) -> str:
    """A report section (id `sec-KEY`) of one figure per run: `figure(i, run)`, the i-th run's HTML."""
    figures = "".join(figure(i, run) for i, run in enumerate(runs))
    return f"""
<section id="sec-{key}"><h2>{heading}</h2>{figures}</section>"""


def figure_html(fig_id: str, spec: dict, link: str = "") -> str:
    """A figure container and its spec as inline JSON; the page's script embeds every such pair. The
    spec's `description` is the figure's text alternative. `link`: names of params (space separated)
    kept equal across the figures of its section and set by the section's `data-param` rows."""
    payload = json.dumps(spec, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return (
        f'<div id="{fig_id}" class="vega-figure" data-figure="1" data-vega="1" data-link="{html.escape(link)}" '
        f'role="img" aria-label="{html.escape(spec["description"])}"></div>'
        f'<script type="application/json" data-spec-for="{fig_id}">{payload}</script>'
    )


@cache
def javascript_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script that sets only the globals `vega`, `vegaLite` and
    `vegaEmbed` (wrapped in a function: the bundle's own top-level names would clash with the page's)."""
    bundle = vl_convert.javascript_bundle(vl_version=VEGALITE_VERSION).replace("</script", "<\\/script")
    return f"(function () {{\n{bundle}\n}})();"
