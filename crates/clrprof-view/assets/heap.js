// The Heap tab: a heap snapshot's types (count, shallow size, retained size; sortable), and for the
// selected type its shortest paths from roots and its dominator chains (what holds its instances
// exclusively), beside the dominator tree. The selection is linked: a type named anywhere selects it,
// and the dominator tree marks its nodes. Every figure comes from /api/heap*; names are set as text.
import { api, el, put, fmt } from './util.js';

function typeLink(ctx, name, extra) {
  return el('a', { href: '#', class: ctx.state.htype === name ? 'heap-selected' : null, title: name,
    onclick: (e) => { e.preventDefault(); ctx.setState({ htype: name }); } }, name, extra);
}

function rootLabel(root) {
  return root.name ? `${root.kind} ${root.name}` : root.kind;
}

/** One merged path: root → Type.field → Type → … → the instance's type; a run of one type (a linked
 * list) is shown once with its length (×N). */
function pathRow(ctx, p) {
  const parts = [el('span', { class: 'heap-root' }, rootLabel(p.root))];
  const steps = p.nodes.map((n, i) => ({ type: n.type, field: p.nodes[i + 1] ? p.nodes[i + 1].field : null }));
  for (let i = 0; i < steps.length;) {
    let run = 1;
    while (i + run < steps.length && steps[i + run].type === steps[i].type && steps[i + run].field === steps[i].field) run++;
    parts.push(' → ', typeLink(ctx, steps[i].type), steps[i].field ? el('span', { class: 'heap-field' }, `.${steps[i].field}`) : null,
      run > 1 ? el('span', { class: 'heap-field' }, ` ×${fmt(run)}`) : null);
    i += run;
  }
  return el('tr', {}, el('td', { class: 'num' }, fmt(p.count)), el('td', { class: 'name' }, parts));
}

function pathTable(ctx, title, rows, more, empty) {
  const body = rows.map((p) => pathRow(ctx, p));
  if (more && more.count) body.push(el('tr', { class: 'more' }, el('td', { class: 'num' }, fmt(more.instances)), el('td', {}, `… ${more.count} more paths`)));
  return [el('div', { class: 'section-title' }, title),
    rows.length ? el('table', { class: 'heap-paths' }, el('thead', {}, el('tr', {}, el('th', { class: 'num' }, 'Instances'), el('th', {}, 'Path (root → … → instance)'))), el('tbody', {}, body))
      : el('p', {}, empty)];
}

function domRows(ctx, nodes, depth, total, out) {
  for (const n of nodes) {
    const marked = n.type === ctx.state.htype;
    out.push(el('tr', { class: marked ? 'selected' : null },
      el('td', { class: 'num' }, fmt(n.retained, 'bytes')),
      el('td', { class: 'num' }, total ? `${(100 * n.retained / total).toFixed(1)}%` : ''),
      el('td', { class: 'num' }, fmt(n.count)),
      el('td', { class: 'name', style: `padding-left: ${6 + 14 * depth}px` }, typeLink(ctx, n.type),
        n.root ? el('span', { class: 'heap-root' }, ` ← ${rootLabel(n.root)}`) : null)));
    domRows(ctx, n.children, depth + 1, total, out);
    if (n.more && n.more.count) out.push(el('tr', { class: 'more' }, el('td', { class: 'num' }, fmt(n.more.retained, 'bytes')), el('td'), el('td'),
      el('td', { style: `padding-left: ${6 + 14 * (depth + 1)}px` }, `… ${n.more.count} more`)));
  }
}

