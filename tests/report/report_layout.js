/* Measures the report in headless Chromium for tests/report/test_report.py: the harness page holds one iframe per
   viewport width (each loads the report, so its innerWidth is that width); once every figure has drawn, each
   frame's element boxes are measured and the JSON is written into #layout-result (read with --dump-dom).
   Per width: the content column, every element under <main> whose box leaves it, and the top of each section.
   In the first frame also: each figure's legend swatches and line/point marks, axis titles, the knockout map's
   cells, bars, texts and axis labels, the summary table, and the residue figure's axis titles once folded. */
(function () {
  const out = document.getElementById('layout-result');
  const frames = JSON.parse(out.dataset.widths).map(width => {
    const frame = document.createElement('iframe');
    frame.style.cssText = 'border:0;height:900px;width:' + width + 'px';
    frame.src = out.dataset.report;
    document.body.appendChild(frame);
    return frame;
  });
  const round = v => Math.round(v * 10) / 10;
  function describe(el) {
    const section = el.closest('section'), figure = el.closest('[data-figure]'), cls = el.getAttribute('class');
    return [section && section.id, figure && figure.id, el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (cls ? '.' + cls.trim().split(/\s+/).join('.') : '')].filter(Boolean).join(' ');
  }
  function spills(win) {
    const main = win.document.querySelector('main'), style = win.getComputedStyle(main), box = main.getBoundingClientRect();
    const left = box.left + parseFloat(style.paddingLeft), right = box.right - parseFloat(style.paddingRight);
    const found = [];
    main.querySelectorAll('*').forEach(el => {
      const b = el.getBoundingClientRect();
      if (b.width > 0 && (b.right > right + 1 || b.left < left - 1)) found.push({what: describe(el), left: round(b.left), right: round(b.right)});
    });
    return {content: [round(left), round(right)], spill: found};
  }
  const colour = el => { const fill = el.getAttribute('fill'); return fill && fill !== 'none' && fill !== 'transparent' ? fill : el.getAttribute('stroke'); };
  const opacity = el => ['opacity', 'stroke-opacity', 'fill-opacity'].reduce((o, a) => o * (el.hasAttribute(a) ? +el.getAttribute(a) : 1), 1);
  const strings = datum => Object.values(datum || {}).filter(v => typeof v === 'string');
  function figure(div) {
    const legends = Array.from(div.querySelectorAll('.role-legend-entry')).flatMap((entries, legend) => Array.from(entries.querySelectorAll('.role-legend-symbol path')).map((symbol, i) => ({
      legend, label: (entries.querySelectorAll('.role-legend-label text')[i] || {}).textContent,
      colour: colour(symbol), stroke: symbol.getAttribute('stroke'), dash: symbol.getAttribute('stroke-dasharray') || '', opacity: round(opacity(symbol)),
    })));
    const marks = Array.from(div.querySelectorAll('.mark-line.role-mark path, .mark-symbol.role-mark path')).filter(p => p.__data__ && p.__data__.datum).map(p => ({
      line: p.parentNode.classList.contains('mark-line'), colour: p.parentNode.classList.contains('mark-line') ? p.getAttribute('stroke') : colour(p),
      dash: p.getAttribute('stroke-dasharray') || '', opacity: round(opacity(p)), values: strings(p.__data__.datum),
    }));
    const axes = Array.from(div.querySelectorAll('.role-axis-title text')).map(t => t.textContent);
    return {legends, marks, axes};
  }
  function knockout(div) {
    const rects = Array.from(div.querySelectorAll('.mark-rect.role-mark'));
    const items = mark => Array.from(mark.querySelectorAll('path')).map(p => { const b = p.getBoundingClientRect(); return {width: round(b.width), height: round(b.height), datum: p.__data__ ? p.__data__.datum : null}; });
    return {
      marks: rects.map(mark => ({name: mark.getAttribute('class'), items: items(mark)})),
      texts: Array.from(div.querySelectorAll('.mark-text.role-mark text')).map(t => ({text: t.textContent, datum: t.__data__ ? t.__data__.datum : null})),
      axes: Array.from(div.querySelectorAll('.role-axis')).map(a => ({title: (a.querySelector('.role-axis-title text') || {}).textContent, labels: Array.from(a.querySelectorAll('.role-axis-label text')).map(t => t.textContent)})),
      titles: Array.from(div.querySelectorAll('.role-title-text text')).map(t => t.textContent),
    };
  }
  async function details(win) {
    const doc = win.document, result = {figures: {}, knockout: null, summary: null};
    doc.querySelectorAll('[data-figure]').forEach(div => { result.figures[div.id] = figure(div); });
    const ko = doc.getElementById('fig-knockout');
    if (ko) result.knockout = knockout(ko);
    const summary = doc.getElementById('summary-table');
    if (summary) result.summary = Array.from(summary.querySelectorAll('tbody tr')).map(tr => Array.from(tr.children).map(td => td.textContent.trim()));
    const views = win.eval('VIEWS'), residues = views['fig-residues'];
    if (residues) {
      await residues.signal('fold', true).runAsync();
      result.folded_axes = figure(doc.getElementById('fig-residues')).axes;
      await residues.signal('fold', false).runAsync();
    }
    return result;
  }
  function ready(frame) {
    const doc = frame.contentDocument, figures = doc ? Array.from(doc.querySelectorAll('[data-vega]')) : [];
    return doc && doc.readyState === 'complete' && figures.length > 0 && figures.every(div => div.querySelector('svg'));
  }
  (function poll() {
    if (!frames.every(ready)) return setTimeout(poll, 100);
    const top = (win, el) => Math.round(el.getBoundingClientRect().top + win.scrollY);
    const widths = frames.map(frame => {
      const win = frame.contentWindow;
      const order = Array.from(win.document.querySelectorAll('main > section')).map(s => [s.id, top(win, s)]);
      return {viewport: win.innerWidth, sections: order, ...spills(win)};
    });
    details(frames[0].contentWindow).then(first => { out.textContent = JSON.stringify({widths, ...first}); })
      .catch(err => { out.textContent = JSON.stringify({error: String(err)}); });
  })();
})();
