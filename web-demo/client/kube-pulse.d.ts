// Types of the kube-pulse client and of the documents it delivers
// (docs/STATUS.md, docs/TASKS.md, docs/PROTOCOL.md): the full client
// (`KubePulse`, `@kube-pulse/client`) and the core it extends
// (`PulseClient`, also `@kube-pulse/client/core`, whose types core.d.ts
// takes from here).

/** `idle`: nothing is subscribed, so nothing is open. */
/** `paused`: the tab is hidden and its subscriptions wait, from their cursors, for it to be shown. */
export type ConnectionState = 'idle' | 'connecting' | 'live' | 'reconnecting' | 'offline' | 'paused';
export const STATES: readonly ConnectionState[];

/** One recorded phase change of a status document (an entry of its `history`, keyed there by its number). */
export interface Transition {
  from: string;
  to: string;
  reason: string;
  at: string;
}

/** A transition as `GET /api/v1/history` lists it: with its number. */
export interface NumberedTransition extends Transition {
  /** The key it has in the document's `history` (1, 2, …; it goes on counting past the last 20 kept). */
  number: number;
}

/** Fields every status document shares. */
export interface Lifecycle<P extends string> {
  phase: P;
  reason: string;
  message: string;
  /** When the current phase began (RFC 3339, milliseconds). */
  since: string;
  /**
   * The last 20 transitions keyed by their number (`"1"`, `"2"`, …) — an
   * object so that merge patches carry only new entries. JavaScript iterates
   * such keys in ascending order: `Object.values(doc.history)` is oldest
   * first; `transitions(doc)` does the same.
   */
  history: Record<string, Transition>;
}

/** A document's history, oldest first. */
export function transitions(doc: { history?: Record<string, Transition> }): Transition[];

/** `Unknown` only for a push member whose agent is not heard from (`AgentLost`). */
export type ClusterPhase = 'Pending' | 'Initializing' | 'Healthy' | 'Degraded' | 'Unhealthy' | 'Unknown' | 'Removed';

/** A push member's documents are stale while its agent is lost (docs/AGENT.md). */
export interface Stale {
  reason: 'AgentLost';
  since: string;
}

/** `clusters/{cluster}` */
export interface ClusterStatus extends Lifecycle<ClusterPhase> {
  name: string;
  server: string;
  probe: {
    latencyMs?: number;
    lastError?: string;
    serverVersion?: string;
    consecutiveSuccesses: number;
    consecutiveFailures: number;
  };
  resources: { total: number; synced: number; failing: number; notServed?: number };
  /**
   * What the gateway holds of the member. `objects` is exact after each
   * completed list and then moves only by more than a tenth (docs/STATUS.md).
   */
  cache: { objects: number; lastListAt: string | null };
  /** The member's nodes and their sums (docs/STATUS.md); absent before the first node list. */
  nodes?: {
    total: number;
    ready: number;
    unschedulable: number;
    capacity: NodeResources;
    allocatable: NodeResources;
  };
  /** Its pods and their requests; absent without the pod watch. Coarsened like `cache.objects`. */
  pods?: { total: number; running: number; requests: { cpuMillis: number; memoryBytes: number } };
  /** When the member's credentials expire, when that can be read. */
  credentials?: { kind: 'ClientCertificate' | 'Token'; expires: string };
  /** What to act on before it fails; absent when nothing. */
  warnings?: { reason: 'CredentialsExpiring' | 'CredentialsExpired' | 'ClockSkew' | 'ResourceNotServed'; message: string }[];
  /** `push` for a member whose agent publishes its status (docs/AGENT.md); absent when pulled. */
  mode?: 'push';
  /** A push member's agent as the hub sees it. */
  agent?: { connected: boolean; lastHeartbeatAt: string | null; version: string | null };
}

/** CPU in millicores, memory in bytes, pods. */
export interface NodeResources {
  cpuMillis: number;
  memoryBytes: number;
  pods: number;
}

export type SyncPhase = 'Pending' | 'Listing' | 'Syncing' | 'Error' | 'Backoff' | 'NotServed' | 'Stopped';

/** `clusters/{cluster}/sync/{group}/{version}/{resource}` */
export interface SyncStatus extends Lifecycle<SyncPhase> {
  cluster: string;
  resource: { group: string; version: string; resource: string };
  /** The resource's kind (`Deployment`), once known from discovery. */
  kind?: string;
  objects: number;
  resourceVersion?: string;
  lastEventAt?: string;
  retryAt?: string;
  lastError?: string;
  /** A push member's document while its agent is lost. */
  stale?: Stale;
}

