// `@kube-pulse/client`: the full browser client, the core client
// (./client.js) extended with what the core leaves out (docs/WEB.md
// "Size"): Server-Sent Events over `fetch` (forced, or while WebSockets do
// not pass) and over the native `EventSource` with a cookie session, live
// queries, hidden-tab pause and warm start, and REST helpers. Each lives
// in its own module; this class wires them into the core's extension
// points. The gateway embeds the single-file build of this module
// (client/kube-pulse.js, written by client/build.mjs) for its page.

import { PulseClient } from './client.js';
import { openEventSource } from './event-source.js';
import { deliverQuery, query, queryResult, subscribing, unwindow } from './query.js';
import { abandon, answered, renewToken, request } from './rest.js';
import { openStream, retryWebSocketLater, stopStream } from './sse.js';
import { pause, resume, saveWarm, warmUp, watchPage } from './tab.js';

export { PulseClient, PulseError, STATES, STATUSES, backoffDelay } from './client.js';
export { DocumentStore, matches, mergePatch, patternList, subscriptionOptions, transitions } from './documents.js';
export { liveQuery } from './query.js';
export { base64url, sseParser } from './sse.js';
export { queryStore, topicStore } from './stores.js';

const TRANSPORTS = ['ws', 'sse', 'auto'];

/**
 * The full client. Nothing is opened until the first subscription.
 *
 * @param {object} options  the core's (`url`, `token`, `getToken`, `backoff`, `subscribeRate`) and:
 * @param {'ws'|'sse'|'auto'} [options.transport]  `auto` (default): WebSocket, SSE only when WebSockets are blocked
 * @param {number} [options.wsRetryMs]  `auto` on SSE: how often to try WebSocket again (default 60 s)
 * @param {number|null} [options.hiddenGraceMs]  a hidden tab's subscriptions pause after this long (default 60 s; null: never)
 * @param {number|false} [options.warmStart]  the most bytes of documents and cursors kept in `sessionStorage`
 *   for the next load of the page to resume from (default 512 KiB; false: none)
 * @param {boolean} [options.eventSource]  SSE over the native `EventSource` with an HttpOnly cookie session
 *   (same origin; the token is sent once, to `POST api/v1/session`)
 * @param {number} [options.maxStreams]  SSE streams open at most; the subscriptions past them are the error
 *   `too_many_streams` (default 5 on http:, HTTP/1.1's 6 connections per origin less one for requests; none on https:)
 */
export class KubePulse extends PulseClient {
  constructor(options = {}) {
    const { transport = 'auto', wsRetryMs = 60000, hiddenGraceMs = 60000, warmStart = 512 * 1024, eventSource = false, EventSource: ES, maxStreams } = options;
    if (!TRANSPORTS.includes(transport)) throw new Error(`kube-pulse: transport must be 'ws', 'sse' or 'auto', not ${transport}`);
    super({ ...options, transport });
    this.preferred = this.transport = transport === 'sse' ? 'sse' : 'ws';
    this.auto = transport === 'auto';
    this.wsRetryMs = wsRetryMs;
    /** SSE streams open at most (./sse.js); undefined: by the URL's scheme, once it is resolved. */
    this.maxStreams = maxStreams;
    this.eventSource = eventSource;
    this.EventSource = ES ?? globalThis.EventSource;
    /** `renewToken` operations waiting for their answer, by id. */
    this.pending = new Map();
    watchPage(this, hiddenGraceMs, warmStart);
  }

  // ---- the core's extension points ------------------------------------------

  start(sub) {
    warmUp(this, sub);
    super.start(sub);
  }

  open(sub) {
    if (this.transport === 'ws') super.open(sub);
    else this.openStream(sub);
  }

  openAll() {
    if (this.transport === 'ws') super.openAll();
    else for (const sub of this.subs.values()) if (!sub.abort && !sub.dead) this.openStream(sub);
  }

  resend(sub) {
    if (this.transport === 'ws') super.resend(sub);
    else if (!sub.abort) this.openStream(sub);
  }

  restart(sub) {
    if (this.transport === 'ws') return super.restart(sub);
    sub.synced = false;
    stopStream(sub);
    this.openStream(sub);
  }

  release(sub) {
    if (this.subs.get(sub.id) !== sub) return;
    stopStream(sub);
    if (this.scout === sub) {
      // The streams that waited for its answer go without it.
      this.scout = null;
      if (this.transport === 'sse') queueMicrotask(() => this.reconnectNow());
    }
    super.release(sub);
    // A stream is free: the subscriptions past the cap (`maxStreams`) try again, in order.
    if (this.transport === 'sse') for (const s of this.subs.values()) if (s.error?.code === 'too_many_streams') this.openStream(s);
  }

  idle() {
    this.wsRetryTimer = clearTimeout(this.wsRetryTimer);
    abandon(this);
    this.transport = this.preferred;
    super.idle();
  }

