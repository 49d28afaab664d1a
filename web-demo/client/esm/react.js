// React bindings for the kube-pulse client (React 18+). Kept apart from
// the client so that the client itself needs no React. The document hooks
// take any client, the core's (`@kube-pulse/client/core`) too; the live
// query hooks need the full client's `query`.

import { useEffect, useMemo, useState, useSyncExternalStore } from 'react';
import { liveQuery } from './query.js';
import { queryStore, topicStore } from './stores.js';

function useStore(client, patterns, single, options = {}) {
  const key = [].concat(patterns).join('\n');
  const { debounceMs } = options;
  // By value: callers pass a new options object on every render.
  const fields = options.fields === undefined ? undefined : [].concat(options.fields).join('\n');
  // One store per client and pattern set; its snapshot object is stable
  // between changes, as useSyncExternalStore requires. The client shares
  // one wire subscription among every hook with the same patterns and
  // notifies each of every change to its topics.
  const store = useMemo(
    () => topicStore(client, key.split('\n'), { single, debounceMs, fields: fields?.split('\n') }),
    [client, key, single, debounceMs, fields],
  );
  return useSyncExternalStore(store.subscribe, store.getSnapshot, store.getSnapshot);
}

/**
 * One document by exact topic: `{data, status, error}`. `status` is
 * `loading` until the subscription's snapshots are in, then `live`; `stale`
 * while the connection is lost; `error` when the gateway refused it.
 */
export function usePulse(client, topic, options) {
  return useStore(client, topic, true, options);
}

/** The documents matching `patterns`, by topic: `{data, status, error}`. */
export function usePulseTopics(client, patterns, options) {
  return useStore(client, patterns, false, options);
}

/** The live documents matching `patterns`, keyed by topic (the data of `usePulseTopics`). */
export function useTopic(client, patterns, options) {
  return useStore(client, patterns, false, options).data;
}

/** One document by exact topic, or undefined while it is not there (the data of `usePulse`). */
export function useDocument(client, topic, options) {
  return useStore(client, topic, true, options).data;
}

/** The client's connection state: `idle`, `connecting`, `live`, `reconnecting`, `offline` or `paused` (a hidden tab's). */
export function useConnectionState(client) {
  const [state, setState] = useState(client.state);
  useEffect(() => {
    setState(client.state);
    return client.onState(setState);
  }, [client]);
  return state;
}

// ---- live queries ------------------------------------------------------------

const NO_GROUPS = Object.freeze({});

/**
 * A live query's result, kept equal to the gateway's window: `{rows,
 * total, groups?, next?, status, error}` (docs/PROTOCOL.md "Live
 * queries"). `options` is compared by value (its JSON): a new object with
 * the same members on every render keeps the subscription.
 */
export function useLiveQuery(client, patterns, options = {}) {
  const key = [].concat(patterns).join('\n');
  // Normalized (limit filled in, sort a list, fields sorted), then by value.
  const query = JSON.stringify(liveQuery(options));
  const store = useMemo(() => queryStore(client, key.split('\n'), JSON.parse(query)), [client, key, query]);
  return useSyncExternalStore(store.subscribe, store.getSnapshot, store.getSnapshot);
}

/** How many documents of `patterns` pass `filter` (a query of no rows): `{count, status, error}`. */
export function useCount(client, patterns, filter) {
  const result = useLiveQuery(client, patterns, { filter, limit: 0 });
  const { total, status, error } = result;
  return useMemo(() => ({ count: total, status, error }), [total, status, error]);
}

/**
 * The documents of `patterns` that pass `filter`, counted by the value at
 * `pointer` (a missing or null member under `""`): `{groups, total, status, error}`.
 */
export function useGroupBy(client, patterns, pointer, filter) {
  const result = useLiveQuery(client, patterns, { filter, groupBy: pointer, limit: 0 });
  const { groups = NO_GROUPS, total, status, error } = result;
  return useMemo(() => ({ groups, total, status, error }), [groups, total, status, error]);
}
