// How current each topic is (docs/WEB.md "How current: asOf"): a
// subscription's heartbeats (`at`, `asOf` per member cluster) give each
// topic its member's time and its age measured against the gateway's `at`,
// and never move the point the client resumes from. Over fake WebSocket, fetch and
// EventSource transports, with the core and the full client.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { connect, topicStore } from '../esm/kube-pulse.js';
import { connect as connectCore } from '../esm/core.js';
import { FakeEventSource, FakeSocket, jsonResponse, sseResponse, tick, until } from './fakes.mjs';

const ENTRIES = [
  ['full', connect],
  ['core', connectCore],
];

const wsClient = (connectWith, options = {}) => {
  FakeSocket.all = [];
  FakeSocket.refuse = false;
  return connectWith({ url: 'http://gw.example/', transport: 'ws', WebSocket: FakeSocket, backoff: { initialMs: 1, maxMs: 5 }, ...options });
};

const iso = (ms) => new Date(ms).toISOString();
/** The gateway's clock in these tests: far from this machine's, as a skewed client would see it. */
const AT = Date.parse('2026-12-05T10:31:02.123Z');

/** Subscribes `patterns`, answers with `docs` (topic → doc) and `synced`; resolves the socket and the subscription id. */
async function synced(client, patterns, docs) {
  client.subscribe(patterns);
  const ws = await until('a subscribe', () => FakeSocket.all.find((w) => w.subscribes().length));
  const sub = ws.subscribes().at(-1).id;
  for (const [topic, doc] of Object.entries(docs)) ws.push({ sub, type: 'snapshot', topic, rev: 1, cursor: 'e1-7', doc });
  ws.push({ sub, type: 'synced', cursor: 'e1-7', resumed: false, count: Object.keys(docs).length });
  return { ws, sub };
}

