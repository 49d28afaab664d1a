// Unit tests of the browser client (node's test runner): patterns, merge
// patches, revision order, the SSE parser, backoff, and the client's
// connection life over fake WebSocket / fetch transports. The WebSocket
// tests run twice: against the full client (`@kube-pulse/client`) and the
// core alone (`@kube-pulse/client/core`), which must behave the same.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  DocumentStore,
  PulseClient,
  PulseError,
  backoffDelay,
  connect,
  matches,
  mergePatch,
  sseParser,
  subscriptionOptions,
  base64url,
  topicStore,
  transitions,
} from '../esm/kube-pulse.js';
import { connect as connectCore } from '../esm/core.js';
import { FakeEventSource, FakeSocket, jsonResponse, sseResponse, tick, until } from './fakes.mjs';

test('the core entry is the WebSocket client alone; the full client is that class extended', () => {
  const core = connectCore({ url: 'http://gw.example/', WebSocket: FakeSocket });
  assert.equal(core.transport, 'ws');
  for (const member of ['query', 'queryResult', 'openStream', 'endSession', 'pause', 'saveWarm', 'request', 'createTask', 'renewToken']) {
    assert.equal(core[member], undefined, member);
  }
  for (const transport of ['sse', 'auto']) {
    assert.throws(() => connectCore({ url: 'http://gw.example/', transport }), /core client is WebSocket only/, transport);
  }
  const full = connect({ url: 'http://gw.example/', WebSocket: FakeSocket });
  assert.ok(full instanceof PulseClient && core instanceof PulseClient);
  assert.equal(typeof full.query, 'function');
  assert.throws(() => connect({ url: 'http://gw.example/', transport: 'smoke' }), /transport must be 'ws', 'sse' or 'auto'/);
  core.close();
  full.close();
});

test('patterns match like the gateway', () => {
  const cases = [
    ['clusters/*', 'clusters/dev', true],
    ['clusters/*', 'clusters/dev/sync/apps/v1/deployments', false],
    ['clusters/**', 'clusters/dev/sync/apps/v1/deployments', true],
    ['clusters/**', 'clusters', false],
    ['apps/*/shop/*', 'apps/prod/shop/web', true],
    ['apps/*/shop/*', 'apps/prod/analytics/ingest', false],
    ['tasks/abc', 'tasks/abc', true],
    ['tasks/abc', 'tasks/abcd', false],
  ];
  for (const [pattern, topic, want] of cases) {
    assert.equal(matches(pattern, topic), want, `${pattern} ~ ${topic}`);
  }
});

test('merge patches follow RFC 7386', () => {
  const cases = [
    [{ a: 1, b: 2 }, { b: null }, { a: 1 }],
    [{ a: { x: 1, y: 2 } }, { a: { y: null, z: 3 } }, { a: { x: 1, z: 3 } }],
    [{ a: [1, 2] }, { a: [3] }, { a: [3] }],
    [{ a: 1 }, { b: { c: null } }, { a: 1, b: {} }],
    [{ a: 1 }, [1], [1]],
    ['text', { a: 1 }, { a: 1 }],
  ];
  for (const [target, patch, want] of cases) {
    const before = JSON.stringify(target);
    assert.deepEqual(mergePatch(target, patch), want, JSON.stringify(patch));
    assert.equal(JSON.stringify(target), before, 'the target is not modified');
  }
});

test('history patches add and drop entries by number; transitions reads them in order', () => {
  const entry = (to) => ({ from: 'X', to, reason: 'R', at: '2026-12-02T21:29:12.274Z' });
  let doc = { phase: 'A', history: { 9: entry('A'), 10: entry('B') } };
  // The gateway's patch when transition 11 arrives and 9 falls out of the window.
  doc = mergePatch(doc, { phase: 'C', history: { 9: null, 11: entry('C') } });
  assert.deepEqual(
    transitions(doc).map((t) => t.to),
    ['B', 'C'],
  );
  assert.deepEqual(Object.keys(doc.history), ['10', '11'], 'numeric keys iterate in order');
  assert.deepEqual(transitions({ phase: 'A' }), []);
});

test('the document store applies messages in revision order', () => {
  const store = new DocumentStore();
  const snap = (rev, doc, cursor = 'e1-1') => ({ type: 'snapshot', topic: 't', rev, doc, cursor });
  const patch = (rev, p) => ({ type: 'patch', topic: 't', rev, patch: p, cursor: 'e1-2' });
  assert.equal(store.apply(snap(3, { phase: 'Healthy', n: 1 })).type, 'snapshot');
  assert.equal(store.apply(patch(3, { n: 9 })), null, 'a patch already in the snapshot is skipped');
  const change = store.apply(patch(4, { n: 2 }));
  assert.deepEqual(change.doc, { phase: 'Healthy', n: 2 });
  assert.deepEqual(change.previous, { phase: 'Healthy', n: 1 });
  assert.deepEqual(store.apply(patch(6, { n: 3 })), { gap: true, topic: 't' });
  assert.equal(store.get('t').n, 2, 'a gap changes nothing');
  assert.equal(store.apply(snap(2, { old: true })), null, 'an older snapshot is ignored');
  assert.deepEqual(store.apply(snap(1, { restarted: true }, 'e2-1')).doc, { restarted: true }, 'another process starts over');
  assert.deepEqual(store.apply(patch(2, { n: 1 })), { gap: true, topic: 't' }, 'a patch of the old process');
  store.apply(snap(4, { phase: 'Healthy', n: 2 }));
  assert.deepEqual(store.apply({ type: 'patch', topic: 'u', rev: 1, patch: {} }), { gap: true, topic: 'u' });
  store.apply({ type: 'snapshot', topic: 'apps/a/x', rev: 1, doc: {} });
  store.apply({ type: 'snapshot', topic: 'apps/a/y', rev: 1, doc: {} });
  const gone = store.prune(['apps/a/*'], new Set(['apps/a/x']));
  assert.deepEqual(gone.map((c) => c.topic), ['apps/a/y']);
  assert.deepEqual(Object.keys(store.select(['apps/**', 't'])), ['t', 'apps/a/x']);
  assert.equal(store.apply({ type: 'removed', topic: 't', rev: 7 }).type, 'removed');
  assert.equal(store.get('t'), undefined);
});

test('with replicas sharing a stream, cluster and app revisions carry over from replica to replica', () => {
  const store = new DocumentStore();
  const at = (type, topic, rev, cursor, body) => ({ type, topic, rev, cursor, ...body });
  store.apply(at('snapshot', 'apps/c/ns/web', 4, 'r1a-10.s9-40', { doc: { n: 1 } }));
  const moved = store.apply(at('patch', 'apps/c/ns/web', 5, 'r2b-77.s9-52', { patch: { n: 2 } }));
  assert.deepEqual(moved.doc, { n: 2 }, 'a patch from another replica of the same stream applies');
  assert.equal(store.apply(at('snapshot', 'apps/c/ns/web', 5, 'r3c-5.s9-52', { doc: { n: 2 } })), null);
  store.apply(at('snapshot', 'summary/clusters', 3, 'r1a-11.s9-41', { doc: { total: 1 } }));
  assert.deepEqual(
    store.apply(at('patch', 'summary/clusters', 4, 'r2b-78.s9-53', { patch: { total: 2 } })),
    { gap: true, topic: 'summary/clusters' },
    "a summary's revisions are each replica's own",
  );
  assert.deepEqual(
    store.apply(at('patch', 'apps/c/ns/web', 6, 'r1a-12.s8-1', { patch: { n: 3 } })),
    { gap: true, topic: 'apps/c/ns/web' },
    'another stream numbers revisions anew',
  );
});