export type AppPhase = 'Running' | 'Degraded' | 'Stopped' | 'NotExisted' | 'Panic';
export type TransitionalState = 'Starting' | 'Stopping' | 'Deleting' | 'Updating';

/**
 * A workload's kind: the built-in ones, those the built-in health rules
 * read (KusionStack `CollaSet`, OpenKruise `CloneSet`, Argo `Rollout`), or
 * any kind a configured health rule names (docs/STATUS.md "Health rules").
 */
export type WorkloadKind = 'Deployment' | 'StatefulSet' | 'CollaSet' | 'CloneSet' | 'Rollout' | (string & {});

export interface WorkloadView {
  kind: WorkloadKind;
  name: string;
  generation: number;
  observedGeneration: number;
  expected: number;
  replicas: number;
  ready: number;
  updated: number;
  available: number;
  health: 'Current' | 'InProgress' | 'Failed' | 'Terminating';
  message: string;
  images: string[];
}

/** The active task's slot in an app document. */
export interface ActiveTask {
  id: string;
  state: TransitionalState;
  status: TaskStatus;
  progress: number;
}

/** `apps/{cluster}/{namespace}/{app}` */
export interface AppStatus extends Lifecycle<AppPhase> {
  cluster: string;
  namespace: string;
  app: string;
  /** The active task's transitional state, else `phase`. */
  state: AppPhase | TransitionalState;
  task?: ActiveTask;
  /** A push member's document while its agent is lost. */
  stale?: Stale;
  expected: number;
  ready: number;
  /** Keyed by `Kind/name`, e.g. `Deployment/web`. */
  workloads: Record<string, WorkloadView>;
  /** The app's pods; absent while the gateway's pod watch is off. */
  pods?: PodsSummary;
  /**
   * `false` while the member's pods are not watched because no client
   * looks at its apps (`podWatch.onDemand`; docs/STATUS.md "Pods on
   * demand"): no `pods` and no `lastWarning` then. Absent otherwise.
   */
  podsWatched?: false;
  /** The latest Warning event about the app's workloads and pods. */
  lastWarning?: WarningEvent;
}

/** Why a pod does not serve, worst first. */
export type PodReason =
  | 'OOMKilled' | 'CrashLoopBackOff' | 'ImagePullBackOff' | 'ErrImagePull'
  | 'CreateContainerConfigError' | 'ContainerError' | 'Unschedulable' | 'NotReady';

/** One pod's problem in an app document. */
export interface PodProblem {
  pod: string;
  /** Absent for a pod that was never scheduled. */
  container?: string;
  reason: PodReason;
  message: string;
  restarts: number;
  exitCode?: number;
}

/** An app's pods: counts and the first five problems, worst first. */
export interface PodsSummary {
  total: number;
  ready: number;
  problems: PodProblem[];
  /** Problems not listed. */
  more: number;
}

/** A Warning event (core/v1), as the app document shows its latest. */
export interface WarningEvent {
  reason: string;
  message: string;
  /** `Kind/name` of the object it is about, e.g. `Pod/web-7d9c-x2k4q`. */
  object: string;
  count: number;
  /** RFC 3339. */
  lastSeen: string;
}

export type TaskType = 'Create' | 'Start' | 'Stop' | 'Delete' | 'Update';
export type TaskStatus = 'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Cancelled';

/** `tasks/{id}` and the tasks API. */
export interface Task {
  id: string;
  type: TaskType;
  executor: 'builtin' | 'external';
  target: { cluster: string; namespace: string; app: string };
  replicas?: number;
  image?: string;
  timeoutSeconds: number;
  state: TransitionalState;
  status: TaskStatus;
  progress: number;
  reason?: string;
  message: string;
  created: string;
  updated: string;
  finished?: string;
  revision: number;
}

export interface TaskRequest {
  type: TaskType;
  cluster: string;
  namespace: string;
  app: string;
  replicas?: number | undefined;
  image?: string | undefined;
  executor?: 'builtin' | 'external' | undefined;
  timeoutSeconds?: number | undefined;
}

/**
 * The document type of a topic or pattern: `clusters/dev` is a
 * `ClusterStatus`, `apps/prod/**` an `AppStatus`, `clusters/**` either
 * a cluster or a sync document; a union of patterns the union of their
 * documents. Unknown names (and a plain `string`) give `unknown`.
 */
