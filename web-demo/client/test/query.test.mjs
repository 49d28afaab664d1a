// Live queries in the client (docs/PROTOCOL.md "Live queries"): the
// window kept by applying hand-made message sequences over a fake
// WebSocket and fake fetch, a message that does not fit (a wrong index or
// topic, a patch on another revision) dropping the window and subscribing
// again, `bad_query` surfaced and not retried, a reconnect replacing the
// window with fresh rows; then the client against the real gateway
// (`kube-pulse demo` on loopback, see query-live.mjs) equal to a fresh
// query after scenario changes.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { connect, liveQuery, queryStore } from '../esm/kube-pulse.js';
import { FakeSocket, tick, until } from './fakes.mjs';
import { BIN, liveScenario } from './query-live.mjs';

const wsClient = () => {
  FakeSocket.all = [];
  FakeSocket.refuse = false;
  return connect({ url: 'http://gw.example/', transport: 'ws', WebSocket: FakeSocket, backoff: { initialMs: 1, maxMs: 5 } });
};

/** The topics of a result's rows, in order. */
const topics = (result) => result.rows.map((r) => r.topic);

const A = (name, state, rev = 1) => ({ topic: `apps/c/ns/${name}`, rev, doc: { app: name, state } });

test('liveQuery normalizes the members as they go on the wire', () => {
  assert.deepEqual(liveQuery({}), { limit: 50 });
  assert.deepEqual(liveQuery({ groupBy: '/phase' }), { limit: 0, groupBy: '/phase' });
  assert.deepEqual(liveQuery({ sort: '/state', fields: ['/state', '/app', '/state'], filter: null }), {
    sort: ['/state'],
    limit: 50,
    fields: ['/app', '/state'],
  });
  assert.deepEqual(Object.keys(liveQuery({ fields: ['/a'], groupBy: '/b', after: 't', offset: 2, limit: 3, sort: ['/c'], filter: { exists: '/d' } })), [
    'filter',
    'sort',
    'limit',
    'offset',
    'after',
    'groupBy',
    'fields',
  ]);
  assert.throws(() => liveQuery({ fields: [] }), /fields/);
  assert.throws(() => liveQuery({ debounceMs: 100 }), /debounceMs/);
});

