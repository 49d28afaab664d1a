// The client's live queries against the real gateway: `kube-pulse demo`
// on a loopback port, the client over SSE or WebSocket holding five
// queries (a filter and a sort, a projected page with an offset, a count,
// groups), and after each scenario change (a task stops an app, a cluster
// loses pod capacity and an app degrades, a cluster is disconnected and
// healed, the app started again) each window must equal what a fresh
// query of the same members returns, within a bounded wait. A forced
// resubscribe while changes are under way (what a mismatch does) must
// come back equal too. Imported by query.test.mjs; run alone as
// `node [--experimental-websocket] query-live.mjs ws|sse`.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';

import { connect } from '../esm/kube-pulse.js';
import { mismatch } from '../esm/query.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '../../..');

/** The gateway binary: KUBE_PULSE_BIN, else where `cargo build` leaves it. */
export const BIN =
  process.env.KUBE_PULSE_BIN ?? path.join(process.env.CARGO_TARGET_DIR ?? path.join(REPO, 'target'), 'debug/kube-pulse');

const WAIT = 30_000;

async function freePort() {
  const net = await import('node:net');
  const server = net.createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

async function startGateway(port) {
  const child = spawn(BIN, ['demo', '--listen', `127.0.0.1:${port}`, '--no-scenario', '--tick-ms', '400'], {
    stdio: ['ignore', 'pipe', 'inherit'],
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
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the gateway exited with ${code}: ${out}`));
    });
  });
  return child;
}

async function stopGateway(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await once(child, 'exit');
  clearTimeout(timer);
}

/** Polls `check` (async) until it returns a truthy value without `wrong`; fails with the last value after `ms`. */
async function until(what, check, ms = WAIT) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    last = await check();
    if (last && !last.wrong) return last;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(last, null, 1).slice(0, 4000)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The queries the client holds: patterns, members, and whether rows carry whole documents (revisions compare). */
const QUERIES = {
  notRunning: { patterns: ['apps/**'], query: { filter: { ne: ['/state', 'Running'] }, sort: ['/state'], limit: 3 }, whole: true },
  page: {
    patterns: ['apps/**'],
    query: { sort: ['-/ready', '/state'], limit: 4, offset: 2, fields: ['/cluster', '/ready', '/state'] },
    whole: false,
  },
  devReady: { patterns: ['apps/**'], query: { filter: { and: [{ eq: ['/cluster', 'dev'] }, { gte: ['/ready', 1] }] }, limit: 0 }, whole: true },
  phases: { patterns: ['clusters/*'], query: { groupBy: '/phase' }, whole: true },
  shop: { patterns: ['apps/*/shop/*'], query: { sort: ['/state'], groupBy: '/state', limit: 5 }, whole: true },
};

/**
 * What a fresh query returns: an SSE request with the same members, its
 * `rows` message (the stream is closed once `synced` is in).
 */
async function freshRows(base, { patterns, query }) {
  const url = new URL('api/v1/events', base);
  for (const p of patterns) url.searchParams.append('topic', p);
  if (query.filter) url.searchParams.set('filter', JSON.stringify(query.filter));
  for (const s of query.sort ?? []) url.searchParams.append('sort', s);
  if (query.limit !== undefined) url.searchParams.set('limit', String(query.limit));
  if (query.offset !== undefined) url.searchParams.set('offset', String(query.offset));
  if (query.groupBy) url.searchParams.set('groupBy', query.groupBy);
  for (const f of query.fields ?? []) url.searchParams.append('field', f);
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), 10_000);
  try {
    const response = await fetch(url, { headers: { Accept: 'text/event-stream' }, signal: abort.signal });
    assert.equal(response.status, 200, `${url}: ${response.status}`);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`${url}: the stream ended before synced`);
      text += decoder.decode(value, { stream: true });
      if (/event: synced/.test(text)) break;
    }
    const data = text.match(/event: rows\ndata: (.*)\n/);
    assert.ok(data, text);
    return JSON.parse(data[1]);
  } finally {
    clearTimeout(timer);
    abort.abort();
  }
}

/** A result as compared: rows (with revisions for whole documents), total, groups. */
const view = (result, whole) => ({
  rows: result.rows.map((r) => (whole ? { topic: r.topic, rev: r.rev, doc: r.doc } : { topic: r.topic, doc: r.doc })),
  total: result.total,
  groups: result.groups ?? null,
});

/** A compared view in short: each row's topic, revision and state, the total and the groups. */
const brief = (v) => ({ ...v, rows: v.rows.map((r) => `${r.topic}@${r.rev ?? ''} ${r.doc.state ?? ''}`) });

/** The first row whose document differs, member by member. */
function firstDifference(held, fresh) {
  for (let i = 0; i < Math.max(held.rows.length, fresh.rows.length); i++) {
    const [a, b] = [held.rows[i]?.doc ?? {}, fresh.rows[i]?.doc ?? {}];
    const members = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => !isDeepStrictEqual(a[k], b[k]));
    if (members.length) return { index: i, members: Object.fromEntries(members.map((k) => [k, [a[k], b[k]]])) };
  }
  return null;
}

async function api(base, method, route, body) {
  const response = await fetch(new URL(route, base), {
    method,
    headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(WAIT),
  });
  const text = await response.text();
  assert.ok(response.ok, `${method} ${route}: HTTP ${response.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

/** Runs the scenario over `transport` ('ws' or 'sse'); throws on the first window that never equals a fresh query. */
export async function liveScenario(transport) {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}/`;
  const gateway = await startGateway(port);
  const client = connect({ url: base, transport, backoff: { initialMs: 100, maxMs: 1000 } });
  const stops = [];
  try {
    await until('the simulated apps, all Running', async () => {
      const { items } = await api(base, 'GET', 'api/v1/apps');
      return (items.length === 15 && items.every((a) => a.state === 'Running')) || { wrong: items.map((a) => a.state) };
    });
    // What changed the windows, by kind: the scenario must move rows, not only resend them.
    const applied = {};
    for (const { patterns, query } of Object.values(QUERIES)) {
      stops.push(client.query(patterns, query, (_, event) => (applied[event.type] = (applied[event.type] ?? 0) + 1)));
    }

    /** Every query's window equal to a fresh query's rows, live. */
    const allEqual = (step) =>
      until(`every window equal to a fresh query (${step}, ${transport})`, async () => {
        const wrong = [];
        for (const [name, q] of Object.entries(QUERIES)) {
          const held = client.queryResult(q.patterns, q.query);
          const fresh = await freshRows(base, q);
          if (held.status !== 'live') wrong.push({ name, status: held.status, error: held.error?.message });
          // Equal as JSON values: members in any order (a patch adds its new members last).
          else if (!isDeepStrictEqual(view(held, q.whole), view(fresh, q.whole))) {
            wrong.push({ name, held: brief(view(held, q.whole)), fresh: brief(view(fresh, q.whole)), first: firstDifference(held, fresh) });
          }
        }
        return wrong.length ? { wrong } : true;
      });
    const app = async (topic, ok) =>
      until(`${topic} in REST`, async () => {
        const doc = await api(base, 'GET', `api/v1/${topic}`);
        return ok(doc) || { wrong: doc.state };
      });

    await allEqual('at start');
    assert.equal(client.queryResult(QUERIES.phases.patterns, QUERIES.phases.query).groups.Healthy, 3);

    // A task stops an app: Stopping with progress, then Stopped.
    await api(base, 'POST', 'api/v1/tasks', { type: 'Stop', cluster: 'dev', namespace: 'analytics', app: 'ingest' });
    await app('apps/dev/analytics/ingest', (d) => d.state === 'Stopped' && !d.task);
    await allEqual('an app stopped');
    assert.ok(
      client.queryResult(QUERIES.notRunning.patterns, QUERIES.notRunning.query).rows.some((r) => r.topic === 'apps/dev/analytics/ingest'),
    );

    // Staging has room for one pod; its web scaled to 6 degrades. A forced
    // resubscribe of every query while that goes on (what a mismatch does)
    // must end equal too: the old subscriptions' last messages count for nothing.
    await api(base, 'PUT', '_sim/clusters/staging/capacity', { pods: 1 });
    await api(base, 'POST', 'api/v1/tasks', { type: 'Update', cluster: 'staging', namespace: 'shop', app: 'web', replicas: 6, timeoutSeconds: 1 });
    await new Promise((r) => setTimeout(r, 300));
    for (const sub of [...client.subs.values()]) mismatch(client, sub, 'forced by the test');
    await app('apps/staging/shop/web', (d) => d.state === 'Degraded' && !d.task);
    await allEqual('an app degraded, every query subscribed again');

    // Prod is disconnected, then healed.
    await api(base, 'PUT', '_sim/clusters/prod/faults', { refuse: true });
    await until('prod Unhealthy', async () => (await api(base, 'GET', 'api/v1/clusters/prod')).phase === 'Unhealthy' || { wrong: 'prod' });
    await allEqual('prod disconnected');
    await api(base, 'DELETE', '_sim/clusters/prod/faults');
    await until('prod Healthy', async () => (await api(base, 'GET', 'api/v1/clusters/prod')).phase === 'Healthy' || { wrong: 'prod' });

    // The stopped app starts again.
    await api(base, 'POST', 'api/v1/tasks', { type: 'Start', cluster: 'dev', namespace: 'analytics', app: 'ingest' });
    await app('apps/dev/analytics/ingest', (d) => d.state === 'Running' && !d.task);
    await allEqual('prod healed, the app started');
    for (const kind of ['rows', 'enter', 'leave', 'move', 'patch', 'total', 'groups', 'reset']) {
      assert.ok(applied[kind] > 0, `no ${kind} applied: ${JSON.stringify(applied)}`);
    }
  } finally {
    for (const stop of stops) stop();
    client.close();
    await stopGateway(gateway);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const transport = process.argv[2] ?? 'ws';
  liveScenario(transport).then(
    () => {
      console.log(`live queries over ${transport}: every window equal to a fresh query`);
      process.exit(0);
    },
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