for (const [entry, connectWith] of ENTRIES) {
  test(`each kind of topic takes its member's asOf; a member without an entry and a topic of no member are null (${entry})`, async () => {
    const client = wsClient(connectWith);
    const docs = {
      'clusters/dev': { phase: 'Healthy' },
      'clusters/staging': { phase: 'Pending' },
      'clusters/dev/sync/apps/v1/deployments': { phase: 'Syncing' },
      'apps/prod/shop/web': { state: 'Running' },
      'summary/apps/prod/shop': { total: 1 },
      'summary/clusters': { total: 3 },
      'tasks/t1': { id: 't1', target: { cluster: 'prod', namespace: 'shop', app: 'web' } },
      'tasks/t2': { id: 't2', target: { cluster: 'staging', namespace: 'shop', app: 'web' } },
      'other/thing': { n: 1 },
    };
    const { ws, sub } = await synced(client, ['clusters/**', 'apps/**', 'summary/**', 'tasks/*', 'other/*'], docs);
    // No heartbeat yet: nothing is known.
    assert.equal(client.asOf('clusters/dev'), null);
    assert.equal(client.age('clusters/dev'), null);
    const dev = AT - 2122;
    const prod = AT - 3253;
    ws.push({ sub, type: 'heartbeat', cursor: 'e1-9', at: iso(AT), asOf: { dev: iso(dev), prod: iso(prod) } });
    const asOf = (topic) => client.asOf(topic)?.getTime() ?? null;
    assert.deepEqual(
      Object.fromEntries(Object.keys(docs).map((topic) => [topic, asOf(topic)])),
      {
        'clusters/dev': dev,
        'clusters/staging': null, // never current: absent from asOf
        'clusters/dev/sync/apps/v1/deployments': dev,
        'apps/prod/shop/web': prod,
        'summary/apps/prod/shop': prod,
        'summary/clusters': prod, // the oldest entry
        'tasks/t1': prod, // its target's cluster
        'tasks/t2': null,
        'other/thing': null, // no member
      },
    );
    assert.equal(client.asOf('clusters/nowhere'), null, 'a topic no subscription holds');
    // A later heartbeat without dev's entry: dev is unknown again.
    ws.push({ sub, type: 'heartbeat', cursor: 'e1-9', at: iso(AT + 15000), asOf: { prod: iso(prod + 15000) } });
    assert.equal(client.asOf('clusters/dev'), null);
    assert.equal(client.age('clusters/dev'), null);
    assert.equal(asOf('apps/prod/shop/web'), prod + 15000);
    client.close();
  });

  test(`age is the heartbeat's at − asOf plus the time since it came, whatever this machine's clock says (${entry})`, async () => {
    const client = wsClient(connectWith);
    const events = [];
    client.subscribe('clusters/*', (e) => events.push(e));
    const ws = await until('a subscribe', () => FakeSocket.all[0]?.subscribes().length && FakeSocket.all[0]);
    const sub = ws.subscribes()[0].id;
    ws.push({ sub, type: 'snapshot', topic: 'clusters/dev', rev: 1, cursor: 'e1-1', doc: { phase: 'Healthy' } });
    ws.push({ sub, type: 'synced', cursor: 'e1-1', resumed: false, count: 1 });
    // The gateway's clock is months away from this machine's: only at − asOf counts.
    const arrived = Date.now();
    ws.push({ sub, type: 'heartbeat', cursor: 'e1-1', at: iso(AT), asOf: { dev: iso(AT - 5000) } });
    const handled = Date.now();
    const first = client.age('clusters/dev');
    assert.ok(first >= 5000 && first <= 5000 + (Date.now() - arrived), `${first} ms`);
    await tick(60);
    // Bounds from this clock's own readings: a 60 ms timer may fire when Date.now() has moved 59.
    const before = Date.now();
    const later = client.age('clusters/dev');
    const since = `${later} ms, ${before - handled}–${Date.now() - arrived} ms after the heartbeat`;
    assert.ok(before - handled >= 50, `the timer waited ${before - handled} ms`);
    assert.ok(later >= 5000 + (before - handled) && later <= 5000 + (Date.now() - arrived), since);
    assert.equal(client.asOf('clusters/dev').toISOString(), iso(AT - 5000));
    // Each heartbeat is an event of the subscription's holders, with what it said.
    assert.deepEqual(events.filter((e) => e.type === 'heartbeat'), [{ type: 'heartbeat', at: iso(AT), asOf: { dev: iso(AT - 5000) } }]);
    // A ping's answer (an id, no at/asOf) is no heartbeat of a subscription.
    ws.push({ type: 'heartbeat', cursor: 'e1-50', id: 'p1' });
    assert.equal(events.filter((e) => e.type === 'heartbeat').length, 1);
    client.close();
  });

  test(`a heartbeat does not move the resume point (WebSocket, ${entry})`, async () => {
    const client = wsClient(connectWith);
    const { ws, sub } = await synced(client, 'clusters/*', { 'clusters/dev': { phase: 'Healthy' } });
    ws.push({ sub, type: 'heartbeat', cursor: 'e1-90', at: iso(AT), asOf: { dev: iso(AT - 100) } });
    ws.drop();
    const again = await until('a second socket', () => FakeSocket.all[1]?.subscribes().length && FakeSocket.all[1]);
    assert.equal(again.subscribes()[0].since, 'e1-7', 'the last message of the subscription, not the heartbeat');
    // What the last heartbeat said stays known (and ages) until the next one.
    assert.equal(client.asOf('clusters/dev').getTime(), AT - 100);
    client.close();
  });

  test(`a projected subscription's topics take its own heartbeats (${entry})`, async () => {
    const client = wsClient(connectWith);
    const options = { fields: ['/phase'] };
    client.subscribe('clusters/*', () => {}, options);
    const ws = await until('a subscribe', () => FakeSocket.all[0]?.subscribes().length && FakeSocket.all[0]);
    const sub = ws.subscribes()[0].id;
    ws.push({ sub, type: 'snapshot', topic: 'clusters/dev', rev: 1, cursor: 'e1-1', doc: { phase: 'Healthy' } });
    // The asOf may come in `synced` itself.
    ws.push({ sub, type: 'synced', cursor: 'e1-1', resumed: false, count: 1, at: iso(AT), asOf: { dev: iso(AT - 10) } });
    assert.equal(client.asOf('clusters/dev', options).getTime(), AT - 10);
    assert.equal(client.asOf('clusters/dev'), null, 'no whole-document subscription holds it');
    client.close();
  });

  test(`usePulse's store: asOf and age in the snapshot, new once per heartbeat, not more (${entry})`, async () => {
    const client = wsClient(connectWith);
    const single = topicStore(client, 'clusters/dev', { single: true });
    const list = topicStore(client, 'clusters/*');
    let renders = 0;
    let listRenders = 0;
    const stops = [single.subscribe(() => renders++), list.subscribe(() => listRenders++)];
    assert.deepEqual(single.getSnapshot(), { data: undefined, status: 'loading', error: null, asOf: null, age: null });
    const ws = await until('two subscribes', () => FakeSocket.all[0]?.subscribes().length === 2 && FakeSocket.all[0]);
    const [devSub, allSub] = ws.subscribes().map((o) => o.id);
    for (const sub of [devSub, allSub]) {
      ws.push({ sub, type: 'snapshot', topic: 'clusters/dev', rev: 1, cursor: 'e1-1', doc: { phase: 'Healthy' } });
      ws.push({ sub, type: 'synced', cursor: 'e1-1', resumed: false, count: 1 });
    }
    const before = renders;
    const listBefore = listRenders;
    const pushed = Date.now();
    ws.push({ sub: devSub, type: 'heartbeat', cursor: 'e1-1', at: iso(AT), asOf: { dev: iso(AT - 3000) } });
    assert.equal(renders, before + 1, 'one render for the heartbeat');
    const snapshot = single.getSnapshot();
    assert.equal(snapshot.asOf.getTime(), AT - 3000);
    assert.ok(snapshot.age >= 3000 && snapshot.age <= 3000 + (Date.now() - pushed), `${snapshot.age}`);
    assert.equal(single.getSnapshot(), snapshot, 'the same object until something changes');
    // Another subscription's heartbeat does not render this one; a list's store does not render for heartbeats.
    ws.push({ sub: allSub, type: 'heartbeat', cursor: 'e1-1', at: iso(AT), asOf: { dev: iso(AT - 3000) } });
    assert.equal(renders, before + 1);
    assert.equal(listRenders, listBefore);
    stops.forEach((stop) => stop());
    client.close();
  });
}