  close() {
    clearTimeout(this.hideTimer);
    super.close();
  }

  lost() {
    abandon(this);
    super.lost();
  }

  authRefused(error, except) {
    this.sseToken = undefined;
    super.authRefused(error, except);
  }

  streaming() {
    return this.transport === 'sse' && [...this.subs.values()].some((s) => s.streaming);
  }

  fallBack() {
    if (!this.auto) return false;
    // WebSockets cannot get through (a proxy, a policy): SSE for now, and
    // WebSocket again every wsRetryMs.
    this.transport = 'sse';
    retryWebSocketLater(this);
    this.openAll();
    return true;
  }

  route(message) {
    if (!answered(this, message)) super.route(message);
  }

  deliver(sub, message) {
    if (sub.query) deliverQuery(this, sub, message);
    else super.deliver(sub, message);
  }

  setStatus(sub, status, error = null) {
    // A live query's result carries its status: a new one before its holders hear.
    if (sub.query && !(sub.status === status && sub.error === error)) sub.window = Object.freeze({ ...sub.window, status, error });
    super.setStatus(sub, status, error);
  }

  refused(sub, error, retryAfterMs) {
    if (sub.query) unwindow(sub);
    super.refused(sub, error, retryAfterMs);
  }

  sendSubscribe(sub) {
    if (sub.query) subscribing(sub, true);
    super.sendSubscribe(sub);
  }

  // ---- SSE --------------------------------------------------------------------

  /** Opens `sub`'s stream (SSE over fetch, or the native `EventSource`). */
  openStream(sub) {
    return openStream(this, sub);
  }

  openEventSource(sub, url, token, unproven) {
    return openEventSource(this, sub, url, token, unproven);
  }

  /** Ends the cookie session (`DELETE api/v1/session`), e.g. at logout. */
  endSession() {
    this.sseToken = undefined;
    return this.request('DELETE', 'api/v1/session');
  }

  // ---- live queries -----------------------------------------------------------

  /**
   * A live query over the documents matching `patterns` (docs/PROTOCOL.md
   * "Live queries"): `query` is `{filter, sort, limit, offset, after,
   * groupBy, fields}`. `onChange(result, event)` gets the query's result —
   * `{rows: [{topic, rev, doc}], total, groups?, next?, status, error}`, a
   * new object at each change, equal to the gateway's window once the
   * messages of a change are applied — and what changed it: an operation
   * of the wire (`rows`, `enter`, `leave`, `move`, `patch`, `total`,
   * `groups`), `{type: 'synced'}`, `{type: 'status', status, error}`,
   * `{type: 'error', code, message, error}` (a refused query: `bad_query`
   * is not retried) or `{type: 'reset', reason}` (a message did not fit the
   * window: it was dropped and the query subscribed again). Queries with
   * the same patterns and members share one subscription on the wire.
   * Returns the function that ends it.
   */
  query(patterns, members = {}, onChange = () => {}) {
    return query(this, patterns, members, onChange);
  }

  /** The current result of the live query `query` over `patterns` (loading when it is not subscribed). */
  queryResult(patterns, members = {}) {
    return queryResult(this, patterns, members);
  }

  // ---- the page's life ----------------------------------------------------------

  /** Pauses now as a tab hidden past its grace does. */
  pause() {
    pause(this);
  }

  /** Resumes as a tab shown again does. */
  resume() {
    resume(this);
  }

  /** Keeps what the next load of this page in the tab resumes from (what `pagehide` does). */
  saveWarm() {
    saveWarm(this);
  }

  // ---- requests (tasks, REST) ---------------------------------------------------

  /** A JSON request to the gateway with the bearer token; throws a `PulseError` with `status`. */
  request(method, path, body) {
    return request(this, method, path, body);
  }

  /** `POST /api/v1/tasks`, e.g. `{type: 'Stop', cluster, namespace, app}`. */
  createTask(task) {
    return this.request('POST', 'api/v1/tasks', task);
  }

  /** `DELETE /api/v1/tasks/{id}`. */
  cancelTask(id) {
    return this.request('DELETE', `api/v1/tasks/${encodeURIComponent(id)}`);
  }

  /** `GET /api/v1/history?topic=…`: a document's phase transitions, oldest first. */
  history(topic) {
    return this.request('GET', `api/v1/history?topic=${encodeURIComponent(topic)}`);
  }

  /**
   * Renews the token of the live WebSocket with the `auth` operation (same
   * subject and grants); resolves with `{subject, expires?}`. Over SSE the
   * next request carries the new token, so this resolves at once.
   */
  renewToken(token = this.currentToken()) {
    return renewToken(this, token);
  }
}

/**
 * Connects to a gateway. Nothing is opened until the first subscription.
 * Options: see `KubePulse`.
 */
export function connect(options) {
  return new KubePulse(options);
}
