// Types of `@kube-pulse/client/core`: the core client alone (docs/WEB.md
// "Size"). Its types are the full client's (kube-pulse.d.ts), which
// declares the core class `PulseClient` that `KubePulse` extends.

import type { CoreConnectOptions, PulseClient } from './kube-pulse.js';

export { DocumentStore, PulseClient, PulseError, backoffDelay, matches, mergePatch, patternList, subscriptionOptions } from './kube-pulse.js';
export type {
  ActiveTask,
  AppPhase,
  AppStatus,
  AppSummary,
  BackoffOptions,
  BaseConnectOptions,
  ClusterPhase,
  ClusterStatus,
  ClusterSummary,
  ConnectionState,
  CoreConnectOptions,
  DocumentChange,
  DocumentFor,
  DocumentOf,
  ErrorBody,
  ErrorCode,
  Heartbeat,
  HistoryResponse,
  ItemList,
  JsonPointer,
  JsonValue,
  KnownErrorCode,
  Lifecycle,
  Message,
  NodeResources,
  NumberedTransition,
  Operation,
  PodProblem,
  PodReason,
  PodsSummary,
  Projected,
  PulseDocumentResult,
  PulseResult,
  Stale,
  SubscribeOptions,
  SubscriptionEvent,
  SubscriptionStatus,
  SyncPhase,
  SyncStatus,
  Task,
  TaskRequest,
  TaskStatus,
  TaskType,
  TokenSource,
  Transition,
  TransitionalState,
  WarningEvent,
  WorkloadKind,
  WorkloadView,
} from './kube-pulse.js';

/** A core client (WebSocket only). Nothing is opened until the first subscription. */
export function connect(options: CoreConnectOptions): PulseClient;
