// Shared by the browser tests: a real `kube-pulse demo` on a loopback port,
// headless Chromium (Debian's, through playwright-core), the harness page
// built with esbuild, the gateway's /metrics, and a `nats-server` on
// loopback for `demo --leases --nats`.
//
// The gateway embeds the page (src/http/web.rs). When KUBE_PULSE_BIN was
// built before this tree's page changed (its bytes do not hold the tree's
// index.html, app.js, style.css and client), the tests' gateways serve the
// tree's files instead, through a loopback proxy on the test's port that
// forwards everything else (HTTP, SSE, WebSocket upgrades) to the gateway:
// the page the tests drive is always this tree's, and it says so once.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
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

const WEB = fileURLToPath(new URL('..', import.meta.url));
/** The page's files as the gateway serves them (under its base path): path → [content type, file]. */
const PAGE_FILES = {
  '': ['text/html; charset=utf-8', 'index.html'],
  'ui/app.js': ['text/javascript; charset=utf-8', 'app.js'],
  'ui/style.css': ['text/css; charset=utf-8', 'style.css'],
  'ui/client/kube-pulse.js': ['text/javascript; charset=utf-8', 'client/kube-pulse.js'],
  'ui/client/kube-pulse.d.ts': ['text/plain; charset=utf-8', 'client/kube-pulse.d.ts'],
};
// The client's ES modules the gateway serves beside it (src/http/web.rs: all
// of esm/ but the React and Karpor entries, which import packages by name).
for (const file of readdirSync(join(WEB, 'client/esm'))) {
  if (file.endsWith('.js') && file !== 'react.js' && file !== 'karpor.js') {
    PAGE_FILES[`ui/client/esm/${file}`] = ['text/javascript; charset=utf-8', `client/esm/${file}`];
  }
}

let embedsTree;
/** Whether the gateway binary embeds this tree's page files byte for byte. */
function binaryEmbedsTree() {
  if (embedsTree === undefined) {
    const binary = readFileSync(BIN);
    const stale = Object.values(PAGE_FILES)
      .map(([, file]) => file)
      .filter((file) => !binary.includes(readFileSync(join(WEB, file))));
    embedsTree = stale.length === 0;
    if (!embedsTree) {
      console.log(`${BIN} embeds an older ${stale.join(', ')}: the gateways serve this tree's page files through a loopback proxy`);
    }
  }
  return embedsTree;
}

/**
 * A loopback server on `port` that answers the page's files from this tree
 * and forwards every other request, and WebSocket upgrades, to the gateway
 * on `upstream`. Resolves the server; `closeProxy` ends it and its connections.
 */
async function pageProxy(port, upstream, basePath) {
  // basePath null: a plain relay, no page files.
  const prefix = basePath === null ? null : basePath === '/' ? '/' : `${basePath}/`;
  const sockets = new Set();
  const server = http.createServer((req, res) => {
    const { pathname } = new URL(req.url, 'http://x');
    const file = req.method === 'GET' && prefix && pathname.startsWith(prefix) ? PAGE_FILES[pathname.slice(prefix.length)] : undefined;
    if (file) {
      res.writeHead(200, { 'Content-Type': file[0], 'Cache-Control': 'no-cache' });
      res.end(readFileSync(join(WEB, file[1])));
      return;
    }
    const forward = http.request({ host: '127.0.0.1', port: upstream, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
    forward.on('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    res.on('close', () => forward.destroy());
    req.pipe(forward);
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.on('upgrade', (req, socket, head) => {
    const up = net.connect(upstream, '127.0.0.1', () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      up.write(`${lines.join('\r\n')}\r\n\r\n`);
      if (head.length) up.write(head);
      socket.pipe(up).pipe(socket);
    });
    sockets.add(up);
    up.on('close', () => {
      sockets.delete(up);
      socket.destroy();
    });
    up.on('error', () => socket.destroy());
    socket.on('error', () => up.destroy());
    socket.on('close', () => up.destroy());
  });
  server.sockets = sockets;
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  return server;
}

/**
 * A loopback relay on `port` to the gateway on `upstream` that forwards
 * HTTP (SSE included) and, unless `relay.refuseUpgrades` is set, WebSocket
 * upgrades: set, it answers every upgrade 403, as a proxy that does not
 * pass WebSockets does. Resolves the server; `closeRelay` ends it.
 */
export async function startRelay(port, upstream) {
  const server = await pageProxy(port, upstream, null);
  const upgrade = server.listeners('upgrade')[0];
  server.removeAllListeners('upgrade');
  server.refuseUpgrades = false;
  server.on('upgrade', (req, socket, head) => {
    if (!server.refuseUpgrades) return upgrade(req, socket, head);
    socket.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
  });
  return server;
}

export const closeRelay = (server) => closeProxy(server);

async function closeProxy(server) {
  const closed = once(server, 'close');
  server.close();
  for (const socket of server.sockets) socket.destroy();
  await closed;
}

/**
 * Starts `kube-pulse demo` on `port` (extra flags in `args`) and resolves
 * once it listens; behind a proxy serving this tree's page when the binary
 * embeds an older one.
 */
export async function startGateway(port, args = []) {
  if (binaryEmbedsTree()) return spawnGateway(port, args);
  const upstream = await freePort();
  const child = await spawnGateway(upstream, args);
  const base = args.includes('--base-path') ? args[args.indexOf('--base-path') + 1] : '/';
  try {
    child.proxy = await pageProxy(port, upstream, base);
  } catch (err) {
    await stopGateway(child);
    throw err;
  }
  return child;
}

async function spawnGateway(port, args) {
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
  if (child.exitCode === null && child.signalCode === null) {
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await once(child, 'exit');
    clearTimeout(timer);
  }
  if (child.proxy) {
    const proxy = child.proxy;
    child.proxy = null;
    await closeProxy(proxy);
  }
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
