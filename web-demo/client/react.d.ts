import type { ConnectionState, DocumentFor, KubePulse, Projected, PulseResult, SubscribeOptions } from './kube-pulse.js';

/** One document by exact topic, typed by it: `usePulse(client, 'clusters/dev').data` is a `ClusterStatus`. */
export function usePulse<T extends string>(client: KubePulse, topic: T): PulseResult<DocumentFor<T> | undefined>;
/** The documents matching `patterns`, keyed by topic. */
export function usePulseTopics<T extends string>(
  client: KubePulse,
  patterns: T | readonly T[],
): PulseResult<Record<string, DocumentFor<T>>>;
/** The same, coalesced and/or projected (`{debounceMs, fields}`). */
export function usePulseTopics<T extends string>(
  client: KubePulse,
  patterns: T | readonly T[],
  options: SubscribeOptions,
): PulseResult<Record<string, Projected<DocumentFor<T>>>>;
/** The live documents matching `patterns`, keyed by topic. */
export function useTopic<T extends string>(client: KubePulse, patterns: T | readonly T[]): Record<string, DocumentFor<T>>;
export function useTopic<T extends string>(
  client: KubePulse,
  patterns: T | readonly T[],
  options: SubscribeOptions,
): Record<string, Projected<DocumentFor<T>>>;
/** One document by exact topic, or undefined while it is not there. */
export function useDocument<T extends string>(client: KubePulse, topic: T): DocumentFor<T> | undefined;
/** The client's connection state. */
export function useConnectionState(client: KubePulse): ConnectionState;
