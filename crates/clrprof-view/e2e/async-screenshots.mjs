// docs/async.md's screenshots of `clrprof view` on a trace recorded with `--async`
// (docs/images/async-*.png): `node async-screenshots.mjs TRACE OUTDIR` with CLRPROF (the binary)
// and CHROMIUM (default /usr/bin/chromium) in the environment. The trace: apps/AsyncShape recorded
// with `clrprof record --async`.
import { launchChromium, startViewer, stopViewers } from './viewer.mjs';

const [trace, out] = process.argv.slice(2);


async function settled(page) {
  await page.waitForTimeout(50);
  await page.waitForFunction(() => !document.body.dataset.busy, null, { timeout: 120000 });
  await page.waitForTimeout(200);
}

async function main() {
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const shoot = async (url, name, hash) => {
      await page.goto(`${url}#${hash}`);
      await page.reload();
      await settled(page);
      await page.screenshot({ path: `${out}/async-${name}.png` });
      console.log(`async-${name}.png`);
    };
    const url = await startViewer([trace]);
    await shoot(url, 'flame-wall', 'view=flame&w=wall');
    await shoot(url, 'flame-wall-idle', 'view=flame&w=wall&idle=1');
    await shoot(url, 'flame-cpu', 'view=flame&w=cpu');
    await shoot(url, 'tree-wall', 'view=tree&w=wall');
    const phys = await startViewer([trace, '--physical-stacks']);
    await shoot(phys, 'flame-cpu-physical', 'view=flame&w=cpu');
  } finally {
    await browser.close();
    stopViewers();
  }
}

main().catch((e) => { console.error(`screenshots: ${e.message}`); process.exitCode = 1; });
