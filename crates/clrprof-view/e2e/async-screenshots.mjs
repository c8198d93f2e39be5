// docs/async.md's screenshots of `clrprof view` on a trace recorded with `--async`
// (docs/images/async-*.png): `node async-screenshots.mjs TRACE OUTDIR` with CLRPROF (the binary)
// and CHROMIUM (default /usr/bin/chromium) in the environment. The trace: apps/AsyncShape recorded
// with `clrprof record --async`.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const [trace, out] = process.argv.slice(2);
const children = [];

function startViewer(args) {
  const child = spawn(process.env.CLRPROF, ['view', ...args, '--no-browser'], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', (l) => resolve(l.trim()));
    child.once('exit', (code) => reject(new Error(`clrprof view exited with ${code}`)));
  });
}

async function settled(page) {
  await page.waitForTimeout(50);
  await page.waitForFunction(() => !document.body.dataset.busy, null, { timeout: 120000 });
  await page.waitForTimeout(200);
}

async function main() {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
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
    for (const c of children) c.kill('SIGTERM');
  }
}

main().catch((e) => { console.error(`screenshots: ${e.message}`); process.exitCode = 1; });
