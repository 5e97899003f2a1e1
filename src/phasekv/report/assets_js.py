# ruff: noqa: E501  (embedded web assets: long lines of JavaScript, CSS and HTML)
"""The report's JavaScript (inlined into the HTML): it embeds the figures, every one drawn from a Vega-Lite
spec (with the Vega bundle the page inlines, see `vega.py`), and keeps their shared params in step; it
draws nothing itself.

With `?selftest=1` in the URL the page checks itself after drawing (every figure has marks, a model
row narrows the residue figure to its panel and the position figure follows, the fold toggle (there exactly
when a model has periods to fold) changes the x axis, a knockout row click, the gate step slider, an R² cell, prepending a token and clicking a
chip in the compressor illustration, no errors) and writes the outcome as JSON into `#selftest-result`,
for headless browser tests.
"""

EARLY = r"""
window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push('error: ' + (e.message || e)); });
window.addEventListener('unhandledrejection', function (e) { window.__errors.push('rejection: ' + e.reason); });
(function () { var orig = console.error; console.error = function () {
  window.__errors.push('console.error: ' + Array.prototype.join.call(arguments, ' ')); return orig.apply(console, arguments); }; })();
"""

JS = r"""
'use strict';
function $(id) { return document.getElementById(id); }

/* ---------- figures drawn from Vega-Lite specs (built in Python, one per figure; see vega.py) ---------- */
const VIEWS = {};  // figure id -> its Vega view
function embedFigures() {
  const figures = Array.from(document.querySelectorAll('[data-vega]'));
  return Promise.all(figures.map(div => {
    const spec = JSON.parse(document.querySelector('script[data-spec-for="' + div.id + '"]').textContent);
    return vegaEmbed(div, spec, {actions: false, renderer: 'svg'}).then(result => { VIEWS[div.id] = result.view; });
  })).then(() => document.querySelectorAll('section').forEach(linkParams));
}
// A param named in a figure's data-link stays equal across the figures of its section, and rows or cells
// with data-param/data-value (JSON; the residue table, the R² grid) set it: one choice drives every figure.
function linkedViews(section, name) {
  return Array.from(section.querySelectorAll('[data-vega]')).filter(div => div.dataset.link.split(' ').includes(name)).map(div => VIEWS[div.id]);
}
function setParam(section, name, value) {
  section.querySelectorAll('[data-param="' + name + '"]').forEach(row => row.setAttribute('aria-selected', JSON.parse(row.dataset.value) === value ? 'true' : 'false'));
  return Promise.all(linkedViews(section, name).filter(v => v.signal(name) !== value).map(v => v.signal(name, value).runAsync()));
}
function linkParams(section) {
  const names = new Set(Array.from(section.querySelectorAll('[data-vega]')).flatMap(div => div.dataset.link.split(' ').filter(Boolean)));
  names.forEach(name => linkedViews(section, name).forEach(v => v.addSignalListener(name, (_, value) => setParam(section, name, value))));
  const choices = Array.from(section.querySelectorAll('[data-param]'));
  choices.forEach((row, i) => {
    const pick = () => setParam(section, row.dataset.param, JSON.parse(row.dataset.value));
    row.addEventListener('click', pick);
    row.addEventListener('keydown', e => {
      if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); pick(); }
      // ↑/↓ walk a table's rows (the residue table), choosing each
      const next = row.tagName === 'TR' ? choices[i + ({ArrowDown: 1, ArrowUp: -1}[e.key] || 0)] : null;
      if (next && next !== row && next.tagName === 'TR') { e.preventDefault(); next.focus(); next.click(); }
    });
  });
}
function settle() { return Promise.all(Object.values(VIEWS).map(v => v.runAsync())); }

/* ---------- self-test (?selftest=1) ---------- */
async function selfTest() {
  const checks = [];
  const ok = (name, pass, info) => checks.push({name, pass: !!pass, info: info === undefined ? '' : String(info)});
  document.querySelectorAll('[data-figure]').forEach(fig => {
    const svg = fig.querySelector('svg');  // a Vega view draws into an <svg> inside its container
    const n = svg ? svg.querySelectorAll('.role-mark > *').length : 0;
    const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    ok('figure ' + fig.id + ' renders', n > 3 && box.width > 0 && box.height > 0, n + ' marks, ' + Math.round(box.width) + 'x' + Math.round(box.height));
    const label = fig.getAttribute('aria-label') || '';  // its spec's description
    ok('figure ' + fig.id + ' has a text alternative', label.length > 10 && label !== 'Vega visualization', label);
  });
  const residues = VIEWS['fig-residues'];
  if (residues) {
    const fig = $('fig-residues'), section = $('sec-residues');
    const panels = () => fig.querySelectorAll('.role-scope.cell > g').length;
    const xAxis = () => Array.from(fig.querySelectorAll('.role-axis')).filter(a => /^X-axis/.test(a.getAttribute('aria-label'))).map(a => Array.from(a.querySelectorAll('.role-axis-label text')).map(t => t.textContent).join(',')).join(' | ');
    const rows = Array.from(section.querySelectorAll('tr[data-param="model"]'));
    const all = panels(), target = rows.find(r => r.dataset.foldable) || rows[rows.length - 1];
    target.click(); await settle();
    ok('clicking a model row shows its panel alone', residues.signal('model') === JSON.parse(target.dataset.value) && panels() === 1 && target.getAttribute('aria-selected') === 'true',
       all + ' panels -> ' + panels() + ' (' + residues.signal('model') + ')');
    const positions = VIEWS['fig-positions'];
    if (positions) ok('the position figure follows the selected model', positions.signal('model') === residues.signal('model'), positions.signal('model'));
    const at = rows.indexOf(target), below = rows[at + 1], key = below ? 'ArrowDown' : 'ArrowUp', neighbour = below || rows[at - 1];
    if (neighbour) {  // ↓ (or ↑) from the chosen row chooses the next one
      target.dispatchEvent(new KeyboardEvent('keydown', {key, bubbles: true})); await settle();
      ok('the arrow keys walk the model rows', residues.signal('model') === JSON.parse(neighbour.dataset.value) && document.activeElement === neighbour, key + ': ' + residues.signal('model'));
      target.click(); await settle();
    }
    // the toggle is there exactly when a model has periods to fold, and then it folds the chosen one
    const fold = fig.querySelector('.vega-bindings input[type="checkbox"]');
    if (target.dataset.foldable && fold) {
      const axis0 = xAxis();
      fold.click(); await settle();
      const axis1 = xAxis();
      ok('the fold toggle changes the x axis', residues.signal('fold') === true && axis1 !== axis0, axis0 + ' -> ' + axis1);
      fold.click(); await settle();
      ok('the fold toggle restores the x axis', xAxis() === axis0, xAxis());
    } else if (fold || target.dataset.foldable) {
      ok('the fold toggle changes the x axis', false, fold ? 'a fold toggle but no model with a period below its modulus' : 'no fold toggle for a model with periods to fold');
    }
  }
  const knockout = VIEWS['fig-knockout'];
  if (knockout) {  // click the last cell of the folded map: its row becomes the selection
    const selected = () => (knockout.data('row_store')[0] || {values: []}).values[0];
    const cells = $('fig-knockout').querySelectorAll('.mark-rect.role-mark')[1].querySelectorAll('path');
    const before = selected(), cell = cells[cells.length - 1];
    cell.dispatchEvent(new MouseEvent('click', {bubbles: true}));
    await settle();
    ok('clicking a knockout row selects it', selected() !== before && cell.__data__.datum.label === selected(), before + ' -> ' + selected());
  }
  const replay = Array.from(document.querySelectorAll('#sec-gates [data-vega]')).find(fig => fig.querySelector('input[type="range"]'));
  if (replay) {  // drag the training-step slider to the first snapshot: the plane shows that step
    const view = VIEWS[replay.id], slider = replay.querySelector('input[type="range"]'), last = view.signal('step');
    const spec = JSON.parse(document.querySelector('script[data-spec-for="' + replay.id + '"]').textContent);
    const first = spec.data.values.find(row => row.kind === 'step' && row.index === 0).text;
    slider.value = '0'; slider.dispatchEvent(new Event('input', {bubbles: true}));
    await settle();
    const shown = Array.from(replay.querySelectorAll('.mark-text text')).map(t => t.textContent).find(t => /^step /.test(t));
    ok('the step slider replays the training', last > 0 && view.signal('step') === 0 && shown === first, last + ' -> ' + view.signal('step') + ' (' + shown + ')');
  }
  const cycled = VIEWS['fig-cycle'], cells = Array.from(document.querySelectorAll('#cycle-grid td[data-param="delta"]'));
  if (cycled && cells.length) {  // a cell of the R² grid sets δ in the figures
    const cell = cells.find(td => JSON.parse(td.dataset.value) !== cycled.signal('delta'));
    if (cell) {
      const before = cycled.signal('delta');
      cell.click(); await settle();
      ok('clicking an R² cell shows its δ', cycled.signal('delta') === JSON.parse(cell.dataset.value) && cell.getAttribute('aria-selected') === 'true', before + ' -> ' + cycled.signal('delta'));
    }
  }
  const compressor = VIEWS['fig-compressor'];
  if (compressor) {  // prepend one token: the followed token moves one offset on; then click another token's chip
    const fig = $('fig-compressor');
    const caption = () => Array.from(fig.querySelectorAll('.mark-text text')).map(t => t.textContent).find(t => /^followed token/.test(t)) || '';
    const offset = () => +(caption().match(/at offset (\d+)/) || [])[1];
    const before = caption(), from = offset(), W = fig.querySelectorAll('.vega-bindings input[type="radio"]').length;
    await compressor.signal('shift', (compressor.signal('shift') + 1) % W).runAsync();
    ok('prepending moves the followed token', W > 1 && offset() === (from + 1) % W, before + ' -> ' + caption());
    const followed = compressor.signal('follow_token');
    const chip = Array.from(fig.querySelectorAll('.mark-rect path')).find(p => p.__data__.datum.kind === 'slot' && ![null, followed].includes(p.__data__.datum.token));
    if (chip) { chip.dispatchEvent(new MouseEvent('click', {bubbles: true})); await settle(); }
    const token = chip ? chip.__data__.datum.token : null;
    ok('clicking a chip follows its token', chip && compressor.signal('follow_token') === token && caption().includes('"' + chip.__data__.datum.label + '"'), followed + ' -> ' + compressor.signal('follow_token') + ': ' + caption());
  }
  ok('no errors on the page', window.__errors.length === 0, window.__errors.join(' | '));
  const out = {ok: checks.every(c => c.pass), checks, errors: window.__errors};
  $('selftest-result').textContent = JSON.stringify(out);
  document.body.setAttribute('data-selftest', out.ok ? 'pass' : 'fail');
}

function main() {
  const embedded = embedFigures().catch(err => { window.__errors.push('vega: ' + err); });
  if (/[?&]selftest=1/.test(location.search)) embedded.then(selfTest).catch(err => { window.__errors.push('selftest: ' + err); });
}
main();
"""
