# ruff: noqa: E501  (embedded web assets: long lines of JavaScript, CSS and HTML)
"""The report's JavaScript (inlined into the HTML): it embeds the figures drawn from Vega-Lite specs
(with the Vega bundle the page inlines, see `vega.py`) and keeps their shared params in step. The
compressor illustration (prepend buttons moving a followed token through a window's offsets, with
softmax scores recomputed per shift) stays plain SVG drawn here from `report-data`.

With `?selftest=1` in the URL the page checks itself after drawing (every figure has marks, a model
row narrows the residue figure to its panel and the position figure follows, the fold toggle changes
the x axis, a knockout row click, the gate step slider, an R² cell, the compressor's prepend buttons,
no errors) and writes the outcome as JSON into `#selftest-result`, for headless browser tests.
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
const SVGNS = 'http:' + '//www.w3.org/2000/svg';
const PALETTE = ['#1b9e77', '#d95f02', '#7570b3', '#e7298a', '#66a61e', '#e6ab02', '#a6761d', '#1f78b4',
                 '#b15928', '#6a3d9a', '#33a02c', '#fb9a99'];

function $(id) { return document.getElementById(id); }
function el(tag, attrs, parent, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in (attrs || {})) if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function h(tag, attrs, parent, text) {
  const e = document.createElement(tag);
  for (const k in (attrs || {})) if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function fmt(v, d) { return (v === null || v === undefined) ? '–' : Number(v).toFixed(d === undefined ? 1 : d); }
function scale(d0, d1, r0, r1) { return v => r0 + (v - d0) * (r1 - r0) / ((d1 - d0) || 1); }
// Empty an <svg>, keep its <title>, set its size and text alternative.
function resetSvg(svg, w, hgt, label) {
  const title = svg.querySelector('title');
  while (svg.lastChild) svg.removeChild(svg.lastChild);
  if (title) { title.textContent = label; svg.appendChild(title); }
  svg.setAttribute('viewBox', '0 0 ' + w + ' ' + hgt);
  svg.setAttribute('width', w); svg.setAttribute('height', hgt);
  svg.setAttribute('aria-label', label);
  return svg;
}
function range(n) { return Array.from({length: n}, (_, i) => i); }

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

/* ---------- compressor illustration ---------- */
function initCompressor(D) {
  const svg = $('fig-compressor'), btns = $('compressor-prepend'), uni = $('compressor-uniform');
  const W = D.window, state = {shift: 0, follow: Math.min(2, D.tokens.length - 1), uniform: false};
  function layout(shift) {  // tokens of the window holding the followed token
    const seq = range(shift).map(() => null).concat(range(D.tokens.length));
    const pos = shift + state.follow, j = Math.floor(pos / W);
    const slots = range(W).map(i => seq[j * W + i] === undefined ? null : seq[j * W + i]);
    const logits = slots.map((t, i) => D.bias[i] + (t === null ? 0 : D.content[t][i]));
    const mx = Math.max(...logits), ex = logits.map(v => Math.exp(v - mx)), sum = ex.reduce((a, b) => a + b, 0);
    const alpha = state.uniform ? slots.map(() => 1 / W) : ex.map(v => v / sum);
    return {slots, logits, alpha, offset: pos % W};
  }
  range(W).forEach(k => {
    const b = h('button', {type: 'button', 'data-shift': k, 'aria-label': 'prepend ' + k + ' token' + (k === 1 ? '' : 's')}, btns);
    b.addEventListener('click', () => { state.shift = k; draw(); });
  });
  uni.addEventListener('click', () => { state.uniform = !state.uniform; draw(); });
  function draw() {
    uni.setAttribute('aria-pressed', state.uniform ? 'true' : 'false');
    Array.from(btns.children).forEach(b => {
      const k = +b.dataset.shift, a = layout(k);
      b.innerHTML = '';
      b.setAttribute('aria-pressed', k === state.shift ? 'true' : 'false');
      b.appendChild(document.createTextNode('+' + k + ' '));
      const s = el('svg', {width: 10, height: 14, 'aria-hidden': 'true'}, b);
      const v = a.alpha[a.offset];
      el('rect', {x: 1, y: 14 - 13 * v, width: 8, height: 13 * v, fill: k === state.shift ? '#fff' : '#555'}, s);
    });
    const a = layout(state.shift);
    const CW = 92, X0 = 20, Wd = Math.max(620, X0 + CW * W + 280), H = 300;
    resetSvg(svg, Wd, H, 'Compressor illustration (W=S=' + W + '): token chips coloured by offset, gate scores, and each channel\'s contribution by offset; followed token at offset ' + a.offset);
    el('text', {x: X0, y: 14, class: 'label'}, svg, '1  logits = content + bias');
    a.slots.forEach((t, i) => {
      const g = el('g', {class: 'chip', tabindex: t === null ? null : 0, 'data-offset': i}, svg);
      const rect = el('rect', {x: X0 + i * CW, y: 24, width: CW - 10, height: 34, rx: 5, fill: PALETTE[i], 'fill-opacity': t === null ? 0.12 : 0.3,
                               stroke: t !== null && t === state.follow ? '#000' : PALETTE[i], 'stroke-width': t !== null && t === state.follow ? 3 : 1.2,
                               'stroke-dasharray': t === null ? '4 3' : null}, g);
      el('text', {x: X0 + i * CW + (CW - 10) / 2, y: 46, 'text-anchor': 'middle', class: 'label'}, g, t === null ? 'pad' : D.tokens[t]);
      el('text', {x: X0 + i * CW + (CW - 10) / 2, y: 72, 'text-anchor': 'middle', class: 'axis', 'font-size': 10}, g, 'i=' + i + ' · ' + fmt(a.logits[i], 2));
      el('title', {}, rect, (t === null ? 'padding' : D.tokens[t]) + ' at offset ' + i + ': bias ' + fmt(D.bias[i], 2) + ', logit ' + fmt(a.logits[i], 2));
      if (t !== null) {
        const follow = () => { state.follow = t; draw(); };
        g.addEventListener('click', follow);
        g.addEventListener('keydown', e => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); follow(); } });
      }
    });
    el('text', {x: X0, y: 100, class: 'label'}, svg, '2  scores α (softmax over the window)' + (state.uniform ? ': uniform 1/' + W : ''));
    const by = scale(0, 1, 200, 110);
    a.alpha.forEach((v, i) => {
      el('rect', {x: X0 + i * CW + 10, y: by(v), width: CW - 30, height: Math.max(1, by(0) - by(v)), fill: PALETTE[i], class: 'alpha-bar'}, svg);
      el('text', {x: X0 + i * CW + (CW - 10) / 2, y: by(v) - 3, 'text-anchor': 'middle', class: 'axis', 'font-size': 10}, svg, fmt(v, 2));
    });
    el('line', {x1: X0, x2: X0 + CW * W, y1: by(0), y2: by(0), stroke: '#888'}, svg);
    const sx = X0 + CW * W + 30, C = D.payload[0][0].length;
    el('text', {x: sx, y: 100, class: 'label'}, svg, '3  entry: contribution per channel');
    const contrib = range(C).map(c => a.slots.map((t, i) => a.alpha[i] * (t === null ? 0.05 : D.payload[t][i][c])));
    const top = Math.max(...contrib.map(r => r.reduce((p, q) => p + q, 0)), 1e-9);
    const cy = scale(0, top, 200, 110), bw = Math.min(34, 220 / C);
    contrib.forEach((parts, c) => {
      let acc = 0;
      parts.forEach((v, i) => { el('rect', {x: sx + c * (bw + 4), y: cy(acc + v), width: bw, height: Math.max(0, cy(acc) - cy(acc + v)), fill: PALETTE[i], class: 'stack'}, svg); acc += v; });
      el('text', {x: sx + c * (bw + 4) + bw / 2, y: 214, 'text-anchor': 'middle', class: 'axis', 'font-size': 10}, svg, 'c' + c);
    });
    el('text', {x: X0, y: 250, class: 'label'}, svg, 'followed token "' + D.tokens[state.follow] + '" is at offset ' + a.offset + ' after prepending ' + state.shift + '; its score is ' + fmt(a.alpha[a.offset], 3) + '.');
    el('text', {x: X0, y: 272, class: 'axis', 'font-size': 10}, svg, 'source: ' + D.source);
    svg.dataset.offset = String(a.offset);
  }
  draw();
}

/* ---------- self-test (?selftest=1) ---------- */
async function selfTest() {
  const checks = [];
  const ok = (name, pass, info) => checks.push({name, pass: !!pass, info: info === undefined ? '' : String(info)});
  document.querySelectorAll('[data-figure]').forEach(fig => {
    const svg = fig.dataset.vega ? fig.querySelector('svg') : fig;  // a Vega view draws into an <svg> inside its container
    const n = svg ? svg.querySelectorAll(fig.dataset.vega ? '.role-mark > *' : 'path,rect,circle,line,text').length : 0;
    const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    ok('figure ' + fig.id + ' renders', n > 3 && box.width > 0 && box.height > 0, n + ' marks, ' + Math.round(box.width) + 'x' + Math.round(box.height));
    const label = fig.getAttribute('aria-label') || '';  // a Vega view's is its spec's description
    ok('figure ' + fig.id + ' has a text alternative', label.length > 10 && label !== 'Vega visualization' && (fig.dataset.vega || svg.querySelector('title')), label);
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
    const fold = fig.querySelector('.vega-bindings input[type="checkbox"]');
    if (target.dataset.foldable && fold) {
      const axis0 = xAxis();
      fold.click(); await settle();
      const axis1 = xAxis();
      ok('the fold toggle changes the x axis', residues.signal('fold') === true && axis1 !== axis0, axis0 + ' -> ' + axis1);
      fold.click(); await settle();
      ok('the fold toggle restores the x axis', xAxis() === axis0, xAxis());
    } else ok('the fold toggle changes the x axis', false, 'no model with a stride below its modulus');
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
  const comp = $('fig-compressor');
  if (comp) {
    const before = comp.dataset.offset;
    const b = document.querySelector('#compressor-prepend button[data-shift="1"]');
    if (b) { b.click(); ok('prepending moves the followed token', comp.dataset.offset !== before, before + ' -> ' + comp.dataset.offset); }
  }
  ok('no errors on the page', window.__errors.length === 0, window.__errors.join(' | '));
  const out = {ok: checks.every(c => c.pass), checks, errors: window.__errors};
  $('selftest-result').textContent = JSON.stringify(out);
  document.body.setAttribute('data-selftest', out.ok ? 'pass' : 'fail');
}

function main() {
  const D = JSON.parse($('report-data').textContent);
  const inits = {compressor: initCompressor};
  for (const k in inits) if (D[k]) {
    try { inits[k](D[k]); } catch (err) { window.__errors.push(k + ': ' + err + (err.stack ? ' ' + err.stack.split('\n')[1] : '')); }
  }
  const embedded = embedFigures().catch(err => { window.__errors.push('vega: ' + err); });
  if (/[?&]selftest=1/.test(location.search)) embedded.then(selfTest).catch(err => { window.__errors.push('selftest: ' + err); });
}
main();
"""