test('the SSE parser handles any chunking, CRLF, comments and multi-line data', () => {
  const stream =
    'retry: 2000\r\n\r\nid: e-1\r\nevent: snapshot\r\ndata: {"a":\r\ndata: 1}\r\n\r\n: heartbeat\n\nid: e-2\nevent: synced\ndata: {}\n\n';
  for (const size of [1, 2, 3, 7, stream.length]) {
    const events = [];
    const feed = sseParser((e) => events.push(e));
    for (let i = 0; i < stream.length; i += size) feed(stream.slice(i, i + size));
    assert.deepEqual(
      events,
      [
        { id: 'e-1', event: 'snapshot', data: '{"a":\n1}' },
        { id: 'e-2', event: 'synced', data: '{}' },
      ],
      `chunks of ${size}`,
    );
  }
});

test('backoff grows exponentially, is capped, and jitter only shortens it', () => {
  const opts = { initialMs: 100, maxMs: 1000, factor: 2, jitter: 0.5 };
  const none = () => 0;
  assert.deepEqual(
    [0, 1, 2, 3, 4, 10].map((a) => backoffDelay(a, opts, none)),
    [100, 200, 400, 800, 1000, 1000],
  );
  assert.equal(backoffDelay(3, opts, () => 1), 400);
  for (let i = 0; i < 200; i++) {
    const d = backoffDelay(2, opts);
    assert.ok(d >= 200 && d <= 400, `${d}`);
  }
});

// ---- the client over fake transports --------------------------------------

const open = (sockets) => sockets.filter((s) => s.readyState === 1);
const fresh = () => {
  FakeSocket.all = [];
  FakeSocket.refuse = false;
};
const wsClient = (options = {}) =>
  connect({ url: 'http://gw.example/', transport: 'ws', WebSocket: FakeSocket, backoff: { initialMs: 1, maxMs: 5 }, ...options });

/**
 * A test of the WebSocket path, run with each entry's `connect` (the full
 * client's, then the core's): `body({connect, wsClient})`.
 */
function both(name, body) {
  for (const [entry, connectWith] of [
    ['full', connect],
    ['core', connectCore],
  ]) {
    const wsClientWith = (options = {}) =>
      connectWith({ url: 'http://gw.example/', transport: 'ws', WebSocket: FakeSocket, backoff: { initialMs: 1, maxMs: 5 }, ...options });
    test(`${name} (${entry})`, () => body({ connect: connectWith, wsClient: wsClientWith }));
  }
}

both('over WebSocket: snapshots, patches, live state, and resume from the last cursor', async ({ connect, wsClient }) => {
  fresh();
  const client = connect({
    url: 'http://gw.example/pulse',
    token: 'secret',
    transport: 'ws',
    WebSocket: FakeSocket,
    backoff: { initialMs: 1, maxMs: 5 },
  });
  const states = [client.state];
  client.onState((s) => states.push(s));
  const seen = [];
  client.subscribe(['apps/*/shop/*'], (c) => seen.push(c));
  const ws = await until('a subscribe op', () => FakeSocket.all[0]?.subscribes().length && FakeSocket.all[0]);
  assert.equal(ws.url, 'ws://gw.example/pulse/api/v1/ws');
  // The token is the socket's first operation, not part of its handshake.
  assert.deepEqual(ws.protocols, ['kube-pulse']);
  assert.deepEqual({ ...ws.sent[0], id: undefined }, { op: 'auth', token: 'secret', id: undefined });
  ws.push({ type: 'authenticated', subject: 'alice', id: ws.sent[0].id });
  const op = ws.sent[1];
  assert.deepEqual({ ...op, id: undefined }, { op: 'subscribe', id: undefined, topics: ['apps/*/shop/*'] });
  const sub = op.id;
  assert.equal(client.status('apps/*/shop/*').status, 'loading');
  ws.push({ sub, type: 'snapshot', topic: 'apps/a/shop/web', rev: 1, cursor: 'e1-5', doc: { state: 'Running', ready: 3 } });
  ws.push({ sub, type: 'snapshot', topic: 'apps/a/shop/db', rev: 1, cursor: 'e1-5', doc: { state: 'Running' } });
  ws.push({ sub, type: 'synced', cursor: 'e1-5', resumed: false, count: 2 });
  assert.equal(client.state, 'live');
  assert.equal(client.status('apps/*/shop/*').status, 'live');
  ws.push({ sub, type: 'patch', topic: 'apps/a/shop/web', rev: 2, cursor: 'e1-9', patch: { state: 'Stopping', task: { progress: 40 } } });
  assert.deepEqual(client.get('apps/a/shop/web'), { state: 'Stopping', ready: 3, task: { progress: 40 } });
  assert.deepEqual(
    seen.filter((c) => c.type !== 'status').map((c) => c.type),
    ['snapshot', 'snapshot', 'synced', 'patch'],
  );

  // The connection drops: reconnecting and stale, then a new socket resumes from e1-9.
  ws.drop();
  assert.equal(client.state, 'reconnecting');
  assert.equal(client.status('apps/*/shop/*').status, 'stale');
  const ws2 = await until('a second socket', () => FakeSocket.all[1]?.subscribes().length && FakeSocket.all[1]);
  assert.equal(ws2.sent[0].op, 'auth');
  assert.equal(ws2.subscribes()[0].since, 'e1-9');
  assert.equal(ws2.subscribes()[0].id, sub);
  // Another gateway process answers: fresh snapshots, and what is gone is dropped.
  ws2.push({ sub, type: 'snapshot', topic: 'apps/a/shop/web', rev: 1, cursor: 'e2-3', doc: { state: 'Stopped' } });
  ws2.push({ sub, type: 'synced', cursor: 'e2-3', resumed: false, count: 1, reason: 'unknown epoch' });
  assert.deepEqual(client.get('apps/a/shop/web'), { state: 'Stopped' });
  assert.equal(client.get('apps/a/shop/db'), undefined);
  assert.ok(seen.some((c) => c.type === 'removed' && c.topic === 'apps/a/shop/db'));
  assert.deepEqual(states, ['idle', 'connecting', 'live', 'reconnecting', 'live']);
  assert.deepEqual(
    seen.filter((c) => c.type === 'status').map((c) => c.status),
    ['live', 'stale', 'live'],
  );

  // A gap in revisions starts the subscription over from snapshots.
  ws2.push({ sub, type: 'patch', topic: 'apps/a/shop/web', rev: 5, cursor: 'e2-8', patch: { state: 'x' } });
  assert.deepEqual(ws2.sent.slice(2).map((o) => [o.op, o.since]), [['unsubscribe', undefined], ['subscribe', undefined]]);
  client.close();
  assert.equal(client.state, 'offline');
});

both('every holder of a topic hears every change, whichever subscription brought it (finding 1)', async ({ connect, wsClient }) => {
  fresh();
  const client = wsClient();
  const table = [];
  const card = [];
  const card2 = [];
  client.subscribe('clusters/*', (e) => table.push(e));
  client.subscribe('clusters/dev', (e) => card.push(e));
  client.subscribe(['clusters/dev'], (e) => card2.push(e));
  const ws = await until('two subscribe ops', () => FakeSocket.all[0]?.sent.length === 2 && FakeSocket.all[0]);
  assert.equal(FakeSocket.all.length, 1, 'one socket');
  // Same patterns share one subscription on the wire.
  const [a, b] = ws.sent.map((o) => o.id);
  const snap = (sub) => ({ sub, type: 'snapshot', topic: 'clusters/dev', rev: 1, cursor: 'e-1', doc: { phase: 'Healthy' } });
  ws.push(snap(a));
  ws.push(snap(b));
  const patch = (sub) => ({ sub, type: 'patch', topic: 'clusters/dev', rev: 2, cursor: 'e-2', patch: { phase: 'Unhealthy' } });
  ws.push(patch(a)); // applied once …
  ws.push(patch(b)); // … and skipped here
  const docs = (events) => events.filter((e) => e.topic === 'clusters/dev').map((e) => e.doc.phase);
  assert.deepEqual(docs(table), ['Healthy', 'Unhealthy']);
  assert.deepEqual(docs(card), ['Healthy', 'Unhealthy']);
  assert.deepEqual(docs(card2), ['Healthy', 'Unhealthy']);
  client.close();
});

