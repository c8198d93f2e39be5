// The page: state (kept in the URL's hash, so a reload or a shared link shows the same view),
// the header controls, the timeline with its brush, the transform and selection bars, and the
// tabs. Every figure comes from the server's JSON API; the page renders and navigates.
import { api, el, put, time, namespaceOf, fmt } from './util.js';
import * as views from './views.js';

const DEFAULTS = { view: 'hotspots', w: '', threads: 'merged', inv: '0', t: [], sel: '', path: [], q: '', re: '0',
  from: '', to: '', zoom: '0', dzoom: '0', sort: 'self', table: 'exceptions', tq: '', norm: '0', colour: 'module', selm: '', run: '',
  snap: '', htype: '', hsort: '', idle: '0' };

const $ = (id) => document.getElementById(id);
let meta = null;
let timelineData = null;
let generation = 0;
export let state = { ...DEFAULTS };

function readHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  const s = { ...DEFAULTS };
  for (const k of Object.keys(DEFAULTS)) {
    if (!h.has(k)) continue;
    if (k === 't' || k === 'path') {
      try { s[k] = JSON.parse(h.get(k)); } catch { s[k] = []; }
      if (!Array.isArray(s[k])) s[k] = [];
    } else s[k] = h.get(k);
  }
  if (!s.w && meta) s.w = meta.default_weight;
  return s;
}

function writeHash(push) {
  const h = new URLSearchParams();
  for (const [k, v] of Object.entries(state)) {
    const d = DEFAULTS[k];
    if (Array.isArray(v)) { if (v.length) h.set(k, JSON.stringify(v)); } else if (v !== d) h.set(k, v);
  }
  const url = `${location.pathname}${location.search}#${h}`;
  if (push) history.pushState(null, '', url); else history.replaceState(null, '', url);
}

/** Changes the state, records it in the URL and renders. */
export function setState(patch, push = true) {
  // Node ids of the flame graphs change with the weight, range and transforms: a reset of the
  // flame graph's zoom resets the differential one's too.
  if (patch.zoom === '0' && !('dzoom' in patch)) patch = { ...patch, dzoom: '0' };
  state = { ...state, ...patch };
  writeHash(push);
  render();
}

/** The transforms a stack query applies: the user's, and in wall views of a trace with logical
 * async stacks the idle threads left out unless shown. */
function queryTransforms() {
  if (!hidesIdle()) return state.t;
  return [...state.t, { op: 'drop', function: meta.idle_frame }];
}

function hidesIdle() {
  return !!(meta && meta.async) && state.w === 'wall' && state.idle !== '1';
}

/** The parameters every stack query shares. */
export function params(extra) {
  const t = queryTransforms();
  return { w: state.w, threads: state.threads, t: t.length ? JSON.stringify(t) : '',
    from: state.from, to: state.to, ...extra };
}

export function unit() {
  const w = meta && meta.weights.find((x) => x.name === state.w);
  return w ? w.unit : 'none';
}

export function status(text, error) {
  const s = $('status');
  s.textContent = text;
  s.className = error ? 'error' : '';
}

/** Selects a function everywhere (path: root-first names when picked in a tree or flame graph). */
export function select(name, path, module) {
  setState({ sel: name, path: path || [], selm: module || '' });
}

export function addTransform(t) {
  setState({ t: [...state.t, t], zoom: '0' });
}

function renderHeader() {
  put($('weight'), meta.weights.map((w) => el('option', { value: w.name, selected: w.name === state.w }, w.label)));
  const th = [el('option', { value: 'merged' }, 'all threads merged'), el('option', { value: 'each' }, 'per thread')];
  for (const t of meta.threads) th.push(el('option', { value: String(t.os_tid) }, `thread ${t.label}`));
  put($('threads'), th);
  $('threads').value = state.threads;
  $('inverted').checked = state.inv === '1';
  const w = meta.weights.find((x) => x.name === state.w);
  const note = $('weight-note');
  note.textContent = w && w.note ? w.note : '';
  note.hidden = !(w && w.note);
  note.classList.toggle('estimated', !!(w && w.estimated));
  $('jmc').checked = state.t.some((t) => t.op === 'just-my-code');
  $('idle').checked = state.idle === '1';
  $('idle').closest('label').hidden = !(meta.async && state.w === 'wall');
  if (document.activeElement !== $('search')) $('search').value = state.q;
  $('regex').checked = state.re === '1';
  for (const b of document.querySelectorAll('#tabs button')) {
    b.classList.toggle('active', b.dataset.tab === state.view);
    if (b.dataset.tab === 'diff') b.hidden = !meta.baseline;
    if (b.dataset.tab === 'heap') b.hidden = !meta.heap_snapshots;
  }
}

