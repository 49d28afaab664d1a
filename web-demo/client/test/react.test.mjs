// The React hooks with real React (server rendering runs the hooks'
// snapshot path without a DOM): they read the client's local copy.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createElement } from 'react';
import { renderToString } from 'react-dom/server';

import { connect } from '../kube-pulse.js';
import { useConnectionState, useDocument, usePulse, usePulseTopics, useTopic } from '../react.js';

class QuietSocket {
  constructor() {
    this.readyState = 0;
  }
  send() {}
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