export type DocumentFor<T extends string> = T extends `clusters/${string}/sync/${string}`
  ? SyncStatus
  : T extends `clusters/${string}/**`
    ? ClusterStatus | SyncStatus
    : T extends `clusters/**`
      ? ClusterStatus | SyncStatus
      : T extends `clusters/${string}/${string}`
        ? SyncStatus
        : T extends `clusters/${string}`
          ? ClusterStatus
          : T extends `apps/${string}`
            ? AppStatus
            : T extends `tasks/${string}`
              ? Task
              : T extends 'summary/clusters'
                ? ClusterSummary
                : T extends `summary/apps/${string}`
                  ? AppSummary
                  : unknown;

/** `summary/clusters` (docs/STATUS.md): clusters counted by phase, names sorted (at most 100 per phase). */
export interface ClusterSummary {
  total: number;
  phases: Partial<Record<ClusterPhase | 'Unknown', { count: number; names: string[] }>>;
}

/** `summary/apps/{cluster}/{namespace}`: a namespace's apps counted by state and by phase. */
export interface AppSummary {
  cluster: string;
  namespace: string;
  total: number;
  states: Partial<Record<AppPhase | TransitionalState | 'Unknown', number>>;
  phases: Partial<Record<AppPhase | 'Unknown', number>>;
}

/** The document type of a pattern or a list of them (a union of each's). */
export type DocumentOf<P extends string | readonly string[]> = P extends readonly string[] ? DocumentFor<P[number]> : P extends string ? DocumentFor<P> : unknown;

/** A change of one local document, as `subscribe` reports it. */
export type DocumentChange<D = unknown> =
  | { type: 'snapshot'; topic: string; rev: number; doc: D; previous: D | undefined }
  | { type: 'patch'; topic: string; rev: number; doc: D; previous: D; patch: object }
  | { type: 'removed'; topic: string; rev?: number; doc: undefined; previous: D };

// Optional members of what the client takes (options, queries, props) also
// take `undefined`, which means the same as leaving them out: so they pass
// under `exactOptionalPropertyTypes` with a value that may be undefined.

/** Per-subscription options (docs/PROTOCOL.md "Subscription options"). */
export interface SubscribeOptions {
  /** At most one message per topic per this many ms (50–60 000); the first change goes out at once. */
  debounceMs?: number | undefined;
  /** JSON pointers (1–32) the documents are projected onto, e.g. `['/phase', '/reason']`. */
  fields?: readonly JsonPointer[] | undefined;
}

/** A projected document: any member may be left out, at any depth. */
export type Projected<D> = D extends readonly unknown[] ? D : D extends object ? { [K in keyof D]?: Projected<D[K]> } : D;

/** Checks and normalizes options as the gateway does (fields sorted, duplicates dropped); null when none. Throws on bad ones. */
export function subscriptionOptions(options?: SubscribeOptions): { debounceMs?: number; fields?: string[] } | null;

/** A JSON value, as a filter compares with. */
export type JsonValue = string | number | boolean | null | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/** An RFC 6901 JSON pointer into a document: `/phase`, `/workloads/Deployment~1web/ready` (`~1` is `/`, `~0` is `~`). */
export type JsonPointer = `/${string}`;

/**
 * The nodes of a live query's filter (docs/PROTOCOL.md "Live queries"),
 * by operator. A node is an object with exactly one of them.
 */
export interface FilterOperators {
  /** The member equals the value (JSON equality; numbers by value). */
  eq: readonly [pointer: JsonPointer, value: JsonValue];
  /** Not `eq`: a missing member passes. */
  ne: readonly [pointer: JsonPointer, value: JsonValue];
  /** The member and the value are both numbers or both strings (by UTF-8 bytes), and compare so. */
  lt: readonly [pointer: JsonPointer, value: number | string];
  lte: readonly [pointer: JsonPointer, value: number | string];
  gt: readonly [pointer: JsonPointer, value: number | string];
  gte: readonly [pointer: JsonPointer, value: number | string];
  /** `eq` to one of 1–100 values. */
  in: readonly [pointer: JsonPointer, values: readonly JsonValue[]];
  /** The document has the member. */
  exists: JsonPointer;
  /** All of 1–32 nodes. */
  and: readonly QueryFilter[];
  /** Any of 1–32 nodes. */
  or: readonly QueryFilter[];
  /** The node does not pass. */
  not: QueryFilter;
}

