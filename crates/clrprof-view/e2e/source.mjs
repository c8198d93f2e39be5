// Browser test of the viewer's source panel: Debian's chromium driven by playwright-core.
// Environment: CLRPROF (the binary), TRACE (a trace of apps/Lines with its PDBs and sources on
// this machine), LINE_A and LINE_B (the lines of its two loops), CHROMIUM (default
// /usr/bin/chromium), SCREENSHOTS (a directory: write view-source.png).
// Selects Lines.Loops.TwoLoops, opens the Source tab, and checks that both loops' lines are there
// with their text, hot, with the costs the API gives, the hotter one redder.
// Exits 0 when every check passed; prints what failed otherwise.
import { launchChromium, startViewer, stopViewers } from './viewer.mjs';

const env = process.env;

function check(cond, message) {
  if (!cond) throw new Error(message);
}


async function settled(page) {
  await page.waitForTimeout(30);
  await page.waitForFunction(() => !document.body.dataset.busy, null, { timeout: 30000 });
}

async function main() {
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const problems = [];
    page.on('console', (m) => { if (m.type() === 'error' && !/status of 503/.test(m.text())) problems.push(m.text()); });
    page.on('pageerror', (e) => problems.push(e.message));
    const url = await startViewer([env.TRACE]);
    await page.goto(url);
    await settled(page);

    // Select the method in the hot spots, then open its source.
    await page.click('#hotspots tr[data-name="Lines.Loops.TwoLoops"] a');
    await settled(page);
    await page.click('#tabs button[data-tab=source]');
    await settled(page);
    check((await page.textContent('#source-head')).includes('Lines.Loops.TwoLoops'), 'the panel names the method');
    const row = async (n) => page.$eval(`#source tr[data-line="${n}"]`, (tr) => ({
      cls: tr.className, bg: tr.style.background, cells: [...tr.cells].map((c) => c.textContent),
    }));
    const a = await row(env.LINE_A);
    const b = await row(env.LINE_B);
    check(a.cells[5].endsWith('// LINE:A') && b.cells[5].endsWith('// LINE:B'), `the loops' text: ${a.cells[5]} / ${b.cells[5]}`);
    check(a.cls === 'hot' && b.cls === 'hot', 'both loops are hot');
    check(a.cells[0] !== '' && b.cells[0] !== '', `self shown: ${a.cells[0]} / ${b.cells[0]}`);
    const alpha = (bg) => Number((/rgba\([^)]*,\s*([\d.]+)\)/.exec(bg) || [0, 0])[1]);
    check(alpha(a.bg) > alpha(b.bg), `loop A redder than B: ${a.bg} / ${b.bg}`);
    // The figures are the API's.
    const api = await page.evaluate(async () => {
      const r = await fetch('/api/source?fn=Lines.Loops.TwoLoops&w=cpu', { credentials: 'same-origin' });
      return r.json();
    });
    const apiA = api.lines.find((l) => String(l.line) === env.LINE_A);
    const want = `${(Math.round(apiA.total_percent * 10) / 10).toFixed(1)}%`;
    check(a.cells[3] === want, `total % of line A: ${a.cells[3]}, the API's ${want}`);
    if (env.SCREENSHOTS) await page.screenshot({ path: `${env.SCREENSHOTS}/view-source.png` });

    // Without a selection: a hint, not an error.
    await page.click('#selection button:last-child');
    await settled(page);
    check((await page.textContent('#source-missing')).includes('Select a function'), 'hint without a selection');
    check(problems.length === 0, `console errors: ${problems.join('; ')}`);
    console.log('source: all checks passed');
  } finally {
    await browser.close();
    stopViewers();
  }
}

main().catch((e) => {
  console.log(`source: FAILED: ${e.message}`);
  stopViewers();
  process.exit(1);
});
