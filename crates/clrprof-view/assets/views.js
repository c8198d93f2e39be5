// The views. Each takes the page context (state, params(), select, setState, addTransform, unit,
// main) and renders into ctx.main from the server's answers. Names are always set as text.
import { api, el, put, fmt, pct, colour, namespaceOf } from './util.js';

export { heap } from './heap.js';

const PAGE = 100;

function numCell(v, unit) {
  return el('td', { class: 'num' }, fmt(v, unit));
}

function nameCell(name, onclick, extra) {
  return el('td', { class: 'name', title: name }, el('a', { href: '#', onclick: (e) => { e.preventDefault(); onclick(); } }, name), extra);
}

// ---- hot spots ----

export async function hotspots(ctx) {
  const { state } = ctx;
  // Exact time: self_count is the function's own calls, so per-call averages are exact too
  // (a recursive function's total counts its outermost calls' time once).
  const perCall = state.w === 'time';
  const body = el('tbody');
  const sortBy = (s) => () => ctx.setState({ sort: s });
  const arrow = (s) => (state.sort === s ? ' ▼' : '');
  const table = el('table', { id: 'hotspots' },
    el('thead', {}, el('tr', {},
      el('th', { onclick: sortBy('name') }, `Function${arrow('name')}`),
      el('th', {}, 'Module'),
      el('th', { class: 'num', onclick: sortBy('self') }, `Self${arrow('self')}`),
      el('th', { class: 'num' }, 'Self %'),
      el('th', { class: 'num', onclick: sortBy('total') }, `Total${arrow('total')}`),
      el('th', { class: 'num' }, 'Total %'),
      el('th', { class: 'num', onclick: sortBy('count') }, `Samples/calls${arrow('count')}`),
      perCall ? el('th', { class: 'num' }, 'Avg self/call') : null,
      perCall ? el('th', { class: 'num' }, 'Avg total/call') : null)),
    body);
  const summary = el('div', { id: 'hotspots-summary' });
  const load = async (offset) => {
    const r = await api('hotspots', ctx.params({ sort: state.sort, q: state.q, re: state.re === '1' ? 1 : '', offset, limit: PAGE }));
    if (!ctx.gen()) return;
    const p = r.page;
    body.querySelector('tr.more')?.remove();
    for (const row of p.rows) {
      body.append(el('tr', { class: [row.name === state.sel ? 'selected' : '', row.wait ? 'wait' : ''].join(' '), dataset: { name: row.name } },
        nameCell(row.name, () => ctx.select(row.name, [], row.module)),
        el('td', {}, row.module),
        numCell(row.self, ctx.unit), el('td', { class: 'num' }, pct(row.self_percent)),
        numCell(row.total, ctx.unit), el('td', { class: 'num' }, pct(row.total_percent)),
        el('td', { class: 'num' }, String(row.count)),
        perCall ? numCell(row.self_count ? row.self / row.self_count : 0, ctx.unit) : null,
        perCall ? numCell(row.self_count ? row.total / row.self_count : 0, ctx.unit) : null));
    }
    const shown = offset + p.rows.length;
    if (shown < p.count) {
      body.append(el('tr', { class: 'more', onclick: () => load(shown) }, el('td', { colspan: 7 }, `${p.count - shown} more functions`)));
    }
    put(summary, `${p.count} functions${state.q ? ' matching' : ''}; total ${fmt(p.total, ctx.unit)}`);
  };
  put(ctx.main, summary, table);
  await load(0);
}

// ---- call tree ----

