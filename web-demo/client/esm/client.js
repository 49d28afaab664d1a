// The core of the kube-pulse client, shared by both entries
// (`@kube-pulse/client/core` is this; `@kube-pulse/client` extends it):
// one WebSocket to a gateway and ONE local copy of every document its
// subscriptions match — snapshots first, then JSON merge patches — shared
// by every holder: a change is reported to every subscription whose
// patterns match its topic, whichever subscription brought it.
// Subscriptions with the same patterns share one subscription on the wire
// (ref-counted). It reconnects with exponential backoff and jitter (or when
// `Retry-After` says), resuming each subscription from its last cursor,
// keeps how current each subscription's members are from its heartbeats,
// and leaves no socket or timer behind once nothing is subscribed.
//
// The full client (kube-pulse.js) adds Server-Sent Events, live queries,
// hidden-tab pause, warm start and REST helpers by overriding the methods
// marked "extension point" below. Wire format: docs/PROTOCOL.md.

import { DocumentStore, asOfMs, keyOf, matchesAny, optionsKey, patternList, subscriptionOptions } from './documents.js';

/** Connection states: `idle` when nothing is subscribed, `paused` while a hidden tab's subscriptions are. */
export const STATES = /* @__PURE__ */ Object.freeze(['idle', 'connecting', 'live', 'reconnecting', 'offline', 'paused']);

/** Subscription states. */
export const STATUSES = /* @__PURE__ */ Object.freeze(['loading', 'live', 'stale', 'error']);

/** Error codes that mean the credential, not the request, is the problem. */
const AUTH_CODES = ['unauthorized', 'unauthenticated', 'token_expired', 'permissions_changed', 'forbidden'];
/** Error codes worth retrying after a while (the request itself was fine). */
const RETRY_CODES = [...AUTH_CODES, 'rate_limited', 'too_many_connections', 'too_many_subscriptions', 'too_many_auth_failures', 'unavailable'];

/** Faults of the request itself: the same request fails again, so only a new subscription retries. */
const permanent = (error) => !!error && !error.retrying && !error.auth && /^(bad_|invalid_|unknown_op|duplicate_id)/.test(error.code);

/**
 * An error from the gateway (or the client's own: `websocket_refused`,
 * `unreachable`, …): `code` is the protocol's (`bad_pattern`,
 * `rate_limited`, `unauthorized`, …, or `http_{status}`), `status` the HTTP
 * status when there was one, `retrying` whether it is a failure for now
 * (a subscription's the client tries again by itself; a request's may pass
 * when sent again), `auth` whether the credential is the problem.
 */
export class PulseError extends Error {
  constructor(code, message, { status, retrying = RETRY_CODES.includes(code) } = {}) {
    super(message || code);
    this.name = 'PulseError';
    this.code = code;
    this.status = status;
    this.retrying = retrying;
    this.auth = AUTH_CODES.includes(code);
  }
}

/**
 * A refused HTTP answer as a `PulseError` (its `{code, message}` body):
 * retried when its code says so and whenever it is a 429 or 503 (a refusal
 * for now: a lockout, a limit, a gateway starting), with `retryAfterMs`
 * from `Retry-After`.
 */
export async function httpError(response) {
  const body = await response.json().catch(() => ({}));
  const { status } = response;
  const code = body.code ?? `http_${status}`;
  const error = new PulseError(code, body.message ?? `HTTP ${status}`, {
    status,
    retrying: RETRY_CODES.includes(code) || status === 429 || status === 503,
  });
  const after = Number(response.headers?.get?.('Retry-After'));
  if (after > 0) error.retryAfterMs = after * 1000;
  return error;
}

/**
 * Delay before reconnect attempt `attempt` (0-based): exponential growth
 * capped at `maxMs`, minus a random share of up to `jitter` so that many
 * clients dropped at once do not come back at once.
 */
export function backoffDelay(attempt, options = {}, random = Math.random) {
  // Defaults by destructuring: a member given as `undefined` takes its default too.
  const { initialMs = 500, maxMs = 30000, factor = 2, jitter = 0.5 } = options;
  return Math.round(Math.min(maxMs, initialMs * factor ** Math.max(0, attempt)) * (1 - jitter * random()));
}

