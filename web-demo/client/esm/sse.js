// Server-Sent Events, the full client's second transport: one stream per
// subscription over `fetch` with a stream reader (so that it can send
// `Authorization: Bearer …` and `Last-Event-ID`), used when forced
// (`transport: 'sse'`) or while WebSockets do not pass (`auto`), with
// WebSocket tried again every `wsRetryMs`. A token not yet accepted goes
// in one stream first (the scout), so that a refused token costs the
// address's auth-failure budget one failure, not one per stream.
// `KubePulse` (./kube-pulse.js) calls these with itself.

import { PulseError, gatewayUrl, httpError } from './client.js';
import { queryParameters, subscribing, unwindow } from './query.js';

/**
 * Incremental parser of a text/event-stream body. Feed it decoded text as
 * it arrives; it calls `onEvent({id, event, data})` for each complete event
 * (a `heartbeat` event too: it has no `id:` line, so `id` stays the last one).
 */
export function sseParser(onEvent) {
  let buffer = '';
  let event = { id: '', event: 'message', data: [] };
  const line = (text) => {
    if (text === '') {
      if (event.data.length > 0) onEvent({ id: event.id, event: event.event, data: event.data.join('\n') });
      event = { id: event.id, event: 'message', data: [] };
      return;
    }
    if (text.startsWith(':')) return; // a comment
    const colon = text.indexOf(':');
    const field = colon === -1 ? text : text.slice(0, colon);
    let value = colon === -1 ? '' : text.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'id') event.id = value;
    else if (field === 'event') event.event = value;
    else if (field === 'data') event.data.push(value);
  };
  return (chunk) => {
    buffer += chunk;
    let end;
    while ((end = buffer.search(/\r\n|\r|\n/)) !== -1) {
      // A CR ending the chunk may be the first half of a CRLF.
      if (buffer[end] === '\r' && end === buffer.length - 1) break;
      const text = buffer.slice(0, end);
      const skip = buffer[end] === '\r' && buffer[end + 1] === '\n' ? 2 : 1;
      buffer = buffer.slice(end + skip);
      line(text);
    }
  };
}