export async function heap(ctx) {
  const { state } = ctx;
  const list = await api('heap', {});
  if (!ctx.gen()) return;
  if (!list.snapshots.length) {
    put(ctx.main, el('p', {}, 'This trace holds no heap snapshot: take one with `clrprof heap PID` or `record --heap-snapshot-at TIME`.'));
    return;
  }
  const snap = state.snap || String(list.snapshots.length);
  const sort = state.hsort || 'retained';
  const [types, dom] = await Promise.all([api('heap-types', { snap, sort }), api('heap-dominators', { snap })]);
  let paths = null;
  if (state.htype) {
    try { paths = await api('heap-paths', { snap, type: state.htype }); } catch (e) { paths = { error: e.message }; }
  }
  if (!ctx.gen()) return;
  const h = types.snapshot;

  const picker = el('select', { id: 'heap-snap', onchange: (e) => ctx.setState({ snap: e.target.value }) },
    list.snapshots.map((s) => el('option', { value: String(s.index), selected: String(s.index) === snap },
      `snapshot ${s.index} of ${s.of}: ${s.gc_index ? `gc ${s.gc_index}, ` : ''}${(s.ts_ns / 1e9).toFixed(3)} s${s.reason ? `, ${s.reason}` : ''}${s.complete ? '' : ' (incomplete)'}`)));
  const summary = el('div', { id: 'heap-summary' }, picker,
    ` ${fmt(h.objects)} objects, ${fmt(h.bytes, 'bytes')}, ${fmt(h.references)} references, ${fmt(h.roots)} roots`,
    h.unreachable ? `; ${fmt(h.unreachable)} objects (${fmt(h.unreachable_bytes, 'bytes')}) reached from no root` : '');
  const warn = h.complete ? null : el('div', { class: 'heap-incomplete' },
    `Incomplete snapshot${h.dropped_events ? ` (${fmt(h.dropped_events)} heap-dump events lost)` : ''}: every count and size is a lower bound.`);

  const arrow = (k) => (sort === k ? ' ▼' : '');
  const th = (k, label, cls) => el('th', { class: cls, onclick: () => ctx.setState({ hsort: k }) }, `${label}${arrow(k)}`);
  const total = h.reachable_bytes || 1;
  const typeRows = types.types.map((t) => el('tr', { class: t.name === state.htype ? 'selected' : null },
    el('td', { class: 'name' }, typeLink(ctx, t.name)),
    el('td', { class: 'num' }, fmt(t.count)),
    el('td', { class: 'num' }, fmt(t.size, 'bytes')),
    el('td', { class: 'num' }, fmt(t.retained, 'bytes')),
    el('td', { class: 'num' }, `${(100 * t.retained / total).toFixed(1)}%`)));
  if (types.total_types > types.types.length) typeRows.push(el('tr', { class: 'more' }, el('td', {}, `… ${types.total_types - types.types.length} more types`)));
  const typeTable = el('table', { id: 'heap-types' },
    el('thead', {}, el('tr', {}, th('name', 'Type'), th('count', 'Count', 'num'), th('size', 'Size', 'num'), th('retained', 'Retained', 'num'), el('th', { class: 'num' }, 'Retained %'))),
    el('tbody', {}, typeRows));

  let detail;
  if (!state.htype) detail = [el('p', {}, 'Select a type to see what holds its instances.')];
  else if (paths.error) detail = [el('p', { class: 'error' }, paths.error)];
  else {
    detail = [el('div', { class: 'section-title' }, paths.type),
      el('div', {}, `${fmt(paths.instances)} instances, retaining ${fmt(paths.retained, 'bytes')}; all of them gone would free ${fmt(paths.freed_if_all_gone, 'bytes')}`,
        paths.unreachable ? `; ${fmt(paths.unreachable)} reached from no root` : ''),
      ...pathTable(ctx, 'Shortest paths from roots', paths.paths, paths.more, 'No instance is reached from a root.'),
      ...pathTable(ctx, 'Dominator chains (what holds them exclusively)', paths.dominator_chains, null, 'No instance is reached from a root.')];
  }
  const domOut = [];
  domRows(ctx, dom.dominators.children, 0, dom.dominators.retained, domOut);
  const domTable = el('table', { id: 'heap-dominators' },
    el('thead', {}, el('tr', {}, el('th', { class: 'num' }, 'Retained'), el('th', { class: 'num' }, '%'), el('th', { class: 'num' }, 'Objects'), el('th', {}, 'Dominator tree (objects of one type merged)'))),
    el('tbody', {}, domOut));

  put(ctx.main, summary, warn, el('div', { id: 'heap-grid' },
    el('div', { id: 'heap-left' }, typeTable),
    el('div', { id: 'heap-right' }, el('div', { id: 'heap-detail' }, detail), domTable)));
}
