// The test harness page: React (development build, StrictMode) rendering
// a cluster table and cards through the package's hooks, driven by the
// browser tests through window.mountApp / window.unmountApp. It records
// every paint, every error a hook showed and every WebSocket it opened.

import { StrictMode, createElement as h, useEffect, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { connect } from '@kube-pulse/client';
import * as hooks from '@kube-pulse/client/react';

// Clients before {data, status, error} hooks are driven through useTopic,
// so that the tests can show what they fail.
const usePulseTopics =
  hooks.usePulseTopics ?? ((client, patterns) => ({ data: hooks.useTopic(client, patterns), status: 'n/a', error: null }));

const sockets = new Set();
window.socketsOpened = 0;
window.opsSent = [];
window.handshakes = [];
// The extensions each socket's handshake agreed on (permessage-deflate).
window.socketExtensions = [];
class CountingSocket extends WebSocket {
  constructor(...args) {
    super(...args);
    window.socketsOpened++;
    this.addEventListener('open', () => window.socketExtensions.push(this.extensions));
    // The subprotocols each handshake offered (a token may ride in one).
    window.handshakes.push([].concat(args[1] ?? []));
    sockets.add(this);
    this.addEventListener('close', () => sockets.delete(this));
    // The type of every message the gateway sent (the tests count snapshots).
    this.addEventListener('message', (e) => window.framesIn.push(JSON.parse(e.data).type));
  }
  send(data) {
    window.opsSent.push(JSON.parse(data));
    super.send(data);
  }
}
window.openSockets = () => [...sockets].filter((s) => s.readyState <= 1).length;
window.paints = [];
window.errorsSeen = [];
window.framesIn = [];

function Card({ id, topics }) {
  const { data, status, error } = usePulseTopics(window.client, topics);
  const doc = data[topics[0]];
  window.paints.push({ id, phase: doc?.phase ?? '', status });
  useEffect(() => {
    if (error) window.errorsSeen.push({ id, code: error.code });
  }, [error, id]);
  return h('div', {
    className: 'card',
    'data-id': id,
    'data-topic': topics[0],
    'data-phase': doc?.phase ?? '',
    'data-status': status,
    'data-error': error?.code ?? '',
  });
}

function Table() {
  const { data, status } = usePulseTopics(window.client, 'clusters/*');
  return h(
    'table',
    { 'data-status': status },
    h(
      'tbody',
      null,
      Object.values(data).map((c) => h('tr', { key: c.name, className: 'row', 'data-topic': `clusters/${c.name}`, 'data-phase': c.phase })),
    ),
  );
}

/** The same table over a coalesced, projected subscription (`{debounceMs, fields}`). */
const PROJECTION = { debounceMs: 200, fields: ['/phase', '/reason'] };
function ProjectedTable() {
  const { data, status } = usePulseTopics(window.client, 'clusters/*', PROJECTION);
  return h(
    'table',
    { 'data-status': status },
    h(
      'tbody',
      null,
      Object.entries(data).map(([topic, c]) =>
        h('tr', {
          key: topic,
          className: 'prow',
          'data-topic': topic,
          'data-phase': c.phase,
          'data-reason': c.reason,
          'data-members': Object.keys(c).sort().join(','),
          'data-status': status,
        }),
      ),
    ),
  );
}

/**
 * Three live queries through the hooks, their options written inline (a
 * new object at every render) and rendered again every 50 ms whatever
 * changes: the clusters not Healthy (projected), how many are Healthy,
 * and how many are in each phase.
 */
function LiveQueries() {
  const [, setTicks] = useState(0);
  useEffect(() => {
    const timer = setInterval(() => setTicks((n) => n + 1), 50);
    return () => clearInterval(timer);
  }, []);
  window.liveRenders++;
  const q = hooks.useLiveQuery(window.client, 'clusters/*', {
    filter: { ne: ['/phase', 'Healthy'] },
    sort: ['/phase'],
    limit: 10,
    fields: ['/phase', '/reason'],
  });
  const healthy = hooks.useCount(window.client, ['clusters/*'], { eq: ['/phase', 'Healthy'] });
  const phases = hooks.useGroupBy(window.client, 'clusters/*', '/phase');
  return h(
    'div',
    {
      className: 'live',
      'data-status': [q.status, healthy.status, phases.status].join(','),
      'data-total': q.total,
      'data-count': healthy.count,
      'data-groups': JSON.stringify(phases.groups),
    },
    q.rows.map((r) => h('p', { key: r.topic, className: 'lrow', 'data-topic': r.topic, 'data-phase': r.doc.phase, 'data-reason': r.doc.reason })),
  );
}

let root = null;
window.mountApp = ({ url, transport = 'auto', backoff, subscribeRate, cards = [], table = false, projected = false, live = false, reuseClient = false, options = {} }) => {
  if (!reuseClient || !window.client) {
    window.client?.close();
    window.client = connect({
      url,
      transport,
      backoff,
      subscribeRate,
      ...options,
      token: () => localStorage.getItem('tok') || undefined,
      WebSocket: CountingSocket,
    });
  }
  window.paints = [];
  window.liveRenders = 0;
  // How often the hooks start a live query (each start is a new store's subscription).
  window.queryCalls = 0;
  const query = window.client.query?.bind(window.client);
  if (query) {
    window.client.query = (...args) => {
      window.queryCalls++;
      return query(...args);
    };
  }
  root = createRoot(document.getElementById('root'));
  root.render(
    h(
      StrictMode,
      null,
      table ? h(Table) : null,
      projected ? h(ProjectedTable) : null,
      live ? h(LiveQueries) : null,
      cards.map((topics, i) => h(Card, { key: i, id: i, topics })),
    ),
  );
};
window.unmountApp = () => {
  root?.unmount();
  root = null;
};
/** What the page shows: the phase and status of every card and table row. */
window.shown = () => ({
  cards: [...document.querySelectorAll('.card')].map((c) => ({ ...c.dataset })),
  rows: [...document.querySelectorAll('.row')].map((r) => ({ ...r.dataset })),
  projected: [...document.querySelectorAll('.prow')].map((r) => ({ ...r.dataset })),
  live: [...document.querySelectorAll('.live')].map((l) => ({ ...l.dataset, rows: [...l.querySelectorAll('.lrow')].map((r) => ({ ...r.dataset })) })),
  state: window.client?.state,
  transport: window.client?.transport,
});
window.harnessReady = true;