/** The gateway's URL for `path`, under its base path; `ws` for the WebSocket's scheme. */
export function gatewayUrl(client, path, ws) {
  const url = new URL(path, client.base);
  if (ws) url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  return url;
}

let nextId = 0;
/** A new id for a subscription or an operation: `prefix` and a number unique in the page. */
export const newId = (prefix) => `${prefix}${++nextId}`;

/** Calls every listener of a set with `value`. */
export const tell = (listeners, value) => [...listeners].forEach((l) => l(value));

/**
 * The core client. Nothing is opened until the first subscription.
 *
 * @param {object} options
 * @param {string} options.url  base URL of the gateway (`https://host/` or `/pulse/`)
 * @param {string|(() => string|undefined|null)} [options.token]  bearer token, or a getter read at each (re)connect
 * @param {() => string|undefined|null} [options.getToken]  the same as a getter
 * @param {object} [options.backoff]  `{initialMs, maxMs, factor, jitter}`
 * @param {number} [options.subscribeRate]  subscribe operations per second at most (default 10)
 */
export class PulseClient {
  constructor({ url, token, getToken, transport = 'ws', backoff = {}, subscribeRate = 10, WebSocket: WS, fetch: fetchImpl } = {}) {
    if (!url) throw new Error('kube-pulse: connect({url}) needs the gateway URL');
    // SSE is the full client's (@kube-pulse/client), which sets its transports itself.
    if (transport !== 'ws' && !this.openStream) throw new Error(`kube-pulse: the core client is WebSocket only, not ${transport}`);
    // Resolved at first use (`base`): a relative URL needs the page's
    // location, which a server render has not, and a client made at module
    // level must not throw there.
    this.url = url;
    this.token = getToken ?? token;
    /** The transport in use: `ws` (the full client: or `sse`). */
    this.transport = 'ws';
    this.backoff = backoff;
    this.subscribeRate = subscribeRate > 0 ? subscribeRate : Infinity;
    this.WebSocket = WS ?? globalThis.WebSocket;
    this.fetch = fetchImpl ?? globalThis.fetch?.bind(globalThis);
    this.store = new DocumentStore();
    this.state = 'idle';
    /** Wire subscriptions by id, and by their key (patterns and options). */
    this.subs = new Map();
    this.byKey = new Map();
    this.listeners = new Set();
    this.errorListeners = new Set();
    /** The last connection-level error (an auth failure), cleared once live. */
    this.error = null;
    this.attempt = this.wsFailures = 0;
    this.queue = [];
    this.tokens = Math.min(this.subscribeRate, 20);
    this.lastRefill = Date.now();
    this.onOnline = () => {
      if (!this.active()) return;
      this.attempt = 0;
      this.reconnectNow();
    };
    this.onOffline = () => {
      if (!this.active()) return;
      this.timer = clearTimeout(this.timer);
      this.setState('offline');
    };
    /** What `close` takes away: the listeners `listen` added. */
    this.unlisten = [];
    this.listen('online', this.onOnline);
    this.listen('offline', this.onOffline);
  }

  /**
   * Adds `listener` for the window's (or, with `target`, its) event `type`
   * until the client closes.
   */
  listen(type, listener, target = globalThis) {
    target?.addEventListener?.(type, listener);
    this.unlisten.push(() => target?.removeEventListener?.(type, listener));
  }

  /**
   * The gateway's base URL, resolved against the page's at first use (the
   * first subscription or request); a relative one where there is no page
   * (a server render) throws then, saying so.
   */
  get base() {
    let base = this.resolved;
    if (!base) {
      try {
        // The page's `location` as the base (a URL takes it as its `href`).
        base = new URL(this.url, globalThis.location);
      } catch {
        throw new Error(`kube-pulse: no page to resolve ${this.url} against: give an absolute URL`);
      }
      if (!base.pathname.endsWith('/')) base.pathname += '/';
    }
    return (this.resolved = base);
  }

  /** Subscriptions are held and the client is open. */
  active() {
    return !this.closed && this.subs.size > 0;
  }

  /** The current bearer token, if any. */
  currentToken() {
    const token = typeof this.token === 'function' ? this.token() : this.token;
    return token || undefined;
  }

