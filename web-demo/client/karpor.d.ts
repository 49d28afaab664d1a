import type { ReactElement } from 'react';
import type { ClusterPhase, PulseClient, PulseError, SubscriptionStatus, SyncPhase } from './kube-pulse.js';

/** antd `Badge` statuses. */
export type BadgeStatus = 'success' | 'processing' | 'default' | 'error' | 'warning';

/** antd `Badge` status of each cluster phase. */
export const CLUSTER_PHASE_STATUS: Readonly<Record<ClusterPhase, BadgeStatus>>;
/** antd `Badge` status of each sync phase. */
export const SYNC_PHASE_STATUS: Readonly<Record<SyncPhase, BadgeStatus>>;

/** How long ago `since` (RFC 3339) was, short: `42s`, `5m`, `3h`, `2d`; '' when unknown. */
export function sinceText(since: string | undefined, now?: number): string;

/**
 * How old (ms, `asOf`'s age) a badge's cluster may be before it shows as
 * stale by default: 45 000, three heartbeats of the gateway's default
 * period (15 s).
 */
export const STALE_AFTER_MS: number;

/**
 * A cluster's phase as an antd `Badge` (`Healthy (Ready) · 5m`, its message
 * in a `Tooltip`), live; grey and `· reconnecting` while the connection is
 * lost; grey and `· as of 2m ago` when what the gateway knows of the member
 * is older than `staleAfterMs` (default `STALE_AFTER_MS`; with
 * `--heartbeat-seconds N`, about `3 * N * 1000`); nothing until `name` is known.
 */
export function ClusterPhaseBadge(props: { client: PulseClient; name: string | undefined; staleAfterMs?: number | undefined }): ReactElement | null;

/**
 * The cluster list's tabs, live, in the shape of Karpor's cluster summary
 * (`/rest-api/v1/clusters?summary=true`); unhealthy is every cluster not `Healthy`.
 */
export function useClusterSummary(client: PulseClient): {
  totalCount: number;
  healthyCount: number;
  unhealthyCount: number;
  healthyClusters: string[];
  unhealthyClusters: string[];
  status: SubscriptionStatus;
  error: PulseError | null;
};

/** A cluster's sync registry as an antd `Table`, live; nothing until `cluster` is known. */
export function SyncRegistryTable(props: { client: PulseClient; cluster: string | undefined; pageSize?: number | undefined }): ReactElement | null;