test('over WebSocket: rows, then enter, leave, move, patch, total and groups keep the window', async () => {
  const client = wsClient();
  const seen = [];
  const stop = client.query('apps/**', { filter: { ne: ['/state', 'Running'] }, sort: ['/state'], limit: 3, groupBy: '/state' }, (result, event) =>
    seen.push({ result, event }),
  );
  const ws = await until('a subscribe op', () => FakeSocket.all[0]?.sent.length && FakeSocket.all[0]);
  const op = ws.sent[0];
  assert.deepEqual(
    { ...op, id: undefined },
    { op: 'subscribe', id: undefined, topics: ['apps/**'], filter: { ne: ['/state', 'Running'] }, sort: ['/state'], limit: 3, groupBy: '/state' },
  );
  const sub = op.id;
  assert.equal(client.queryResult('apps/**', { filter: { ne: ['/state', 'Running'] }, sort: ['/state'], limit: 3, groupBy: '/state' }).status, 'loading');
  ws.push({ sub, type: 'subscribed', topics: ['apps/**'], query: { filter: { ne: ['/state', 'Running'] }, sort: ['/state'], limit: 3, groupBy: '/state' } });
  ws.push({ sub, type: 'rows', cursor: 'e-1', total: 2, rows: [A('b', 'Degraded'), A('a', 'Stopped')], groups: { Degraded: 1, Stopped: 1 } });
  ws.push({ sub, type: 'synced', cursor: 'e-1', resumed: false, count: 2 });
  let result = seen.at(-1).result;
  assert.equal(result.status, 'live');
  assert.deepEqual(topics(result), ['apps/c/ns/b', 'apps/c/ns/a']);
  assert.deepEqual(result.groups, { Degraded: 1, Stopped: 1 });

  // c turns Degraded: it enters before a.
  ws.push({ sub, type: 'enter', topic: 'apps/c/ns/c', rev: 4, index: 1, cursor: 'e-2', doc: { app: 'c', state: 'Degraded' } });
  ws.push({ sub, type: 'total', total: 3, cursor: 'e-2' });
  ws.push({ sub, type: 'groups', groups: { Degraded: 2, Stopped: 1 }, cursor: 'e-2' });
  result = client.queryResult('apps/**', { filter: { ne: ['/state', 'Running'] }, sort: ['/state'], limit: 3, groupBy: '/state' });
  assert.deepEqual(topics(result), ['apps/c/ns/b', 'apps/c/ns/c', 'apps/c/ns/a']);
  assert.equal(result.total, 3);
  assert.deepEqual(result.groups, { Degraded: 2, Stopped: 1 });
  // b turns Stopped: it moves to the end, then its patch.
  ws.push({ sub, type: 'move', topic: 'apps/c/ns/b', from: 0, to: 2, cursor: 'e-3' });
  ws.push({ sub, type: 'patch', topic: 'apps/c/ns/b', rev: 3, base: 1, cursor: 'e-3', patch: { state: 'Stopped', task: null } });
  // a runs again: it leaves.
  ws.push({ sub, type: 'leave', topic: 'apps/c/ns/a', index: 1, cursor: 'e-4' });
  ws.push({ sub, type: 'total', total: 2, cursor: 'e-4' });
  result = seen.at(-1).result;
  assert.deepEqual(result.rows, [
    { topic: 'apps/c/ns/c', rev: 4, doc: { app: 'c', state: 'Degraded' } },
    { topic: 'apps/c/ns/b', rev: 3, doc: { app: 'b', state: 'Stopped' } },
  ]);
  assert.equal(result.total, 2);
  assert.equal(result.status, 'live');
  assert.deepEqual(
    seen.map((s) => s.event.type),
    ['rows', 'status', 'synced', 'enter', 'total', 'groups', 'move', 'patch', 'leave', 'total'],
  );
  assert.ok(seen.every((s, i) => i === 0 || s.result !== seen[i - 1].result || s.event.type === 'synced'), 'a new object at each change');
  assert.ok(Object.isFrozen(result) && Object.isFrozen(result.rows));
  assert.equal(ws.ops('subscribe').length, 1, 'no resubscription');

  stop();
  await tick();
  assert.deepEqual(ws.ops('unsubscribe'), [{ op: 'unsubscribe', id: sub }]);
  assert.equal(client.state, 'idle');
  client.close();
});

