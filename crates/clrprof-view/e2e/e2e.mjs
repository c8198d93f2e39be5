// Browser end-to-end test of `clrprof view`: Debian's chromium driven by playwright-core.
// Environment: CLRPROF (the binary), TRACES (testdata/traces/v1), HOSTILE (a trace with hostile
// names), STORE (a run store with 2 runs), CHROMIUM (default /usr/bin/chromium), SCREENSHOTS (a
// directory: write one per view).
// Exits 0 when every check passed; prints what failed otherwise.
import { launchChromium, startViewer, stopViewers } from './viewer.mjs';

const env = process.env;
const traces = env.TRACES;
const shots = env.SCREENSHOTS || '';

function fail(message) {
  throw new Error(message);
}

function check(cond, message) {
  if (!cond) fail(message);
}


async function settled(page) {
  await page.waitForTimeout(30);
  await page.waitForFunction(() => !document.body.dataset.busy, null, { timeout: 20000 });
}

async function shot(page, name) {
  if (shots) await page.screenshot({ path: `${shots}/view-${name}.png` });
}

const texts = (page, sel) => page.$$eval(sel, (els) => els.map((e) => e.textContent));

async function main() {
  const browser = await launchChromium();
  try {
    await checks(browser);
  } finally {
    await browser.close();
  }
}