both('errors reach the subscription by the id of the refused operation (finding 2)', async ({ connect, wsClient }) => {
  fresh();
  const client = wsClient();
  const events = [];
  client.subscribe('apps/**/x', (e) => events.push(e));
  const other = [];
  client.subscribe('clusters/*', (e) => other.push(e));
  const ws = await until('subscribes', () => FakeSocket.all[0]?.sent.length === 2 && FakeSocket.all[0]);
  const [bad, good] = ws.sent.map((o) => o.id);
  ws.push({ type: 'error', code: 'bad_pattern', message: '`**` must be last', id: bad });
  const error = events.find((e) => e.type === 'error');
  assert.equal(error.code, 'bad_pattern');
  assert.equal(error.error.retrying, false);
  assert.deepEqual(client.status('apps/**/x'), { status: 'error', error: error.error });
  // One subscription refused for good does not hold the connection state back.
  assert.equal(client.state, 'live');
  // A rate limit is retried, alone.
  ws.push({ type: 'error', code: 'rate_limited', message: 'too fast', id: good });
  assert.equal(client.status('clusters/*').status, 'error');
  await until('the subscription again', () => ws.subscribes().length === 3);
  assert.equal(ws.subscribes()[2].id, good);
  ws.push({ sub: good, type: 'synced', cursor: 'e-1', resumed: false, count: 0 });
  assert.equal(client.status('clusters/*').status, 'live');
  assert.equal(ws.subscribes().filter((o) => o.id === bad).length, 1, 'a bad pattern is not retried');
  client.close();
});

both('subscribe operations are paced under the gateway rate limit', async ({ connect, wsClient }) => {
  fresh();
  const client = wsClient({ subscribeRate: 50 });
  const stops = [];
  for (let i = 0; i < 30; i++) stops.push(client.subscribe(`tasks/t${i}`));
  const ws = await until('a socket', () => open(FakeSocket.all)[0]);
  await tick(1);
  assert.equal(ws.subscribes().length, 20, 'a burst of 20');
  await until('all 30', () => ws.subscribes().length === 30);
  for (const stop of stops) stop();
  await tick();
  assert.equal(client.state, 'idle');
  assert.equal(client.pumpTimer, null);
  client.close();
});

both('nothing subscribed leaves no socket and no timer, also while reconnecting (finding 4)', async ({ connect, wsClient }) => {
  fresh();
  const client = wsClient({ backoff: { initialMs: 50, maxMs: 50, jitter: 0 } });
  const stop = client.subscribe('clusters/*');
  const ws = await until('a socket', () => open(FakeSocket.all)[0]);
  ws.drop();
  assert.equal(client.state, 'reconnecting');
  assert.ok(client.timer, 'a reconnect is scheduled');
  stop();
  await tick();
  assert.equal(client.state, 'idle');
  assert.equal(client.timer, null);
  await tick(80);
  assert.equal(FakeSocket.all.length, 1, 'no new socket');
  // online with nothing subscribed opens nothing either.
  client.onOnline();
  await tick();
  assert.equal(FakeSocket.all.length, 1);
  // The last holder gone closes the socket.
  client.subscribe('clusters/*')();
  await tick();
  assert.equal(FakeSocket.all.length, 2);
  assert.equal(FakeSocket.all[1].readyState, 3);
  assert.equal(client.state, 'idle');
  client.close();
});

both('unsubscribe and subscribe again at once (React StrictMode) keeps the subscription and the socket (finding 7)', async ({ connect, wsClient }) => {
  fresh();
  const client = wsClient();
  client.subscribe('clusters/*')();
  const stop = client.subscribe('clusters/*');
  await until('a socket', () => open(FakeSocket.all)[0]);
  await tick();
  assert.equal(FakeSocket.all.length, 1);
  assert.deepEqual(FakeSocket.all[0].sent.map((o) => o.op), ['subscribe']);
  stop();
  await tick();
  assert.deepEqual(FakeSocket.all[0].sent.map((o) => o.op), ['subscribe', 'unsubscribe']);
  client.close();
});

both('documents no subscription covers are dropped, not shown later as current (finding 5)', async ({ connect, wsClient }) => {
  fresh();
  const client = wsClient();
  const stop = client.subscribe('clusters/dev');
  const ws = await until('subscribe', () => FakeSocket.all[0]?.sent.length && FakeSocket.all[0]);
  ws.push({ sub: ws.sent[0].id, type: 'snapshot', topic: 'clusters/dev', rev: 1, cursor: 'e-1', doc: { phase: 'Healthy' } });
  stop();
  await tick();
  assert.equal(client.get('clusters/dev'), undefined);
  assert.deepEqual(client.status('clusters/dev'), { status: 'loading', error: null });
  client.close();
});

both('auto: a refused token is an auth error, not a reason for SSE, one failure per attempt; a new token recovers (finding 3)', async ({ connect, wsClient }) => {
  fresh();
  let token = 'bad';
  let probes = 0;
  const fetch = async () => {
    probes++;
    return jsonResponse(200, { items: [] });
  };
  const client = connect({ url: 'http://gw.example/', getToken: () => token, WebSocket: FakeSocket, fetch, backoff: { initialMs: 5, maxMs: 10 } });
  const events = { a: [], b: [] };
  const errors = [];
  client.onError((e) => errors.push(e.code));
  client.subscribe('clusters/*', (e) => events.a.push(e));
  client.subscribe('apps/**', (e) => events.b.push(e));
  // The gateway refuses each socket's `auth` operation (the one failure the attempt costs).
  const refuse = async (n) => {
    const ws = await until(`socket ${n}`, () => FakeSocket.all[n]?.sent.length >= 3 && FakeSocket.all[n]);
    const auth = ws.sent.filter((o) => o.op === 'auth');
    assert.equal(auth.length, 1, 'one auth operation per socket');
    assert.equal(ws.sent[0], auth[0], 'the token goes first');
    ws.push({ type: 'error', code: 'unauthorized', message: 'token not accepted', id: auth[0].id });
    // The subscribes that followed it are refused too (unauthenticated).
    for (const op of ws.subscribes()) ws.push({ type: 'error', code: 'unauthenticated', message: 'auth first', id: op.id });
    return ws;
  };
  for (let n = 0; n < 3; n++) {
    const ws = await refuse(n);
    assert.equal(ws.protocols.length, 1, 'no token in the handshake');
    for (const [name, list] of Object.entries(events)) {
      assert.equal(list.find((e) => e.type === 'error')?.code, 'unauthorized', `subscription ${name}`);
    }
    await until('the client closing the socket', () => ws.readyState === 3);
  }
  assert.equal(probes, 0, 'no HTTP probe: the socket said why');
  assert.equal(errors[0], 'unauthorized');
  assert.equal(client.transport, 'ws', 'still WebSocket');
  // The user logs in: the next attempt carries the new token.
  token = 'good';
  const ws = await until('a socket with the good token', () => FakeSocket.all.find((w) => w.sent[0]?.token === 'good' && w.subscribes().length === 2));
  assert.equal(client.status('clusters/*').status, 'loading');
  ws.push({ type: 'authenticated', subject: 'me', id: ws.sent[0].id });
  ws.push({ sub: ws.subscribes()[0].id, type: 'synced', cursor: 'e-1', resumed: false, count: 0 });
  assert.equal(client.status('clusters/*').status, 'live');
  client.close();
});

both('auto: a gateway that is down (a restart) is retried over WebSocket (finding 3)', async ({ connect, wsClient }) => {
  fresh();
  FakeSocket.refuse = true;
  const fetch = async () => {
    throw new TypeError('fetch failed');
  };
  const client = connect({ url: 'http://gw.example/', WebSocket: FakeSocket, fetch, backoff: { initialMs: 1, maxMs: 5 } });
  client.subscribe('clusters/*');
  await until('several attempts', () => FakeSocket.all.length >= 4);
  assert.equal(client.transport, 'ws');
  FakeSocket.refuse = false;
  await until('an open socket', () => open(FakeSocket.all)[0]);
  assert.equal(client.state, 'live');
  client.close();
});