export async function tree(ctx) {
  const { state } = ctx;
  const inv = state.inv === '1' ? 1 : '';
  const body = el('tbody');
  const table = el('table', { id: 'calltree' },
    el('thead', {}, el('tr', {}, el('th', {}, state.inv === '1' ? 'Function (inverted: callers below)' : 'Function'),
      el('th', { class: 'num' }, 'Total'), el('th', { class: 'num' }, '% total'), el('th', { class: 'num' }, '% parent'),
      el('th', { class: 'num' }, 'Self'), el('th', { class: 'num' }, 'Samples/calls'))),
    body);
  put(ctx.main, table);
  const rowsUnder = (tr) => {
    const out = [];
    const d = Number(tr.dataset.depth);
    for (let n = tr.nextElementSibling; n && Number(n.dataset.depth) > d; n = n.nextElementSibling) out.push(n);
    return out;
  };
  const expand = async (node, after, depth, path, offset = 0) => {
    const r = await api('tree', ctx.params({ node, inv, offset, limit: 50 }));
    if (!ctx.gen()) return [];
    const p = r.page;
    const made = [];
    for (const row of p.rows) {
      const rowPath = [...path, row.name];
      const twist = el('span', { class: 'twist' }, row.children ? '▸' : ' ');
      const tr = el('tr', { class: [row.name === state.sel ? 'selected' : '', row.wait ? 'wait' : ''].join(' '),
        dataset: { id: String(row.id), depth: String(depth), name: row.name } },
      el('td', { class: 'name', style: `padding-left:${depth * 14 + 4}px`, title: row.name }, twist,
        el('a', { href: '#', onclick: (e) => { e.preventDefault(); ctx.select(row.name, state.inv === '1' ? [] : rowPath, row.module); } }, row.name)),
      numCell(row.total, ctx.unit), el('td', { class: 'num' }, pct(row.percent)),
      el('td', { class: 'num' }, pct(row.percent_of_parent)), numCell(row.self, ctx.unit), el('td', { class: 'num' }, String(row.count)));
      tr.rowPath = rowPath;
      if (row.children) {
        twist.addEventListener('click', async () => {
          if (tr.dataset.open) { rowsUnder(tr).forEach((n) => n.remove()); delete tr.dataset.open; twist.textContent = '▸'; return; }
          tr.dataset.open = '1';
          twist.textContent = '▾';
          await expand(row.id, tr, depth + 1, rowPath);
        });
      }
      made.push(tr);
    }
    if (p.more.count > 0) {
      const shown = offset + p.rows.length;
      const more = el('tr', { class: 'more', dataset: { depth: String(depth) } },
        el('td', { colspan: 6, style: `padding-left:${depth * 14 + 4}px` }, `${p.more.count} more (${fmt(p.more.value, ctx.unit)})`));
      more.addEventListener('click', async () => {
        const anchor = more.previousElementSibling;
        more.remove();
        await expand(node, anchor, depth, path, shown);
      });
      made.push(more);
    }
    if (after) after.after(...made); else body.append(...made);
    return made.filter((m) => m.dataset.id).map((m) => [m, p.rows.find((r) => String(r.id) === m.dataset.id)]);
  };
  // Open the hot path: follow the heaviest child while it holds most of its parent.
  let level = await expand(0, null, 0, []);
  for (let d = 0; d < 12 && level.length; d++) {
    const [tr, row] = level[0];
    if (!row.children || (d > 0 && row.percent_of_parent < 50)) break;
    tr.dataset.open = '1';
    tr.querySelector('.twist').textContent = '▾';
    level = await expand(row.id, tr, d + 1, tr.rowPath);
  }
}

// ---- butterfly ----

function edgeTable(id, title, rows, more, ctx) {
  return [el('div', { class: 'section-title' }, title),
    el('table', { id }, el('thead', {}, el('tr', {}, el('th', {}, 'Function'), el('th', {}, 'Module'),
      el('th', { class: 'num' }, 'Value'), el('th', { class: 'num' }, '% of selected'), el('th', { class: 'num' }, 'Samples/calls'))),
    el('tbody', {}, rows.map((e) => el('tr', { class: e.wait ? 'wait' : '', dataset: { name: e.name } },
      e.entry ? el('td', { class: 'name' }, e.name) : nameCell(e.name, () => ctx.select(e.name, [], e.module)),
      el('td', {}, e.module), numCell(e.value, ctx.unit),
      el('td', { class: 'num' }, [el('span', { class: 'bar', style: `width:${Math.round(e.percent / 2)}px` }), pct(e.percent)]),
      el('td', { class: 'num' }, String(e.count)))),
    more.count ? el('tr', { class: 'more', onclick: more.expand }, el('td', { colspan: 5 }, `${more.count} more (${fmt(more.value, ctx.unit)})`)) : null))];
}

