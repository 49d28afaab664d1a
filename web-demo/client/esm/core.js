// `@kube-pulse/client/core`: the client's core alone (docs/WEB.md "Size"):
// one WebSocket with resume from cursors, the shared local copy in
// revision order, backoff with jitter and `Retry-After` pacing, auth
// retries, subscription options and how current each topic is (`asOf`).
// It leaves out SSE, live queries, hidden-tab pause, warm start and the
// REST helpers; the full client (`@kube-pulse/client`) is this class
// extended with them. The React hooks take either.

import { PulseClient } from './client.js';

export { PulseClient, PulseError, backoffDelay } from './client.js';
export { DocumentStore, matches, mergePatch, patternList, subscriptionOptions } from './documents.js';

/** A core client (WebSocket only). Nothing is opened until the first subscription. */
export function connect(options) {
  return new PulseClient(options);
}