test('over SSE a heartbeat event gives asOf and does not move Last-Event-ID', async () => {
  const requests = [];
  const fetch = async (url, init) => {
    requests.push(init.headers['Last-Event-ID']);
    if (requests.length > 2) return new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(new Error('aborted'))));
    // The gateway's stream: a snapshot, synced, then heartbeats (events without an id: line), then its end.
    return sseResponse(
      'retry: 2000\n\n' +
        'id: e1-4\nevent: snapshot\ndata: {"type":"snapshot","topic":"clusters/dev","rev":2,"cursor":"e1-4","doc":{"phase":"Healthy"}}\n\n' +
        'id: e1-4\nevent: synced\ndata: {"type":"synced","cursor":"e1-4","resumed":false,"count":1}\n\n' +
        `event: heartbeat\ndata: {"type":"heartbeat","cursor":"e1-77","at":"${iso(AT)}","asOf":{"dev":"${iso(AT - 1500)}"}}\n\n` +
        ': an old gateway\'s heartbeat comment\n\n',
    );
  };
  const client = connect({ url: 'http://gw.example/', transport: 'sse', fetch, backoff: { initialMs: 1, maxMs: 5 } });
  const events = [];
  client.subscribe('clusters/*', (e) => events.push(e));
  await until('the heartbeat', () => events.some((e) => e.type === 'heartbeat'));
  assert.equal(client.asOf('clusters/dev').getTime(), AT - 1500);
  assert.ok(client.age('clusters/dev') >= 1500);
  // The stream ended: the next one resumes from the subscription's last message.
  await until('two more requests', () => requests.length >= 3);
  assert.deepEqual(requests.slice(0, 3), [undefined, 'e1-4', 'e1-4']);
  client.close();
});

test('the native EventSource listens for heartbeat events too; since= stays the last message of the subscription', async () => {
  const fetch = async () => jsonResponse(200, { subject: 'alice' });
  FakeEventSource.all = [];
  const client = connect({
    url: 'http://gw.example/',
    transport: 'sse',
    eventSource: true,
    token: 'tok',
    fetch,
    EventSource: FakeEventSource,
    backoff: { initialMs: 1, maxMs: 5 },
  });
  client.subscribe('apps/**');
  const es = await until('a stream', () => FakeEventSource.all[0]);
  es.emit('snapshot', { type: 'snapshot', topic: 'apps/prod/shop/web', rev: 1, cursor: 'e1-3', doc: { state: 'Running' } });
  es.emit('synced', { type: 'synced', cursor: 'e1-3', resumed: false, count: 1 });
  es.emit('heartbeat', { type: 'heartbeat', cursor: 'e1-60', at: iso(AT), asOf: { prod: iso(AT - 700) } });
  assert.equal(client.asOf('apps/prod/shop/web').getTime(), AT - 700);
  es.fail();
  const again = await until('a new stream', () => FakeEventSource.all[1]);
  assert.match(again.url, /since=e1-3(&|$)/);
  client.close();
});
