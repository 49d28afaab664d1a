// The React hooks with real React (server rendering runs the hooks'
// snapshot path without a DOM): they read the client's local copy.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createElement } from 'react';
import { renderToString } from 'react-dom/server';

import { STATES, connect } from '../esm/kube-pulse.js';
import { connect as connectCore } from '../esm/core.js';
import { useConnectionState, useCount, useDocument, useGroupBy, useLiveQuery, usePulse, usePulseTopics, useTopic } from '../esm/react.js';

class QuietSocket {
  static last = null;
  constructor() {
    this.readyState = 0;
    this.sent = [];
    QuietSocket.last = this;
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  close() {}
}

function clientWith(docs) {
  const client = connect({ url: 'http://gw.example/', transport: 'ws', WebSocket: QuietSocket });
  for (const [topic, doc] of Object.entries(docs)) {
    client.store.apply({ type: 'snapshot', topic, rev: 1, cursor: 'e-1', doc });
  }
  return client;
}

test('useTopic, useDocument and useConnectionState render the local copy', () => {
  const client = clientWith({
    'clusters/dev': { name: 'dev', phase: 'Healthy', reason: 'Ready' },
    'clusters/prod': { name: 'prod', phase: 'Unhealthy', reason: 'Disconnected' },
    'apps/prod/shop/web': { app: 'web', state: 'Stopping' },
  });
  function Clusters() {
    const clusters = useTopic(client, 'clusters/*');
    const web = useDocument(client, 'apps/prod/shop/web');
    const state = useConnectionState(client);
    return createElement(
      'ul',
      { 'data-state': state },
      Object.values(clusters).map((c) => createElement('li', { key: c.name }, `${c.name}: ${c.phase} (${c.reason})`)),
      createElement('li', { key: 'web' }, `web: ${web.state}`),
    );
  }
  const html = renderToString(createElement(Clusters));
  assert.equal(
    html,
    '<ul data-state="idle"><li>dev: Healthy (Ready)</li><li>prod: Unhealthy (Disconnected)</li><li>web: Stopping</li></ul>',
  );
  client.close();
});

test('usePulse and usePulseTopics return {data, status, error}', () => {
  const client = clientWith({ 'clusters/dev': { name: 'dev', phase: 'Healthy', reason: 'Ready' } });
  function Card() {
    const { data, status, error } = usePulse(client, 'clusters/dev');
    const all = usePulseTopics(client, ['clusters/*']);
    return createElement(
      'p',
      { 'data-status': status, 'data-error': error?.code ?? '' },
      `${data?.phase} ${Object.keys(all.data).length} ${all.status}`,
    );
  }
  // Nothing is subscribed while rendering on the server: loading, with the local copy.
  assert.equal(renderToString(createElement(Card)), '<p data-status="loading" data-error="">Healthy 1 loading</p>');
  client.close();
});

test('useLiveQuery, useCount and useGroupBy render the windows the client holds', async () => {
  const client = connect({ url: 'http://gw.example/', transport: 'ws', WebSocket: QuietSocket });
  const NOT_RUNNING = { filter: { ne: ['/state', 'Running'] }, sort: ['/state'], limit: 10 };
  // The queries the hooks will ask for, held open and given their windows as the gateway would.
  const held = [
    client.query('apps/**', NOT_RUNNING),
    client.query('apps/**', { filter: { eq: ['/cluster', 'dev'] }, limit: 0 }),
    client.query('clusters/*', { groupBy: '/phase', limit: 0 }),
  ];
  const ws = QuietSocket.last;
  await new Promise((r) => setTimeout(r, 0));
  ws.readyState = 1;
  ws.onopen();
  await new Promise((r) => setTimeout(r, 10));
  const [rowsId, countId, groupsId] = ws.sent.map((o) => o.id);
  const deliver = (sub, messages) => {
    ws.onmessage({ data: JSON.stringify({ sub, type: 'subscribed', topics: [] }) });
    for (const m of messages) ws.onmessage({ data: JSON.stringify({ sub, cursor: 'e-1', ...m }) });
  };
  deliver(rowsId, [
    { type: 'rows', total: 2, rows: [{ topic: 'apps/dev/shop/web', rev: 3, doc: { app: 'web', state: 'Degraded' } }, { topic: 'apps/prod/shop/db', rev: 2, doc: { app: 'db', state: 'Stopped' } }] },
    { type: 'synced', resumed: false, count: 2 },
  ]);
  deliver(countId, [{ type: 'rows', total: 4, rows: [] }, { type: 'synced', resumed: false, count: 0 }]);
  deliver(groupsId, [{ type: 'rows', total: 3, rows: [], groups: { Degraded: 1, Healthy: 2 } }, { type: 'synced', resumed: false, count: 0 }]);

  function Page() {
    // A new options object at every render, equal by value.
    const { rows, total, status } = useLiveQuery(client, 'apps/**', { filter: { ne: ['/state', 'Running'] }, sort: '/state', limit: 10 });
    const dev = useCount(client, 'apps/**', { eq: ['/cluster', 'dev'] });
    const phases = useGroupBy(client, ['clusters/*'], '/phase');
    return createElement(
      'div',
      { 'data-status': status },
      createElement('ol', null, rows.map((r) => createElement('li', { key: r.topic }, `${r.doc.app}: ${r.doc.state}`))),
      createElement('p', null, `${total} not running, ${dev.count} on dev (${dev.status})`),
      createElement('p', null, Object.entries(phases.groups).map(([p, n]) => `${p} ${n}`).join(', ') + ` of ${phases.total}`),
    );
  }
  assert.equal(
    renderToString(createElement(Page)),
    '<div data-status="live"><ol><li>web: Degraded</li><li>db: Stopped</li></ol><p>2 not running, 4 on dev (live)</p><p>Degraded 1, Healthy 2 of 3</p></div>',
  );
  for (const stop of held) stop();
  client.close();
});

test('before their rows the hooks say loading, with nothing', () => {
  const client = connect({ url: 'http://gw.example/', transport: 'ws', WebSocket: QuietSocket });
  function Page() {
    const q = useLiveQuery(client, 'apps/**', { sort: ['/state'] });
    const c = useCount(client, 'apps/**');
    const g = useGroupBy(client, 'clusters/*', '/phase', { ne: ['/phase', 'Healthy'] });
    return createElement('p', null, `${q.status} ${q.rows.length} ${q.total} · ${c.status} ${c.count} · ${g.status} ${Object.keys(g.groups).length} ${g.total}`);
  }
  assert.equal(renderToString(createElement(Page)), '<p>loading 0 0 · loading 0 · loading 0 0</p>');
  client.close();
});

test('the document hooks take a core client; usePulse says how current its document is', async () => {
  const client = connectCore({ url: 'http://gw.example/', WebSocket: QuietSocket });
  client.store.apply({ type: 'snapshot', topic: 'clusters/dev', rev: 1, cursor: 'e-1', doc: { name: 'dev', phase: 'Healthy' } });
  function Card() {
    const { data, status, asOf, age } = usePulse(client, 'clusters/dev');
    const all = usePulseTopics(client, 'clusters/*');
    const state = useConnectionState(client);
    return createElement('p', { 'data-as-of': String(asOf), 'data-age': String(age) }, `${data?.phase} ${status} ${Object.keys(all.data)} ${state}`);
  }
  assert.equal(renderToString(createElement(Card)), '<p data-as-of="null" data-age="null">Healthy loading clusters/dev idle</p>');
  // Subscribed and heard from: the snapshot carries the heartbeat's asOf.
  const stop = client.subscribe('clusters/dev');
  await new Promise((r) => setTimeout(r, 0));
  const ws = QuietSocket.last;
  ws.readyState = 1;
  ws.onopen();
  const sub = ws.sent.find((o) => o.op === 'subscribe').id;
  ws.onmessage({ data: JSON.stringify({ sub, type: 'synced', cursor: 'e-1', resumed: false, count: 1 }) });
  ws.onmessage({ data: JSON.stringify({ sub, type: 'heartbeat', cursor: 'e-1', at: '2026-12-05T10:31:02.000Z', asOf: { dev: '2026-12-05T10:30:02.000Z' } }) });
  function AsOf() {
    const { asOf, age } = usePulse(client, 'clusters/dev');
    return createElement('p', null, `${asOf.toISOString()} ${Math.floor(age / 1000)}s`);
  }
  assert.equal(renderToString(createElement(AsOf)), '<p>2026-12-05T10:30:02.000Z 60s</p>');
  stop();
  client.close();
});

test('ClusterPhaseBadge turns grey with "as of … ago" once its cluster is older than staleAfterMs', async () => {
  const { ClusterPhaseBadge, STALE_AFTER_MS } = await import('../esm/karpor.js');
  assert.equal(STALE_AFTER_MS, 45000);
  const client = connectCore({ url: 'http://gw.example/', WebSocket: QuietSocket });
  const stop = client.subscribe('clusters/dev');
  await new Promise((r) => setTimeout(r, 0));
  const ws = QuietSocket.last;
  ws.readyState = 1;
  ws.onopen();
  const sub = ws.sent.find((o) => o.op === 'subscribe').id;
  const say = (m) => ws.onmessage({ data: JSON.stringify({ sub, cursor: 'e-1', ...m }) });
  const since = new Date(Date.now() - 5 * 60000).toISOString();
  say({ type: 'snapshot', topic: 'clusters/dev', rev: 1, doc: { name: 'dev', phase: 'Healthy', reason: 'Ready', message: 'ok', since } });
  say({ type: 'synced', resumed: false, count: 1 });
  const badge = (props = {}) => renderToString(createElement(ClusterPhaseBadge, { client, name: 'dev', ...props }));
  const at = Date.parse('2026-12-05T10:31:02.000Z');
  // Current: 3 s old, the phase's colour and its time in phase.
  say({ type: 'heartbeat', at: new Date(at).toISOString(), asOf: { dev: new Date(at - 3000).toISOString() } });
  let html = badge();
  assert.match(html, /data-as-of="2026-12-05T10:30:59.000Z"/);
  assert.match(html, /data-old="false"/);
  assert.match(html, /Healthy \(Ready\) · 5m/);
  assert.match(html, /ant-badge-status-success/);
  // 2 minutes old at the last heartbeat: grey, as of 2m ago.
  say({ type: 'heartbeat', at: new Date(at + 15000).toISOString(), asOf: { dev: new Date(at - 105000).toISOString() } });
  html = badge();
  assert.match(html, /data-old="true"/);
  assert.match(html, /Healthy \(Ready\) · as of 2m ago/);
  assert.match(html, /ant-badge-status-default/);
  assert.doesNotMatch(html, /ant-badge-status-success/);
  // A larger threshold: current again.
  html = badge({ staleAfterMs: 180000 });
  assert.match(html, /data-old="false"/);
  assert.match(html, /Healthy \(Ready\) · 5m/);
  stop();
  client.close();
});

test('ClusterPhaseBadge says "reconnecting" while the connection is lost, not while its own subscription loads on a live one', async () => {
  const { ClusterPhaseBadge } = await import('../esm/karpor.js');
  const client = connectCore({ url: 'http://gw.example/', WebSocket: QuietSocket });
  // A list keeps dev's document current over a live connection.
  const stopList = client.subscribe('clusters/*');
  await new Promise((r) => setTimeout(r, 0));
  const ws = QuietSocket.last;
  ws.readyState = 1;
  ws.onopen();
  const say = (sub, m) => ws.onmessage({ data: JSON.stringify({ sub, cursor: 'e-1', ...m }) });
  const list = ws.sent.find((o) => o.op === 'subscribe').id;
  const since = new Date(Date.now() - 5 * 60000).toISOString();
  say(list, { type: 'snapshot', topic: 'clusters/dev', rev: 1, doc: { name: 'dev', phase: 'Healthy', reason: 'Ready', message: 'ok', since } });
  say(list, { type: 'synced', resumed: false, count: 1 });
  assert.equal(client.state, 'live');
  const badge = () => renderToString(createElement(ClusterPhaseBadge, { client, name: 'dev' }));
  // The badge's own subscription has not answered yet: loading, the shared copy is current.
  let html = badge();
  assert.match(html, /data-status="loading"/);
  assert.match(html, /Healthy \(Ready\) · 5m</);
  assert.doesNotMatch(html, /reconnecting/);
  assert.match(html, /ant-badge-status-success/);
  // Its own subscription, synced: live.
  const stopOwn = client.subscribe('clusters/dev');
  await new Promise((r) => setTimeout(r, 10));
  const own = ws.sent.filter((o) => o.op === 'subscribe').at(-1).id;
  say(own, { type: 'snapshot', topic: 'clusters/dev', rev: 1, doc: { name: 'dev', phase: 'Healthy', reason: 'Ready', message: 'ok', since } });
  say(own, { type: 'synced', resumed: false, count: 1 });
  assert.doesNotMatch(badge(), /reconnecting/);
  // The connection is lost: stale, grey, reconnecting.
  ws.readyState = 3;
  ws.onclose({ code: 1006 });
  html = badge();
  assert.match(html, /data-status="stale"/);
  assert.match(html, /Healthy \(Ready\) · 5m · reconnecting/);
  assert.match(html, /ant-badge-status-default/);
  stopOwn();
  stopList();
  client.close();
});

test("docs/WEB.md lists every connection state useConnectionState returns, 'paused' too", () => {
  const docs = readFileSync(new URL('../../../docs/WEB.md', import.meta.url), 'utf8');
  const row = docs.split('\n').find((line) => line.startsWith('| `useConnectionState(client)` |'));
  assert.ok(row, 'the hooks table has useConnectionState');
  // The cell's code span: 'idle' \| 'connecting' \| …
  const [, states] = row.split(' | ')[1].match(/`([^`]*)`/);
  const documented = [...states.matchAll(/'([a-z]+)'/g)].map((m) => m[1]);
  assert.deepEqual(documented, [...STATES]);
  // And the client's example of onState.
  const example = docs.split('\n').find((line) => line.includes('pulse.onState('));
  assert.deepEqual([...example.matchAll(/'([a-z]+)'/g)].map((m) => m[1]), [...STATES]);
});
