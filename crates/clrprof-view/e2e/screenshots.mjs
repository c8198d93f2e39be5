// docs/view.md's screenshots of `clrprof view` (docs/images/view-*.png), one per view, from a real
// trace: `node screenshots.mjs NEW.clrprof BASELINE.clrprof OUTDIR` with CLRPROF (the binary) and
// CHROMIUM (default /usr/bin/chromium) in the environment. scripts/screenshots records the traces
// (apps/Demo, two sizes) and runs this.
import { launchChromium, startViewer, stopViewers } from './viewer.mjs';

const [trace, baseline, out] = process.argv.slice(2);


async function settled(page) {
  await page.waitForTimeout(50);
  await page.waitForFunction(() => !document.body.dataset.busy, null, { timeout: 120000 });
  await page.waitForTimeout(200);
}

async function main() {
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const url = await startViewer([trace]);
    const shot = async (name, hash, after) => {
      await page.goto(`${url}#${hash}`);
      await page.reload();
      await settled(page);
      if (after) { await after(); await settled(page); }
      await page.screenshot({ path: `${out}/view-${name}.png` });
      console.log(`view-${name}.png`);
    };
    await shot('hotspots', 'view=hotspots');
    // The heaviest function of the app's own code, for the butterfly (the trace is loaded now).
    const meta = await (await fetch(url.replace('/?', '/api/meta?'))).json();
    const span = meta.end_ns - meta.start_ns;
    const hot = await (await fetch(url.replace('/?', `/api/hotspots?w=cpu&q=Demo.&limit=5&sort=total&`))).json();
    const fn = (hot.page.rows.find((r) => !r.name.endsWith('.Main')) || hot.page.rows[0]).name;
    await shot('butterfly', `view=butterfly&sel=${encodeURIComponent(fn)}`);
    // Its source with each line's cost (the PDB beside the app, the sources in the checkout).
    await shot('source', `view=source&sel=${encodeURIComponent(fn)}`);
    await shot('calltree', 'view=tree');
    await shot('flame', 'view=flame&q=Demo.');
    await shot('timeline-range', `view=hotspots&from=${meta.start_ns + Math.round(span * 0.55)}&to=${meta.start_ns + Math.round(span * 0.85)}`);
    await shot('events', 'view=events&table=exceptions');
    if (meta.weights.some((w) => w.name === 'exceptions')) await shot('exceptions', 'view=flame&w=exceptions');
    const durl = await startViewer([trace, '--baseline', baseline]);
    await page.goto(`${durl}#view=diff`);
    await page.reload();
    await settled(page);
    // Zoomed on the app's entry point: the breadcrumb shows the path.
    const main = await page.$('#flame .cell[data-name="Demo.Program.Main"]');
    if (main) { await main.click(); await settled(page); }
    await page.screenshot({ path: `${out}/view-diff.png` });
    console.log('view-diff.png');
  } finally {
    await browser.close();
    stopViewers();
  }
}

main().catch((e) => { console.error(`screenshots: ${e.message}`); process.exitCode = 1; });
