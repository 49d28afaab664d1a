// Types of the kube-pulse client and of the documents it delivers
// (docs/STATUS.md, docs/TASKS.md, docs/PROTOCOL.md).

export type ConnectionState = 'connecting' | 'live' | 'reconnecting' | 'offline';
export const STATES: readonly ConnectionState[];

/** One recorded phase change of a status document. */
export interface Transition {
  from: string;
  to: string;
  reason: string;
  at: string;
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

export type ClusterPhase = 'Pending' | 'Initializing' | 'Healthy' | 'Degraded' | 'Unhealthy' | 'Removed';

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
  resources: { total: number; synced: number; failing: number };
}

export type SyncPhase = 'Pending' | 'Listing' | 'Syncing' | 'Error' | 'Backoff' | 'Stopped';

/** `clusters/{cluster}/sync/{group}/{version}/{resource}` */
export interface SyncStatus extends Lifecycle<SyncPhase> {
  cluster: string;
  resource: { group: string; version: string; resource: string };
  objects: number;
  resourceVersion?: string;
  lastEventAt?: string;
  retryAt?: string;
  lastError?: string;
}

export type AppPhase = 'Running' | 'Degraded' | 'Stopped' | 'NotExisted' | 'Panic';
export type TransitionalState = 'Starting' | 'Stopping' | 'Deleting' | 'Updating';

export interface WorkloadView {
  kind: 'Deployment' | 'StatefulSet';
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
  expected: number;
  ready: number;
  /** Keyed by `Kind/name`, e.g. `Deployment/web`. */
  workloads: Record<string, WorkloadView>;
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
  replicas?: number;
  image?: string;
  executor?: 'builtin' | 'external';
  timeoutSeconds?: number;
}

/** A change of one local document, as `subscribe` reports it. */
export interface DocumentChange<D = unknown> {
  type: 'snapshot' | 'patch' | 'removed';
  topic: string;
  rev?: number;
  /** The document after the change (undefined when removed). */
  doc: D | undefined;
  previous: D | undefined;
  patch?: object;
}

export type SubscriptionEvent<D = unknown> =
  | DocumentChange<D>
  | { type: 'synced'; resumed: boolean; reason?: string }
  | { type: 'error'; code: string; message: string };

/** Wire messages (docs/PROTOCOL.md). */
export type Message =
  | { type: 'snapshot'; topic: string; rev: number; cursor: string; doc: object; sub?: string }
  | { type: 'patch'; topic: string; rev: number; cursor: string; patch: object; sub?: string }
  | { type: 'removed'; topic: string; rev?: number; cursor: string; sub?: string }
  | { type: 'synced'; cursor: string; resumed: boolean; count: number; reason?: string; sub?: string }
  | { type: 'heartbeat'; cursor: string; id?: string }
  | { type: 'error'; code: string; message: string; id?: string };

export interface BackoffOptions {
  initialMs?: number;
  maxMs?: number;
  factor?: number;
  jitter?: number;
}

export interface ConnectOptions {
  /** Base URL of the gateway, e.g. `https://karpor.example.com/pulse/`. */
  url: string;
  /** Bearer token, or a getter read at each (re)connect. */
  token?: string | (() => string | undefined | null);
  transport?: 'ws' | 'sse' | 'auto';
  backoff?: BackoffOptions;
  WebSocket?: typeof WebSocket;
  fetch?: typeof fetch;
}

export class KubePulse {
  readonly state: ConnectionState;
  onState(listener: (state: ConnectionState) => void): () => void;
  get<D = unknown>(topic: string): D | undefined;
  select<D = unknown>(patterns: string | string[]): Record<string, D>;
  subscribe<D = unknown>(patterns: string | string[], onChange?: (event: SubscriptionEvent<D>) => void): () => void;
  close(): void;
  request<T = unknown>(method: string, path: string, body?: unknown): Promise<T>;
  createTask(task: TaskRequest): Promise<Task>;
  cancelTask(id: string): Promise<Task>;
}

export function connect(options: ConnectOptions): KubePulse;
export function backoffDelay(attempt: number, options?: BackoffOptions, random?: () => number): number;
export function matches(pattern: string, topic: string): boolean;
export function base64url(text: string): string;
export function mergePatch<T>(target: T, patch: unknown): T;
export function sseParser(onEvent: (event: { id: string; event: string; data: string }) => void): (chunk: string) => void;

export class DocumentStore {
  get<D = unknown>(topic: string): D | undefined;
  select<D = unknown>(patterns: string[]): Record<string, D>;
}

export function topicStore<D = unknown>(
  client: KubePulse,
  patterns: string | string[],
): { subscribe(listener: () => void): () => void; getSnapshot(): Record<string, D> };