for (const [what, bad] of [
  ['a leave at an index holding another topic', { type: 'leave', topic: 'apps/c/ns/a', index: 0 }],
  ['a leave past the end', { type: 'leave', topic: 'apps/c/ns/a', index: 2 }],
  ['an enter past the end', { type: 'enter', topic: 'apps/c/ns/z', rev: 1, index: 3, doc: {} }],
  ['an enter of a topic already there', { type: 'enter', topic: 'apps/c/ns/a', rev: 2, index: 0, doc: {} }],
  ['an enter over the limit', { type: 'enter', topic: 'apps/c/ns/z', rev: 1, index: 0, doc: {}, limit: 2 }],
  ['an enter of a topic outside the patterns', { type: 'enter', topic: 'clusters/dev', rev: 1, index: 0, doc: {} }],
  ['a move of another topic', { type: 'move', topic: 'apps/c/ns/b', from: 1, to: 0 }],
  ['a move past the end', { type: 'move', topic: 'apps/c/ns/b', from: 0, to: 2 }],
  ['a patch on another revision', { type: 'patch', topic: 'apps/c/ns/a', rev: 6, base: 4, patch: { state: 'x' } }],
  ['a patch of a topic not in the window', { type: 'patch', topic: 'apps/c/ns/z', rev: 2, base: 1, patch: { state: 'x' } }],
  ['a total below the rows held', { type: 'total', total: 1 }],
]) {
  test(`${what} drops the window and subscribes again`, async () => {
    const client = wsClient();
    const seen = [];
    const limit = bad.limit ?? 10;
    client.query('apps/**', { sort: '/state', limit }, (result, event) => seen.push({ result, event }));
    const ws = await until('a subscribe op', () => FakeSocket.all[0]?.sent.length && FakeSocket.all[0]);
    const sub = ws.sent[0].id;
    ws.push({ sub, type: 'subscribed', topics: ['apps/**'], query: { sort: ['/state'], limit } });
    ws.push({ sub, type: 'rows', cursor: 'e-1', total: 2, rows: [A('b', 'Degraded', 3), A('a', 'Running', 5)] });
    ws.push({ sub, type: 'synced', cursor: 'e-1', resumed: false, count: 2 });
    const message = { ...bad, sub, cursor: 'e-2' };
    delete message.limit;
    ws.push(message);
    const reset = seen.at(-1);
    assert.equal(reset.event.type, 'reset', JSON.stringify(reset.event));
    assert.deepEqual(reset.result.rows, [], 'never a wrong window');
    assert.equal(reset.result.status, 'loading');
    await until('the query again', () => ws.ops('subscribe').length === 2);
    assert.deepEqual(
      ws.sent.map((o) => o.op),
      ['subscribe', 'unsubscribe', 'subscribe'],
    );
    assert.deepEqual(ws.sent[2], ws.sent[0], 'the same query, without a cursor');
    // The old subscription's last messages change nothing …
    ws.push({ sub, type: 'leave', topic: 'apps/c/ns/b', index: 0, cursor: 'e-3' });
    ws.push({ sub, type: 'stopped', reason: 'unsubscribed' });
    assert.equal(seen.at(-1).event.type, 'reset');
    // … the new one's rows are the window.
    ws.push({ sub, type: 'subscribed', topics: ['apps/**'], query: { sort: ['/state'], limit } });
    ws.push({ sub, type: 'rows', cursor: 'e-4', total: 1, rows: [A('a', 'Running', 6)] });
    ws.push({ sub, type: 'synced', cursor: 'e-4', resumed: false, count: 1 });
    const result = client.queryResult('apps/**', { sort: '/state', limit });
    assert.deepEqual(result.rows, [A('a', 'Running', 6)]);
    assert.equal(result.status, 'live');
    client.close();
  });
}

test('a change before rows, and rows that cannot be the window, start over too', async () => {
  const client = wsClient();
  const events = [];
  client.query('apps/**', { limit: 1 }, (_, event) => events.push(event));
  const ws = await until('a subscribe op', () => FakeSocket.all[0]?.sent.length && FakeSocket.all[0]);
  const sub = ws.sent[0].id;
  ws.push({ sub, type: 'subscribed', topics: ['apps/**'], query: { limit: 1 } });
  ws.push({ sub, type: 'enter', topic: 'apps/c/ns/a', rev: 1, index: 0, cursor: 'e-1', doc: {} });
  assert.equal(events.at(-1).type, 'reset');
  await until('the query again', () => ws.ops('subscribe').length === 2);
  ws.push({ sub, type: 'subscribed', topics: ['apps/**'], query: { limit: 1 } });
  ws.push({ sub, type: 'rows', cursor: 'e-1', total: 2, rows: [A('a', 'Running'), A('b', 'Running')] });
  assert.match(events.at(-1).reason, /over the limit/);
  await until('the query again', () => ws.ops('subscribe').length === 3);
  client.close();
});

