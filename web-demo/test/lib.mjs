// Shared by the browser tests: a real `kube-pulse demo` on a loopback port,
// headless Chromium (Debian's, through playwright-core), the harness page
// built with esbuild, the gateway's /metrics, and a `nats-server` on
// loopback for `demo --leases --nats`.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

export const BIN =
  process.env.KUBE_PULSE_BIN ?? fileURLToPath(new URL('../../target/debug/kube-pulse', import.meta.url));
export const WAIT = 30_000;

export async function freePort() {
  const server = net.createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

/** Starts `kube-pulse demo` on `port` (extra flags in `args`) and resolves once it listens. */
export async function startGateway(port, args = []) {
  const child = spawn(BIN, ['demo', '--listen', `127.0.0.1:${port}`, '--no-scenario', '--tick-ms', '400', ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
    // Member clusters the tests break log connection errors; keep them out.
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? 'warn,kube_client=off' },
  });
  let out = '';
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the gateway did not start: ${out}`)), WAIT);
    child.stdout.on('data', (chunk) => {
      out += chunk;
      if (out.includes('listening on http://')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.on('exit', (code) => reject(new Error(`the gateway exited with ${code}: ${out}`)));
  });
  return child;
}

export async function stopGateway(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await once(child, 'exit');
  clearTimeout(timer);
}

export function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** `kube_pulse_sessions` by transport, from /metrics. */
export async function sessions(base, token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const text = await (await fetch(`${base}metrics`, { headers })).text();
  const out = { ws: 0, sse: 0 };
  for (const m of text.matchAll(/^kube_pulse_sessions\{transport="(\w+)"\} (\d+)/gm)) out[m[1]] = Number(m[2]);
  return out;
}

/** Polls `check` (async) until it returns a truthy value; fails with the last value after `ms`. */
export async function until(what, check, ms = WAIT) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    last = await check();
    if (last && !last.wrong) return last;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** `nats-server` on PATH, or where Debian installs it (/usr/sbin); undefined when absent. */
export function natsServerBinary() {
  const dirs = [...(process.env.PATH ?? '').split(':').filter(Boolean), '/usr/sbin'];
  return dirs.map((d) => `${d}/nats-server`).find((p) => existsSync(p));
}

/**
 * Starts `nats-server -js` on a free loopback port with its store in a new
 * temporary directory, and resolves once it accepts connections (within
 * WAIT). Resolves `{ url, stop }`; `stop()` kills it and removes the store.
 */
export async function startNats(binary = natsServerBinary()) {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'kube-pulse-web-nats-'));
  const child = spawn(binary, ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dir], { stdio: 'ignore' });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await once(child, 'exit');
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await until('nats-server to accept connections', () => new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => { socket.destroy(); resolve(true); });
      socket.once('error', () => resolve(false));
    }));
  } catch (err) {
    await stop();
    throw err;
  }
  return { url: `nats://127.0.0.1:${port}`, stop };
}
