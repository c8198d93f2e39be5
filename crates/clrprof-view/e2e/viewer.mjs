// What the browser scripts share: starting `clrprof view` (CLRPROF: the binary) and stopping every
// viewer they started, and launching Debian's chromium (CHROMIUM, default /usr/bin/chromium).
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const children = [];

/** Starts `clrprof view --no-browser ARGS`; resolves to the URL it prints. */
export function startViewer(args) {
  const child = spawn(process.env.CLRPROF, ['view', ...args, '--no-browser'], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', (l) => resolve(l.trim()));
    child.once('exit', (code) => reject(new Error(`clrprof view exited with ${code}`)));
  });
}

/** Stops every viewer `startViewer` started. */
export function stopViewers() {
  for (const c of children) c.kill('SIGTERM');
}

export function launchChromium() {
  return chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
}
