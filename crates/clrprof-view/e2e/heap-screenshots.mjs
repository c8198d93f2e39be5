// docs/heap.md's screenshots of the viewer's Heap tab (docs/images/view-heap*.png) from a real snapshot:
// `node heap-screenshots.mjs SNAPSHOT.clrprof TYPE OUTDIR` with CLRPROF (the binary) and CHROMIUM (default
// /usr/bin/chromium) in the environment; TYPE is the type selected in the second picture.
import { launchChromium, startViewer, stopViewers } from './viewer.mjs';

const [trace, type, out] = process.argv.slice(2);

async function main() {
  const url = await startViewer([trace]);
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 1500, height: 900 } });
    const shot = async (name, hash) => {
      await page.goto(`${url}#${hash}`);
      await page.reload();
      await page.waitForTimeout(50);
      await page.waitForFunction(() => !document.body.dataset.busy, null, { timeout: 120000 });
      await page.waitForTimeout(200);
      await page.screenshot({ path: `${out}/${name}.png` });
      console.log(`${name}.png`);
    };
    await shot('view-heap', 'view=heap');
    await shot('view-heap-paths', `view=heap&htype=${encodeURIComponent(type)}`);
  } finally {
    await browser.close();
    stopViewers();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