/** Puts each caller's "at FILE:LINE" rows (the server's /api/sites) under its row in the callers
 *  table; with transforms applied, a note instead (the sites are the untransformed trace's). */
function addSites(table, sites, transformed, ctx) {
  if (!table || !sites || !sites.with_sites) return;
  if (transformed) {
    table.after(el('p', { id: 'sites-hidden', class: 'note' },
      'Call-site lines are hidden: they are for the untransformed trace (remove the transforms to see them).'));
    return;
  }
  const body = table.tBodies[0];
  for (const c of sites.callers) {
    const tr = [...body.rows].find((x) => x.dataset.name === c.name);
    if (!tr || !c.sites.length) continue;
    tr.after(...c.sites.map((s) => {
      const file = s.file.split(/[\\/]/).pop();
      return el('tr', { class: 'site', dataset: { caller: c.name, file, line: String(s.line) } },
        el('td', { class: 'name', title: `${s.file}:${s.line}` }, `at ${file}:${s.line}`),
        el('td', {}, ''), numCell(s.value, ctx.unit),
        el('td', { class: 'num' }, pct(sites.total ? (100 * s.value) / sites.total : 0)),
        el('td', { class: 'num' }, String(s.count)));
    }));
  }
}

export async function butterfly(ctx) {
  const { state } = ctx;
  if (!state.sel) {
    const r = await api('entries', ctx.params({ limit: 200 }));
    if (!ctx.gen()) return;
    put(ctx.main, el('p', {}, 'Entry points (functions no one calls: stack roots). Select one, or any function in another view.'),
      edgeTable('entries', `Entry points (${r.count})`, r.entries.map((e) => ({ ...e, entry: false })), { count: r.count - r.entries.length, value: 0 }, ctx));
    return;
  }
  let r;
  const limit = ctx.butterflyLimit || 100;
  try {
    r = await api('butterfly', ctx.params({ fn: state.sel, limit }));
  } catch (e) {
    if (!ctx.gen()) return;
    put(ctx.main, el('p', { id: 'butterfly-missing' }, `${e.message} (with the current weight, range and transforms)`));
    return;
  }
  // The callers' call-site lines (traces with lines): asked without the transforms, since they
  // are the untransformed trace's; with transforms they are hidden with a note.
  const q = ctx.params({ fn: state.sel.replace(/ \([^()]*:\d+\)$/, '') });
  const transformed = !!q.t;
  const sites = await api('sites', { ...q, t: '' }).catch(() => null);
  if (!ctx.gen()) return;
  const f = r.function;
  // "N more" loads every edge (up to the API's 1000).
  const expand = () => butterfly({ ...ctx, butterflyLimit: 1000 });
  f.more_callers.expand = expand;
  f.more_callees.expand = expand;
  put(ctx.main, el('div', { id: 'butterfly' },
    edgeTable('callers', 'Callers', f.callers, f.more_callers, ctx),
    el('div', { class: 'section-title', id: 'butterfly-function' }, `▶ ${f.name}`),
    el('table', { id: 'butterfly-totals' }, el('tbody', {},
      el('tr', {}, el('td', {}, 'total (inclusive)'), numCell(f.total, ctx.unit), el('td', { class: 'num' }, pct(f.percent)), el('td', { class: 'num' }, `${f.count} samples/calls`)),
      el('tr', {}, el('td', {}, 'self (exclusive)'), numCell(f.self, ctx.unit), el('td', { class: 'num' }, pct(f.view_total ? (100 * f.self) / f.view_total : 0)), el('td', { class: 'num' }, `${f.self_count} samples/calls`)))),
    edgeTable('callees', 'Callees', f.callees, f.more_callees, ctx)));
  addSites(ctx.main.querySelector('#callers'), sites, transformed, ctx);
}

// ---- source ----

/** The selected method's source, each line with its self and total and a heat colour by its share
 *  of the method's total (the server's figures; lines come from the trace's PDBs). */