test('auto: SSE only when HTTP passes and WebSockets do not, twice; WebSocket again later', async () => {
  fresh();
  FakeSocket.refuse = true;
  const requests = [];
  const fetch = async (url, init) => {
    if (url.endsWith('/api/v1/clusters')) return jsonResponse(200, { items: [] });
    requests.push({ url, headers: init.headers });
    if (requests.length === 1) {
      return sseResponse(
        'retry: 2000\n\nid: e1-4\nevent: snapshot\ndata: {"type":"snapshot","topic":"clusters/dev","rev":2,"cursor":"e1-4","doc":{"phase":"Healthy"}}\n\n' +
          'id: e1-4\nevent: synced\ndata: {"type":"synced","cursor":"e1-4","resumed":false,"count":1}\n\n',
      );
    }
    return new Promise((resolve, reject) => init.signal.addEventListener('abort', () => reject(new Error('aborted'))));
  };
  const client = connect({
    url: 'http://gw.example/',
    token: () => 'tok',
    WebSocket: FakeSocket,
    fetch,
    backoff: { initialMs: 1, maxMs: 5 },
    wsRetryMs: 60,
  });
  client.subscribe('clusters/*');
  await until('the snapshot', () => client.get('clusters/dev'));
  assert.equal(FakeSocket.all.length, 2, 'two WebSocket attempts first');
  assert.equal(client.transport, 'sse');
  assert.equal(requests[0].url, 'http://gw.example/api/v1/events?topic=clusters%2F*');
  assert.equal(requests[0].headers.Authorization, 'Bearer tok');
  // The stream ended: the client reconnects and resumes.
  await until('a second request', () => requests.length === 2);
  assert.equal(requests[1].headers['Last-Event-ID'], 'e1-4');
  // WebSockets pass again: the subscription moves back, resuming.
  FakeSocket.refuse = false;
  const ws = await until('a subscribe over WebSocket', () => FakeSocket.all.find((s) => s.subscribes().length));
  assert.equal(client.transport, 'ws');
  assert.equal(ws.subscribes()[0].since, 'e1-4');
  client.close();
});

test('auto on SSE: the trial WebSocket carries no token; the socket after it sends it in its auth operation', async () => {
  fresh();
  FakeSocket.refuse = true;
  const fetch = async (url, init) => {
    if (url.endsWith('/api/v1/clusters')) return jsonResponse(200, { items: [] });
    return new Promise((resolve, reject) => {
      init.signal.addEventListener('abort', () => reject(new Error('aborted')));
      resolve({ ok: true, status: 200, headers: new Map(), body: new ReadableStream({}) });
    });
  };
  const client = connect({ url: 'http://gw.example/', token: 'stale-or-not', WebSocket: FakeSocket, fetch, backoff: { initialMs: 1, maxMs: 5 }, wsRetryMs: 5 });
  client.subscribe('clusters/*');
  await until('on SSE', () => client.transport === 'sse');
  // Two sockets before the fallback, then a trial every wsRetryMs.
  await until('three trials', () => FakeSocket.all.length >= 5);
  FakeSocket.refuse = false;
  const ws = await until('a socket that subscribes', () => FakeSocket.all.find((s) => s.subscribes().length));
  assert.equal(client.transport, 'ws');
  // No handshake carries the token (a stale one would cost a failure at every trial) …
  for (const socket of FakeSocket.all) assert.deepEqual(socket.protocols, ['kube-pulse']);
  // … the socket that stays sends it first, in its auth operation.
  assert.deepEqual(ws.sent[0], { op: 'auth', token: 'stale-or-not', id: ws.sent[0].id });
  client.close();
});

test('a refused SSE request is reported, not retried; a rate limit is retried after Retry-After', async () => {
  let calls = 0;
  const fetch = async (url) => {
    calls++;
    if (url.includes('bad')) return jsonResponse(400, { code: 'bad_pattern', message: 'bad pattern' });
    if (calls <= 2) return jsonResponse(429, { code: 'rate_limited', message: 'slow down' }, { 'Retry-After': '0.01' });
    return sseResponse('id: e-1\nevent: synced\ndata: {"type":"synced","cursor":"e-1","resumed":false,"count":0}\n\n');
  };
  const client = connect({ url: 'http://gw.example/', transport: 'sse', fetch, backoff: { initialMs: 1000 } });
  const events = [];
  client.subscribe('a/**/bad', (e) => events.push(e));
  await until('the error', () => events.some((e) => e.type === 'error'));
  await tick();
  const error = events.find((e) => e.type === 'error');
  assert.deepEqual([error.code, error.message, error.error.status], ['bad_pattern', 'bad pattern', 400]);
  assert.equal(calls, 1);
  const limited = [];
  client.subscribe('clusters/*', (e) => limited.push(e));
  await until('synced after the rate limit', () => limited.some((e) => e.type === 'synced'));
  assert.equal(limited.find((e) => e.type === 'error').code, 'rate_limited');
  client.close();
});

both('an auth refusal reaches every subscription still loading, not only the first answered', async ({ connect, wsClient }) => {
  fresh();
  const client = wsClient({ backoff: { initialMs: 1000, maxMs: 1000 } });
  const seen = { a: [], b: [], c: [] };
  client.subscribe('clusters/*', (e) => seen.a.push(e));
  client.subscribe('apps/**', (e) => seen.b.push(e));
  client.subscribe('tasks/*', (e) => seen.c.push(e));
  const ws = await until('three subscribes', () => FakeSocket.all[0]?.sent.length === 3 && FakeSocket.all[0]);
  ws.push({ type: 'error', code: 'unauthenticated', message: 'auth first', id: ws.sent[0].id });
  for (const [name, events] of Object.entries(seen)) {
    const error = events.find((e) => e.type === 'error');
    assert.equal(error?.code, 'unauthenticated', `subscription ${name}: ${JSON.stringify(events)}`);
  }
  for (const topic of ['clusters/*', 'apps/**', 'tasks/*']) assert.equal(client.status(topic).status, 'error', topic);
  client.close();
});

test('a lockout over SSE (429 too_many_auth_failures) is retried after Retry-After, never terminal', async () => {
  let calls = 0;
  let locked = 2;
  const fetch = async () => {
    calls++;
    if (locked > 0) {
      locked--;
      return jsonResponse(429, { code: 'too_many_auth_failures', message: 'too many failed authentications' }, { 'Retry-After': '0.01' });
    }
    return sseResponse('id: e-1\nevent: synced\ndata: {"type":"synced","cursor":"e-1","resumed":false,"count":0}\n\n');
  };
  const client = connect({ url: 'http://gw.example/', transport: 'sse', fetch, backoff: { initialMs: 1000 } });
  const events = [];
  client.subscribe('clusters/*', (e) => events.push(e));
  await until('synced after the lockout', () => events.some((e) => e.type === 'synced'));
  const errors = events.filter((e) => e.type === 'error');
  assert.equal(errors.length, 2);
  assert.deepEqual([errors[0].code, errors[0].error.retrying, errors[0].error.status], ['too_many_auth_failures', true, 429]);
  assert.equal(calls, 3);
  // A 503 whatever its code is retried too.
  const busy = [];
  let down = 1;
  const fetch503 = async () => {
    if (down-- > 0) return jsonResponse(503, { code: 'http_503', message: 'starting' }, { 'Retry-After': '0.01' });
    return sseResponse('id: e-1\nevent: synced\ndata: {"type":"synced","cursor":"e-1","resumed":false,"count":0}\n\n');
  };
  const other = connect({ url: 'http://gw.example/', transport: 'sse', fetch: fetch503, backoff: { initialMs: 1000 } });
  other.subscribe('apps/**', (e) => busy.push(e));
  await until('synced after the 503', () => busy.some((e) => e.type === 'synced'));
  client.close();
  other.close();
});