test('bad_query is an error of the query, not retried; other queries go on', async () => {
  const client = wsClient();
  const bad = [];
  client.query('apps/**', { filter: { like: ['/state', 'Run%'] } }, (result, event) => bad.push({ result, event }));
  const good = [];
  client.query('clusters/*', { groupBy: '/phase' }, (result) => good.push(result));
  const ws = await until('two subscribe ops', () => FakeSocket.all[0]?.sent.length === 2 && FakeSocket.all[0]);
  const [badId, goodId] = ws.sent.map((o) => o.id);
  ws.push({ type: 'error', code: 'bad_query', message: 'filter: unknown operator "like"; one of and, or, not, eq, ne, lt, lte, gt, gte, in, exists', id: badId });
  ws.push({ sub: goodId, type: 'subscribed', topics: ['clusters/*'], query: { groupBy: '/phase', limit: 0 } });
  ws.push({ sub: goodId, type: 'rows', cursor: 'e-1', total: 3, rows: [], groups: { Healthy: 3 } });
  ws.push({ sub: goodId, type: 'synced', cursor: 'e-1', resumed: false, count: 0 });
  const { result, event } = bad.at(-1);
  assert.equal(event.type, 'error');
  assert.equal(event.code, 'bad_query');
  assert.equal(result.status, 'error');
  assert.equal(result.error.name, 'PulseError');
  assert.equal(result.error.code, 'bad_query');
  assert.equal(result.error.retrying, false);
  assert.match(result.error.message, /unknown operator "like"/);
  assert.deepEqual(result.rows, []);
  assert.equal(good.at(-1).status, 'live');
  assert.deepEqual(good.at(-1).groups, { Healthy: 3 });
  assert.equal(client.state, 'live', 'the connection is fine');
  await tick(50);
  assert.equal(ws.ops('subscribe').filter((o) => o.id === badId).length, 1, 'not retried');
  // Not on a reconnect either.
  ws.drop();
  const ws2 = await until('a second socket', () => FakeSocket.all[1]?.sent.length && FakeSocket.all[1]);
  await tick(20);
  assert.deepEqual(ws2.ops('subscribe').map((o) => o.id), [goodId]);
  client.close();
});

test('after a reconnect the query subscribes again and fresh rows replace the window', async () => {
  const client = wsClient();
  const seen = [];
  client.query(['apps/**'], { sort: ['-/ready'], limit: 2, fields: ['/ready'] }, (result) => seen.push(result));
  const ws = await until('a subscribe op', () => FakeSocket.all[0]?.sent.length && FakeSocket.all[0]);
  const sub = ws.sent[0].id;
  assert.deepEqual(ws.sent[0].fields, ['/ready']);
  ws.push({ sub, type: 'subscribed', topics: ['apps/**'], fields: ['/ready'], query: { sort: ['-/ready'], limit: 2 } });
  const row = (name, ready, rev) => ({ topic: `apps/c/ns/${name}`, rev, doc: { ready } });
  ws.push({ sub, type: 'rows', cursor: 'e1-1', total: 3, rows: [row('a', 3, 1), row('b', 2, 1)], next: 'tok' });
  ws.push({ sub, type: 'synced', cursor: 'e1-1', resumed: false, count: 2 });
  assert.equal(seen.at(-1).next, 'tok');
  ws.drop();
  assert.equal(seen.at(-1).status, 'stale', 'the last window, marked stale');
  assert.deepEqual(topics(seen.at(-1)), ['apps/c/ns/a', 'apps/c/ns/b']);
  const ws2 = await until('a second socket', () => FakeSocket.all[1]?.sent.length && FakeSocket.all[1]);
  assert.equal(ws2.sent[0].since, undefined, 'a live query does not resume');
  assert.equal(ws2.sent[0].id, sub);
  ws2.push({ sub, type: 'subscribed', topics: ['apps/**'], fields: ['/ready'], query: { sort: ['-/ready'], limit: 2 } });
  ws2.push({ sub, type: 'rows', cursor: 'e2-1', total: 1, rows: [row('c', 5, 1)] });
  ws2.push({ sub, type: 'synced', cursor: 'e2-1', resumed: false, count: 1 });
  const result = seen.at(-1);
  assert.deepEqual(result.rows, [row('c', 5, 1)]);
  assert.equal(result.total, 1);
  assert.equal(result.next, undefined);
  assert.equal(result.status, 'live');
  client.close();
});

