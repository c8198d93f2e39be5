// Browser test of the callers panel's call sites: Debian's chromium driven by playwright-core.
// Environment: CLRPROF (the binary), TRACE (an instrumented trace of `apps/Lines sites N M` with
// its PDBs on this machine), LINE_N and LINE_M (the two lines Sites.Caller calls Sites.Callee
// from), N and M (the calls from each), CHROMIUM (default /usr/bin/chromium), SCREENSHOTS (a
// directory: write view-callsites.png).
// Selects Lines.Sites.Callee, opens the Callers tab, and checks that under Lines.Sites.Caller the
// two "at Program.cs:LINE" rows show exactly N and M calls (in either order: they are ranked by
// time), the caller N + M; with a transform applied the rows give way to a note.
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
    const page = await browser.newPage({ viewport: { width: 1400, height: 700 } });
    const problems = [];
    page.on('console', (m) => { if (m.type() === 'error' && !/status of 503/.test(m.text())) problems.push(m.text()); });
    page.on('pageerror', (e) => problems.push(e.message));
    const url = await startViewer([env.TRACE]);
    // The callers panel of Lines.Sites.Callee, as a shared link opens it.
    await page.goto(`${url}#view=butterfly&sel=Lines.Sites.Callee`);
    await settled(page);
    await page.waitForSelector('#callers', { timeout: 30000 });
    const rows = async () => page.$$eval('#callers tbody tr', (trs) => trs.map((tr) => ({
      site: tr.className === 'site', name: tr.dataset.name, line: tr.dataset.line, caller: tr.dataset.caller,
      cells: [...tr.cells].map((c) => c.textContent),
    })));
    const all = await rows();
    const i = all.findIndex((r) => r.name === 'Lines.Sites.Caller');
    check(i >= 0, `a row for the caller: ${JSON.stringify(all)}`);
    check(all[i].cells[4] === String(Number(env.N) + Number(env.M)), `the caller's calls: ${all[i].cells[4]}`);
    const sites = all.slice(i + 1, i + 3);
    check(sites.length === 2 && sites.every((s) => s.site && s.caller === 'Lines.Sites.Caller'),
      `two site rows under the caller: ${JSON.stringify(all)}`);
    check(all[i + 3] === undefined || !all[i + 3].site, `no third site row: ${JSON.stringify(all)}`);
    const got = sites.map((s) => `${s.cells[0]}=${s.cells[4]}`).sort();
    const want = [`at Program.cs:${env.LINE_N}=${env.N}`, `at Program.cs:${env.LINE_M}=${env.M}`].sort();
    check(JSON.stringify(got) === JSON.stringify(want), `site rows ${got.join(', ')}; expected ${want.join(', ')}`);
    // The figures are the API's: each row's value cell is the API's value in the unit.
    const api = await page.evaluate(async () => {
      const r = await fetch('/api/sites?fn=Lines.Sites.Callee', { credentials: 'same-origin' });
      return r.json();
    });
    const caller = api.callers.find((c) => c.name === 'Lines.Sites.Caller');
    const apiCalls = caller.sites.map((s) => `${s.line}=${s.calls}`).sort();
    const wantCalls = [`${env.LINE_N}=${env.N}`, `${env.LINE_M}=${env.M}`].sort();
    check(JSON.stringify(apiCalls) === JSON.stringify(wantCalls), `API sites ${apiCalls.join(', ')}`);
    check(caller.sites.reduce((a, s) => a + s.value, 0) === caller.value, 'the sites\' time sums to the caller\'s');
    if (env.SCREENSHOTS) await page.screenshot({ path: `${env.SCREENSHOTS}/view-callsites.png` });

    // With a transform (just my code: folds System.* frames): the rows give way to a note.
    await page.check('#jmc');
    await settled(page);
    await page.waitForSelector('#sites-hidden', { timeout: 30000 });
    check((await page.$$('#callers tr.site')).length === 0, 'no site rows with a transform');
    check((await page.textContent('#sites-hidden')).includes('untransformed'), 'the note says why');
    check(problems.length === 0, `console errors: ${problems.join('; ')}`);
    console.log('callsites: all checks passed');
  } finally {
    await browser.close();
    stopViewers();
  }
}

main().catch((e) => {
  console.log(`callsites: FAILED: ${e.message}`);
  stopViewers();
  process.exit(1);
});
