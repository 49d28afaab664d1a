// The Karpor pieces (@kube-pulse/client/karpor) with antd 5, as Karpor's
// cluster list would show them: tabs labelled with the live counts, a
// phase badge per cluster card, and the first cluster's sync registry;
// beside each badge, its cluster's usePulse asOf and age. Over the full
// client or the core (`core: true`). Driven by test/karpor.e2e.test.mjs
// through window.mount / window.shown.

import { createElement as h } from 'react';
import { createRoot } from 'react-dom/client';
import { Tabs } from 'antd';
import { connect } from '@kube-pulse/client';
import { connect as connectCore } from '@kube-pulse/client/core';
import { ClusterPhaseBadge, SyncRegistryTable, useClusterSummary } from '@kube-pulse/client/karpor';
import { usePulse } from '@kube-pulse/client/react';

/** How current `name` is, as usePulse says: its asOf and age (ms when its last heartbeat came). */
function Freshness({ client, name }) {
  const { asOf, age, status } = usePulse(client, `clusters/${name}`);
  return h('span', { className: 'freshness', 'data-cluster': name, 'data-as-of': asOf?.toISOString() ?? '', 'data-age': age ?? '', 'data-status': status });
}

function ClusterList({ client, names, staleAfterMs }) {
  const summary = useClusterSummary(client);
  return h(
    'div',
    null,
    h(Tabs, {
      items: [
        { key: 'all', label: `All (${summary.totalCount})` },
        { key: 'healthy', label: `Healthy (${summary.healthyCount})` },
        { key: 'unhealthy', label: `Unhealthy (${summary.unhealthyCount})` },
      ],
    }),
    h('div', { className: 'counts', 'data-status': summary.status, 'data-healthy': summary.healthyClusters.join(','), 'data-unhealthy': summary.unhealthyClusters.join(',') }),
    names.map((name) => h('div', { key: name, className: 'card' }, h(ClusterPhaseBadge, { client, name, staleAfterMs }), h(Freshness, { client, name }))),
    h(SyncRegistryTable, { client, cluster: names[0] }),
  );
}

window.mount = ({ url, names, core = false, transport, staleAfterMs }) => {
  window.client = core ? connectCore({ url }) : connect({ url, transport });
  createRoot(document.getElementById('root')).render(h(ClusterList, { client: window.client, names, staleAfterMs }));
};
window.shown = () => ({
  tabs: [...document.querySelectorAll('.ant-tabs-tab')].map((t) => t.textContent),
  counts: document.querySelector('.counts')?.dataset.status,
  names: [document.querySelector('.counts')?.dataset.healthy, document.querySelector('.counts')?.dataset.unhealthy],
  badges: [...document.querySelectorAll('.kp-cluster-phase')].map((b) => ({ ...b.dataset, text: b.textContent })),
  sync: [...document.querySelectorAll('.kp-sync-registry tr[data-topic]')].map((r) => ({ ...r.dataset, text: r.textContent })),
  syncStatus: document.querySelector('.kp-sync-registry')?.dataset.status,
  freshness: [...document.querySelectorAll('.freshness')].map((f) => ({ ...f.dataset })),
  transport: window.client.transport,
});
window.harnessReady = true;