/**
 * A live query's filter: `{eq: ['/phase', 'Running']}`, `{and: [{exists:
 * '/task'}, {gt: ['/ready', 0]}]}`. At most 4 096 bytes, 64 nodes, 8 levels.
 */
export type QueryFilter = {
  [K in keyof FilterOperators]: { [P in K]: FilterOperators[P] } & { [P in Exclude<keyof FilterOperators, K>]?: never };
}[keyof FilterOperators];

/** A sort field: a pointer, ascending, or `-` and a pointer, descending. Ties are broken by topic. */
export type SortField = JsonPointer | `-${JsonPointer}`;

/** A live query (docs/PROTOCOL.md "Live queries"); the gateway checks it (`bad_query`). */
export interface LiveQuery {
  /** Which documents are rows; none: every document of the patterns. */
  filter?: QueryFilter | undefined;
  /** At most 4 fields; none: by topic. */
  sort?: SortField | readonly SortField[] | undefined;
  /** Rows in the window, 0–500 (0: counts only); 50, or 0 with `groupBy`. */
  limit?: number | undefined;
  /** Rows skipped before the window, 0–10 000. */
  offset?: number | undefined;
  /** The window starts after this place in the order: the `next` of an earlier result with the same sort. */
  after?: string | undefined;
  /** Count matching documents by the value at this pointer (`groups`). */
  groupBy?: JsonPointer | undefined;
  /** Rows carry only these members (filter and sort still see whole documents). */
  fields?: readonly JsonPointer[] | undefined;
}

/** A live query's members as they go on the wire (limit filled in, sort a list, fields sorted); throws on bad fields. */
export function liveQuery(query?: LiveQuery): {
  filter?: QueryFilter;
  sort?: SortField[];
  limit: number;
  offset?: number;
  after?: string;
  groupBy?: JsonPointer;
  fields?: JsonPointer[];
};

/** One row of a live query's window. */
export interface LiveRow<D> {
  readonly topic: string;
  readonly rev: number;
  readonly doc: D;
}

/**
 * A live query's result: its window in order, how many documents match,
 * their counts per group (with `groupBy`), the `after` token of the next
 * page as the gateway's `rows` gave it (when rows follow the window), and
 * the subscription's status. A new object at each change.
 */
export interface LiveQueryResult<D> {
  readonly rows: readonly LiveRow<D>[];
  readonly total: number;
  /** Matching documents per value of `groupBy`; a missing or `null` member counts under `""`. */
  readonly groups?: Readonly<Record<string, number>>;
  readonly next?: string;
  readonly status: SubscriptionStatus;
  readonly error: PulseError | null;
}

/** What changed a live query's result. */
export type LiveQueryEvent =
  | { type: 'rows' }
  | { type: 'enter'; topic: string; index: number }
  | { type: 'leave'; topic: string; index: number }
  | { type: 'move'; topic: string; from: number; to: number }
  | { type: 'patch'; topic: string; index: number; rev: number }
  | { type: 'total'; total: number }
  | { type: 'groups'; groups: Record<string, number> }
  | { type: 'synced' }
  | { type: 'status'; status: SubscriptionStatus; error: PulseError | null }
  | { type: 'error'; code: ErrorCode; message: string; error: PulseError }
  /** A message did not fit the window: it was dropped and the query subscribed again. */
  | { type: 'reset'; reason: string };

/** A live query without `fields`: whole documents. */
export type WholeQuery = LiveQuery & { fields?: undefined };

/** Subscription states: `loading` until synced, `stale` while disconnected. */
export type SubscriptionStatus = 'loading' | 'live' | 'stale' | 'error';

/**
 * Every code the gateway sends (docs/PROTOCOL.md, the HTTP API's error
 * body, WebSocket `error` messages, SSE `error` events) and the client's own
 * (`websocket_refused`, `closed`, `unreachable`, `too_many_streams`,
 * `http_{status}`). client/test/error-codes.test.mjs checks this list
 * against the codes in the gateway's source, and the client's own against
 * docs/WEB.md.
 */
