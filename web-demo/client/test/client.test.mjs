// Unit tests of the browser client (node's test runner): patterns, merge
// patches, revision order, the SSE parser, backoff, and the client's
// connection life over fake WebSocket / fetch transports.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  DocumentStore,
  backoffDelay,
  connect,
  matches,
  mergePatch,
  sseParser,
  base64url,
  topicStore,
  transitions,
} from '../kube-pulse.js';

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

class FakeSocket {
  static all = [];
  static refuse = false;
  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.sent = [];
    this.readyState = 0;
    FakeSocket.all.push(this);
    queueMicrotask(() => {
      if (FakeSocket.refuse) {
        this.readyState = 3;
        this.onclose?.({ code: 1006 });
      } else {
        this.readyState = 1;
        this.onopen?.();
      }
    });
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  close() {
    this.readyState = 3;
  }
  /** The server's side. */
  push(message) {
    this.onmessage?.({ data: JSON.stringify(message) });
  }
  drop() {
    this.readyState = 3;
    this.onclose?.({ code: 1006 });
  }
}

const tick = () => new Promise((r) => setTimeout(r, 5));

async function until(what, check) {
  for (let i = 0; i < 400; i++) {
    const v = check();
    if (v) return v;
    await tick();
  }
  assert.fail(`timed out waiting for ${what}`);
}

test('over WebSocket: snapshots, patches, live state, and resume from the last cursor', async () => {
  FakeSocket.all = [];
  FakeSocket.refuse = false;
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
  const ws = await until('a subscribe op', () => FakeSocket.all[0]?.sent.length && FakeSocket.all[0]);
  assert.equal(ws.url, 'ws://gw.example/pulse/api/v1/ws');
  // The token rides in a subprotocol (base64url of "secret").
  assert.deepEqual(ws.protocols, ['kube-pulse', 'base64url.bearer.authorization.k8s.io.c2VjcmV0']);
  const op = ws.sent[0];
  assert.deepEqual({ ...op, id: undefined }, { op: 'subscribe', id: undefined, topics: ['apps/*/shop/*'] });
  const sub = op.id;
  ws.push({ sub, type: 'snapshot', topic: 'apps/a/shop/web', rev: 1, cursor: 'e1-5', doc: { state: 'Running', ready: 3 } });
  ws.push({ sub, type: 'snapshot', topic: 'apps/a/shop/db', rev: 1, cursor: 'e1-5', doc: { state: 'Running' } });
  ws.push({ sub, type: 'synced', cursor: 'e1-5', resumed: false, count: 2 });
  assert.equal(client.state, 'live');
  ws.push({ sub, type: 'patch', topic: 'apps/a/shop/web', rev: 2, cursor: 'e1-9', patch: { state: 'Stopping', task: { progress: 40 } } });
  assert.deepEqual(client.get('apps/a/shop/web'), { state: 'Stopping', ready: 3, task: { progress: 40 } });
  assert.deepEqual(seen.map((c) => c.type), ['snapshot', 'snapshot', 'synced', 'patch']);

  // The connection drops: reconnecting, then a new socket resumes from e1-9.
  ws.drop();
  assert.equal(client.state, 'reconnecting');
  const ws2 = await until('a second socket', () => FakeSocket.all[1]?.sent.length && FakeSocket.all[1]);
  assert.equal(ws2.sent[0].since, 'e1-9');
  assert.equal(ws2.sent[0].id, sub);
  // Another gateway process answers: fresh snapshots, and what is gone is dropped.
  ws2.push({ sub, type: 'snapshot', topic: 'apps/a/shop/web', rev: 1, cursor: 'e2-3', doc: { state: 'Stopped' } });
  ws2.push({ sub, type: 'synced', cursor: 'e2-3', resumed: false, count: 1, reason: 'unknown epoch' });
  assert.deepEqual(client.get('apps/a/shop/web'), { state: 'Stopped' });
  assert.equal(client.get('apps/a/shop/db'), undefined);
  assert.ok(seen.some((c) => c.type === 'removed' && c.topic === 'apps/a/shop/db'));
  assert.deepEqual(states, ['connecting', 'live', 'reconnecting', 'live']);

  // A gap in revisions starts the subscription over from snapshots.
  ws2.push({ sub, type: 'patch', topic: 'apps/a/shop/web', rev: 5, cursor: 'e2-8', patch: { state: 'x' } });
  assert.deepEqual(ws2.sent.slice(1).map((o) => [o.op, o.since]), [['unsubscribe', undefined], ['subscribe', undefined]]);
  client.close();
  assert.equal(client.state, 'offline');
});

