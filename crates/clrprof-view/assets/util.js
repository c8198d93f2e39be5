// Helpers shared by the views: API calls, DOM building (text only: names are never parsed as
// HTML) and locale-independent number formatting.

/** GETs /api/<what> with the parameters; resolves to the JSON answer or throws its error. */
export async function api(what, params) {
  const q = new URLSearchParams();
  // A store session: every call names the opened run.
  if (api.run) q.set('run', api.run);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const started = performance.now();
  const r = await fetch(`/api/${what}?${q}`, { credentials: 'same-origin' });
  const body = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) {
    const e = new Error(body.error || `HTTP ${r.status}`);
    e.status = r.status;
    throw e;
  }
  api.last = { what, ms: performance.now() - started };
  return body;
}

/** Creates an element: el('td', {class: 'num', onclick: f}, 'text', child, ...). */
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else if (k === 'style') e.style.cssText = v; // CSSOM: allowed by the CSP, unlike a style attribute
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

/** Replaces the children of `parent`. */
export function put(parent, ...children) {
  parent.replaceChildren(...children.flat().filter((c) => c !== undefined && c !== null && c !== false));
}

function fixed(x, digits) {
  return (Math.round(x * 10 ** digits) / 10 ** digits).toFixed(digits);
}

/** A value in its unit: nanoseconds as ms or s, bytes as KB/MB/GB, counts as integers. */
export function fmt(v, unit) {
  if (v === undefined || v === null) return '';
  if (unit === 'nanoseconds') {
    if (Math.abs(v) >= 1e10) return `${fixed(v / 1e9, 2)} s`;
    return `${fixed(v / 1e6, 2)} ms`;
  }
  if (unit === 'bytes') {
    const a = Math.abs(v);
    if (a >= 1e9) return `${fixed(v / 1e9, 2)} GB`;
    if (a >= 1e6) return `${fixed(v / 1e6, 2)} MB`;
    if (a >= 1e3) return `${fixed(v / 1e3, 1)} KB`;
    return `${v} B`;
  }
  return String(Math.round(v));
}

export function pct(x) {
  return `${fixed(x, 1)}%`;
}

/** A time since process start in ns, as seconds with ms precision. */
export function time(ns) {
  return `${fixed(ns / 1e9, 3)} s`;
}

/** A stable colour for a key (module or namespace). */
export function colour(key) {
  let h = 2166136261;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 16777619);
  const hue = ((h >>> 0) % 360);
  return `hsl(${hue}, 55%, 72%)`;
}

/** The namespace of a managed name: everything before the type (two segments at most). */
export function namespaceOf(name) {
  const base = name.split(/[(<]/)[0];
  const parts = base.split('.');
  if (parts.length <= 2) return parts[0];
  return parts.slice(0, Math.min(2, parts.length - 2)).join('.');
}