/** Unpadded base64url of a string's UTF-8 bytes. */
export function base64url(text) {
  let binary = '';
  for (const b of new TextEncoder().encode(text)) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** Ends `sub`'s stream, if any, without hearing from it again. */
export function stopStream(sub) {
  sub.abort?.abort();
  sub.abort = null;
  sub.streaming = false;
}

/** `sub`'s stream: `GET api/v1/events` with its patterns, options or query as parameters. */
function streamUrl(client, sub) {
  const url = gatewayUrl(client, 'api/v1/events');
  const params = url.searchParams;
  for (const p of sub.patterns) params.append('topic', p);
  if (sub.options?.debounceMs !== undefined) params.set('debounceMs', String(sub.options.debounceMs));
  for (const f of sub.options?.fields ?? []) params.append('field', f);
  if (sub.query) {
    queryParameters(params, sub.query);
    subscribing(sub, false);
  }
  return url;
}

/**
 * Whether `sub`'s stream would pass the cap on the client's open streams
 * (`maxStreams`; by default 5 on http:, none on https:), and if so `sub`
 * is in error `too_many_streams` instead. Over HTTP/1.1 a browser opens at
 * most 6 connections per origin and leaves the rest waiting, unanswered:
 * a stream past them would stay `loading` for ever with no error, and
 * requests (tasks, history) would wait behind the streams, so 5 leave one
 * for them. Over https: the browser speaks HTTP/2 (one connection, many
 * streams) where the gateway or its ingress does. A capped subscription
 * opens when a stream is released, at a reconnect, or over WebSocket.
 */
function capped(client, sub) {
  const cap = client.maxStreams ?? (client.base.protocol === 'http:' ? 5 : Infinity);
  let open = 0;
  for (const s of client.subs.values()) if (s.abort) open++;
  if (open < cap) return false;
  // After the caller's `subscribe` returned, so that its holder hears it too.
  queueMicrotask(() => {
    if (client.subs.get(sub.id) !== sub || sub.abort || sub.error?.code === 'too_many_streams') return;
    if (sub.query) unwindow(sub);
    const message = `${open} SSE streams are open, the most this client opens (maxStreams): use WebSocket, HTTPS (HTTP/2) or fewer subscriptions with more patterns each`;
    client.fail(sub, new PulseError('too_many_streams', message, { retrying: true }));
  });
  return true;
}

/** Opens `sub`'s stream (over the native `EventSource` with `eventSource: true`). */
export async function openStream(client, sub) {
  if (client.closed || client.subs.get(sub.id) !== sub || sub.dead) return;
  const token = client.currentToken();
  // A token not yet accepted over SSE goes in one stream first (the
  // scout); the others wait for its answer.
  const unproven = token && token !== client.sseToken;
  if ((unproven && client.scout && client.scout !== sub) || capped(client, sub)) return;
  if (unproven) client.scout = sub;
  const abort = new AbortController();
  sub.abort = abort;
  sub.fresh = new Set();
  const url = streamUrl(client, sub);
  if (client.eventSource) return client.openEventSource(sub, url, token, unproven);
  const headers = { Accept: 'text/event-stream' };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (sub.cursor && !sub.options) headers['Last-Event-ID'] = sub.cursor;
  try {
    const response = await client.fetch(url.href, { headers, signal: abort.signal, cache: 'no-store' }).finally(() => {
      if (client.scout === sub) client.scout = null;
    });
    const { status } = response;
    if (unproven && status !== 401 && status !== 403 && status !== 429 && client.transport === 'sse') {
      // The token passed: the streams that waited for it go now.
      client.sseToken = token;
      queueMicrotask(() => client.reconnectNow());
    }
    if (status >= 400 && status < 500) {
      if (sub.abort === abort) sub.abort = null;
      const error = await httpError(response);
      client.refused(sub, error);
      if (error.auth) client.schedule();
      if (error.code === 'too_many_auth_failures') {
        // The address is locked out: the streams waiting on this one hear it too.
        for (const other of client.subs.values()) if (other.status === 'loading') client.setStatus(other, 'error', error);
      }
      return;
    }
    if (!response.ok) throw new Error(`HTTP ${status}`);
    sub.streaming = true;
    client.setState('live');
    if (sub.status === 'error') client.setStatus(sub, sub.synced ? 'live' : 'loading');
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const feed = sseParser(({ data }) => {
      let message;
      try {
        message = JSON.parse(data);
      } catch {
        return;
      }
      if (client.subs.get(sub.id) === sub && sub.abort === abort) client.deliver(sub, message);
    });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      feed(decoder.decode(value, { stream: true }));
    }
  } catch {
    if (abort.signal.aborted) return; // whoever aborted it reset streaming
  }
  if (sub.abort === abort) {
    sub.abort = null;
    sub.streaming = false;
  }
  if (abort.signal.aborted || client.subs.get(sub.id) !== sub) return;
  sub.synced = false;
  if (sub.status === 'live') client.setStatus(sub, 'stale');
  if (client.auto && client.transport === 'sse' && !client.wsRetryTimer) retryWebSocketLater(client);
  client.schedule();
}

/**
 * With `auto` on SSE: a trial socket every `wsRetryMs`, without
 * subscriptions; only once it opens do the streams move over (resuming
 * from their cursors). The trial carries no token, as no socket of the
 * client does (the gateway takes the handshake and waits for `auth`): a
 * stale token in its handshake would cost the address's auth-failure
 * budget a failure at every trial, and the socket that follows sends the
 * token in its `auth` operation anyway.
 */
export function retryWebSocketLater(client) {
  clearTimeout(client.wsRetryTimer);
  client.wsRetryTimer = setTimeout(() => {
    client.wsRetryTimer = null;
    if (!client.active() || client.transport !== 'sse') return;
    let trial;
    try {
      trial = new client.WebSocket(gatewayUrl(client, 'api/v1/ws', true).href, ['kube-pulse']);
    } catch {
      retryWebSocketLater(client);
      return;
    }
    trial.onopen = () => {
      trial.onclose = null;
      trial.close(1000);
      if (!client.active() || client.transport !== 'sse' || client.paused) return;
      client.transport = 'ws';
      client.wsFailures = 0;
      for (const sub of client.subs.values()) stopStream(sub);
      client.openSocket();
    };
    trial.onclose = () => retryWebSocketLater(client);
  }, client.wsRetryMs);
}