export type KnownErrorCode =
  // Requests: refused for what they ask, not retried.
  | 'bad_request'
  | 'bad_pattern'
  | 'bad_option'
  | 'bad_query'
  | 'invalid_json'
  | 'invalid_op'
  | 'unknown_op'
  | 'invalid_id'
  | 'duplicate_id'
  | 'unknown_subscription'
  | 'binary_not_supported'
  | 'not_found'
  | 'conflict'
  | 'unsupported_media_type'
  | 'misdirected_request'
  | 'forbidden_origin'
  // Credentials: the connection retries with the token of that time.
  | 'unauthorized'
  | 'unauthenticated'
  | 'forbidden'
  | 'token_expired'
  | 'permissions_changed'
  // Refusals for now: retried (after `Retry-After`), never terminal.
  | 'too_many_auth_failures'
  | 'too_many_connections'
  | 'too_many_subscriptions'
  | 'rate_limited'
  | 'unavailable'
  // The gateway's own failures (configuration, simulator, I/O), as error bodies.
  | 'invalid_config'
  | 'invalid_cluster'
  | 'invalid_settings'
  | 'kubeconfig'
  | 'read_failed'
  | 'simulator'
  | 'serve'
  | 'listen'
  // The client's (docs/WEB.md "Errors of the client"): a forced WebSocket that
  // cannot connect, the connection closed under a request, a request with no
  // answer, an SSE stream past `maxStreams`, an HTTP error without the gateway's body.
  | 'websocket_refused'
  | 'closed'
  | 'unreachable'
  | 'too_many_streams'
  | `http_${number}`;

/** A known code, or another string (a newer gateway's). */
export type ErrorCode = KnownErrorCode | (string & {});

/** An error from the gateway, or the client's own (docs/WEB.md "Errors of the client"). */
export class PulseError extends Error {
  constructor(code: ErrorCode, message?: string, options?: { status?: number | undefined; retrying?: boolean | undefined });
  readonly name: 'PulseError';
  /** The protocol's code, or `http_{status}`. */
  readonly code: ErrorCode;
  /** The HTTP status, when the error came as one. */
  readonly status?: number;
  /**
   * Whether it is a failure for now: a subscription's is tried again by
   * the client itself (rate limits, auth once the token changes,
   * `too_many_streams`); a request's (`unreachable`) is not sent again by
   * the client, but may pass when sent again.
   */
  readonly retrying: boolean;
  /** Whether the credential is the problem (`unauthorized`, `token_expired`, …). */
  readonly auth: boolean;
  /** What failed under it: for `unreachable`, the error `fetch` threw. */
  cause?: unknown;
}

/** The HTTP API's error body (every 4xx/5xx of the gateway). */
export interface ErrorBody {
  code: ErrorCode;
  message: string;
}

/** `GET /api/v1/clusters`, `/apps`, `/clusters/{name}/sync`. */
export interface ItemList<D> {
  items: D[];
}

/** `GET /api/v1/history?topic=…` */
export interface HistoryResponse {
  topic: string;
  /** The document's revision the history was read from. */
  rev: number;
  /** The current phase; `null` for a document without one (a task, a summary). */
  phase: string | null;
  /** When the current phase began (RFC 3339); `null` without a phase. */
  since: string | null;
  /** The last 20 transitions, oldest first. */
  history: NumberedTransition[];
}

/**
 * How current a subscription's member clusters are, from its heartbeat:
 * `at` the gateway's clock when it sent it, `asOf` per member cluster the
 * time its source was last known current (RFC 3339; a member never current
 * is absent). An entry that stops moving while `at` moves is a member lost.
 */
export interface Heartbeat {
  at: string;
  asOf: Record<string, string>;
}

export type SubscriptionEvent<D = unknown> =
  | DocumentChange<D>
  | { type: 'synced'; resumed: boolean; reason?: string }
  | { type: 'status'; status: SubscriptionStatus; error: PulseError | null }
  | { type: 'error'; code: ErrorCode; message: string; error: PulseError }
  /** At each of the subscription's heartbeats (every 15 s by default) and at a `synced` that carries `at` and `asOf`. */
  | ({ type: 'heartbeat' } & Heartbeat);

