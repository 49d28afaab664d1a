// Stores in the shape React's `useSyncExternalStore` takes, over a client's
// subscriptions (topicStore: any client, the core's too) and live queries
// (queryStore: the full client's `query`). The hooks in ./react.js are
// these stores and nothing more.

import { patternList, subscriptionOptions } from './documents.js';
import { tell } from './client.js';
import { liveQuery } from './query.js';

/**
 * A store over the documents matching `patterns`, in the shape React's
 * `useSyncExternalStore` wants: `subscribe(listener)` and `getSnapshot()`,
 * which returns `{data, status, error}` — the same object until something
 * changes. `data` is the documents by topic, or with `{single: true}` the
 * one document of an exact topic, with `asOf` (a Date or null) and `age`
 * (ms when its last heartbeat came, or null): how current it is.
 */
export function topicStore(client, patterns, { single = false, debounceMs, fields } = {}) {
  const list = patternList(patterns);
  const options = subscriptionOptions({ debounceMs, fields }) ?? undefined;
  const read = () => {
    const { status, error } = client.status(list, options);
    if (!single) return { data: client.select(list, options), status, error };
    const [topic] = list;
    return { data: client.get(topic, options), status, error, asOf: client.asOf(topic, options), age: client.age(topic, options) };
  };
  let snapshot = read();
  const listeners = new Set();
  let unsubscribe = null;
  const changed = (event) => {
    if (event.type === 'synced' || (event.type === 'heartbeat' && !single)) return; // its status event already came; nothing shown changed
    const next = read();
    if (single && ['data', 'status', 'error', 'age'].every((k) => next[k] === snapshot[k]) && +next.asOf === +snapshot.asOf) return;
    snapshot = next;
    tell(listeners);
  };
  return {
    subscribe(listener) {
      listeners.add(listener);
      if (!unsubscribe) {
        unsubscribe = client.subscribe(list, changed, options);
        snapshot = read();
      }
      return () => {
        listeners.delete(listener);
        if (!listeners.size && unsubscribe) {
          unsubscribe();
          unsubscribe = null;
        }
      };
    },
    getSnapshot() {
      return snapshot;
    },
  };
}

/**
 * A store over a live query, in the shape React's `useSyncExternalStore`
 * wants: `getSnapshot()` returns the query's result (`{rows, total,
 * groups?, next?, status, error}`), the same object until something
 * changes; the first listener subscribes the query, the last one gone ends it.
 */
export function queryStore(client, patterns, query = {}) {
  const list = patternList(patterns);
  const normalized = liveQuery(query);
  let snapshot = client.queryResult(list, normalized);
  const listeners = new Set();
  let stop = null;
  const changed = (result) => {
    if (result === snapshot) return;
    snapshot = result;
    tell(listeners);
  };
  return {
    subscribe(listener) {
      listeners.add(listener);
      if (!stop) {
        stop = client.query(list, normalized, changed);
        snapshot = client.queryResult(list, normalized);
      }
      return () => {
        listeners.delete(listener);
        if (!listeners.size && stop) {
          stop();
          stop = null;
        }
      };
    },
    getSnapshot() {
      return snapshot;
    },
  };
}