both('a 429 from the HTTP probe is a refusal for now: surfaced, retried over WebSocket when Retry-After says, no switch to SSE', async ({ connect, wsClient }) => {
  fresh();
  FakeSocket.refuse = true;
  const probes = [];
  const fetch = async (url, init) => {
    if (url.endsWith('/api/v1/clusters')) {
      probes.push({ at: Date.now(), auth: init.headers?.Authorization });
      return jsonResponse(429, { code: 'too_many_auth_failures', message: 'locked out' }, { 'Retry-After': '0.1' });
    }
    assert.fail(`no SSE request expected: ${url}`);
  };
  const client = connect({ url: 'http://gw.example/', token: 'stale', WebSocket: FakeSocket, fetch, backoff: { initialMs: 1, maxMs: 5 } });
  const events = [];
  client.subscribe('clusters/*', (e) => events.push(e));
  await until('three probes', () => probes.length >= 3);
  assert.equal(client.transport, 'ws');
  assert.deepEqual(probes.map((p) => p.auth), [undefined, undefined, undefined], 'the probe sends no token');
  // Paced by Retry-After (100 ms), not by the 1-5 ms backoff.
  assert.ok(probes[2].at - probes[0].at >= 190, `${probes[2].at - probes[0].at} ms for three probes`);
  const error = events.find((e) => e.type === 'error');
  assert.deepEqual([error.code, error.error.retrying, error.error.status], ['too_many_auth_failures', true, 429]);
  assert.equal(events.filter((e) => e.type === 'error').length, 1, 'told once, not at every attempt');
  // Unlocked: the next socket opens, the error goes and the subscription goes out.
  FakeSocket.refuse = false;
  const ws = await until('a subscribe over WebSocket', () => FakeSocket.all.find((s) => s.subscribes().length));
  assert.equal(ws.subscribes()[0].topics[0], 'clusters/*');
  assert.equal(client.status('clusters/*').status, 'loading');
  client.close();
});

test('over SSE a token not yet accepted goes in one stream first: one failure per attempt, then every stream', async () => {
  let token = 'bad';
  const requests = [];
  let inFlight = 0;
  let most = 0;
  const held = (init) => new Promise((resolve, reject) => init.signal.addEventListener('abort', () => reject(new Error('aborted'))));
  const fetch = async (url, init) => {
    requests.push({ url, auth: init.headers.Authorization });
    if (init.headers.Authorization === 'Bearer bad') {
      most = Math.max(most, ++inFlight);
      await tick(2);
      inFlight--;
      return jsonResponse(401, { code: 'unauthorized', message: 'no' });
    }
    if (url.includes('tasks')) return held(init);
    return { ok: true, status: 200, headers: new Map(), body: new ReadableStream({}) };
  };
  const client = connect({ url: 'http://gw.example/', transport: 'sse', getToken: () => token, fetch, backoff: { initialMs: 5, maxMs: 10 } });
  const events = { a: [], b: [], c: [] };
  client.subscribe('clusters/*', (e) => events.a.push(e));
  client.subscribe('apps/**', (e) => events.b.push(e));
  client.subscribe('tasks/*', (e) => events.c.push(e));
  await until('three refused attempts', () => requests.length >= 3);
  await tick(20);
  const attempts = requests.length;
  assert.ok(requests.every((r) => r.auth === 'Bearer bad'));
  // Each attempt is one stream: never two requests with the refused token at once.
  assert.equal(most, 1);
  for (const [name, list] of Object.entries(events)) {
    assert.equal(list.find((e) => e.type === 'error')?.code, 'unauthorized', `subscription ${name}`);
  }
  token = 'good';
  await until('every stream with the good token', () => requests.filter((r) => r.auth === 'Bearer good').length >= 3);
  assert.ok(attempts >= 3);
  const good = requests.filter((r) => r.auth === 'Bearer good').map((r) => new URL(r.url).searchParams.get('topic'));
  assert.deepEqual(good.slice().sort(), ['apps/**', 'clusters/*', 'tasks/*']);
  assert.equal(client.state, 'live');
  client.close();
});

both("with transport 'ws', a socket that never opens while HTTP passes is the error websocket_refused, retried and revived", async ({ connect, wsClient }) => {
  fresh();
  FakeSocket.refuse = true;
  const fetch = async () => jsonResponse(200, { items: [] });
  const client = connect({ url: 'http://gw.example/', transport: 'ws', WebSocket: FakeSocket, fetch, backoff: { initialMs: 1, maxMs: 5 } });
  const events = [];
  const errors = [];
  client.onError((e) => errors.push(e.code));
  client.subscribe('clusters/*', (e) => events.push(e));
  await until('the error', () => events.some((e) => e.type === 'error'));
  const error = events.find((e) => e.type === 'error');
  assert.deepEqual([error.code, error.error.retrying], ['websocket_refused', true]);
  assert.deepEqual(client.status('clusters/*'), { status: 'error', error: error.error });
  assert.equal(errors[0], 'websocket_refused');
  await until('more attempts', () => FakeSocket.all.length >= 5);
  assert.equal(events.filter((e) => e.type === 'error').length, 1, 'told once');
  assert.equal(client.transport, 'ws');
  FakeSocket.refuse = false;
  const ws = await until('a subscribe', () => FakeSocket.all.find((w) => w.subscribes().length));
  assert.equal(client.status('clusters/*').status, 'loading', 'revived by the connection');
  ws.push({ sub: ws.subscribes()[0].id, type: 'synced', cursor: 'e-1', resumed: false, count: 0 });
  assert.equal(client.status('clusters/*').status, 'live');
  client.close();
});

both('reconnect() revives every error that is not the request\'s own fault; a bad pattern stays', async ({ connect, wsClient }) => {
  fresh();
  const client = wsClient({ backoff: { initialMs: 60000, maxMs: 60000 } });
  const stops = ['apps/**/x', 'clusters/*', 'tasks/*'].map((p) => client.subscribe(p));
  const ws = await until('subscribes', () => FakeSocket.all[0]?.subscribes().length === 3 && FakeSocket.all[0]);
  const [bad, limited, busy] = ws.subscribes().map((o) => o.id);
  ws.push({ type: 'error', code: 'bad_pattern', message: 'no', id: bad });
  ws.push({ type: 'error', code: 'rate_limited', message: 'slow', id: limited });
  ws.push({ type: 'error', code: 'too_many_subscriptions', message: 'full', id: busy });
  assert.equal(client.status('clusters/*').status, 'error');
  client.reconnect();
  await until('both again', () => ws.subscribes().length === 5);
  await tick(20);
  assert.deepEqual(ws.subscribes().slice(3).map((o) => o.topics[0]).sort(), ['clusters/*', 'tasks/*']);
  assert.equal(client.status('apps/**/x').status, 'error');
  assert.equal(client.status('clusters/*').status, 'error', 'until the gateway answers');
  stops.forEach((s) => s());
  client.close();
});

test('over SSE the connection is live while any stream is', async () => {
  let ends = null;
  const fetch = async (url, init) => {
    if (url.includes('tasks')) {
      // This stream opens, then ends once.
      if (ends) return new Promise((resolve, reject) => init.signal.addEventListener('abort', () => reject(new Error('aborted'))));
      let close;
      ends = () => close();
      return {
        ok: true,
        status: 200,
        body: new ReadableStream({
          start(controller) {
            close = () => controller.close();
          },
        }),
      };
    }
    return new Promise((resolve, reject) => {
      init.signal.addEventListener('abort', () => reject(new Error('aborted')));
      resolve({ ok: true, status: 200, body: new ReadableStream({}) });
    });
  };
  const client = connect({ url: 'http://gw.example/', transport: 'sse', fetch, backoff: { initialMs: 50, maxMs: 50, jitter: 0 } });
  const states = [];
  client.onState((s) => states.push(s));
  client.subscribe('clusters/*');
  client.subscribe('tasks/*');
  await until('two streams', () => ends && client.state === 'live');
  ends();
  await tick(20);
  assert.equal(client.state, 'live', 'the other stream is still open');
  assert.deepEqual(states, ['connecting', 'live']);
  client.close();
});