  /** Listens to connection state changes; returns the function that stops listening. */
  onState(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Listens to connection-level errors (auth failures, errors of no subscription). */
  onError(listener) {
    this.errorListeners.add(listener);
    return () => this.errorListeners.delete(listener);
  }

  setState(state) {
    if (state === 'live') {
      this.everLive = true;
      this.error = null;
    }
    if (this.state !== state) tell(this.listeners, (this.state = state));
  }

  connectionError(error) {
    tell(this.errorListeners, (this.error = error));
  }

  /** The subscriptions with `options` (normalized; whole documents: none) whose patterns match `topic`. */
  holders(topic, options) {
    const key = optionsKey(options);
    return [...this.subs.values()].filter((sub) => !sub.query && optionsKey(sub.options) === key && matchesAny(sub.patterns, topic));
  }

  /**
   * The local copy of one document, or undefined. With `options`, the copy
   * of the subscription to `topic` with those options (a projected one).
   */
  get(topic, options) {
    const normalized = subscriptionOptions(options);
    if (!normalized) return this.store.get(topic);
    return this.holders(topic, normalized)
      .map((sub) => sub.store.get(topic))
      .find((doc) => doc !== undefined);
  }

  /** Local documents matching `patterns` (a string or an array), by topic. */
  select(patterns, options) {
    const list = [].concat(patterns);
    const normalized = subscriptionOptions(options);
    return ((normalized ? this.byKey.get(keyOf(list, normalized))?.store : this.store) ?? new DocumentStore()).select(list);
  }

  /**
   * The status of the subscription to `patterns`: `loading` until its
   * snapshots are in, `live`, `stale` while the connection is lost, or
   * `error` (with `error`) when the gateway refused it.
   */
  status(patterns, options) {
    const sub = this.byKey.get(keyOf([].concat(patterns), subscriptionOptions(options)));
    return sub ? { status: sub.status, error: sub.error } : { status: 'loading', error: null };
  }

  /**
   * When the source of `topic`'s document was last known current (its
   * member cluster's last successful probe, or its agent's last
   * heartbeat), from the latest heartbeat of a subscription holding it;
   * null when unknown (no heartbeat yet, no member, a member never current).
   */
  asOf(topic, options) {
    const ms = this.asOfAt(topic, options);
    return ms ? new Date(ms[0]) : null;
  }

  /**
   * How old `topic`'s source is, in ms: the heartbeat's `at` − `asOf` (both
   * the gateway's clock) plus the time since that heartbeat arrived; null
   * when `asOf` is unknown.
   */
  age(topic, options) {
    const ms = this.asOfAt(topic, options);
    return ms ? ms[1] - ms[0] + Date.now() - ms[2] : null;
  }

  /** `[asOf, at, arrival]` of `topic` in ms, or undefined. */
  asOfAt(topic, options) {
    let sub;
    for (const s of this.holders(topic, subscriptionOptions(options))) if (s.beat && !(sub?.beatAt >= s.beatAt)) sub = s;
    const beat = sub?.beat;
    const asOf = beat && asOfMs(beat.asOf, topic, sub.store.get(topic));
    return asOf >= 0 ? [asOf, beat.at, sub.beatAt] : undefined;
  }

  /**
   * Subscribes to topic patterns. `onEvent` gets every change of a local
   * document matching them ({type: 'snapshot'|'patch'|'removed', topic, rev,
   * doc, previous, patch?}), `{type: 'synced', resumed}` when the initial
   * snapshots (or the replay) are in, `{type: 'status', status, error}` when
   * the subscription's status changes, `{type: 'error', code, message,
   * error}` when the gateway refuses it and `{type: 'heartbeat', at, asOf}`
   * at each of its heartbeats. Returns the unsubscribe function.
   *
   * `options` (`{debounceMs, fields}`, as second or third argument) asks the
   * gateway to coalesce changes and to project documents onto JSON
   * pointers; such a subscription keeps its own copy of its documents (read
   * it with `get`/`select`/`status` and the same options).
   */
  subscribe(patterns, onEvent = () => {}, options) {
    if (typeof onEvent === 'object' && onEvent) [onEvent, options] = [options ?? (() => {}), onEvent];
    const list = patternList(patterns);
    const normalized = subscriptionOptions(options);
    const sub = this.acquire(keyOf(list, normalized), () => ({
      id: newId('s'),
      patterns: list,
      options: normalized,
      store: normalized ? new DocumentStore() : this.store,
    }));
    return this.hold(sub, { onEvent });
  }

  /**
   * The subscription of `key`, made with the members `make` gives (beside
   * the state every subscription starts with) and started when there is none.
   */
  acquire(key, make) {
    if (this.closed) throw new Error('kube-pulse: the client is closed');
    let sub = this.byKey.get(key);
    if (!sub) {
      // Throws before anything is held when the URL cannot be resolved.
      this.base;
      sub = { key, holders: new Set(), status: 'loading', error: null, ...make() };
      this.subs.set(sub.id, sub);
      this.byKey.set(key, sub);
      this.start(sub);
    }
    return sub;
  }

  /**
   * Adds `holder` to `sub`; returns the function that takes it away. A
   * subscription left without holders is released a moment later, so that
   * React StrictMode's unsubscribe-resubscribe keeps it (and the socket).
   */
  hold(sub, holder) {
    sub.releaseTimer = clearTimeout(sub.releaseTimer);
    sub.holders.add(holder);
    return () => {
      if (sub.holders.delete(holder) && !sub.holders.size && !sub.releaseTimer) {
        sub.releaseTimer = setTimeout(() => {
          sub.releaseTimer = undefined;
          if (!sub.holders.size) this.release(sub);
        });
      }
    };
  }

  /** Ends `sub`: on the wire, and its documents no other subscription covers. Extension point. */
  release(sub) {
    if (this.subs.get(sub.id) !== sub) return;
    this.subs.delete(sub.id);
    this.byKey.delete(sub.key);
    clearTimeout(sub.retryTimer);
    this.queue = this.queue.filter((s) => s !== sub);
    if (this.wsReady() && sub.sent) this.send({ op: 'unsubscribe', id: sub.id });
    // Documents no other subscription covers are dropped: kept, they would
    // go stale unseen and be shown as current to the next holder. (A
    // subscription with options takes its own copy with it.)
    const covered = (topic) => [...this.subs.values()].some((s) => !s.options && matchesAny(s.patterns, topic));
    if (!sub.options) this.store.drop((topic) => !covered(topic));
    if (!this.subs.size) this.idle();
  }

  /** Nothing is subscribed: no socket or timer is left. Extension point. */
  idle() {
    clearTimeout(this.timer);
    clearTimeout(this.pumpTimer);
    this.timer = this.pumpTimer = null;
    this.probeAbort?.abort();
    this.closeSocket();
    this.attempt = this.wsFailures = 0;
    this.everLive = this.paused = false;
    if (!this.closed) this.setState('idle');
  }

  /** Closes the socket, if any, without hearing from it again. */
  closeSocket() {
    const ws = this.ws;
    this.ws = null;
    this.queue = [];
    if (ws) {
      ws.onclose = ws.onopen = ws.onmessage = null;
      ws.close(1000);
    }
  }

  /** Closes everything; the client goes `offline` and stays so. Extension point. */
  close() {
    this.closed = true;
    for (const off of this.unlisten) off();
    for (const sub of [...this.subs.values()]) {
      clearTimeout(sub.releaseTimer);
      this.release(sub);
    }
    this.idle();
    this.setState('offline');
  }

  /** Tries to connect again now (e.g. after the user logged in). */
  reconnect() {
    if (!this.active()) return;
    this.attempt = 0;
    for (const sub of this.subs.values()) {
      if (sub.status !== 'error' || permanent(sub.error)) continue;
      sub.dead = false;
      sub.retryTimer = clearTimeout(sub.retryTimer);
      this.resend(sub);
    }
    this.reconnectNow();
  }

  /** The socket is open. */
  wsReady() {
    return this.ws?.readyState === 1;
  }

  send(op) {
    this.ws.send(JSON.stringify(op));
  }

  /**
   * A (re)connection succeeded: every subscription refused for a reason
   * that is not its own fault (a token, a lockout, a rate limit, a refused
   * socket) is tried again, not left dead.
   */
  revive(sub) {
    if (sub.status === 'error' && !permanent(sub.error)) {
      sub.dead = false;
      this.setStatus(sub, sub.synced ? 'live' : 'loading');
      return true;
    }
    return !sub.dead;
  }

  /** A new subscription goes out. Extension point (warm start). */
  start(sub) {
    if (this.closed || this.paused) return;
    if (this.state === 'idle') this.setState('connecting');
    this.open(sub);
  }

  /** `sub` goes out on the connection, opened if need be. Extension point (transports). */
  open(sub) {
    this.openSocket(sub);
  }

  /** Every subscription goes out again (a reconnect). Extension point. */
  openAll() {
    if (!this.ws) this.openSocket();
  }

  /** `sub` goes out again on the open connection (a retry). Extension point. */
  resend(sub) {
    if (this.wsReady()) this.enqueue(sub);
  }

  // ---- delivery ----------------------------------------------------------

  /** Calls every holder of `sub`. */
  emit(sub, event) {
    for (const h of [...sub.holders]) h.onEvent(event);
  }

  /** A change of `sub`'s copy: the shared one goes to every subscription matching its topic, its own to it. */
  changed(sub, change) {
    if (sub.options) return this.emit(sub, change);
    for (const other of [...this.subs.values()]) if (!other.options && matchesAny(other.patterns, change.topic)) this.emit(other, change);
  }

  /** `sub`'s status, told to its holders when it changes. Extension point (a live query's result carries it). */
  setStatus(sub, status, error = null) {
    if (sub.status === status && sub.error === error) return;
    sub.status = status;
    sub.error = error;
    this.emit(sub, { type: 'status', status, error });
  }

  /** A message of `sub`'s. Extension point (live queries). */
  deliver(sub, message) {
    const { type, cursor, at, asOf } = message;
    if (at && asOf) {
      // How current its members are: kept, and told once per heartbeat.
      sub.beat = { at: Date.parse(at), asOf };
      sub.beatAt = Date.now();
      this.emit(sub, { type: 'heartbeat', at, asOf });
    }
    // A heartbeat does not move the resume point: that stays the subscription's last other message's.
    if (cursor && type !== 'heartbeat') sub.cursor = cursor;
    if (type === 'synced') {
      sub.synced = true;
      sub.retries = this.attempt = 0;
      // Fresh snapshots: what did not come again is gone.
      const removed = !message.resumed && sub.fresh ? sub.store.prune(sub.patterns, sub.fresh) : [];
      sub.fresh = null;
      for (const change of removed) this.changed(sub, change);
      this.setStatus(sub, 'live');
      this.emit(sub, { type, resumed: message.resumed, reason: message.reason });
    } else if (type === 'error') {
      this.refused(sub, new PulseError(message.code, message.message));
    } else if (message.topic) {
      if (type === 'snapshot') sub.fresh?.add(message.topic);
      const change = sub.store.apply(message);
      // A patch we cannot apply: start this subscription over from snapshots.
      if (change?.gap) {
        sub.cursor = undefined;
        this.restart(sub);
      } else if (change) this.changed(sub, change);
    }
  }

  /** `sub` is in error: its status and an `error` event. */
  fail(sub, error) {
    sub.synced = sub.sent = false;
    this.setStatus(sub, 'error', error);
    this.emit(sub, { type: 'error', code: error.code, message: error.message, error });
  }

  /** The gateway refused (or ended) a subscription. Extension point (a live query drops its window). */
  refused(sub, error, retryAfterMs = error.retryAfterMs) {
    this.fail(sub, error);
    if (error.auth) return this.authRefused(error, sub);
    if (!error.retrying) return (sub.dead = true);
    clearTimeout(sub.retryTimer);
    // From the backoff's second step: a refusal is no reason to come back at once.
    sub.retries = (sub.retries ?? 0) + 1;
    sub.retryTimer = setTimeout(() => {
      sub.retryTimer = null;
      if (this.subs.get(sub.id) === sub) this.resend(sub);
    }, retryAfterMs ?? backoffDelay(sub.retries, this.backoff));
  }

  /**
   * The credential was refused: every subscription still waiting on the
   * connection hears why, not only the one whose answer came first, and the
   * connection starts over (after a backoff) with the token of that time.
   * Extension point.
   */
  authRefused(error, except) {
    this.refuseAll(error, (other) => other !== except && other.status === 'loading');
    if (this.ws && this.wsOpened) {
      // What the socket still says (the subscribes that followed a refused
      // token, each `unauthenticated`) is about a connection that is over.
      this.ws.onmessage = null;
      this.ws.close(1000);
    }
  }

  /** `sub` starts over (from snapshots after a gap). Extension point (transports). */
  restart(sub) {
    sub.synced = false;
    if (this.wsReady()) {
      if (sub.sent) this.send({ op: 'unsubscribe', id: sub.id });
      sub.sent = false;
      this.enqueue(sub);
    }
  }

  /** The connection is lost: every subscription goes stale until it syncs again. Extension point. */
  lost() {
    if (!this.active()) return;
    for (const sub of this.subs.values()) {
      sub.synced = sub.sent = false;
      if (sub.status === 'live') this.setStatus(sub, 'stale', sub.error);
    }
    this.schedule();
  }

  /** Whether the connection is live while it is also being retried (SSE: any stream). Extension point. */
  streaming() {
    return false;
  }

  /**
   * The next attempt, after the backoff or, when the gateway said when
   * (`Retry-After` of a lockout), then (plus up to half a second, so that
   * tabs do not come back at once): an attempt before that would be
   * refused again.
   */
  schedule(retryAfterMs) {
    if (!this.active() || this.timer || this.paused || this.state === 'offline') return; // `online` resumes
    if (!this.streaming()) this.setState(this.everLive ? 'reconnecting' : 'connecting');
    const backoff = backoffDelay(this.attempt++, this.backoff);
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.reconnectNow();
      },
      retryAfterMs > 0 ? retryAfterMs + Math.random() * 500 : backoff,
    );
  }

  reconnectNow() {
    if (!this.active() || this.paused) return;
    this.timer = clearTimeout(this.timer);
    if (this.state === 'offline') this.setState(this.everLive ? 'reconnecting' : 'connecting');
    this.openAll();
  }

  // ---- WebSocket ----------------------------------------------------------

  /** Subscribe operations leave at most `subscribeRate` per second (the gateway refuses more). */
  enqueue(sub) {
    if (!this.queue.includes(sub)) this.queue.push(sub);
    this.pump();
  }

  pump() {
    // A token bucket: bursts of `subscribeRate` (20 at most), refilled at `subscribeRate` per second.
    const burst = Math.min(this.subscribeRate, 20);
    while (!this.pumpTimer && this.queue.length) {
      if (!this.wsReady()) return (this.queue = []);
      const now = Date.now();
      this.tokens = Math.min(burst, this.tokens + ((now - this.lastRefill) / 1000) * this.subscribeRate);
      this.lastRefill = now;
      if (this.tokens < 1) {
        this.pumpTimer = setTimeout(
          () => {
            this.pumpTimer = null;
            this.pump();
          },
          ((1 - this.tokens) / this.subscribeRate) * 1000,
        );
      } else {
        this.tokens -= 1;
        this.sendSubscribe(this.queue.shift());
      }
    }
  }

  /** `sub`'s subscribe operation, from its cursor when it has one and no options. Extension point (live queries). */
  sendSubscribe(sub) {
    if (this.subs.get(sub.id) !== sub || sub.dead) return;
    const op = { op: 'subscribe', id: sub.id, topics: sub.patterns, ...sub.options };
    // A subscription with options does not replay: no cursor to offer.
    if (sub.cursor && !sub.options) op.since = sub.cursor;
    sub.fresh = new Set();
    sub.sent = true;
    this.send(op);
  }

  openSocket(sub) {
    if (this.ws) {
      if (sub) this.resend(sub);
      return;
    }
    let ws;
    try {
      // Browsers cannot set headers on a WebSocket: the token goes in the
      // socket's first operation (below), not in its handshake.
      ws = new this.WebSocket(gatewayUrl(this, 'api/v1/ws', true).href, ['kube-pulse']);
    } catch {
      return this.socketFailed();
    }
    this.ws = ws;
    this.wsOpened = false;
    ws.onopen = () => {
      this.wsOpened = true;
      this.wsFailures = 0;
      this.setState('live');
      // A refused token is then an answer the client reads (a refused
      // handshake is not), so no HTTP probe has to send the token again,
      // and each attempt costs the address's auth-failure budget
      // (docs/SECURITY.md) one failure at most. The gateway reads nothing
      // else until it has checked it, so the subscribes follow at once.
      const token = this.currentToken();
      this.authId = token && newId('a');
      if (token) this.send({ op: 'auth', token, id: this.authId });
      for (const s of this.subs.values()) if (this.revive(s)) this.enqueue(s);
    };
    ws.onmessage = (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return;
      }
      this.route(message);
    };
    ws.onclose = (event) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.pumpTimer = clearTimeout(this.pumpTimer);
      this.queue = [];
      if (!this.wsOpened) return this.socketFailed();
      // A close code that says why: the credential, or a limit (docs/PROTOCOL.md).
      const { code, reason = '' } = event ?? {};
      const why = { 4001: 'token_expired', 4003: 'permissions_changed', 4029: reason.match(/^too_many_connections/)?.[0] ?? 'too_many_auth_failures' }[code];
      if (why) this.connectionError(new PulseError(why, reason || `closed with ${code}`));
      this.lost();
    };
  }

  /** A WebSocket message goes to its subscription (`sub`, or the `id` of the refused operation). Extension point. */
  route(message) {
    const { id, type, code } = message;
    if (id && id === this.authId) {
      this.authId = null;
      // Refused: every subscription hears why, and the connection starts over.
      if (type === 'error') this.authRefused(new PulseError(code, message.message));
      return;
    }
    const sub = this.subs.get(message.sub ?? id);
    if (sub) this.deliver(sub, message);
    else if (type === 'error' && code !== 'unknown_subscription') this.connectionError(new PulseError(code, message.message));
  }

  /**
   * A socket did not open. Browsers do not say why, and the handshake
   * carries no token, so an HTTP request without one tells a refusal for
   * now (429 or 503: a lockout, a limit, a gateway starting; surfaced, and
   * the socket tried again when `Retry-After` says), a gateway that is down
   * (no answer) and a path that passes HTTP but not WebSockets (twice in a
   * row: the error `websocket_refused`, or SSE when `fallBack` takes it).
   */
  async socketFailed() {
    this.ws = null;
    if (!this.active()) return;
    this.setState(this.everLive ? 'reconnecting' : 'connecting');
    const verdict = await this.probe();
    if (!this.active()) return;
    if (verdict instanceof PulseError) {
      this.refuseAll(verdict);
      return this.schedule(verdict.retryAfterMs);
    }
    if (verdict === 'http' && ++this.wsFailures >= 2) {
      if (this.fallBack()) return;
      this.refuseAll(new PulseError('websocket_refused', 'the WebSocket does not open though HTTP passes', { retrying: true }));
    }
    this.schedule();
  }

  /** WebSockets do not pass: whether another transport takes over. Extension point. */
  fallBack() {
    return false;
  }

  /**
   * A refusal of the connection: `onError` hears it, and so does every
   * subscription `which` takes (by default those not refused for good nor
   * told already).
   */
  refuseAll(error, which = (sub) => !sub.dead && !(sub.status === 'error' && sub.error.code === error.code)) {
    for (const sub of this.subs.values()) if (which(sub)) this.fail(sub, error);
    this.connectionError(error);
  }

  /**
   * Why a socket did not open, asked over HTTP without the token (the
   * handshake had none either, so a bad token is not why it failed, and a
   * probe with one would cost the address's auth-failure budget a second
   * failure): a `PulseError` (429 or 503: a refusal for now, which says
   * nothing of whether WebSockets pass), `http` (it passes) or `down` (no
   * answer within 5 s, or no fetch at all).
   */
  async probe() {
    const abort = (this.probeAbort = new AbortController());
    const timer = setTimeout(() => abort.abort(), 5000);
    try {
      const response = await this.fetch(gatewayUrl(this, 'api/v1/clusters').href, { signal: abort.signal, cache: 'no-store' });
      const { status } = response;
      return status === 429 || status === 503 ? await httpError(response) : status >= 500 ? 'down' : 'http';
    } catch {
      return 'down';
    } finally {
      clearTimeout(timer);
    }
  }
}