export async function source(ctx) {
  const { state } = ctx;
  if (!state.sel) {
    put(ctx.main, el('p', { id: 'source-missing' }, 'Select a function in any view to see its source with the cost of each line.'));
    return;
  }
  let r;
  try {
    r = await api('source', ctx.params({ fn: state.sel.replace(/ \([^()]*:\d+\)$/, '') }));
  } catch (e) {
    if (!ctx.gen()) return;
    put(ctx.main, el('p', { id: 'source-missing' }, e.message));
    return;
  }
  if (!ctx.gen()) return;
  const hottest = Math.max(0, ...r.lines.map((l) => l.total_percent));
  const where = r.origin === 'embedded' ? `${r.file} (source embedded in the PDB)`
    : r.origin ? r.file
      : r.source_link ? `${r.file} — not on this machine; Source Link: ` : `${r.file} — not on this machine`;
  const head = el('div', { id: 'source-head' },
    el('div', { class: 'section-title' }, r.function),
    el('div', {}, where, r.source_link && !r.origin ? el('a', { href: r.source_link, target: '_blank', rel: 'noreferrer' }, r.source_link) : null),
    el('div', {}, `self ${fmt(r.self, ctx.unit)}, total ${fmt(r.total, ctx.unit)} (${pct(r.percent)} of the selection); line percentages are of the method's total`),
    r.note ? el('div', { class: 'note' }, r.note) : null);
  const rows = r.lines.map((l) => {
    const heat = hottest > 0 ? l.total_percent / hottest : 0;
    const tr = el('tr', { class: l.total > 0 ? 'hot' : '', dataset: { line: String(l.line) } },
      el('td', { class: 'num' }, l.self ? fmt(l.self, ctx.unit) : ''),
      el('td', { class: 'num' }, l.self ? pct(l.self_percent) : ''),
      el('td', { class: 'num' }, l.total ? fmt(l.total, ctx.unit) : ''),
      el('td', { class: 'num' }, l.total ? pct(l.total_percent) : ''),
      el('td', { class: 'num lineno' }, String(l.line)),
      el('td', { class: 'code' }, l.text === null ? '' : l.text));
    if (heat > 0) tr.style.background = `rgba(230, 80, 40, ${(0.08 + 0.5 * heat).toFixed(3)})`;
    return tr;
  });
  put(ctx.main, head, el('table', { id: 'source' },
    el('thead', {}, el('tr', {}, el('th', { class: 'num' }, 'Self'), el('th', { class: 'num' }, 'Self %'),
      el('th', { class: 'num' }, 'Total'), el('th', { class: 'num' }, 'Total %'), el('th', { class: 'num' }, 'Line'),
      el('th', {}, 'Source'))),
    el('tbody', {}, rows)));
}

// ---- flame graph ----

function flameCells(ctx, box, fl, diffOf) {
  const W = box.clientWidth || 1000;
  const scale = fl.total ? W / fl.total : 0;
  const maxDepth = fl.cells.reduce((m, c) => Math.max(m, c.depth), 0);
  box.style.height = `${(maxDepth + 1) * 17 + 4}px`;
  const cells = fl.cells.map((c) => {
    const key = ctx.state.colour === 'namespace' ? namespaceOf(c.name) : (c.module || c.name.split('!')[0]);
    const d = diffOf ? diffOf(c) : null;
    const cls = ['cell', c.wait ? 'wait' : '', c.more ? 'more' : '', c.matched ? 'matched' : '',
      !c.more && c.name === ctx.state.sel ? 'selected' : '', d || ''].join(' ');
    const title = c.more ? `${c.name} (narrower than a pixel): ${fmt(c.width, ctx.unit)} — click to zoom into the parent`
      : `${c.name}\n${c.module}\n${fmt(c.width, ctx.unit)} (${((100 * c.width) / (fl.view_total || 1)).toFixed(1)}% of all)`
        + (c.delta === undefined ? '' : `\nbaseline ${fmt(c.base, ctx.unit)}, change ${c.delta > 0 ? '+' : ''}${fmt(c.delta, ctx.unit)}${c.only ? ` (only in ${c.only})` : ''}`);
    return el('div', { class: cls, title, dataset: { id: String(c.id), name: c.name, depth: String(c.depth) },
      style: `left:${(c.x * scale).toFixed(1)}px;width:${Math.max(1, c.width * scale).toFixed(1)}px;top:${c.depth * 17}px;${c.more || c.wait || d ? '' : `background:${colour(key)}`}`,
      onclick: () => {
        if (c.more) { ctx.setState({ zoom: String(c.id) }); return; }
        ctx.setState({ zoom: String(c.id), sel: c.name, selm: c.module, path: [] });
      } }, c.name);
  });
  put(box, cells);
}