test('renewToken sends the auth operation and resolves with its answer', async () => {
  fresh();
  const client = wsClient({ token: 'old' });
  client.subscribe('clusters/*');
  const ws = await until('a socket', () => open(FakeSocket.all)[0]);
  const renewed = client.renewToken('new-token');
  const op = ws.sent.find((o) => o.op === 'auth' && o.token === 'new-token');
  assert.equal(op.token, 'new-token');
  ws.push({ type: 'authenticated', subject: 'alice', expires: '2027-01-01T00:00:00Z', id: op.id });
  assert.equal((await renewed).subject, 'alice');
  const refused = client.renewToken('other');
  ws.push({ type: 'error', code: 'unauthorized', message: 'no', id: ws.sent.at(-1).id });
  await assert.rejects(refused, (e) => e.code === 'unauthorized');
  client.close();
});

both('topicStore gives {data, status, error}, one object until something changes', async ({ connect, wsClient }) => {
  fresh();
  const client = wsClient();
  const store = topicStore(client, 'clusters/*');
  let renders = 0;
  const stop = store.subscribe(() => renders++);
  const first = store.getSnapshot();
  assert.equal(store.getSnapshot(), first);
  assert.deepEqual(first, { data: {}, status: 'loading', error: null });
  const ws = await until('subscribe', () => FakeSocket.all[0]?.sent.length && FakeSocket.all[0]);
  const sub = ws.sent[0].id;
  ws.push({ sub, type: 'snapshot', topic: 'clusters/dev', rev: 1, cursor: 'e-1', doc: { phase: 'Healthy' } });
  ws.push({ sub, type: 'synced', cursor: 'e-1', resumed: false, count: 1 });
  assert.equal(renders, 2);
  assert.deepEqual(store.getSnapshot(), { data: { 'clusters/dev': { phase: 'Healthy' } }, status: 'live', error: null });
  const single = topicStore(client, 'clusters/dev', { single: true });
  assert.deepEqual(single.getSnapshot().data, { phase: 'Healthy' });
  stop();
  await tick();
  assert.deepEqual(ws.sent.at(-1), { op: 'unsubscribe', id: sub });
  client.close();
});

test('requests carry the token and turn errors into PulseErrors', async () => {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, init });
    const conflict = calls.length === 2;
    return {
      ok: !conflict,
      status: conflict ? 409 : 201,
      text: async () =>
        JSON.stringify(conflict ? { code: 'conflict', message: 'app already has an active task' } : { id: 't1' }),
    };
  };
  const client = connect({ url: 'http://gw.example/pulse/', token: 't', transport: 'sse', fetch });
  const task = await client.createTask({ type: 'Stop', cluster: 'a', namespace: 'shop', app: 'web' });
  assert.equal(task.id, 't1');
  assert.equal(calls[0].url, 'http://gw.example/pulse/api/v1/tasks');
  assert.equal(calls[0].init.method, 'POST');
  assert.equal(calls[0].init.headers.Authorization, 'Bearer t');
  await assert.rejects(client.createTask({}), (e) => e instanceof PulseError && e.status === 409 && e.code === 'conflict');
  client.close();
});

test('a request that gets no answer is a PulseError unreachable, retrying, with no status and the failure as its cause', async () => {
  const failure = new TypeError('Failed to fetch');
  const client = connect({ url: 'http://gw.example/', transport: 'sse', fetch: async () => Promise.reject(failure) });
  for (const call of [() => client.history('clusters/dev'), () => client.createTask({ type: 'Stop', cluster: 'a', namespace: 'shop', app: 'web' }), () => client.request('GET', 'api/v1/clusters')]) {
    await assert.rejects(call(), (e) => {
      assert.ok(e instanceof PulseError, `${e}`);
      assert.deepEqual([e.code, e.status, e.retrying, e.auth, e.cause], ['unreachable', undefined, true, false, failure]);
      assert.match(e.message, /no answer from the gateway: Failed to fetch/);
      return true;
    });
  }
  // A body cut off mid-way is no answer either.
  const cut = connect({ url: 'http://gw.example/', fetch: async () => ({ ok: true, status: 200, text: async () => Promise.reject(new TypeError('network error')) }) });
  await assert.rejects(cut.history('clusters/dev'), (e) => e instanceof PulseError && e.code === 'unreachable' && e.cause.message === 'network error');
  client.close();
  cut.close();
});

test('over SSE on http: at most maxStreams streams (5 by default); the rest are too_many_streams, and open as streams are released', async () => {
  const streams = [];
  const fetch = async (url, init) => {
    const stream = { topic: new URL(url).searchParams.get('topic'), aborted: false };
    streams.push(stream);
    return new Promise((resolve, reject) => {
      init.signal.addEventListener('abort', () => {
        stream.aborted = true;
        reject(new Error('aborted'));
      });
      resolve({ ok: true, status: 200, headers: new Map(), body: new ReadableStream({}) });
    });
  };
  const client = connect({ url: 'http://gw.example/pulse/', transport: 'sse', fetch });
  const topics = ['a', 'b', 'c', 'd', 'e', 'f', 'g'].map((n) => `clusters/${n}`);
  const events = Object.fromEntries(topics.map((t) => [t, []]));
  const stops = topics.map((t) => client.subscribe(t, (e) => events[t].push(e)));
  await until('five streams', () => streams.length === 5);
  await tick(20);
  assert.deepEqual(streams.map((s) => s.topic), topics.slice(0, 5), 'the first five, in order, and no more');
  for (const t of topics.slice(5)) {
    const { status, error } = client.status(t);
    assert.equal(status, 'error', t);
    assert.deepEqual([error.code, error.status, error.retrying], ['too_many_streams', undefined, true]);
    assert.match(error.message, /WebSocket, HTTPS \(HTTP\/2\) or fewer subscriptions with more patterns/);
    assert.equal(events[t].filter((e) => e.type === 'error').length, 1, 'told once');
  }
  assert.equal(client.state, 'live', 'the connection is live: the streams that are open are');
  // One released: the next one waiting opens, the last waits on.
  stops[1]();
  await until('a sixth stream', () => streams.length === 6);
  await tick(20);
  assert.equal(streams[5].topic, 'clusters/f');
  assert.equal(client.status('clusters/f').status, 'loading');
  assert.equal(client.status('clusters/g').error.code, 'too_many_streams');
  assert.equal(events['clusters/g'].filter((e) => e.type === 'error').length, 1, 'still told once');
  client.close();

  // https: (HTTP/2) has no cap; maxStreams sets one on any scheme.
  for (const [url, maxStreams, want] of [['https://gw.example/', undefined, 7], ['https://gw.example/', 2, 2], ['http://gw.example/', Infinity, 7]]) {
    streams.length = 0;
    const other = connect({ url, transport: 'sse', fetch, maxStreams });
    topics.forEach((t) => other.subscribe(t));
    await until(`${want} streams`, () => streams.length === want);
    await tick(20);
    assert.equal(streams.length, want, `${url} maxStreams ${maxStreams}`);
    assert.equal(topics.filter((t) => other.status(t).error?.code === 'too_many_streams').length, 7 - want);
    other.close();
  }
});

test('a live query past maxStreams is in error with no window, and gets one once it opens', async () => {
  const streams = [];
  const fetch = async (url, init) => {
    streams.push(url);
    return new Promise((resolve, reject) => {
      init.signal.addEventListener('abort', () => reject(new Error('aborted')));
      resolve({ ok: true, status: 200, headers: new Map(), body: new ReadableStream({}) });
    });
  };
  const client = connect({ url: 'http://gw.example/', transport: 'sse', fetch, maxStreams: 1 });
  const stop = client.subscribe('clusters/*');
  const results = [];
  client.query('apps/**', { limit: 5 }, (result) => results.push(result));
  await until('the query refused', () => results.some((r) => r.status === 'error'));
  const refused = client.queryResult('apps/**', { limit: 5 });
  assert.deepEqual([refused.status, refused.error.code, refused.rows.length], ['error', 'too_many_streams', 0]);
  stop();
  await until('the query streams', () => streams.some((u) => u.includes('apps')));
  assert.equal(client.queryResult('apps/**', { limit: 5 }).status, 'loading');
  client.close();
});

