// Requests beside the push stream, the full client's: the gateway's REST
// API with the bearer token (tasks, history, the cookie session's end) and
// the WebSocket `auth` operation that renews a live socket's token.
// `KubePulse` (./kube-pulse.js) calls these with itself.

import { PulseError, gatewayUrl, newId } from './client.js';

/**
 * A JSON request to the gateway with the bearer token; throws a
 * `PulseError`: with `status` when the gateway answered with an error,
 * `unreachable` (no `status`, `retrying`, the failure as its `cause`) when
 * no answer came (the network, a gateway down, a request the browser
 * refused, e.g. for CORS), so that callers look at `code` alone.
 */
export async function request(client, method, path, body) {
  const headers = { Accept: 'application/json' };
  const token = client.currentToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const url = gatewayUrl(client, path.replace(/^\//, '')).href;
  let response, text;
  try {
    response = await client.fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    text = await response.text();
  } catch (cause) {
    const error = new PulseError('unreachable', `no answer from the gateway: ${cause?.message ?? cause}`, { retrying: true });
    error.cause = cause;
    throw error;
  }
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) {
    throw new PulseError(json?.code ?? `http_${response.status}`, json?.message ?? `HTTP ${response.status}`, {
      status: response.status,
      retrying: false,
    });
  }
  return json;
}

/**
 * Renews the token of the live WebSocket with the `auth` operation (same
 * subject and grants); resolves with its answer. Over SSE the next request
 * carries the new token, so this resolves at once.
 */
export function renewToken(client, token) {
  if (client.transport !== 'ws' || !client.wsReady()) return Promise.resolve(undefined);
  const id = newId('a');
  return new Promise((resolve, reject) => {
    client.pending.set(id, { resolve, reject });
    client.send({ op: 'auth', token, id });
  });
}

/** The answer to a `renewToken` (true), or another message (false). */
export function answered(client, message) {
  const pending = message.id && client.pending.get(message.id);
  if (!pending) return false;
  client.pending.delete(message.id);
  if (message.type === 'error') pending.reject(new PulseError(message.code, message.message));
  else pending.resolve(message);
  return true;
}

/** The connection closed under the requests still waiting for an answer. */
export function abandon(client) {
  for (const [, p] of client.pending) p.reject(new PulseError('closed', 'the connection closed', { retrying: false }));
  client.pending.clear();
}