function describe(t) {
  switch (t.op) {
    case 'focus-function': return `focus ${t.function}`;
    case 'focus-subtree': return `focus subtree ${t.path.join(' › ')}`;
    case 'merge': return `merge ${t.function}`;
    case 'drop': return `drop ${t.function}`;
    case 'collapse-module': return `collapse [${t.module}]`;
    case 'collapse-namespace': return `collapse ${t.namespace}.*`;
    case 'collapse-recursion': return `collapse recursion ${t.function}`;
    case 'just-my-code': return 'just my code';
    default: return t.op;
  }
}

function renderTransforms() {
  const items = state.t.map((t, i) => el('button', { class: 'chip', title: 'remove this and later transforms',
    dataset: { index: String(i) }, onclick: () => setState({ t: state.t.slice(0, i), zoom: '0' }) }, describe(t), ' ✕'));
  put($('transforms'), 'transforms:', items.length ? items : el('span', {}, 'none'),
    state.t.length ? el('button', { id: 'undo', onclick: () => setState({ t: state.t.slice(0, -1), zoom: '0' }) }, 'undo') : null);
}

function renderSelection() {
  if (!state.sel) { put($('selection'), 'select a function in any view'); return; }
  const f = state.sel;
  const ns = namespaceOf(f);
  const b = (id, label, t) => el('button', { id, onclick: () => addTransform(t) }, label);
  put($('selection'), 'selected:', el('span', { class: 'name', title: f }, f),
    b('tf-focus', 'focus function', { op: 'focus-function', function: f }),
    state.path.length ? b('tf-subtree', 'focus subtree', { op: 'focus-subtree', path: state.path }) : null,
    b('tf-merge', 'merge', { op: 'merge', function: f }),
    b('tf-drop', 'drop samples with it', { op: 'drop', function: f }),
    b('tf-recursion', 'collapse recursion', { op: 'collapse-recursion', function: f }),
    state.selm ? b('tf-module', `collapse [${state.selm}]`, { op: 'collapse-module', module: state.selm }) : null,
    ns && ns !== f ? b('tf-namespace', `collapse ${ns}.*`, { op: 'collapse-namespace', namespace: ns }) : null,
    el('button', { onclick: () => setState({ sel: '', path: [], selm: '' }) }, 'clear'));
}

// ---- timeline ----

const LABEL = 150;
const BASE_MARKERS = [['gc_pause_ns', 'GC pauses', '#c33'], ['exceptions', 'exceptions', '#e80'], ['jit', 'JIT', '#39c'],
  ['contention_ns', 'lock waits', '#93c'], ['alloc_bytes', 'allocations', '#3a3']];
const MAX_TRACKS = 24;
// Rows of an --async trace only (the server sends them when the trace has requests or waits).
const ASYNC_MARKERS = [['requests', 'requests', '#077'], ['wait_ns', 'blocking waits', '#a50']];

function drawTimeline() {
  const c = $('timeline');
  const tl = timelineData;
  if (!tl) return;
  const MARKERS = [...BASE_MARKERS, ...ASYNC_MARKERS.filter(([k]) => tl.markers[k])];
  const tracks = tl.threads.slice(0, MAX_TRACKS);
  const h = MARKERS.length * 10 + tracks.length * 11 + (tl.threads.length > MAX_TRACKS ? 12 : 2);
  c.height = h;
  c.width = c.clientWidth || 1000;
  const g = c.getContext('2d');
  g.clearRect(0, 0, c.width, h);
  g.font = '10px sans-serif';
  const W = c.width - LABEL;
  const bw = W / tl.buckets;
  MARKERS.forEach(([key, label, colour], r) => {
    const v = tl.markers[key];
    const max = Math.max(1, ...v);
    g.fillStyle = '#555';
    g.fillText(label, 2, r * 10 + 9);
    g.fillStyle = colour;
    v.forEach((x, i) => { if (x > 0) { const a = 0.3 + 0.7 * x / max; g.globalAlpha = a; g.fillRect(LABEL + i * bw, r * 10 + 2, Math.max(bw, 1), 7); } });
    g.globalAlpha = 1;
  });
  const top = MARKERS.length * 10;
  const maxCpu = Math.max(1, tl.bucket_ns);
  tracks.forEach((t, r) => {
    const y = top + r * 11;
    g.fillStyle = t.pool ? '#357' : '#222';
    g.fillText((t.pool ? '⋯ ' : '') + t.label.slice(0, 26), 2, y + 9);
    t.wall_ns.forEach((x, i) => { if (x > 0) { g.fillStyle = '#e4e4ee'; g.fillRect(LABEL + i * bw, y + 1, Math.max(bw, 1), 9); } });
    t.cpu_ns.forEach((x, i) => {
      if (x > 0) { g.fillStyle = `rgba(220, 80, 40, ${0.25 + 0.75 * Math.min(1, x / maxCpu)})`; g.fillRect(LABEL + i * bw, y + 1, Math.max(bw, 1), 9); }
    });
    t.exceptions.forEach((x, i) => { if (x > 0) { g.fillStyle = '#e80'; g.fillRect(LABEL + i * bw, y + 8, Math.max(bw, 2), 2); } });
  });
  if (tl.threads.length > MAX_TRACKS) {
    g.fillStyle = '#666';
    g.fillText(`${tl.threads.length - MAX_TRACKS} more threads (pick one in the threads list)`, 2, h - 2);
  }
  if (state.from || state.to) {
    const span = tl.end_ns - tl.start_ns || 1;
    const x0 = LABEL + ((Number(state.from || tl.start_ns) - tl.start_ns) / span) * W;
    const x1 = LABEL + ((Math.min(Number(state.to || tl.end_ns), tl.end_ns) - tl.start_ns) / span) * W;
    g.fillStyle = 'rgba(60, 90, 200, 0.18)';
    g.fillRect(x0, 0, Math.max(1, x1 - x0), h);
  }
}