test('base64url encodes UTF-8 without padding', () => {
  assert.equal(base64url('secret'), 'c2VjcmV0');
  assert.equal(base64url('a?b>'), 'YT9iPg');
  assert.equal(base64url('ü'), 'w7w');
});

test('a patch with `base` applies only on exactly that revision', () => {
  const store = new DocumentStore();
  store.apply({ type: 'snapshot', topic: 't', rev: 3, doc: { phase: 'A' }, cursor: 'e1-1' });
  const patch = (rev, base, p) => ({ type: 'patch', topic: 't', rev, base, patch: p, cursor: 'e1-9' });
  assert.deepEqual(store.apply(patch(7, 3, { phase: 'B' })).doc, { phase: 'B' }, 'a coalesced patch from 3 to 7');
  assert.equal(store.apply(patch(6, 3, { phase: 'X' })), null, 'not newer: ignored');
  assert.deepEqual(store.apply(patch(9, 8, { phase: 'C' })), { gap: true, topic: 't' }, 'another base is a gap');
  assert.equal(store.get('t').phase, 'B');
});

test('subscription options are checked and normalized like the gateway does', () => {
  assert.equal(subscriptionOptions(), null);
  assert.equal(subscriptionOptions({}), null);
  assert.deepEqual(subscriptionOptions({ debounceMs: 1000, fields: ['/reason', '/phase', '/phase'] }), {
    debounceMs: 1000,
    fields: ['/phase', '/reason'],
  });
  for (const bad of [{ debounceMs: 10 }, { debounceMs: 60001 }, { debounceMs: 1.5 }, { fields: [] }, { fields: ['phase'] }]) {
    assert.throws(() => subscriptionOptions(bad), /kube-pulse/, JSON.stringify(bad));
  }
});

both('options go on the wire, and a subscription with them keeps its own copy', async ({ connect, wsClient }) => {
  fresh();
  const client = wsClient();
  const whole = [];
  const projected = [];
  const options = { debounceMs: 500, fields: ['/phase'] };
  client.subscribe('apps/**', (e) => whole.push(e));
  client.subscribe('apps/**', options, (e) => projected.push(e));
  const ws = await until('two subscribe ops', () => FakeSocket.all[0]?.sent.length === 2 && FakeSocket.all[0]);
  const [plainOp, shapedOp] = ws.sent;
  assert.deepEqual(plainOp, { op: 'subscribe', id: plainOp.id, topics: ['apps/**'] });
  assert.deepEqual(shapedOp, { op: 'subscribe', id: shapedOp.id, topics: ['apps/**'], debounceMs: 500, fields: ['/phase'] });
  const t = 'apps/c/ns/a';
  ws.push({ sub: plainOp.id, type: 'subscribed', topics: ['apps/**'] });
  ws.push({ sub: shapedOp.id, type: 'subscribed', topics: ['apps/**'], debounceMs: 500, fields: ['/phase'] });
  ws.push({ sub: plainOp.id, type: 'snapshot', topic: t, rev: 1, cursor: 'e-1', doc: { phase: 'Running', ready: 3 } });
  ws.push({ sub: shapedOp.id, type: 'snapshot', topic: t, rev: 1, cursor: 'e-1', doc: { phase: 'Running' } });
  ws.push({ sub: plainOp.id, type: 'synced', cursor: 'e-1', resumed: false, count: 1 });
  ws.push({ sub: shapedOp.id, type: 'synced', cursor: 'e-1', resumed: false, count: 1 });
  ws.push({ sub: plainOp.id, type: 'patch', topic: t, rev: 2, cursor: 'e-2', patch: { ready: 2 } });
  ws.push({ sub: plainOp.id, type: 'patch', topic: t, rev: 3, cursor: 'e-3', patch: { phase: 'Degraded' } });
  ws.push({ sub: shapedOp.id, type: 'patch', topic: t, rev: 3, base: 1, cursor: 'e-3', patch: { phase: 'Degraded' } });
  assert.deepEqual(client.get(t), { phase: 'Degraded', ready: 2 });
  assert.deepEqual(client.get(t, options), { phase: 'Degraded' });
  assert.deepEqual(client.select('apps/**', { fields: ['/phase'], debounceMs: 500 }), { [t]: { phase: 'Degraded' } });
  assert.equal(client.status('apps/**', options).status, 'live');
  assert.deepEqual(
    projected.filter((e) => e.topic).map((e) => e.doc),
    [{ phase: 'Running' }, { phase: 'Degraded' }],
    'the projected holder hears only its copy',
  );
  assert.equal(whole.filter((e) => e.topic).length, 3);
  // A gap on the projected copy resubscribes it (without a cursor: it does not replay).
  ws.push({ sub: shapedOp.id, type: 'patch', topic: t, rev: 9, base: 7, cursor: 'e-9', patch: { phase: 'X' } });
  await until('a resubscribe', () => ws.subscribes().length === 3);
  assert.equal(ws.subscribes()[2].since, undefined);
  assert.equal(ws.subscribes()[2].debounceMs, 500);
  ws.push({ sub: shapedOp.id, type: 'stopped', reason: 'unsubscribed' });
  client.close();
});

test('over SSE the options are query parameters', async () => {
  const urls = [];
  const fetch = async (url, init) => {
    urls.push(url);
    return new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(new Error('aborted'))));
  };
  const client = connect({ url: 'http://gw.example/', transport: 'sse', fetch, backoff: { initialMs: 1, maxMs: 5 } });
  client.subscribe(['apps/**'], () => {}, { debounceMs: 1000, fields: ['/phase', '/reason'] });
  await until('a request', () => urls.length);
  const url = new URL(urls[0]);
  assert.deepEqual(url.searchParams.getAll('topic'), ['apps/**']);
  assert.equal(url.searchParams.get('debounceMs'), '1000');
  assert.deepEqual(url.searchParams.getAll('field'), ['/phase', '/reason']);
  client.close();
});

test('a template topic whose name is undefined throws a clear error instead of subscribing', async () => {
  fresh();
  const client = wsClient();
  let name;
  for (const call of [
    () => client.subscribe(`clusters/${name}`),
    () => client.subscribe(['clusters/*', `apps/${null}/shop/*`]),
    () => client.query(`apps/${name}/**`, { limit: 5 }),
    () => topicStore(client, `clusters/${name}`, { single: true }),
  ]) {
    assert.throws(call, (e) => e instanceof TypeError && /a name in a template topic was (undefined|null)/.test(e.message) && /"(undefined|null)"/.test(e.message));
  }
  assert.throws(() => client.subscribe([]), /at least one pattern/);
  await tick(20);
  assert.equal(FakeSocket.all.length, 0, 'nothing was opened');
  // A name that merely contains the word is a name.
  client.subscribe('clusters/undefined-things');
  const ws = await until('a subscribe', () => FakeSocket.all[0]?.subscribes().length && FakeSocket.all[0]);
  assert.deepEqual(ws.subscribes()[0].topics, ['clusters/undefined-things']);
  client.close();
});