test('queries with the same patterns and members share one subscription; a late holder hears the window', async () => {
  const client = wsClient();
  const first = [];
  const q = { filter: { eq: ['/cluster', 'c'] }, sort: ['/state'] };
  const stop1 = client.query('apps/**', q, (r) => first.push(r));
  const ws = await until('a subscribe op', () => FakeSocket.all[0]?.sent.length && FakeSocket.all[0]);
  const sub = ws.sent[0].id;
  ws.push({ sub, type: 'subscribed', topics: ['apps/**'], query: { ...q, limit: 50 } });
  ws.push({ sub, type: 'rows', cursor: 'e-1', total: 1, rows: [A('a', 'Running')] });
  ws.push({ sub, type: 'synced', cursor: 'e-1', resumed: false, count: 1 });
  const second = [];
  const stop2 = client.query(['apps/**'], { sort: '/state', filter: { eq: ['/cluster', 'c'] }, limit: 50 }, (r) => second.push(r));
  await tick();
  assert.equal(ws.ops('subscribe').length, 1, 'one subscription on the wire');
  assert.deepEqual(topics(second.at(-1)), ['apps/c/ns/a']);
  ws.push({ sub, type: 'enter', topic: 'apps/c/ns/b', rev: 1, index: 1, cursor: 'e-2', doc: { app: 'b', state: 'Stopped' } });
  assert.equal(first.at(-1), second.at(-1), 'the same result object');
  stop1();
  await tick();
  assert.equal(ws.ops('unsubscribe').length, 0, 'still held');
  stop2();
  await tick();
  assert.equal(ws.ops('unsubscribe').length, 1);
  client.close();
});

test('queryStore gives the result, one object until something changes', async () => {
  const client = wsClient();
  const store = queryStore(client, 'clusters/*', { groupBy: '/phase' });
  assert.equal(store.getSnapshot().status, 'loading');
  let calls = 0;
  const unsubscribe = store.subscribe(() => calls++);
  const ws = await until('a subscribe op', () => FakeSocket.all[0]?.sent.length && FakeSocket.all[0]);
  const sub = ws.sent[0].id;
  ws.push({ sub, type: 'subscribed', topics: ['clusters/*'], query: { groupBy: '/phase', limit: 0 } });
  ws.push({ sub, type: 'rows', cursor: 'e-1', total: 3, rows: [], groups: { Healthy: 3 } });
  ws.push({ sub, type: 'synced', cursor: 'e-1', resumed: false, count: 0 });
  const a = store.getSnapshot();
  assert.equal(a, store.getSnapshot());
  assert.deepEqual({ ...a }, { rows: [], total: 3, groups: { Healthy: 3 }, status: 'live', error: null });
  const before = calls;
  ws.push({ sub, type: 'groups', cursor: 'e-2', groups: { Healthy: 2, Degraded: 1 } });
  assert.equal(calls, before + 1);
  assert.deepEqual(store.getSnapshot().groups, { Healthy: 2, Degraded: 1 });
  unsubscribe();
  await tick();
  assert.equal(ws.ops('unsubscribe').length, 1);
  client.close();
});

// ---- over SSE ---------------------------------------------------------------

function sseResponse(events) {
  const text = events.map((m) => `event: ${m.type}\ndata: ${JSON.stringify(m)}\n\n`).join('');
  let controller;
  const body = new ReadableStream({
    start(c) {
      controller = c;
      c.enqueue(new TextEncoder().encode(`retry: 2000\n\n${text}`));
    },
  });
  return { ok: true, status: 200, headers: new Map(), body, push: (m) => controller.enqueue(new TextEncoder().encode(`data: ${JSON.stringify(m)}\n\n`)), end: () => controller.close() };
}