export async function flame(ctx) {
  const { state } = ctx;
  const box = el('div', { id: 'flame' });
  const crumbs = el('div', { class: 'crumbs', id: 'crumbs' });
  const info = el('div', { id: 'flame-info' });
  const colourSel = el('select', { id: 'colour', onchange: (e) => ctx.setState({ colour: e.target.value }) },
    el('option', { value: 'module', selected: state.colour === 'module' }, 'colour by module'),
    el('option', { value: 'namespace', selected: state.colour === 'namespace' }, 'colour by namespace'));
  put(ctx.main, el('div', {}, colourSel, ' ', info), crumbs, box);
  const W = ctx.main.clientWidth - 20;
  const r = await api('flame', ctx.params({ node: state.zoom, width: W, q: state.q, re: state.re === '1' ? 1 : '', inv: state.inv === '1' ? 1 : '' }));
  if (!ctx.gen()) return;
  const fl = r.flame;
  put(crumbs, el('span', { onclick: () => ctx.setState({ zoom: '0' }) }, 'all'),
    fl.path.map((p) => el('span', { dataset: { id: String(p.id) }, onclick: () => ctx.setState({ zoom: String(p.id) }) }, p.name)));
  if (fl.path.length && state.inv !== '1') {
    crumbs.append(el('button', { id: 'tf-zoom-subtree', onclick: () => ctx.addTransform({ op: 'focus-subtree', path: fl.path.map((p) => p.name) }) }, 'focus on this subtree'));
  }
  put(info, `${fmt(fl.total, ctx.unit)} shown of ${fmt(fl.view_total, ctx.unit)}`,
    state.q ? el('span', { id: 'match-share' }, ` — matches of “${state.q}”: ${fmt(fl.matched, ctx.unit)} (${pct(fl.matched_percent)})`) : null);
  flameCells(ctx, box, fl, null);
}

// ---- events ----

const TABLES = [['exceptions', 'Exceptions (type, site, stack at throw)'], ['gcs', 'GCs'], ['allocations', 'Allocations by type'],
  ['allocation_sites', 'Allocations by site'], ['contentions', 'Lock contention'], ['jit', 'JIT'], ['counters', 'Counters'],
  ['threads', 'Threads'], ['modules', 'Modules'], ['assemblies', 'Assemblies'], ['classes', 'Classes'], ['functions', 'Functions']];

function cellOf(v) {
  if (v !== null && typeof v === 'object') {
    const n = Array.isArray(v) ? `${v.length} items` : 'details';
    return el('td', {}, el('details', {}, el('summary', {}, n), el('pre', {}, JSON.stringify(v, null, 1))));
  }
  return el('td', { class: typeof v === 'number' ? 'num' : '' }, v === null ? '' : String(v));
}