async function checks(browser) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const problems = [];
  // 503: the API's answer while a trace is still loading (the page polls it).
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 503/.test(m.text())) problems.push(m.text()); });
  page.on('pageerror', (e) => problems.push(e.message));

  // 1. Open a real trace: hot spots.
  const url = await startViewer([`${traces}/sampled.clrprof`]);
  await page.goto(url);
  await settled(page);
  check(await page.isVisible('#hotspots tr[data-name="Sampling.Many.Spin"]'), 'hot spots list Sampling.Many.Spin');
  const before = await page.textContent('#hotspots-summary');
  await shot(page, 'hotspots');

  // 2. Select a function and check the butterfly.
  await page.click('#hotspots tr[data-name="Sampling.Many.Spin"] a');
  await settled(page);
  check((await page.textContent('#selection .name')) === 'Sampling.Many.Spin', 'selection bar names the function');
  await page.click('#tabs button[data-tab=butterfly]');
  await settled(page);
  check((await page.textContent('#butterfly-function')).includes('Sampling.Many.Spin'), 'butterfly centre');
  const callers = await texts(page, '#callers tbody tr td.name');
  check(callers.includes('System.Threading.Thread.StartCallback'), `butterfly callers: ${callers}`);
  await shot(page, 'butterfly');

  // Call tree: the hot path opens; a row expands on click.
  await page.click('#tabs button[data-tab=tree]');
  await settled(page);
  const treeRows = await page.$$eval('#calltree tbody tr', (r) => r.length);
  check(treeRows >= 5, `call tree rows: ${treeRows}`);
  check(await page.isVisible('#calltree tr[data-name="Sampling.Many.Spin"]'), 'hot path reaches Spin');
  await shot(page, 'calltree');

  // 3. Zoom the flame graph.
  await page.click('#tabs button[data-tab=flame]');
  await settled(page);
  const cells = await page.$$eval('#flame .cell', (c) => c.length);
  check(cells > 5, `flame cells: ${cells}`);
  await shot(page, 'flame');
  const spinCell = page.locator('#flame .cell[data-name="Sampling.Many.Spin"]').first();
  await spinCell.click();
  await settled(page);
  check((await texts(page, '#crumbs span')).includes('Sampling.Many.Spin'), 'breadcrumb shows the zoomed frame');
  check(/zoom=\d+/.test(page.url()), 'zoom kept in the URL');
  const zoomedTop = await page.$eval('#flame .cell[data-depth="0"]', (c) => c.textContent);
  check(zoomedTop === 'Sampling.Many.Spin', `zoomed root: ${zoomedTop}`);
  await page.click('#crumbs span:first-child');
  await settled(page);

  // Search highlights matches and shows their share.
  await page.fill('#search', 'many.spin');
  await page.waitForTimeout(400);
  await settled(page);
  check((await page.$$eval('#flame .cell.matched', (c) => c.length)) > 0, 'search highlights cells');
  check((await page.textContent('#match-share')).includes('%'), 'search share shown');
  await page.fill('#search', '');
  await page.waitForTimeout(400);
  await settled(page);

  // 4. Brush a time range on the timeline: every view is recomputed for it.
  await page.click('#tabs button[data-tab=hotspots]');
  await settled(page);
  const box = await page.locator('#timeline').boundingBox();
  const y = box.y + box.height / 2;
  await page.mouse.move(box.x + 150 + (box.width - 150) * 0.3, y);
  await page.mouse.down();
  await page.mouse.move(box.x + 150 + (box.width - 150) * 0.6, y, { steps: 5 });
  await page.mouse.up();
  await settled(page);
  check(/from=\d+/.test(page.url()) && /to=\d+/.test(page.url()), `range in the URL: ${page.url()}`);
  check((await page.textContent('#range')).startsWith('range '), 'range shown');
  const after = await page.textContent('#hotspots-summary');
  check(after !== before, `hot spots recomputed for the range: ${before} → ${after}`);
  await shot(page, 'timeline-range');
  await page.click('#clear-range');
  await settled(page);

  // 5. Apply a transform and undo it.
  await page.click('#tf-drop');
  await settled(page);
  check((await texts(page, '#transforms .chip')).some((t) => t.includes('drop Sampling.Many.Spin')), 'transform chip');
  check(!(await page.isVisible('#hotspots tr[data-name="Sampling.Many.Spin"]')), 'dropped function gone');
  await page.click('#undo');
  await settled(page);
  check(await page.isVisible('#hotspots tr[data-name="Sampling.Many.Spin"]'), 'undo brings it back');

  // 6. Reload the URL: the same state.
  await page.click('#tf-focus');
  await settled(page);
  await page.click('#tabs button[data-tab=tree]');
  await settled(page);
  const stateBefore = await texts(page, '#calltree tbody tr td.name');
  const chipsBefore = await texts(page, '#transforms .chip');
  await page.reload();
  await settled(page);
  check(JSON.stringify(await texts(page, '#transforms .chip')) === JSON.stringify(chipsBefore), 'transforms survive a reload');
  check((await page.getAttribute('#tabs button.active', 'data-tab')) === 'tree', 'tab survives a reload');
  check(JSON.stringify(await texts(page, '#calltree tbody tr td.name')) === JSON.stringify(stateBefore), 'tree survives a reload');
  check((await page.textContent('#selection .name')) === 'Sampling.Many.Spin', 'selection survives a reload');
  // Browser history goes back to before the transform.
  await page.goBack();
  await settled(page);
  await page.goBack();
  await settled(page);
  check((await page.$$eval('#transforms .chip', (c) => c.length)) === 0, 'back undoes the transform');

  // Events: GCP and event tables.
  await page.click('#tabs button[data-tab=events]');
  await settled(page);
  await page.selectOption('#table', 'functions');
  await settled(page);
  check((await page.$$eval('#events-table tbody tr', (r) => r.length)) > 10, 'function table rows');
  await shot(page, 'events');

  // Hostile names render as text.
  if (env.HOSTILE) {
    const hurl = await startViewer([env.HOSTILE]);
    await page.goto(`${hurl}#w=calls`);
    await settled(page);
    const names = await texts(page, '#hotspots td.name a');
    check(names.includes("<script>alert('x')</script>"), `script name as text: ${names.slice(0, 5)}`);
    check(names.includes('Q"uo\'tes;semi;colons<b>&amp;'), 'quotes as text');
    check(names.includes('Ünïcødé.名前.Émoji✓'), 'unicode as text');
    check(names.some((n) => n.length > 10000), '10 kB name as text');
    check((await page.$$eval('script', (s) => s.length)) === 1, 'no script element injected');
    check((await page.$$eval('main b', (s) => s.length)) === 0, 'no markup injected');
    await page.click('#hotspots td.name a >> text=<script>alert(\'x\')</script>');
    await settled(page);
    await page.click('#tabs button[data-tab=flame]');
    await settled(page);
    check((await page.$$eval('main script, main b', (s) => s.length)) === 0, 'flame graph names as text');
  }

  // 7. Open a diff.
  const durl = await startViewer([`${traces}/counted.clrprof`, '--baseline', `${traces}/instrumented.clrprof`]);
  await page.goto(`${durl}#view=diff&w=calls`);
  await settled(page);
  const first = await page.$eval('#diff-table tbody tr', (r) => r.dataset.name);
  check(first === 'Calls.Shared.Work', `diff sorted by |Δ|: ${first}`);
  check((await page.$$eval('#diff-table .only', (o) => o.length)) > 0, 'only-in-one marked');
  check((await page.$$eval('#flame .cell.grew', (c) => c.length)) > 0, 'differential flame graph: grew');
  await shot(page, 'diff');
  // Zoom the differential flame graph: a click, the breadcrumb, a reload keeps it, 'all' unzooms.
  const work = await page.$('#flame .cell[data-name="Calls.Shared.Work"]');
  check(work, 'Calls.Shared.Work drawn in the differential flame graph');
  await work.click();
  await settled(page);
  let crumbs = await texts(page, '#diff-crumbs span');
  check(crumbs[crumbs.length - 1] === 'Calls.Shared.Work', `diff breadcrumb: ${crumbs}`);
  check(await page.$eval('#flame .cell[data-depth="0"]', (c) => c.dataset.name) === 'Calls.Shared.Work', 'zoomed on Work');
  check(/dzoom=/.test(page.url()), `zoom kept in the URL: ${page.url()}`);
  await page.reload();
  await settled(page);
  crumbs = await texts(page, '#diff-crumbs span');
  check(crumbs[crumbs.length - 1] === 'Calls.Shared.Work', `diff breadcrumb after a reload: ${crumbs}`);
  await page.click('#diff-crumbs span >> text=all');
  await settled(page);
  check((await texts(page, '#diff-crumbs span')).length === 1, 'unzoomed');
  // A transform applies to both sides: merge Work (selected by the click), its calls go to its caller.
  await page.click('#tf-merge');
  await settled(page);
  const merged = await texts(page, '#diff-table tbody tr td.name a');
  check(!merged.includes('Calls.Shared.Work'), `Work merged away on both sides: ${merged.slice(0, 3)}`);
  check((await page.textContent('#diff-transforms')).includes('1 transform'), 'the diff says transforms apply');
  check(/merge/.test(await page.textContent('#transforms')), 'merge chip');
  await page.click('#undo');
  await settled(page);
  check((await page.$eval('#diff-table tbody tr', (r) => r.dataset.name)) === 'Calls.Shared.Work', 'undo brings Work back');

  // 7a. A sampled weight's diff: each row's samples, the 95% uncertainty of its change and whether it
  // is significant (a trace against itself: nothing is; Spin has 56 of the 69 samples).
  const surl = await startViewer([`${traces}/sampled.clrprof`, '--baseline', `${traces}/sampled.clrprof`]);
  await page.goto(`${surl}#view=diff&w=cpu`);
  await settled(page);
  const heads = await texts(page, '#diff-table th');
  check(heads.slice(-3).join('|') === 'Samples|± 95%|Significant', `noise columns: ${heads}`);
  const spin = await texts(page, '#diff-table tr[data-name="Sampling.Many.Spin"] td');
  check(spin.slice(-3).join('|') === '56 → 56|±37.0%|no', `Spin's samples and noise: ${spin}`);
  check((await page.textContent('#diff-noise')).includes('69 → 69 samples'), 'the totals\' samples');
  check((await page.$$eval('#diff-table tr.noise', (r) => r.length)) > 0, 'rows not significant are greyed');
  await shot(page, 'diff-noise');

  // 7b. Exceptions and lock wait as weights (testdata: 40 BoomExceptions, 32 throw stacks walked; 20
  // contentions): picked in the weight list, the page says what the numbers are, every view adds up.
  const xurl = await startViewer([`${traces}/exceptions.clrprof`]);
  await page.goto(`${xurl}#view=hotspots`);
  await settled(page);
  await page.selectOption('#weight', 'exceptions');
  await settled(page);
  check(/total 40$/.test(await page.textContent('#hotspots-summary')), `exceptions total: ${await page.textContent('#hotspots-summary')}`);
  check(await page.isVisible('#weight-note.estimated'), 'the exceptions weight is marked estimated (32 of 40 stacks walked)');
  check(/40 thrown/.test(await page.textContent('#weight-note')), `weight note: ${await page.textContent('#weight-note')}`);
  await page.click('#tabs button[data-tab=flame]');
  await settled(page);
  check(/^40 shown of 40/.test(await page.textContent('#flame-info')), `flame graph total: ${await page.textContent('#flame-info')}`);
  check(await page.isVisible('#flame .cell[data-name="EventsApp.Program.Thrower"]'), 'the throwing function in the flame graph');
  const lurl = await startViewer([`${traces}/contention.clrprof`]);
  await page.goto(`${lurl}#view=butterfly&w=lock-wait&sel=EventsApp.Program.WaitForGate`);
  await page.reload();
  await settled(page);
  check(/602\.80 ms/.test(await page.textContent('#butterfly-totals')), `lock wait of WaitForGate: ${await page.textContent('#butterfly-totals')}`);
  check(/20 contentions/.test(await page.textContent('#weight-note')), 'lock-wait note');

  // 8. A run store: the runs list, newest first, with their states; a click opens a run.
  if (env.STORE) {
    const surl = await startViewer(['--store', env.STORE]);
    await page.goto(surl);
    await settled(page);
    const runs = await page.$$eval('#runs tbody tr', (rs) => rs.map((r) => `${r.dataset.run}:${r.dataset.state}`));
    check(runs.join(',') === '2:running,1:complete', `runs list: ${runs}`);
    await shot(page, 'runs');
    await page.click('#runs tbody tr[data-run="1"] a');
    await page.waitForSelector('#hotspots tr[data-name="Sampling.Many.Spin"]');
    await settled(page);
    check((await page.textContent('#trace')).includes('run:1 (complete'), 'run title');
  }

  const csp = problems.filter((p) => /Content Security Policy|Refused/.test(p));
  check(csp.length === 0, `CSP violations: ${csp.join(' | ')}`);
  check(problems.length === 0, `page errors: ${problems.join(' | ')}`);
}

main()
  .then(() => { console.log('e2e: all checks passed'); })
  .catch((e) => { console.error(`e2e: FAILED: ${e.message}`); process.exitCode = 1; })
  .finally(() => { stopViewers(); });
