// Drop-in pieces for Karpor's UI (React 18+, antd 5): a cluster's phase
// badge with its reason and how long it has been in that phase, the
// cluster list's healthy/unhealthy tabs live (Karpor's summary), and a cluster's
// sync registry as a table. Each is a thin view over the hooks of
// ./react.js, so they share the client's one connection and local copy
// with every other hook of the page. antd is an optional peer: only this
// entry (`@kube-pulse/client/karpor`) imports it.

import { createElement as h, useEffect, useMemo, useState } from 'react';
import { Badge, Table, Tooltip } from 'antd';
import { usePulse, usePulseTopics } from './react.js';

/** antd `Badge` status of each cluster phase. */
export const CLUSTER_PHASE_STATUS = Object.freeze({
  Pending: 'processing',
  Initializing: 'processing',
  Healthy: 'success',
  Degraded: 'warning',
  Unhealthy: 'error',
  Unknown: 'warning',
  Removed: 'default',
});

/** antd `Badge` status of each sync phase. */
export const SYNC_PHASE_STATUS = Object.freeze({
  Pending: 'processing',
  Listing: 'processing',
  Syncing: 'success',
  Error: 'error',
  Backoff: 'warning',
  NotServed: 'default',
  Stopped: 'default',
});

/** A duration, short: `42s`, `5m`, `3h`, `2d`. */
function durationText(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

/** How long ago `since` (RFC 3339) was, short: `42s`, `5m`, `3h`, `2d`; '' when unknown. */
export function sinceText(since, now = Date.now()) {
  const at = Date.parse(since ?? '');
  return Number.isNaN(at) ? '' : durationText(now - at);
}

/**
 * How old a badge's cluster may be before it shows as stale: three
 * heartbeats of the gateway's default period (15 s) without news of the
 * member. A member's `asOf` moves with each probe (every 5 s by default)
 * or agent heartbeat, and the client hears it at each heartbeat, so a
 * current member is at most about 20 s old.
 */
export const STALE_AFTER_MS = 45000;

/** The current time, again every `everyMs`: so that "for 5m" moves on without a change. */
function useNow(everyMs = 15000) {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), everyMs);
    return () => clearInterval(timer);
  }, [everyMs]);
  return now;
}

/**
 * A cluster's phase as an antd `Badge`: `Healthy (Ready) · 5m`, the
 * phase's colour, its message in a `Tooltip`; `…` while loading, grey and
 * `· reconnecting` while the connection is lost, grey and `· as of 2m ago`
 * when what the gateway knows of the member is older than `staleAfterMs`
 * (its `asOf`, default `STALE_AFTER_MS`), the error's code when the
 * gateway refused it. Renders nothing until it has a name.
 */
export function ClusterPhaseBadge({ client, name, staleAfterMs = STALE_AFTER_MS }) {
  return name ? h(PhaseBadge, { client, name, staleAfterMs }) : null;
}

function PhaseBadge({ client, name, staleAfterMs }) {
  const now = useNow();
  const topic = `clusters/${name}`;
  const { data: cluster, status, error, asOf } = usePulse(client, topic);
  // Its age now (the snapshot's is its last heartbeat's): this renders again every 15 s.
  const age = client.age(topic);
  const old = age !== null && age > staleAfterMs;
  const attrs = { className: 'kp-cluster-phase', 'data-cluster': name, 'data-status': status, 'data-as-of': asOf?.toISOString() ?? '', 'data-old': String(old) };
  if (error) return h('span', attrs, h(Badge, { status: 'error', text: `${error.code}: ${error.message}` }));
  if (!cluster) return h('span', attrs, h(Badge, { status: 'default', text: status === 'loading' ? '…' : 'gone' }));
  // Only while the connection is lost: `stale`, or still `loading` on a
  // connection that is not live. Loading on a live one, the document shown
  // is the shared copy another subscription keeps current.
  const stale = status === 'stale' || (status === 'loading' && client.state !== 'live');
  const ago = old ? `as of ${durationText(age)} ago` : sinceText(cluster.since, now);
  const text = `${cluster.phase} (${cluster.reason})${ago ? ` · ${ago}` : ''}${stale ? ' · reconnecting' : ''}`;
  return h(
    'span',
    { ...attrs, 'data-phase': cluster.phase, 'data-reason': cluster.reason },
    h(Tooltip, { title: cluster.message }, h(Badge, { status: stale || old ? 'default' : CLUSTER_PHASE_STATUS[cluster.phase] ?? 'default', text })),
  );
}