function counterChart(rows) {
  const keys = ['time_in_gc_pct', 'alloc_bytes_per_sec', 'exceptions_per_sec', 'threads', 'lock_contentions'];
  const c = el('canvas', { width: 900, height: keys.length * 40, id: 'counter-chart' });
  const g = c.getContext('2d');
  g.font = '10px sans-serif';
  keys.forEach((k, r) => {
    const vals = rows.map((x) => Number(x[k]) || 0);
    const max = Math.max(1e-9, ...vals);
    g.fillStyle = '#333';
    g.fillText(`${k} (max ${Math.round(max * 100) / 100})`, 2, r * 40 + 10);
    g.strokeStyle = '#36c';
    g.beginPath();
    vals.forEach((v, i) => {
      const x = 150 + (i / Math.max(1, vals.length - 1)) * 740;
      const y = r * 40 + 36 - (v / max) * 24;
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke();
  });
  return c;
}

export async function events(ctx) {
  const { state } = ctx;
  const pick = el('select', { id: 'table', onchange: (e) => ctx.setState({ table: e.target.value }) },
    TABLES.map(([k, label]) => el('option', { value: k, selected: k === state.table }, label)));
  const search = el('input', { type: 'search', id: 'table-search', placeholder: 'search rows', value: state.tq });
  let t = null;
  search.addEventListener('input', () => { clearTimeout(t); t = setTimeout(() => ctx.setState({ tq: search.value }, false), 300); });
  const out = el('div', { id: 'table-out' });
  put(ctx.main, el('div', {}, pick, ' ', search), out);
  const load = async (offset, body) => {
    const r = await api('table', { name: state.table, q: state.tq, offset, limit: 200, from: state.from, to: state.to });
    if (!ctx.gen()) return;
    if (!body) {
      body = el('tbody');
      put(out, el('div', {}, `${r.count} rows`),
        r.summary && typeof r.summary === 'object' ? el('details', {}, el('summary', {}, 'summary'), el('pre', {}, JSON.stringify(r.summary, null, 1))) : null,
        state.table === 'counters' && r.rows.length ? counterChart(r.rows) : null,
        el('table', { id: 'events-table' }, el('thead', {}, el('tr', {}, r.columns.map((c) => el('th', {}, c)))), body));
    }
    body.querySelector('tr.more')?.remove();
    for (const row of r.rows) body.append(el('tr', {}, r.columns.map((c) => cellOf(row[c]))));
    const shown = offset + r.rows.length;
    if (shown < r.count) body.append(el('tr', { class: 'more', onclick: () => load(shown, body) }, el('td', { colspan: r.columns.length }, `${r.count - shown} more rows`)));
  };
  await load(0, null);
}

// ---- requests ----

const ms = (ns) => (ns / 1e6).toFixed(3);

// The pool's active workers over the run (a step line) with its starvation injections as marks.
function poolChart(pool, span) {
  const c = el('canvas', { width: 900, height: 90, id: 'pool-chart' });
  const g = c.getContext('2d');
  const max = Math.max(1, pool.max_workers, ...pool.adjustments.map((a) => a[1]));
  const x = (ns) => 40 + (ns / Math.max(1, span)) * 850;
  const y = (n) => 80 - (n / max) * 65;
  g.font = '10px sans-serif';
  g.fillStyle = '#333';
  g.fillText(`${max}`, 2, 18);
  g.fillText('0', 2, 80);
  g.strokeStyle = '#36c';
  g.beginPath();
  pool.workers.forEach(([t, n], i) => { if (i) g.lineTo(x(t), y(pool.workers[i - 1][1])); g.lineTo(x(t), y(n)); if (!i) g.moveTo(x(t), y(n)); });
  g.stroke();
  for (const [t, n, why] of pool.adjustments) {
    if (why !== 'starvation' && why !== 'cooperative blocking') continue;
    g.fillStyle = '#c33';
    g.fillRect(x(t) - 1, y(n) - 3, 3, 6);
  }
  return c;
}

export async function requests(ctx) {
  const { state } = ctx;
  const r = await api('requests', { from: state.from, to: state.to, top: 20 });
  if (!ctx.gen()) return;
  if (!r.recorded) { put(ctx.main, el('div', { id: 'requests-none' }, 'no requests, waits or thread-pool events in this trace: record with --async')); return; }
  const total = r.endpoints.reduce((a, e) => a + e.count, 0);
  const endpoints = el('table', { id: 'requests-table' },
    el('thead', {}, el('tr', {}, ['Endpoint', 'Count', 'p50 ms', 'p95 ms', 'p99 ms', 'Max ms', 'Total ms', 'CPU ms', 'Blocked ms', 'Awaiting ms', 'Status']
      .map((h, i) => el('th', { class: i ? 'num' : '' }, h)))),
    el('tbody', {}, r.endpoints.map((e) => el('tr', { dataset: { endpoint: e.endpoint } },
      el('td', {}, e.endpoint), el('td', { class: 'num' }, String(e.count)), el('td', { class: 'num' }, ms(e.p50_ns)),
      el('td', { class: 'num' }, ms(e.p95_ns)), el('td', { class: 'num' }, ms(e.p99_ns)), el('td', { class: 'num' }, ms(e.max_ns)),
      el('td', { class: 'num' }, ms(e.total_ns)),
      [e.cpu_ns, e.blocked_ns, e.awaiting_ns].map((v) => el('td', { class: 'num' }, v === null ? '-' : ms(v))),
      el('td', { class: 'num' }, e.statuses.map(([c, n]) => `${c || '?'}×${n}`).join(' '))))));
  const slowest = el('table', { id: 'slowest-table' },
    el('thead', {}, el('tr', {}, ['Latency ms', 'Start ms', 'Thread', 'Status', 'Path', 'Endpoint'].map((h, i) => el('th', { class: i < 4 ? 'num' : '' }, h)))),
    el('tbody', {}, r.slowest.map((q) => el('tr', {}, el('td', { class: 'num' }, ms(q.latency_ns)), el('td', { class: 'num' }, ms(q.start_ns)),
      el('td', { class: 'num' }, String(q.os_tid)), el('td', { class: 'num' }, q.status ? String(q.status) : '-'), el('td', {}, q.path), el('td', {}, q.endpoint)))));
  const waits = el('table', { id: 'waits-table' },
    el('thead', {}, el('tr', {}, ['Waiting in', 'Kind', 'Count', 'Wait ms', 'Longest ms'].map((h, i) => el('th', { class: i > 1 ? 'num' : '' }, h)))),
    el('tbody', {}, r.wait_sites.map((w) => el('tr', {},
      el('td', {}, el('details', {}, el('summary', {}, w.site), el('pre', {}, `${w.stack_count} of ${w.count} waits:\n${w.stack.join('\n')}`))),
      el('td', {}, w.kind), el('td', { class: 'num' }, String(w.count)), el('td', { class: 'num' }, ms(w.wait_ns)), el('td', { class: 'num' }, ms(w.max_wait_ns))))));
  const span = ctx.meta.end_ns || Math.max(1, ...r.pool.workers.map((w) => w[0]));
  put(ctx.main,
    el('div', { class: 'section-title' }, `Requests by endpoint: ${total} ended (latency from the runtime's RequestStart to RequestStop; nearest-rank percentiles)`),
    endpoints,
    r.pool.note ? el('div', { id: 'starvation-note', class: 'estimated' }, r.pool.note) : null,
    el('div', { class: 'section-title' }, `Thread pool: active workers over the run (at most ${r.pool.max_workers}); red: threads injected for starvation or blocked threads`),
    poolChart(r.pool, span),
    el('div', { class: 'section-title' }, `Slowest ${r.slowest.length} requests`), slowest,
    el('div', { class: 'section-title' }, `Blocking waits (.NET 9+): ${r.waits} ended, ${ms(r.wait_ns)} ms in all — click a site for its waiting stack`), waits);
}

// ---- diff ----

export async function diff(ctx) {
  const { state } = ctx;
  if (!ctx.meta.baseline) { put(ctx.main, 'start with --baseline OLD to compare two traces'); return; }
  const norm = el('label', {}, el('input', { type: 'checkbox', id: 'normalize', checked: state.norm === '1',
    onchange: (e) => ctx.setState({ norm: e.target.checked ? '1' : '0' }) }), ' normalize to equal totals');
  const W = ctx.main.clientWidth - 20;
  const r = await api('diff', ctx.params({ normalize: state.norm === '1' ? 1 : '', q: state.q, re: state.re === '1' ? 1 : '',
    limit: 300, width: W, node: state.dzoom }));
  if (!ctx.gen()) return;
  const d = r;
  // Sampled weights: each row's samples, the 95% uncertainty of Δ self and whether it is significant.
  const sampled = !!d.sum_noise;
  const sig = (n) => (n.few_samples ? 'few samples' : n.significant ? 'yes' : 'no');
  const pm = (n, base) => (base > 0 ? `±${(n.pm95 * 100 / base).toFixed(1)}%` : `±${fmt(n.pm95, ctx.unit)}`);
  const noiseCells = (f) => (!sampled ? [] : f.noise ? [
    el('td', { class: 'num' }, `${f.noise.base_samples} → ${f.noise.new_samples}`),
    el('td', { class: 'num' }, pm(f.noise, f.base)),
    el('td', { class: f.noise.significant ? 'sig' : 'nosig' }, sig(f.noise))] : [el('td', {}), el('td', {}), el('td', {})]);
  const rows = d.functions.map((f) => el('tr', { dataset: { name: f.name }, class: sampled && f.noise && !f.noise.significant ? 'noise' : '' },
    nameCell(f.name, () => ctx.select(f.name, [], f.module), f.only ? el('span', { class: 'only' }, ` only in ${f.only === 'base' ? 'baseline' : 'new'}`) : null),
    el('td', {}, f.module), numCell(f.base, ctx.unit), numCell(f.new, ctx.unit), numCell(f.delta, ctx.unit),
    numCell(f.base_total, ctx.unit), numCell(f.new_total, ctx.unit), numCell(f.delta_total, ctx.unit),
    el('td', { class: 'num' }, f.calls_delta === null || f.calls_delta === undefined ? '' : String(f.calls_delta)),
    ...noiseCells(f)));
  const box = el('div', { id: 'flame' });
  const fl = d.flame;
  const crumbs = el('div', { class: 'crumbs', id: 'diff-crumbs' },
    el('span', { onclick: () => ctx.setState({ dzoom: '0' }) }, 'all'),
    fl.path.map((p) => el('span', { dataset: { id: String(p.id) }, onclick: () => ctx.setState({ dzoom: String(p.id) }) }, p.name)));
  const sn = d.sum_noise;
  put(ctx.main, el('div', {}, norm, ` baseline ${ctx.meta.baseline}: total ${fmt(d.base_total, ctx.unit)} → ${fmt(d.new_total, ctx.unit)}`,
    sn ? el('span', { id: 'diff-noise' }, ` (${sn.base_samples} → ${sn.new_samples} samples, ${pm(sn, d.base_total)} at 95%, significant: ${sig(sn)})`) : null,
    state.t.length ? el('span', { id: 'diff-transforms' }, ` — ${state.t.length} transform${state.t.length > 1 ? 's' : ''} applied to both`) : null),
  d.estimated ? el('div', { id: 'diff-estimated', class: 'estimated' }, 'ESTIMATED per stack: part of the throw stacks were walked (or an exception storm was sampled); totals are the Exceptions tables\' counts') : null,
  el('div', { class: 'section-title' }, 'Differential flame graph (red grew, blue shrank, width = new; click to zoom)'), crumbs, box,
  el('div', { class: 'section-title' }, `Functions by |Δ| (${d.count})`),
  sampled ? el('div', { class: 'note', id: 'diff-noise-note' }, `Samples behind each self value; ± is the 95% uncertainty of Δ self from the sampling; significant: |z| ≥ 3 with at least ${d.min_samples} samples on one side (greyed rows are not)`) : null,
  el('table', { id: 'diff-table' }, el('thead', {}, el('tr', {}, ['Function', 'Module', 'Base self', 'New self', 'Δ self', 'Base total', 'New total', 'Δ total', 'Δ calls',
    ...(sampled ? ['Samples', '± 95%', 'Significant'] : [])]
    .map((h, i) => el('th', { class: i > 1 && h !== 'Significant' ? 'num' : '' }, h)))), el('tbody', {}, rows)));
  const threshold = Math.abs(fl.total) / 200;
  // A click zooms the differential graph (its own node ids) and selects the function.
  const setState = (patch) => ctx.setState('zoom' in patch ? { ...patch, zoom: state.zoom, dzoom: patch.zoom } : patch);
  flameCells({ ...ctx, setState }, box, fl, (c) => {
    if (c.more || Math.abs(c.delta) < threshold) return null;
    return c.delta > 0 ? 'grew' : 'shrank';
  });
}
