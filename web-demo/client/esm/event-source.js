// SSE over the browser's native `EventSource` with an HttpOnly cookie
// session (`connect({transport: 'sse', eventSource: true})`, same origin;
// docs/SECURITY.md "Cookie sessions"): the token is traded for the cookie
// once (`POST api/v1/session`, which checks it), and the streams carry no
// credential a script holds. `EventSource` does not say why a stream
// failed, so after one ends the cookie is asked for again, and that answer
// says. The full client's; ./sse.js opens these.

import { gatewayUrl, httpError } from './client.js';

/** The events a stream sends (`error` comes through `onerror`). */
const EVENTS = ['snapshot', 'patch', 'removed', 'synced', 'heartbeat', 'rows', 'enter', 'leave', 'move', 'total', 'groups'];

/** A refused HTTP answer as the refusal of `sub`. */
async function httpRefused(client, sub, response) {
  const error = await httpError(response);
  client.refused(sub, error);
  if (error.auth || error.status >= 500) client.schedule();
}

/** Opens `sub`'s stream at `url`; the scout (`unproven`) asks for the cookie with `token` first. */
export async function openEventSource(client, sub, url, token, unproven) {
  const abort = sub.abort;
  if (unproven) {
    let response;
    try {
      response = await client.fetch(gatewayUrl(client, 'api/v1/session').href, {
        method: 'POST',
        headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' },
        credentials: 'same-origin',
        signal: abort.signal,
      });
    } catch {
      response = null;
    }
    if (client.scout === sub) client.scout = null;
    if (abort.signal.aborted || client.subs.get(sub.id) !== sub) return;
    if (!response?.ok) {
      sub.abort = null;
      if (response) httpRefused(client, sub, response);
      else client.schedule();
      return;
    }
    client.sseToken = token;
    queueMicrotask(() => client.reconnectNow());
  }
  if (sub.cursor && !sub.options) url.searchParams.set('since', sub.cursor);
  const es = new client.EventSource(url.href, { withCredentials: true });
  abort.signal.addEventListener('abort', () => es.close());
  const mine = () => client.subs.get(sub.id) === sub && sub.abort === abort;
  const onMessage = (event) => {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    if (mine()) client.deliver(sub, message);
  };
  for (const type of EVENTS) es.addEventListener(type, onMessage);
  es.onopen = () => {
    if (!mine()) return;
    sub.streaming = true;
    client.setState('live');
    client.revive(sub);
  };
  es.onerror = (event) => {
    if (event.data) return onMessage(event); // the gateway's `error` event (token_expired, permissions_changed)
    if (!mine()) return;
    sub.streaming = false;
    if (sub.status === 'live') client.setStatus(sub, 'stale');
    // Connecting: the browser tries again by itself, from the last id.
    if (es.readyState !== 2) return;
    // Closed: refused (or not a stream). The cookie is asked for again.
    es.close();
    sub.abort = null;
    sub.synced = false;
    client.sseToken = undefined;
    client.schedule();
  };
}