function renderRange() {
  const tl = timelineData;
  const parts = [];
  if (state.from || state.to) {
    parts.push(`range ${time(Number(state.from || 0))} – ${state.to ? time(Number(state.to)) : 'end'}`,
      el('button', { id: 'clear-range', onclick: () => setState({ from: '', to: '', zoom: '0' }) }, 'whole run'));
  } else if (tl) {
    parts.push(`whole run: ${time(tl.end_ns - tl.start_ns)} — drag on the timeline to pick a range`);
  }
  put($('range'), parts);
}

function brush() {
  const c = $('timeline');
  let start = null;
  const toNs = (x) => {
    const tl = timelineData;
    const W = c.clientWidth - LABEL;
    const f = Math.min(1, Math.max(0, (x - LABEL) / W));
    return Math.round(tl.start_ns + f * (tl.end_ns - tl.start_ns));
  };
  c.addEventListener('mousedown', (e) => { start = e.offsetX; });
  c.addEventListener('mouseup', (e) => {
    if (start === null || !timelineData) return;
    const [a, b] = [Math.min(start, e.offsetX), Math.max(start, e.offsetX)];
    start = null;
    if (b - a < 3) return;
    setState({ from: String(toNs(a)), to: String(toNs(b)), zoom: '0' });
  });
}

// ---- render ----

async function render() {
  const gen = ++generation;
  document.body.dataset.busy = '1';
  renderHeader();
  renderTransforms();
  renderSelection();
  renderRange();
  drawTimeline();
  const ctx = { state, params, setState, select, addTransform, unit: unit(), meta, gen: () => gen === generation,
    main: $('view'), status };
  try {
    await (views[state.view] || views.hotspots)(ctx);
    if (gen === generation) status(api.last ? `${api.last.what}: ${Math.round(api.last.ms)} ms` : '');
  } catch (e) {
    if (gen === generation) status(e.message, true);
  }
  if (gen === generation) delete document.body.dataset.busy;
}

// ---- a run store (`clrprof view --store`) ----

function openRun(id) {
  location.hash = id ? `run=${id}` : '';
  location.reload();
}

function duration(r) {
  const end = r.end === null || r.end === undefined ? Date.now() : r.end;
  return `${((end - r.start) / 1000).toFixed(1)} s`;
}

function runState(r) {
  if (r.state === 'cut_off') return r.reason ? `cut off (${r.reason})` : 'cut off';
  return r.state;
}

/** The store's runs, newest first; a click opens one. Refreshed every 2 s (running runs grow). */
async function showRuns(first) {
  for (const id of ['timeline-box', 'transforms', 'selection', 'tabs']) $(id).hidden = true;
  for (const id of ['weight', 'threads', 'inverted', 'jmc', 'idle', 'search', 'regex']) { const e = $(id); (e.closest('label') || e).hidden = true; }
  $('trace').textContent = `runs of ${first.store || 'the store'}`;
  const draw = (runs) => {
    const head = el('tr', {}, ['id', 'host', 'pid', 'command', 'started', 'duration', 'bytes', 'state']
      .map((h) => el('th', {}, h)));
    const rows = runs.map((r) => el('tr', { class: 'run', dataset: { run: String(r.id), state: r.state } },
      el('td', { class: 'num' }, el('a', { href: `#run=${r.id}`, onclick: (e) => { e.preventDefault(); openRun(r.id); } },
        String(r.id))),
      el('td', {}, r.host), el('td', { class: 'num' }, String(r.pid)), el('td', {}, r.command),
      el('td', {}, new Date(r.start).toISOString().replace('T', ' ').slice(0, 19)),
      el('td', { class: 'num' }, duration(r)), el('td', { class: 'num' }, fmt(r.bytes, 'bytes')),
      el('td', {}, runState(r))));
    put($('view'), runs.length ? el('table', { id: 'runs' }, el('thead', {}, head), el('tbody', {}, rows))
      : el('p', {}, 'no runs yet: start `clrprof collect` and profile an app with `clrprof record --server`'));
    status(`${runs.length} runs`);
  };
  draw(first.runs);
  delete document.body.dataset.busy;
  for (;;) {
    await new Promise((ok) => setTimeout(ok, 2000));
    try { draw((await api('runs', {})).runs); } catch (e) { status(e.message, true); }
  }
}