test('over SSE the query is parameters; a mismatch opens a new stream, bad_query (HTTP 400) is not retried', async () => {
  const requests = [];
  const streams = [];
  const fetch = async (url, init) => {
    requests.push(new URL(url));
    const u = new URL(url);
    if (u.searchParams.get('filter')?.includes('like')) {
      return {
        ok: false,
        status: 400,
        statusText: 'Bad Request',
        headers: new Map(),
        json: async () => ({ code: 'bad_query', message: 'filter: unknown operator "like"' }),
      };
    }
    const stream = sseResponse([
      { type: 'rows', cursor: 'e-1', total: 2, rows: [A('a', 'Degraded', 2), A('b', 'Stopped', 1)], next: 'n1' },
      { type: 'synced', cursor: 'e-1', resumed: false, count: 2 },
    ]);
    init.signal.addEventListener('abort', () => stream.end());
    streams.push(stream);
    return stream;
  };
  const client = connect({ url: 'http://gw.example/pulse/', transport: 'sse', fetch, backoff: { initialMs: 1, maxMs: 5 } });
  const seen = [];
  const q = { filter: { ne: ['/state', 'Running'] }, sort: ['/state', '-/ready'], limit: 2, offset: 1, groupBy: undefined, fields: ['/state'] };
  client.query('apps/**', q, (result, event) => seen.push({ result, event }));
  await until('the rows', () => seen.some((s) => s.event.type === 'synced'));
  const url = requests[0];
  assert.equal(url.pathname, '/pulse/api/v1/events');
  assert.deepEqual(url.searchParams.getAll('topic'), ['apps/**']);
  assert.deepEqual(JSON.parse(url.searchParams.get('filter')), { ne: ['/state', 'Running'] });
  assert.deepEqual(url.searchParams.getAll('sort'), ['/state', '-/ready']);
  assert.equal(url.searchParams.get('limit'), '2');
  assert.equal(url.searchParams.get('offset'), '1');
  assert.deepEqual(url.searchParams.getAll('field'), ['/state']);
  assert.deepEqual(topics(seen.at(-1).result), ['apps/c/ns/a', 'apps/c/ns/b']);
  assert.equal(seen.at(-1).result.next, 'n1');
  // A patch on a revision the row is not at: a new stream, fresh rows.
  streams[0].push({ type: 'patch', topic: 'apps/c/ns/b', rev: 9, base: 7, cursor: 'e-2', patch: { state: 'x' } });
  await until('a second stream', () => requests.length === 2 && seen.at(-1).event.type === 'synced');
  assert.ok(seen.some((s) => s.event.type === 'reset'));
  assert.equal(seen.at(-1).result.rows[1].doc.state, 'Stopped');
  assert.equal(seen.at(-1).result.status, 'live');

  const refused = [];
  client.query('apps/**', { filter: { like: ['/state', 'R%'] } }, (result) => refused.push(result));
  await until('the refusal', () => refused.at(-1)?.status === 'error');
  assert.equal(refused.at(-1).error.code, 'bad_query');
  assert.equal(refused.at(-1).error.status, 400);
  await tick(50);
  assert.equal(requests.filter((u) => u.searchParams.get('filter')?.includes('like')).length, 1, 'not retried');
  client.close();
});

// ---- against the real gateway ----------------------------------------------

const skip = existsSync(BIN) ? false : `no gateway binary at ${BIN} (cargo build, or KUBE_PULSE_BIN)`;
if (skip) console.log(`skipped: ${skip}`);

test('against kube-pulse demo over SSE: the window equals a fresh query after each scenario change', { skip, timeout: 240_000 }, async () => {
  await liveScenario('sse');
});

test('against kube-pulse demo over WebSocket: the window equals a fresh query after each scenario change', { skip, timeout: 240_000 }, async () => {
  if (typeof globalThis.WebSocket === 'function') {
    await liveScenario('ws');
    return;
  }
  // Node 20 has WebSocket behind a flag: the scenario runs in a child with it.
  if (!process.allowedNodeEnvironmentFlags.has('--experimental-websocket')) {
    assert.fail(`this Node.js (${process.version}) has no WebSocket`);
  }
  const child = spawnSync(
    process.execPath,
    ['--experimental-websocket', '--no-warnings', fileURLToPath(new URL('./query-live.mjs', import.meta.url)), 'ws'],
    { encoding: 'utf8', timeout: 230_000 },
  );
  assert.equal(child.status, 0, `${child.stdout}\n${child.stderr}`);
});