/** Wire messages (docs/PROTOCOL.md). */
export type Message =
  | { type: 'snapshot'; topic: string; rev: number; cursor: string; doc: object; sub?: string }
  | { type: 'patch'; topic: string; rev: number; cursor: string; patch: object; base?: number; sub?: string }
  | { type: 'subscribed'; topics: string[]; debounceMs?: number; fields?: string[]; query?: Omit<LiveQuery, 'fields'>; sub: string }
  | { type: 'rows'; cursor: string; total: number; rows: { topic: string; rev: number; doc: object }[]; groups?: Record<string, number>; next?: string; sub?: string }
  | { type: 'enter'; topic: string; rev: number; index: number; cursor: string; doc: object; sub?: string }
  | { type: 'leave'; topic: string; index: number; cursor: string; sub?: string }
  | { type: 'move'; topic: string; from: number; to: number; cursor: string; sub?: string }
  | { type: 'total'; total: number; cursor: string; sub?: string }
  | { type: 'groups'; groups: Record<string, number>; cursor: string; sub?: string }
  | { type: 'stopped'; reason: string; sub: string }
  | { type: 'removed'; topic: string; rev?: number; cursor: string; sub?: string }
  | { type: 'synced'; cursor: string; resumed: boolean; count: number; reason?: string; at?: string; asOf?: Record<string, string>; sub?: string }
  /** A `ping`'s answer (with `id`; its cursor is the gateway's), or a subscription's heartbeat (with `at`, `asOf` and, over WebSocket, `sub`). */
  | { type: 'heartbeat'; cursor: string; id?: string; at?: string; asOf?: Record<string, string>; sub?: string }
  | { type: 'error'; code: ErrorCode; message: string; id?: string; sub?: string }
  | { type: 'authenticated'; subject: string; expires?: string; id?: string };

/** Client operations over WebSocket. */
export type Operation =
  | { op: 'subscribe'; id: string; topics: string[]; since?: string; debounceMs?: number; fields?: string[] }
  | ({ op: 'subscribe'; id: string; topics: string[]; since?: string } & LiveQuery)
  | { op: 'unsubscribe'; id: string }
  | { op: 'ping'; id?: string }
  | { op: 'auth'; token: string; id?: string };

/** Reconnect delays: `initialMs` (500) growing by `factor` (2) up to `maxMs` (30 000), each shortened by up to `jitter` (0.5) at random. */
export interface BackoffOptions {
  initialMs?: number | undefined;
  maxMs?: number | undefined;
  factor?: number | undefined;
  jitter?: number | undefined;
}

export type TokenSource = string | (() => string | undefined | null);

/** What both clients take. */
export interface BaseConnectOptions {
  /**
   * Base URL of the gateway, e.g. `https://karpor.example.com/pulse/`, or
   * relative to the page (`/pulse/`): resolved at the first subscription or
   * request, so that a client made where there is no page (a server
   * render) does not throw until it is used there.
   */
  url: string;
  /** Bearer token, or a getter read at each (re)connect. */
  token?: TokenSource | undefined;
  /** A getter of the bearer token, read at each (re)connect and retry. */
  getToken?: (() => string | undefined | null) | undefined;
  backoff?: BackoffOptions | undefined;
  /** Subscribe operations per second at most (default 10; the gateway refuses over 20 per socket). */
  subscribeRate?: number | undefined;
  WebSocket?: typeof WebSocket | undefined;
  fetch?: typeof fetch | undefined;
}

/** The core client's options (`@kube-pulse/client/core`): WebSocket only. */
export interface CoreConnectOptions extends BaseConnectOptions {
  transport?: 'ws' | undefined;
}

export interface ConnectOptions extends BaseConnectOptions {
  /** `auto` (default): WebSocket; SSE only while WebSockets are blocked. */
  transport?: 'ws' | 'sse' | 'auto' | undefined;
  /** With `auto` on SSE: how often to try WebSocket again (default 60 000 ms). */
  wsRetryMs?: number | undefined;
  /**
   * A hidden tab (`visibilitychange`) closes its socket or streams after
   * this many ms, keeping documents and cursors, and resumes from the
   * cursors when shown (default 60 000; `null` or `Infinity`: never).
   */
  hiddenGraceMs?: number | null | undefined;
  /**
   * At most this many bytes of documents and cursors kept in
   * `sessionStorage` when the page is hidden or left, for its next load in
   * the tab to resume from instead of taking snapshots (default 524 288;
   * `false` or 0: none).
   */
  warmStart?: number | false | undefined;
  /**
   * With `transport: 'sse'`, same origin: streams over the native
   * `EventSource`, authorized by an HttpOnly cookie session the token is
   * traded for once (`POST api/v1/session`; docs/SECURITY.md).
   */
  eventSource?: boolean | undefined;
  EventSource?: typeof EventSource | undefined;
  /**
   * Over SSE, each subscription is one stream: at most this many are open,
   * and the subscriptions past them are the error `too_many_streams` until
   * one is released (default 5 when the gateway's URL is `http:`, where a
   * browser opens 6 connections per origin over HTTP/1.1 and requests need
   * one; no cap on `https:`, HTTP/2's many streams on one connection;
   * `Infinity`: none).
   */
  maxStreams?: number | undefined;
}