/** Follows an opened run while it streams: when its generation changes, the views recompute. */
async function follow() {
  while (meta.run && meta.run.state === 'running') {
    await new Promise((ok) => setTimeout(ok, 2000));
    let s;
    try { s = await api('status', {}); } catch (e) { status(e.message, true); continue; }
    if (s.generation === meta.run.generation) continue;
    try {
      meta = await api('meta', {});
      timelineData = await api('timeline', { buckets: 400 });
    } catch (e) { status(e.message, true); continue; }
    showTitle();
    render();
  }
}

function showTitle() {
  const run = meta.run ? ` (${runState(meta.run)}, ${fmt(meta.run.bytes, 'bytes')})` : '';
  // The file's name (its full path in the tooltip): titles and screenshots stay short.
  const name = meta.run ? meta.trace : meta.trace.split('/').pop();
  put($('trace'), meta.run ? el('a', { href: '#', onclick: (e) => { e.preventDefault(); openRun(''); } }, 'runs') : null,
    meta.run ? ' / ' : null, el('span', { title: meta.trace }, `${name}${run} — ${meta.command}`));
  document.title = `${name} — clrprof view`;
}

async function start() {
  state = readHash();
  if (state.run) {
    api.run = state.run;
  } else {
    // A store session lists its runs; a trace session answers `store: null`.
    let runs;
    try {
      runs = await api('runs', {});
    } catch (e) {
      status(e.message, true);
      delete document.body.dataset.busy;
      return;
    }
    if (runs.store !== null) { await showRuns(runs); return; }
  }
  try {
    // While the trace loads, the server answers 503 with its progress.
    for (;;) {
      try {
        meta = await api('meta', {});
        break;
      } catch (e) {
        if (e.status !== 503) throw e;
        status(e.message);
        await new Promise((ok) => setTimeout(ok, 300));
      }
    }
  } catch (e) {
    status(`cannot load the trace: ${e.message}`, true);
    delete document.body.dataset.busy;
    return;
  }
  showTitle();
  put($('messages'), meta.messages.map((m) => el('div', {}, m)));
  state = readHash();
  // A trace of heap snapshots only (`clrprof heap PID`) opens on its Heap tab.
  if (meta.heap_snapshots && !new URLSearchParams(location.hash.slice(1)).has('view') && !meta.weights.length) state.view = 'heap';
  $('weight').addEventListener('change', (e) => setState({ w: e.target.value, zoom: '0' }));
  $('threads').addEventListener('change', (e) => setState({ threads: e.target.value, zoom: '0' }));
  $('inverted').addEventListener('change', (e) => setState({ inv: e.target.checked ? '1' : '0', zoom: '0' }));
  $('idle').addEventListener('change', (e) => setState({ idle: e.target.checked ? '1' : '0', zoom: '0' }));
  $('jmc').addEventListener('change', (e) => setState({
    t: e.target.checked ? [...state.t, { op: 'just-my-code' }] : state.t.filter((t) => t.op !== 'just-my-code'), zoom: '0' }));
  let typing = null;
  $('search').addEventListener('input', (e) => {
    clearTimeout(typing);
    typing = setTimeout(() => setState({ q: e.target.value }, false), 250);
  });
  $('regex').addEventListener('change', (e) => setState({ re: e.target.checked ? '1' : '0' }));
  for (const b of document.querySelectorAll('#tabs button')) b.addEventListener('click', () => setState({ view: b.dataset.tab }));
  window.addEventListener('popstate', () => {
    state = readHash();
    if (state.run !== (api.run || '')) { location.reload(); return; }
    render();
  });
  window.addEventListener('resize', () => { drawTimeline(); if (state.view === 'flame') render(); });
  brush();
  try {
    timelineData = await api('timeline', { buckets: 400 });
  } catch (e) {
    status(e.message, true);
  }
  render();
  follow();
}

start();
