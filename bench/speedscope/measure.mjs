// One measurement for bench/view_vs_speedscope.sh, in a fresh headless chromium (playwright-core):
//   node measure.mjs clrprof URL        the page of a running `clrprof view` (its flame graph)
//   node measure.mjs speedscope FILE    speedscope 1.25.0 (node_modules) opening FILE (served on
//                                       loopback and loaded through #profileURL=)
//   node measure.mjs blank              an empty page: the browser's own memory, for reference
// Prints one JSON line: {tool, opened, first_render_ms, js_heap_mb, browser_pss_mb, error}.
// first_render_ms: from navigation to the first drawn view (clrprof: flame-graph cells on the page
// and no request pending; speedscope: the profile's name in the title, then two animation frames).
// js_heap_mb: the page's used JS heap after a forced GC (CDP). browser_pss_mb: proportional set
// size summed over every chromium process (smaps_rollup), read just after the render.
import { createServer } from 'node:http';
import { createReadStream, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, extname } from 'node:path';
import { chromium } from 'playwright-core';

const [tool, target] = process.argv.slice(2);
const TIMEOUT = Number(process.env.TIMEOUT_MS || 300000);

function descendants(pid) {
  const kids = new Map();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (!kids.has(ppid)) kids.set(ppid, []);
      kids.get(ppid).push(Number(d));
    } catch { /* gone */ }
  }
  const out = [];
  const walk = (p) => { for (const k of kids.get(p) || []) { out.push(k); walk(k); } };
  walk(pid);
  return out;
}

function pssMb() {
  let kb = 0;
  for (const p of descendants(process.pid)) {
    try {
      const m = /Pss:\s+(\d+)/.exec(readFileSync(`/proc/${p}/smaps_rollup`, 'utf8'));
      if (m) kb += Number(m[1]);
    } catch { /* gone */ }
  }
  return kb / 1024;
}

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.json': 'application/json',
  '.wasm': 'application/wasm', '.png': 'image/png', '.woff2': 'font/woff2', '.ico': 'image/x-icon' };

function serveSpeedscope(file) {
  const root = new URL('./node_modules/speedscope/dist/release/', import.meta.url).pathname;
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const f = path === '/profile.json' ? file : join(root, path === '/' ? 'index.html' : path);
    try {
      const size = statSync(f).size;
      res.writeHead(200, { 'Content-Type': TYPES[extname(f)] || 'application/octet-stream', 'Content-Length': size });
      createReadStream(f).pipe(res);
    } catch {
      res.writeHead(404).end();
    }
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server)));
}

async function main() {
  const result = { tool, opened: false, first_render_ms: null, js_heap_mb: null, browser_pss_mb: null, error: null };
  let server = null;
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--js-flags=--expose-gc'] });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    let crashed = false;
    page.on('crash', () => { crashed = true; });
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Performance.enable');
    let url;
    if (tool === 'speedscope') {
      server = await serveSpeedscope(target);
      const base = `http://127.0.0.1:${server.address().port}`;
      url = `${base}/index.html#profileURL=${encodeURIComponent(`${base}/profile.json`)}`;
    } else if (tool === 'blank') {
      url = 'about:blank';
    } else {
      url = `${target}#view=flame&w=cpu`;
    }
    const t0 = Date.now();
    await page.goto(url);
    try {
      if (tool === 'blank') {
        await page.waitForTimeout(500);
      } else if (tool === 'speedscope') {
        await page.waitForFunction(() => / - speedscope$/.test(document.title), null, { timeout: TIMEOUT, polling: 50 });
        await page.evaluate(() => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok))));
      } else {
        await page.waitForFunction(() => document.querySelector('#flame .cell') && !document.body.dataset.busy, null,
          { timeout: TIMEOUT, polling: 50 });
      }
      result.first_render_ms = Date.now() - t0;
      result.opened = true;
    } catch (e) {
      result.error = crashed ? 'the page crashed' : e.message.split('\n')[0];
    }
    result.browser_pss_mb = Math.round(pssMb());
    if (!crashed) {
      try {
        await cdp.send('HeapProfiler.collectGarbage');
        const m = (await cdp.send('Performance.getMetrics')).metrics;
        result.js_heap_mb = Math.round(m.find((x) => x.name === 'JSHeapUsedSize').value / 1048576);
      } catch (e) { result.error = result.error || e.message.split('\n')[0]; }
    }
  } finally {
    await browser.close();
    if (server) server.close();
  }
  console.log(JSON.stringify(result));
}

main().catch((e) => { console.log(JSON.stringify({ tool, opened: false, error: e.message.split('\n')[0] })); process.exitCode = 1; });