/** What hooks and `topicStore` snapshots hold. */
export interface PulseResult<T> {
  data: T;
  status: SubscriptionStatus;
  error: PulseError | null;
}

/**
 * One document's snapshot (`usePulse`, `topicStore(…, {single: true})`):
 * also how current it is. `asOf` is when its source was last known current
 * (null: unknown), `age` how old that was when the snapshot was taken (its
 * last heartbeat's `at` − `asOf`, plus the time since that heartbeat came:
 * the gateway's clock, not this machine's; null: unknown). The snapshot is
 * new at each heartbeat; `client.age(topic)` is the age now.
 */
export interface PulseDocumentResult<T> extends PulseResult<T> {
  asOf: Date | null;
  age: number | null;
}

/**
 * The core client (`@kube-pulse/client/core`, and what `KubePulse`
 * extends): one WebSocket, the shared local copy, resume, backoff, auth
 * retries, subscription options and how current each topic is.
 */
export class PulseClient {
  /** The same as the core's `connect(options)`: nothing is opened until the first subscription. */
  constructor(options: CoreConnectOptions);
  readonly state: ConnectionState;
  /** The transport in use now: `ws`, or `sse` (the full client, forced or while WebSockets are blocked). */
  readonly transport: 'ws' | 'sse';
  /** The last connection-level error (e.g. `unauthorized`), null once live. */
  readonly error: PulseError | null;
  onState(listener: (state: ConnectionState) => void): () => void;
  onError(listener: (error: PulseError) => void): () => void;
  get<T extends string>(topic: T): DocumentFor<T> | undefined;
  /** The copy kept by the subscription with these options. */
  get<T extends string>(topic: T, options: SubscribeOptions): Projected<DocumentFor<T>> | undefined;
  select<T extends string>(patterns: T | readonly T[]): Record<string, DocumentFor<T>>;
  select<T extends string>(patterns: T | readonly T[], options: SubscribeOptions): Record<string, Projected<DocumentFor<T>>>;
  status(patterns: string | readonly string[], options?: SubscribeOptions): { status: SubscriptionStatus; error: PulseError | null };
  /**
   * When the source of `topic`'s document was last known current (its
   * member cluster's last successful probe, or its agent's last
   * heartbeat), from the latest heartbeat of a subscription holding it
   * (with these options); null when unknown: no heartbeat yet, a topic of
   * no member, a member never current.
   */
  asOf(topic: string, options?: SubscribeOptions): Date | null;
  /** How old `asOf` is now, in ms of the gateway's clock (so this machine's clock does not matter); null when unknown. */
  age(topic: string, options?: SubscribeOptions): number | null;
  subscribe<T extends string>(
    patterns: T | readonly T[],
    onEvent?: (event: SubscriptionEvent<DocumentFor<T>>) => void,
  ): () => void;
  /** A subscription with options keeps its own (projected, coalesced) copy. */
  subscribe<T extends string>(
    patterns: T | readonly T[],
    onEvent: (event: SubscriptionEvent<Projected<DocumentFor<T>>>) => void,
    options: SubscribeOptions,
  ): () => void;
  subscribe<T extends string>(
    patterns: T | readonly T[],
    options: SubscribeOptions,
    onEvent?: (event: SubscriptionEvent<Projected<DocumentFor<T>>>) => void,
  ): () => void;
  /** Tries to connect again now, e.g. after the user logged in. */
  reconnect(): void;
  close(): void;
}