/**
 * The cluster list's tabs, live, in the shape of Karpor's cluster summary
 * (`GET /rest-api/v1/clusters?summary=true`): `{totalCount, healthyCount,
 * unhealthyCount, healthyClusters, unhealthyClusters, status, error}`,
 * where unhealthy is every cluster not `Healthy` and the names are sorted.
 * One subscription projected onto `/phase`: a few bytes per cluster.
 */
export function useClusterSummary(client) {
  const { data, status, error } = usePulseTopics(client, 'clusters/*', PHASE_ONLY);
  return useMemo(() => {
    const healthyClusters = [];
    const unhealthyClusters = [];
    for (const [topic, doc] of Object.entries(data)) {
      (doc.phase === 'Healthy' ? healthyClusters : unhealthyClusters).push(topic.slice('clusters/'.length));
    }
    healthyClusters.sort();
    unhealthyClusters.sort();
    return {
      totalCount: healthyClusters.length + unhealthyClusters.length,
      healthyCount: healthyClusters.length,
      unhealthyCount: unhealthyClusters.length,
      healthyClusters,
      unhealthyClusters,
      status,
      error,
    };
  }, [data, status, error]);
}

const PHASE_ONLY = Object.freeze({ fields: Object.freeze(['/phase']) });

const resourceName = (r) => `${r.group ? `${r.group}/` : ''}${r.version}/${r.resource}`;

/**
 * A cluster's sync registry as an antd `Table`: each resource the gateway
 * watches on it, with its phase, the objects held, how long in that phase
 * and its last error, by resource name. Live: rows change in place.
 * Renders nothing until it has a cluster.
 */
export function SyncRegistryTable({ client, cluster, pageSize = 20 }) {
  return cluster ? h(SyncTable, { client, cluster, pageSize }) : null;
}

function SyncTable({ client, cluster, pageSize }) {
  const now = useNow();
  const { data, status, error } = usePulseTopics(client, `clusters/${cluster}/sync/**`);
  const rows = useMemo(
    () =>
      Object.entries(data)
        .map(([topic, doc]) => ({ key: topic, topic, name: resourceName(doc.resource), doc }))
        .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
    [data],
  );
  const columns = [
    { title: 'Resource', key: 'resource', render: (_, r) => (r.doc.kind ? `${r.name} (${r.doc.kind})` : r.name) },
    {
      title: 'Phase',
      key: 'phase',
      render: (_, r) =>
        h(Badge, { status: SYNC_PHASE_STATUS[r.doc.phase] ?? 'default', text: `${r.doc.phase} (${r.doc.reason})` }),
    },
    { title: 'Objects', key: 'objects', align: 'right', render: (_, r) => r.doc.objects },
    { title: 'Since', key: 'since', render: (_, r) => sinceText(r.doc.since, now) },
    { title: 'Last error', key: 'error', render: (_, r) => r.doc.lastError ?? '' },
  ];
  const attrs = { className: 'kp-sync-registry', 'data-cluster': cluster, 'data-status': status, 'data-error': error?.code ?? '' };
  if (error) return h('div', attrs, h(Badge, { status: 'error', text: `${error.code}: ${error.message}` }));
  return h('div', attrs, h(Table, {
    size: 'small',
    rowKey: 'key',
    loading: status === 'loading',
    dataSource: rows,
    columns,
    pagination: rows.length > pageSize ? { pageSize } : false,
    onRow: (r) => ({ 'data-topic': r.topic, 'data-phase': r.doc.phase, 'data-objects': r.doc.objects }),
  }));
}
