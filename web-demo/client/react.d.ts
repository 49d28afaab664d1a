import type {
  ConnectionState,
  DocumentFor,
  JsonPointer,
  KubePulse,
  LiveQuery,
  LiveQueryResult,
  Projected,
  PulseClient,
  PulseDocumentResult,
  PulseError,
  PulseResult,
  QueryFilter,
  SubscribeOptions,
  SubscriptionStatus,
  WholeQuery,
} from './kube-pulse.js';

// The document hooks take any client (`PulseClient`: the core's, or the
// full `KubePulse`); the live query hooks the full client.

/**
 * One document by exact topic, typed by it: `usePulse(client, 'clusters/dev').data`
 * is a `ClusterStatus`; with `asOf` and `age`, how current it is (new at each heartbeat).
 */
export function usePulse<T extends string>(client: PulseClient, topic: T): PulseDocumentResult<DocumentFor<T> | undefined>;
/** The same, coalesced and/or projected (`{debounceMs, fields}`): any member may be absent. */
export function usePulse<T extends string>(
  client: PulseClient,
  topic: T,
  options: SubscribeOptions,
): PulseDocumentResult<Projected<DocumentFor<T>> | undefined>;
/** The documents matching `patterns`, keyed by topic. */
export function usePulseTopics<T extends string>(
  client: PulseClient,
  patterns: T | readonly T[],
): PulseResult<Record<string, DocumentFor<T>>>;
/** The same, coalesced and/or projected (`{debounceMs, fields}`). */
export function usePulseTopics<T extends string>(
  client: PulseClient,
  patterns: T | readonly T[],
  options: SubscribeOptions,
): PulseResult<Record<string, Projected<DocumentFor<T>>>>;
/** The live documents matching `patterns`, keyed by topic. */
export function useTopic<T extends string>(client: PulseClient, patterns: T | readonly T[]): Record<string, DocumentFor<T>>;
export function useTopic<T extends string>(
  client: PulseClient,
  patterns: T | readonly T[],
  options: SubscribeOptions,
): Record<string, Projected<DocumentFor<T>>>;
/** One document by exact topic, or undefined while it is not there. */
export function useDocument<T extends string>(client: PulseClient, topic: T): DocumentFor<T> | undefined;
export function useDocument<T extends string>(client: PulseClient, topic: T, options: SubscribeOptions): Projected<DocumentFor<T>> | undefined;
/** The client's connection state: `idle`, `connecting`, `live`, `reconnecting`, `offline` or `paused` (a hidden tab's). */
export function useConnectionState(client: PulseClient): ConnectionState;

/**
 * A live query's result, equal to the gateway's window: `{rows, total,
 * groups?, next?, status, error}`, rows typed by the patterns. Options are
 * compared by value: a new object with the same members keeps the subscription.
 */
export function useLiveQuery<T extends string>(
  client: KubePulse,
  patterns: T | readonly T[],
  options?: WholeQuery,
): LiveQueryResult<DocumentFor<T>>;
/** With `fields`, rows carry projected documents. */
export function useLiveQuery<T extends string>(
  client: KubePulse,
  patterns: T | readonly T[],
  options: LiveQuery,
): LiveQueryResult<Projected<DocumentFor<T>>>;
/** How many documents of `patterns` pass `filter` (a live query with `limit: 0`). */
export function useCount(
  client: KubePulse,
  patterns: string | readonly string[],
  filter?: QueryFilter,
): { count: number; status: SubscriptionStatus; error: PulseError | null };
/** The documents of `patterns` that pass `filter`, counted by the value at `pointer` (missing or null under `""`). */
export function useGroupBy(
  client: KubePulse,
  patterns: string | readonly string[],
  pointer: JsonPointer,
  filter?: QueryFilter,
): { groups: Readonly<Record<string, number>>; total: number; status: SubscriptionStatus; error: PulseError | null };