function sseResponse(text) {
  const bytes = new TextEncoder().encode(text);
  return {
    ok: true,
    status: 200,
    body: new ReadableStream({
      start(controller) {
        controller.enqueue(bytes.slice(0, 10));
        controller.enqueue(bytes.slice(10));
        controller.close();
      },
    }),
  };
}

test('auto falls back to SSE over fetch, with the bearer token and Last-Event-ID', async () => {
  FakeSocket.all = [];
  FakeSocket.refuse = true;
  const requests = [];
  const fetch = async (url, init) => {
    requests.push({ url, headers: init.headers });
    if (requests.length === 1) {
      return sseResponse(
        'retry: 2000\n\nid: e1-4\nevent: snapshot\ndata: {"type":"snapshot","topic":"clusters/dev","rev":2,"cursor":"e1-4","doc":{"phase":"Healthy"}}\n\n' +
          'id: e1-4\nevent: synced\ndata: {"type":"synced","cursor":"e1-4","resumed":false,"count":1}\n\n',
      );
    }
    return new Promise(() => {}); // the second stream stays open
  };
  const client = connect({
    url: 'http://gw.example/',
    token: () => 'tok',
    WebSocket: FakeSocket,
    fetch,
    backoff: { initialMs: 1, maxMs: 5 },
  });
  client.subscribe('clusters/*');
  await until('the snapshot', () => client.get('clusters/dev'));
  assert.equal(FakeSocket.all.length, 1, 'one WebSocket attempt');
  assert.equal(requests[0].url, 'http://gw.example/api/v1/events?topic=clusters%2F*');
  assert.equal(requests[0].headers.Authorization, 'Bearer tok');
  // The stream ended: the client reconnects and resumes.
  await until('a second request', () => requests.length === 2);
  assert.equal(requests[1].headers['Last-Event-ID'], 'e1-4');
  client.close();
});

test('a refused SSE request is reported, not retried', async () => {
  let calls = 0;
  const fetch = async () => {
    calls++;
    return {
      ok: false,
      status: 400,
      statusText: 'Bad Request',
      json: async () => ({ code: 'bad_request', message: 'bad pattern' }),
    };
  };
  const client = connect({ url: 'http://gw.example/', transport: 'sse', fetch, backoff: { initialMs: 1 } });
  const events = [];
  client.subscribe('a/**/b', (e) => events.push(e));
  await until('the error', () => events.length);
  await tick();
  assert.deepEqual(events, [{ type: 'error', code: 'bad_request', message: 'bad pattern' }]);
  assert.equal(calls, 1);
  client.close();
});

test('topicStore keeps one snapshot object until a matching document changes', async () => {
  FakeSocket.all = [];
  FakeSocket.refuse = false;
  const client = connect({ url: 'http://gw.example/', transport: 'ws', WebSocket: FakeSocket });
  const store = topicStore(client, 'clusters/*');
  let renders = 0;
  const stop = store.subscribe(() => renders++);
  const first = store.getSnapshot();
  assert.equal(store.getSnapshot(), first);
  const ws = await until('subscribe', () => FakeSocket.all[0]?.sent.length && FakeSocket.all[0]);
  const sub = ws.sent[0].id;
  ws.push({ sub, type: 'snapshot', topic: 'clusters/dev', rev: 1, cursor: 'e-1', doc: { phase: 'Healthy' } });
  ws.push({ sub, type: 'synced', cursor: 'e-1', resumed: false, count: 1 });
  assert.equal(renders, 1);
  assert.deepEqual(store.getSnapshot(), { 'clusters/dev': { phase: 'Healthy' } });
  assert.notEqual(store.getSnapshot(), first);
  stop();
  assert.deepEqual(ws.sent.at(-1), { op: 'unsubscribe', id: sub });
  client.close();
});

test('requests carry the token and turn errors into exceptions', async () => {
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
  await assert.rejects(client.createTask({}), (e) => e.status === 409 && e.code === 'conflict');
  client.close();
});

test('base64url encodes UTF-8 without padding', () => {
  assert.equal(base64url('secret'), 'c2VjcmV0');
  assert.equal(base64url('a?b>'), 'YT9iPg');
  assert.equal(base64url('ü'), 'w7w');
});