test('a hidden tab pauses after its grace and resumes from the cursor when shown', async () => {
  fresh();
  const doc = new EventTarget();
  doc.visibilityState = 'visible';
  globalThis.document = doc;
  try {
    const client = wsClient({ hiddenGraceMs: 30, warmStart: false });
    const states = [];
    client.onState((s) => states.push(s));
    client.subscribe('clusters/*');
    const ws = await until('a subscribe', () => FakeSocket.all[0]?.subscribes().length && FakeSocket.all[0]);
    const sub = ws.subscribes()[0].id;
    ws.push({ sub, type: 'snapshot', topic: 'clusters/dev', rev: 3, cursor: 'e1-7', doc: { phase: 'Healthy' } });
    ws.push({ sub, type: 'synced', cursor: 'e1-7', resumed: false, count: 1 });
    // Hidden, then shown within the grace: nothing happens.
    doc.visibilityState = 'hidden';
    doc.dispatchEvent(new Event('visibilitychange'));
    await tick(10);
    doc.visibilityState = 'visible';
    doc.dispatchEvent(new Event('visibilitychange'));
    await tick(50);
    assert.equal(ws.readyState, 1, 'shown within the grace: still open');
    // Hidden past the grace: the socket closes, the documents stay, nothing reconnects.
    doc.visibilityState = 'hidden';
    doc.dispatchEvent(new Event('visibilitychange'));
    await until('paused', () => client.state === 'paused');
    assert.equal(ws.readyState, 3);
    assert.equal(client.status('clusters/*').status, 'stale');
    assert.deepEqual(client.get('clusters/dev'), { phase: 'Healthy' });
    await tick(50);
    assert.equal(FakeSocket.all.length, 1, 'no reconnect while hidden');
    // Shown: a new socket resumes from the cursor.
    doc.visibilityState = 'visible';
    doc.dispatchEvent(new Event('visibilitychange'));
    const ws2 = await until('a second socket', () => FakeSocket.all[1]?.subscribes().length && FakeSocket.all[1]);
    assert.equal(ws2.subscribes()[0].since, 'e1-7');
    ws2.push({ sub, type: 'synced', cursor: 'e1-9', resumed: true, count: 0 });
    assert.equal(client.status('clusters/*').status, 'live');
    assert.deepEqual(states, ['connecting', 'live', 'paused', 'reconnecting', 'live']);
    client.close();
  } finally {
    delete globalThis.document;
  }
});

test('warm start: the next load resumes from the stored cursor with the stored documents, for the same token only', async () => {
  fresh();
  const items = new Map();
  globalThis.sessionStorage = {
    getItem: (k) => items.get(k) ?? null,
    setItem: (k, v) => items.set(k, String(v)),
    removeItem: (k) => items.delete(k),
  };
  try {
    const first = wsClient({ token: 'alice' });
    first.subscribe('clusters/*');
    first.subscribe('apps/**', { fields: ['/state'] }); // options: not kept
    const ws = await until('subscribes', () => FakeSocket.all[0]?.subscribes().length === 2 && FakeSocket.all[0]);
    const [a, b] = ws.subscribes().map((o) => o.id);
    ws.push({ sub: a, type: 'snapshot', topic: 'clusters/dev', rev: 4, cursor: 'e1-9', doc: { phase: 'Healthy' } });
    ws.push({ sub: a, type: 'synced', cursor: 'e1-9', resumed: false, count: 1 });
    ws.push({ sub: b, type: 'synced', cursor: 'e1-9', resumed: false, count: 0 });
    first.saveWarm(); // what `pagehide` does
    first.close();
    const saved = JSON.parse([...items.values()][0]);
    assert.deepEqual(saved.subs.map((s) => [s.key, s.cursor, Object.keys(s.docs)]), [['clusters/*', 'e1-9', ['clusters/dev']]]);

    // The page loads again: the documents are there at once (stale), and the subscription resumes.
    fresh();
    const second = wsClient({ token: 'alice' });
    second.subscribe('clusters/*');
    assert.deepEqual(second.get('clusters/dev'), { phase: 'Healthy' });
    assert.equal(second.status('clusters/*').status, 'stale');
    const ws2 = await until('a subscribe', () => FakeSocket.all[0]?.subscribes().length && FakeSocket.all[0]);
    assert.equal(ws2.subscribes()[0].since, 'e1-9');
    ws2.push({ sub: ws2.subscribes()[0].id, type: 'patch', topic: 'clusters/dev', rev: 5, cursor: 'e1-12', patch: { phase: 'Degraded' } });
    ws2.push({ sub: ws2.subscribes()[0].id, type: 'synced', cursor: 'e1-12', resumed: true, count: 1 });
    assert.deepEqual(second.get('clusters/dev'), { phase: 'Degraded' }, 'the patch applied on the stored revision');
    assert.equal(second.status('clusters/*').status, 'live');
    assert.equal(items.size, 0, 'read once');
    second.saveWarm();
    second.close();

    // Another user in the tab: nothing of the first is shown.
    fresh();
    const third = wsClient({ token: 'bob' });
    third.subscribe('clusters/*');
    assert.equal(third.get('clusters/dev'), undefined);
    const ws3 = await until('a subscribe', () => FakeSocket.all[0]?.subscribes().length && FakeSocket.all[0]);
    assert.equal(ws3.subscribes()[0].since, undefined);
    third.close();

    // Bounded: a subscription whose documents do not fit is not kept.
    fresh();
    const small = wsClient({ token: 'alice', warmStart: 200 });
    small.subscribe('apps/**');
    const ws4 = await until('a subscribe', () => FakeSocket.all[0]?.subscribes().length && FakeSocket.all[0]);
    const id = ws4.subscribes()[0].id;
    ws4.push({ sub: id, type: 'snapshot', topic: 'apps/a/b/c', rev: 1, cursor: 'e1-1', doc: { message: 'x'.repeat(300) } });
    ws4.push({ sub: id, type: 'synced', cursor: 'e1-1', resumed: false, count: 1 });
    small.saveWarm();
    assert.equal(items.size, 0, 'over 200 bytes: nothing kept');
    small.close();
  } finally {
    delete globalThis.sessionStorage;
  }
});

test('eventSource: the token buys a cookie session once, then native EventSources stream, resuming with since', async () => {
  const posts = [];
  const fetch = async (url, init) => {
    posts.push({ url, method: init.method, auth: init.headers.Authorization, credentials: init.credentials });
    if (init.headers.Authorization === 'Bearer bad') return jsonResponse(401, { code: 'unauthorized', message: 'no' });
    return jsonResponse(200, { subject: 'alice', expires: '2027-01-01T00:00:00Z' });
  };
  let token = 'bad';
  FakeEventSource.all = [];
  const client = connect({
    url: 'http://gw.example/pulse/',
    transport: 'sse',
    eventSource: true,
    getToken: () => token,
    fetch,
    EventSource: FakeEventSource,
    backoff: { initialMs: 5, maxMs: 10 },
  });
  const a = [];
  client.subscribe('clusters/*', (e) => a.push(e));
  client.subscribe('apps/**');
  await until('the refusal', () => a.some((e) => e.type === 'error'));
  assert.equal(a.find((e) => e.type === 'error').code, 'unauthorized');
  assert.equal(FakeEventSource.all.length, 0, 'no stream without a session');
  await until('a second refused attempt', () => posts.length >= 2);
  assert.ok(posts.every((p) => p.method === 'POST' && p.url === 'http://gw.example/pulse/api/v1/session' && p.credentials === 'same-origin'));
  token = 'good';
  await until('two streams', () => FakeEventSource.all.length === 2);
  assert.equal(posts.filter((p) => p.auth === 'Bearer good').length, 1, 'one session for both streams');
  const es = FakeEventSource.all.find((e) => e.url.includes('clusters'));
  assert.equal(es.url, 'http://gw.example/pulse/api/v1/events?topic=clusters%2F*');
  assert.deepEqual(es.init, { withCredentials: true });
  es.emit('snapshot', { type: 'snapshot', topic: 'clusters/dev', rev: 1, cursor: 'e1-3', doc: { phase: 'Healthy' } });
  es.emit('synced', { type: 'synced', cursor: 'e1-3', resumed: false, count: 1 });
  assert.equal(client.status('clusters/*').status, 'live');
  assert.deepEqual(client.get('clusters/dev'), { phase: 'Healthy' });
  // Refused later (a gateway restart forgets sessions): the cookie is asked for again, the stream resumes.
  es.fail();
  assert.equal(client.status('clusters/*').status, 'stale');
  await until('a new session', () => posts.filter((p) => p.auth === 'Bearer good').length === 2);
  const again = await until('a new stream', () => FakeEventSource.all.find((e, i) => i >= 2 && e.url.includes('clusters')));
  assert.match(again.url, /since=e1-3/);
  client.close();
  assert.equal(again.readyState, 2, 'closed with the client');
});
