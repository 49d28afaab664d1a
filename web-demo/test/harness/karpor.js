// The Karpor pieces (@kube-pulse/client/karpor) with antd 5, as Karpor's
// cluster list would show them: tabs labelled with the live counts, a
// phase badge per cluster card, and the first cluster's sync registry.
// Driven by test/karpor.e2e.test.mjs through window.mount / window.shown.

import { createElement as h } from 'react';
import { createRoot } from 'react-dom/client';
import { Tabs } from 'antd';
import { connect } from '@kube-pulse/client';
import { ClusterPhaseBadge, SyncRegistryTable, useClusterSummary } from '@kube-pulse/client/karpor';

function ClusterList({ client, names }) {
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
    names.map((name) => h('div', { key: name, className: 'card' }, h(ClusterPhaseBadge, { client, name }))),
    h(SyncRegistryTable, { client, cluster: names[0] }),
  );
}

window.mount = ({ url, names }) => {
  window.client = connect({ url });
  createRoot(document.getElementById('root')).render(h(ClusterList, { client: window.client, names }));
};
window.shown = () => ({
  tabs: [...document.querySelectorAll('.ant-tabs-tab')].map((t) => t.textContent),
  counts: document.querySelector('.counts')?.dataset.status,
  names: [document.querySelector('.counts')?.dataset.healthy, document.querySelector('.counts')?.dataset.unhealthy],
  badges: [...document.querySelectorAll('.kp-cluster-phase')].map((b) => ({ ...b.dataset, text: b.textContent })),
  sync: [...document.querySelectorAll('.kp-sync-registry tr[data-topic]')].map((r) => ({ ...r.dataset, text: r.textContent })),
  syncStatus: document.querySelector('.kp-sync-registry')?.dataset.status,
});
window.harnessReady = true;
