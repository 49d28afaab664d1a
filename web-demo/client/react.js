// React bindings for the kube-pulse client (React 18+). Kept apart from
// kube-pulse.js so that the client itself needs no React.

import { useEffect, useMemo, useState, useSyncExternalStore } from 'react';
import { topicStore } from './kube-pulse.js';

/**
 * The live documents matching `patterns` (a pattern or an array of them), as
 * an object keyed by topic. Re-renders when one of them changes; shares the
 * client's connection with every other hook.
 */
export function useTopic(client, patterns) {
  const key = [].concat(patterns).join('\n');
  // One store per client and pattern set; its snapshot object is stable
  // between changes, as useSyncExternalStore requires.
  const store = useMemo(() => topicStore(client, key.split('\n')), [client, key]);
  return useSyncExternalStore(store.subscribe, store.getSnapshot, store.getSnapshot);
}

/** One document by exact topic, or undefined while it is not there. */
export function useDocument(client, topic) {
  return useTopic(client, topic)[topic];
}

/** The client's connection state: `connecting`, `live`, `reconnecting` or `offline`. */
export function useConnectionState(client) {
  const [state, setState] = useState(client.state);
  useEffect(() => {
    setState(client.state);
    return client.onState(setState);
  }, [client]);
  return state;
}
