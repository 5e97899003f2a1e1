# ruff: noqa: E501  (embedded web assets: long lines of JavaScript, CSS and HTML)
"""The report's stylesheet (inlined into the HTML)."""

CSS = r"""
:root { --ink:#222; --muted:#666; --line:#ddd; --sel:#c0392b; --accent:#1f5fa8; }
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); margin: 0; background: #fafafa; }
main { max-width: 1080px; margin: 0 auto; padding: 24px 20px 60px; background: #fff; }
h1 { font-size: 1.6em; margin: 0 0 4px; } h2 { font-size: 1.25em; margin: 36px 0 6px; border-top: 1px solid var(--line); padding-top: 18px; }
.sub { color: var(--muted); margin: 0 0 12px; }
.notes { background: #f5f5f0; border-left: 3px solid #bbb; padding: 6px 12px; font-size: .9em; color: #444; }
.notes li { margin: 2px 0; }
figure { margin: 10px 0; }
figcaption { font-size: .88em; color: #444; max-width: 900px; }
select { font: inherit; font-size: .9em; padding: 3px 10px; border: 1px solid #aaa; background: #fff; border-radius: 4px; cursor: pointer; }
tr:focus-visible, td:focus-visible { outline: 2px solid var(--accent); outline-offset: 2px; }
table.data { border-collapse: collapse; font-size: .88em; margin: 8px 0; }
table.data th, table.data td { padding: 3px 9px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
table.data th { white-space: normal; vertical-align: bottom; }
table.data td.text { white-space: normal; text-align: left; min-width: 10em; }
table.data th:first-child, table.data td:first-child { text-align: left; }
table.select tbody tr[data-param] { cursor: pointer; }
table.select tbody tr[data-param]:hover { background: #f3f6fa; }
table.select tbody tr[aria-selected="true"] { background: #fbeae8; font-weight: 600; }
.chance { color: #a00; font-weight: normal; font-size: .85em; }
.r2grid td.cell { cursor: pointer; text-align: center; min-width: 52px; }
.r2grid td.cell[aria-selected="true"] { outline: 2px solid var(--sel); }
.vega-bindings { display: flex; flex-wrap: wrap; gap: 14px; font-size: .9em; margin: 4px 0 0 40px; }
#selftest-result { white-space: pre-wrap; font-size: 11px; }
.small { font-size: .85em; color: var(--muted); }
.finding .headline { font-size: 1.1em; margin: 4px 0; }
.finding ul { margin: 4px 0 10px; padding-left: 20px; font-size: .9em; }
code { font-size: .88em; background: #f3f3f3; padding: 1px 4px; border-radius: 3px; overflow-wrap: anywhere; }
"""
