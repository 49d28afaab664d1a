import type { ConnectionState, KubePulse } from './kube-pulse';

/** The live documents matching `patterns`, keyed by topic. */
export function useTopic<D = unknown>(client: KubePulse, patterns: string | string[]): Record<string, D>;
/** One document by exact topic, or undefined while it is not there. */
export function useDocument<D = unknown>(client: KubePulse, topic: string): D | undefined;
/** The client's connection state. */
export function useConnectionState(client: KubePulse): ConnectionState;