/** The full client (`@kube-pulse/client`): the core with SSE, live queries, hidden-tab pause, warm start and REST helpers. */
export class KubePulse extends PulseClient {
  /** The same as `connect(options)`: nothing is opened until the first subscription. */
  constructor(options: ConnectOptions);
  /**
   * A live query over the documents of `patterns`: `onChange` gets its
   * result, equal to the gateway's window, at each change. Returns the
   * function that ends it. Rows are typed by the patterns.
   */
  query<T extends string>(
    patterns: T | readonly T[],
    query: WholeQuery,
    onChange?: (result: LiveQueryResult<DocumentFor<T>>, event: LiveQueryEvent) => void,
  ): () => void;
  /** With `fields`, rows carry projected documents. */
  query<T extends string>(
    patterns: T | readonly T[],
    query: LiveQuery,
    onChange?: (result: LiveQueryResult<Projected<DocumentFor<T>>>, event: LiveQueryEvent) => void,
  ): () => void;
  /** The current result of that live query (`loading` with no rows when it is not subscribed). */
  queryResult<T extends string>(patterns: T | readonly T[], query?: WholeQuery): LiveQueryResult<DocumentFor<T>>;
  queryResult<T extends string>(patterns: T | readonly T[], query: LiveQuery): LiveQueryResult<Projected<DocumentFor<T>>>;
  /** Ends the cookie session of `eventSource: true` (`DELETE api/v1/session`), e.g. at logout. */
  endSession(): Promise<unknown>;
  /** Renews the live WebSocket's token with the `auth` operation. */
  renewToken(token?: string): Promise<{ type: 'authenticated'; subject: string; expires?: string } | undefined>;
  /** Pauses now, as a tab hidden past `hiddenGraceMs` does; `resume()` as one shown again. */
  pause(): void;
  resume(): void;
  /** Keeps in `sessionStorage` what the next load of the page in this tab resumes from (what `pagehide` does). */
  saveWarm(): void;
  /**
   * A JSON request to the gateway with the bearer token (so are
   * `createTask`, `cancelTask` and `history`); rejects with a `PulseError`:
   * the gateway's code with its `status`, or `unreachable` (no `status`,
   * `retrying`, what `fetch` threw as its `cause`) when no answer came.
   */
  request<T = unknown>(method: string, path: string, body?: unknown): Promise<T>;
  createTask(task: TaskRequest): Promise<Task>;
  cancelTask(id: string): Promise<Task>;
  history(topic: string): Promise<HistoryResponse>;
}

export function connect(options: ConnectOptions): KubePulse;
export function backoffDelay(attempt: number, options?: BackoffOptions, random?: () => number): number;
export function matches(pattern: string, topic: string): boolean;
/** The patterns as a list without duplicates; throws on a segment `undefined` or `null` (a template topic whose name was not known). */
export function patternList(patterns: string | readonly string[]): string[];
export function base64url(text: string): string;
export function mergePatch<T>(target: T, patch: unknown): T;
export function sseParser(onEvent: (event: { id: string; event: string; data: string }) => void): (chunk: string) => void;
export const STATUSES: readonly SubscriptionStatus[];

export class DocumentStore {
  get<D = unknown>(topic: string): D | undefined;
  select<D = unknown>(patterns: string[]): Record<string, D>;
}

export function topicStore<T extends string>(
  client: PulseClient,
  patterns: T | readonly T[],
  options?: { single?: false | undefined },
): { subscribe(listener: () => void): () => void; getSnapshot(): PulseResult<Record<string, DocumentFor<T>>> };
export function topicStore<T extends string>(
  client: PulseClient,
  patterns: T | readonly T[],
  options: { single?: false | undefined } & SubscribeOptions,
): { subscribe(listener: () => void): () => void; getSnapshot(): PulseResult<Record<string, Projected<DocumentFor<T>>>> };
export function topicStore<T extends string>(
  client: PulseClient,
  topic: T,
  options: { single: true },
): { subscribe(listener: () => void): () => void; getSnapshot(): PulseDocumentResult<DocumentFor<T> | undefined> };
export function topicStore<T extends string>(
  client: PulseClient,
  topic: T,
  options: { single: true } & SubscribeOptions,
): { subscribe(listener: () => void): () => void; getSnapshot(): PulseDocumentResult<Projected<DocumentFor<T>> | undefined> };

/** A live query as a store for React's `useSyncExternalStore`. */
export function queryStore<T extends string>(
  client: KubePulse,
  patterns: T | readonly T[],
  query?: WholeQuery,
): { subscribe(listener: () => void): () => void; getSnapshot(): LiveQueryResult<DocumentFor<T>> };
export function queryStore<T extends string>(
  client: KubePulse,
  patterns: T | readonly T[],
  query: LiveQuery,
): { subscribe(listener: () => void): () => void; getSnapshot(): LiveQueryResult<Projected<DocumentFor<T>>> };
