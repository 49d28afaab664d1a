// kube-pulse browser client: a dependency-free ES module.
//
// connect() opens one WebSocket (or Server-Sent Events over fetch, so a
// bearer token can be sent) to a kube-pulse gateway and keeps ONE local copy
// of every document its subscriptions match — snapshots first, then JSON
// merge patches — shared by every holder: a change is reported to every
// subscription whose patterns match its topic, whichever subscription
// brought it. Subscriptions with the same patterns share one subscription on
// the wire (ref-counted). It reconnects with exponential backoff and
// jitter, resuming each subscription from its last cursor, and leaves no
// socket, stream or timer behind once nothing is subscribed.
// `query()` holds a live query's window (docs/PROTOCOL.md "Live queries"):
// its rows in order, the total and the counts per group, kept equal to the
// gateway's by applying its rows/enter/leave/move/patch/total/groups
// messages, and started over whenever one does not fit.
// Wire format: docs/PROTOCOL.md.

/** Connection states: `idle` when nothing is subscribed, `paused` while a hidden tab's subscriptions are. */
export const STATES = Object.freeze(['idle', 'connecting', 'live', 'reconnecting', 'offline', 'paused']);

/** Subscription states. */
export const STATUSES = Object.freeze(['loading', 'live', 'stale', 'error']);

const DEFAULT_BACKOFF = Object.freeze({ initialMs: 500, maxMs: 30000, factor: 2, jitter: 0.5 });

/** Error codes that mean the credential, not the request, is the problem. */
const AUTH_CODES = new Set(['unauthorized', 'unauthenticated', 'token_expired', 'permissions_changed', 'forbidden']);
/** Error codes worth retrying after a while (the request itself was fine). */
const RETRY_CODES = new Set([
  ...AUTH_CODES,
  'rate_limited',
  'too_many_connections',
  'too_many_subscriptions',
  'too_many_auth_failures',
  'unavailable',
]);
/** HTTP statuses that are a transient refusal whatever the code: retried, never terminal. */
const BUSY_STATUSES = new Set([429, 503]);
/** Faults of the request itself: the same request fails again, so only a new subscription retries. */
const permanent = (error) => !!error && !error.retrying && !error.auth && /^(bad_|invalid_|unknown_op|duplicate_id)/.test(error.code);

/**
 * An error from the gateway: `code` is the protocol's (`bad_pattern`,
 * `rate_limited`, `unauthorized`, …, or `http_{status}`), `status` the HTTP
 * status when there was one, `retrying` whether the client tries again by itself.
 */
export class PulseError extends Error {
  constructor(code, message, { status, retrying = RETRY_CODES.has(code) } = {}) {
    super(message || code);
    this.name = 'PulseError';
    this.code = code;
    if (status !== undefined) this.status = status;
    this.retrying = retrying;
    this.auth = AUTH_CODES.has(code);
  }
}

/**
 * Delay before reconnect attempt `attempt` (0-based): exponential growth
 * capped at `maxMs`, minus a random share of up to `jitter` so that many
 * clients dropped at once do not come back at once.
 */
export function backoffDelay(attempt, options = {}, random = Math.random) {
  const { initialMs, maxMs, factor, jitter } = { ...DEFAULT_BACKOFF, ...options };
  const base = Math.min(maxMs, initialMs * Math.pow(factor, Math.max(0, attempt)));
  return Math.round(base * (1 - jitter * random()));
}

/** Whether topic pattern `pattern` matches `topic` (`*` one segment, `**` the rest). */
export function matches(pattern, topic) {
  const p = pattern.split('/');
  const t = topic.split('/');
  for (let i = 0; i < p.length; i++) {
    if (p[i] === '**') return t.length > i;
    if (i >= t.length) return false;
    if (p[i] !== '*' && p[i] !== t[i]) return false;
  }
  return p.length === t.length;
}

/** RFC 7386 JSON merge patch: returns a new value, leaving `target` untouched. */
export function mergePatch(target, patch) {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out =
    target !== null && typeof target === 'object' && !Array.isArray(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = mergePatch(out[key], value);
  }
  return out;
}

/**
 * A status document's `history` — an object keyed by transition number, so
 * that patches carry only new entries — as an array, oldest first.
 */
export function transitions(doc) {
  return Object.entries(doc?.history ?? {})
    .map(([number, transition]) => [Number(number), transition])
    .filter(([number]) => Number.isInteger(number))
    .sort((a, b) => a[0] - b[0])
    .map(([, transition]) => transition);
}

/**
 * Incremental parser of a text/event-stream body. Feed it decoded text as
 * it arrives; it calls `onEvent({id, event, data})` for each complete event.
 */
export function sseParser(onEvent) {
  let buffer = '';
  let event = { id: '', event: 'message', data: [] };
  const line = (text) => {
    if (text === '') {
      if (event.data.length > 0) {
        onEvent({ id: event.id, event: event.event, data: event.data.join('\n') });
      }
      event = { id: event.id, event: 'message', data: [] };
      return;
    }
    if (text.startsWith(':')) return; // comment (heartbeat)
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

/** `name` of a `{name}-{number}` cursor part ('' when there is none). */
function nameOf(part) {
  const dash = part.lastIndexOf('-');
  return dash > 0 ? part.slice(0, dash) : '';
}

/**
 * Where a topic's revisions are numbered, from a message's cursor: the
 * gateway process (`{epoch}-{seq}`), or, with replicas sharing a stream of
 * changes (`{epoch}-{seq}.{stream}-{position}`), the stream for cluster,
 * sync and app topics, which every replica numbers alike.
 */
function epochOf(cursor, topic) {
  const text = cursor ?? '';
  const dot = text.indexOf('.');
  if (dot >= 0 && /^(clusters|apps)\//.test(topic ?? '')) return `stream:${nameOf(text.slice(dot + 1))}`;
  return nameOf(dot >= 0 ? text.slice(0, dot) : text);
}

/**
 * The local copy of documents, applying protocol messages in revision order.
 * Revisions count per gateway process, so a snapshot from another process
 * (a restart, another replica) replaces a document whatever its revision.
 * `apply` returns the change to report, or null when the message changed
 * nothing (e.g. a patch another subscription already applied).
 */
export class DocumentStore {
  constructor() {
    /** @type {Map<string, {rev: number, epoch: string, doc: object}>} */
    this.docs = new Map();
  }

  get(topic) {
    return this.docs.get(topic)?.doc;
  }

  /** Documents whose topic matches any of `patterns`, as a plain object. */
  select(patterns) {
    const out = {};
    for (const [topic, { doc }] of this.docs) {
      if (patterns.some((p) => matches(p, topic))) out[topic] = doc;
    }
    return out;
  }

  apply(message) {
    const { type, topic, rev } = message;
    const epoch = epochOf(message.cursor, topic);
    const have = this.docs.get(topic);
    const sameProcess = have && have.epoch === epoch;
    if (type === 'snapshot') {
      if (sameProcess && have.rev >= rev) return null;
      this.docs.set(topic, { rev, epoch, doc: message.doc });
      return { type, topic, rev, doc: message.doc, previous: have?.doc };
    }
    if (type === 'patch') {
      if (!sameProcess) return { gap: true, topic };
      if (rev <= have.rev) return null;
      // A coalesced or projected patch names its base; any other's is rev - 1.
      const base = message.base ?? rev - 1;
      if (have.rev !== base) return { gap: true, topic };
      const doc = mergePatch(have.doc, message.patch);
      this.docs.set(topic, { rev, epoch, doc });
      return { type, topic, rev, doc, patch: message.patch, previous: have.doc };
    }
    if (type === 'removed') {
      if (!have) return null;
      this.docs.delete(topic);
      return { type, topic, rev, doc: undefined, previous: have.doc };
    }
    return null;
  }

  /** Drops documents matching `patterns` except `keep` (after fresh snapshots). */
  prune(patterns, keep) {
    return this.drop((topic) => !keep.has(topic) && patterns.some((p) => matches(p, topic)));
  }

  /** Drops the documents whose topic `gone(topic)` says; returns them as `removed` changes. */
  drop(gone) {
    const out = [];
    for (const [topic, { doc }] of this.docs) {
      if (gone(topic)) {
        this.docs.delete(topic);
        out.push({ type: 'removed', topic, doc: undefined, previous: doc });
      }
    }
    return out;
  }
}

/** A short tag of a token (FNV-1a), so that a warm start is not shown to another user of the tab. */
function tokenTag(token = '') {
  let h = 0x811c9dc5;
  for (let i = 0; i < token.length; i++) h = Math.imul(h ^ token.charCodeAt(i), 0x01000193);
  return (h >>> 0).toString(36);
}

function httpBase(url) {
  const base = new URL(url, globalThis.location?.href);
  if (!base.pathname.endsWith('/')) base.pathname += '/';
  return base;
}

/** Unpadded base64url of a string's UTF-8 bytes. */
export function base64url(text) {
  const bytes = new TextEncoder().encode(text);
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/**
 * Subscription options, checked and normalized as the gateway does
 * (docs/PROTOCOL.md "Subscription options"); null when there are none.
 */
export function subscriptionOptions({ debounceMs, fields } = {}) {
  if (debounceMs === undefined && fields === undefined) return null;
  const out = {};
  if (debounceMs !== undefined) {
    if (!Number.isInteger(debounceMs) || debounceMs < 50 || debounceMs > 60000) {
      throw new Error(`kube-pulse: debounceMs must be a whole number of ms from 50 to 60000, not ${debounceMs}`);
    }
    out.debounceMs = debounceMs;
  }
  if (fields !== undefined) {
    const list = [...new Set([].concat(fields))].sort();
    if (list.length === 0 || list.length > 32 || list.some((f) => typeof f !== 'string' || !f.startsWith('/') || f.length > 256)) {
      throw new Error('kube-pulse: fields are 1 to 32 JSON pointers such as "/phase"');
    }
    out.fields = list;
  }
  return out;
}

/** The members of a live query, in the order they go on the wire. */
const QUERY_MEMBERS = Object.freeze(['filter', 'sort', 'limit', 'offset', 'after', 'groupBy', 'fields']);

/**
 * A live query's members as they go on the wire (docs/PROTOCOL.md "Live
 * queries"): `limit` always (50, or 0 with `groupBy`, when not given), so
 * that the gateway takes the subscription for a live query and the client
 * knows the window's size; `sort` as a list; `fields` checked and
 * normalized as `subscriptionOptions` does (bad ones throw). The rest is
 * the gateway's to check: a bad filter, sort, limit, offset, after or
 * groupBy comes back as the error `bad_query`.
 */
export function liveQuery(query = {}) {
  if (query === null || typeof query !== 'object') throw new Error('kube-pulse: a live query is an object such as {filter, sort, limit}');
  if (query.debounceMs !== undefined) throw new Error('kube-pulse: debounceMs does not apply to a live query');
  const out = {};
  if (query.filter !== undefined && query.filter !== null) out.filter = query.filter;
  if (query.sort !== undefined) out.sort = [].concat(query.sort);
  out.limit = query.limit ?? (query.groupBy !== undefined ? 0 : 50);
  if (query.offset !== undefined) out.offset = query.offset;
  if (query.after !== undefined) out.after = query.after;
  if (query.groupBy !== undefined) out.groupBy = query.groupBy;
  if (query.fields !== undefined) out.fields = subscriptionOptions({ fields: query.fields }).fields;
  return out;
}

/**
 * The patterns of a subscription, a list without duplicates; a segment
 * `undefined` or `null` throws: it is a template topic whose name was not
 * known yet (`clusters/${name}`), not a cluster to subscribe to.
 */
export function patternList(patterns) {
  const list = [...new Set([].concat(patterns))];
  if (list.length === 0) throw new Error('kube-pulse: subscribe to at least one pattern');
  for (const p of list) {
    if (typeof p !== 'string') throw new TypeError(`kube-pulse: a pattern is a string such as "clusters/*", not ${p}`);
    const bad = p.split('/').find((segment) => segment === 'undefined' || segment === 'null');
    if (bad) {
      throw new TypeError(`kube-pulse: "${p}" has a segment "${bad}": a name in a template topic was ${bad}; subscribe once it is known`);
    }
  }
  return list;
}

const queryKey = (patterns, query) =>
  `query\n${[...new Set(patterns)].sort().join('\n')}\n${JSON.stringify(QUERY_MEMBERS.map((m) => query[m] ?? null))}`;

/** A live query's result before its rows are in. */
const LOADING = Object.freeze({ rows: Object.freeze([]), total: 0, status: 'loading', error: null });

const EMPTY_STORE = new DocumentStore();

const optionsKey = (options) =>
  options ? `\n#${options.debounceMs ?? ''}#${(options.fields ?? []).join('\t')}` : '';

const keyOf = (patterns, options = null) => [...new Set(patterns)].sort().join('\n') + optionsKey(options);

let nextId = 0;

/**
 * Connects to a gateway. Nothing is opened until the first subscription.
 *
 * @param {object} options
 * @param {string} options.url  base URL of the gateway (`https://host/` or `/pulse/`)
 * @param {string|(() => string|undefined|null)} [options.token]  bearer token, or a getter read at each (re)connect
 * @param {() => string|undefined|null} [options.getToken]  the same as a getter
 * @param {'ws'|'sse'|'auto'} [options.transport]  `auto`: WebSocket, SSE only when WebSockets are blocked
 * @param {object} [options.backoff]  `{initialMs, maxMs, factor, jitter}`
 * @param {number} [options.subscribeRate]  subscribe operations per second at most (default 10)
 * @param {number} [options.wsRetryMs]  `auto` on SSE: how often to try WebSocket again (default 60 s)
 * @param {number|null} [options.hiddenGraceMs]  a hidden tab's subscriptions pause after this long (default 60 s; null: never)
 * @param {number|false} [options.warmStart]  the most bytes of documents and cursors kept in `sessionStorage`
 *   for the next load of the page to resume from (default 512 KiB; false: none)
 * @param {boolean} [options.eventSource]  SSE over the native `EventSource` with an HttpOnly cookie session
 *   (same origin; the token is sent once, to `POST api/v1/session`)
 */
export function connect(options) {
  return new KubePulse(options);
}

export class KubePulse {
  constructor({
    url,
    token,
    getToken,
    transport = 'auto',
    backoff = {},
    subscribeRate = 10,
    wsRetryMs = 60000,
    hiddenGraceMs = 60000,
    warmStart = 512 * 1024,
    eventSource = false,
    WebSocket: WS,
    EventSource: ES,
    fetch: fetchImpl,
  } = {}) {
    if (!url) throw new Error('kube-pulse: connect({url}) needs the gateway URL');
    if (!['ws', 'sse', 'auto'].includes(transport)) {
      throw new Error(`kube-pulse: transport must be 'ws', 'sse' or 'auto', not ${transport}`);
    }
    this.base = httpBase(url);
    this.token = getToken ?? token;
    this.preferred = transport === 'sse' ? 'sse' : 'ws';
    this.transport = this.preferred;
    this.auto = transport === 'auto';
    this.backoff = backoff;
    this.subscribeRate = subscribeRate > 0 ? subscribeRate : Infinity;
    this.wsRetryMs = wsRetryMs;
    this.WebSocket = WS ?? globalThis.WebSocket;
    this.EventSource = ES ?? globalThis.EventSource;
    // SSE streams over the native EventSource and a cookie session (same origin only).
    this.eventSource = eventSource;
    this.fetch = fetchImpl ?? globalThis.fetch?.bind(globalThis);
    this.store = new DocumentStore();
    this.state = 'idle';
    /** Wire subscriptions by id, and by their pattern set. */
    this.subs = new Map();
    this.byKey = new Map();
    this.listeners = new Set();
    this.errorListeners = new Set();
    /** The last connection-level error (an auth failure), cleared once live. */
    this.error = null;
    this.attempt = 0;
    this.closed = false;
    this.everLive = false;
    this.timer = null;
    this.ws = null;
    this.wsOpened = false;
    this.wsFailures = 0;
    this.wsRetryTimer = null;
    this.probeAbort = null;
    this.queue = [];
    this.tokens = Math.min(this.subscribeRate, 20);
    this.lastRefill = Date.now();
    this.pumpTimer = null;
    this.pending = new Map();
    this.onOnline = () => {
      if (this.subs.size === 0 || this.closed) return;
      this.attempt = 0;
      this.reconnectNow();
    };
    this.onOffline = () => {
      if (this.subs.size === 0 || this.closed) return;
      clearTimeout(this.timer);
      this.timer = null;
      this.setState('offline');
    };
    globalThis.addEventListener?.('online', this.onOnline);
    globalThis.addEventListener?.('offline', this.onOffline);
    // A hidden tab stops its subscriptions after a grace and resumes them
    // from their cursors when it is shown again.
    this.hiddenGraceMs = hiddenGraceMs;
    this.paused = false;
    this.hideTimer = null;
    this.onVisibility = () => {
      clearTimeout(this.hideTimer);
      this.hideTimer = null;
      if (globalThis.document?.visibilityState === 'hidden') {
        if (this.hiddenGraceMs != null && this.hiddenGraceMs !== Infinity) {
          this.hideTimer = setTimeout(() => this.pause(), this.hiddenGraceMs);
        }
        this.saveWarm();
      } else if (this.paused) this.resume();
    };
    globalThis.document?.addEventListener?.('visibilitychange', this.onVisibility);
    // Warm start: what the last load of this page held, to resume from.
    this.warmBytes = warmStart;
    this.warmKey = `kube-pulse:${this.base.href}`;
    this.warm = this.loadWarm();
    this.onPageHide = () => this.saveWarm();
    globalThis.addEventListener?.('pagehide', this.onPageHide);
  }

  /**
   * The tab is hidden and its grace is over: sockets and streams close,
   * subscriptions keep their documents and cursors (status `stale`), and
   * nothing reconnects until the tab is shown.
   */
  pause() {
    this.hideTimer = null;
    if (this.closed || this.subs.size === 0 || this.paused) return;
    this.paused = true;
    clearTimeout(this.timer);
    clearTimeout(this.wsRetryTimer);
    this.timer = this.wsRetryTimer = null;
    this.probeAbort?.abort();
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.onclose = ws.onopen = ws.onmessage = null;
      ws.close(1000);
    }
    this.queue = [];
    for (const sub of this.subs.values()) {
      sub.abort?.abort();
      sub.abort = null;
      sub.streaming = false;
      sub.synced = false;
      sub.sent = false;
      clearTimeout(sub.retryTimer);
      if (sub.status === 'live') this.setStatus(sub, 'stale', sub.error);
    }
    this.setState('paused');
  }

  /** The tab is shown again: every subscription resumes from its cursor. */
  resume() {
    this.paused = false;
    if (this.closed || this.subs.size === 0) return;
    this.setState(this.everLive ? 'reconnecting' : 'connecting');
    this.attempt = 0;
    this.reconnectNow();
    if (this.auto && this.transport === 'sse') this.retryWebSocketLater();
  }

  /**
   * What the last load of this page kept (`saveWarm`): by subscription
   * key, its cursor and documents, when the same token holds now.
   */
  loadWarm() {
    const warm = new Map();
    if (!this.warmBytes) return warm;
    try {
      const storage = globalThis.sessionStorage;
      const saved = JSON.parse(storage?.getItem(this.warmKey) ?? 'null');
      storage?.removeItem(this.warmKey);
      if (saved?.v !== 1 || saved.who !== tokenTag(this.currentToken())) return warm;
      for (const sub of saved.subs) warm.set(sub.key, sub);
    } catch {
      // none, unreadable or refused: a cold start
    }
    return warm;
  }

  /**
   * Keeps, for the next load of this page in this tab, each synced
   * subscription's cursor and documents (whole-document subscriptions
   * only: options and live queries do not resume), as many subscriptions
   * as fit in `warmStart` bytes, and a tag of the token they were read with.
   */
  saveWarm() {
    const storage = globalThis.sessionStorage;
    if (!this.warmBytes || !storage || this.closed) return;
    const subs = [];
    let bytes = 0;
    for (const sub of this.subs.values()) {
      if (sub.options || !sub.cursor || !(sub.synced || sub.status === 'stale')) continue;
      const docs = {};
      for (const [topic, { rev, epoch, doc }] of this.store.docs) {
        if (sub.patterns.some((p) => matches(p, topic))) docs[topic] = [rev, epoch, doc];
      }
      const entry = { key: sub.key, cursor: sub.cursor, docs };
      const size = JSON.stringify(entry).length;
      if (bytes + size > this.warmBytes) continue;
      bytes += size;
      subs.push(entry);
    }
    try {
      if (subs.length) storage.setItem(this.warmKey, JSON.stringify({ v: 1, who: tokenTag(this.currentToken()), subs }));
      else storage.removeItem(this.warmKey);
    } catch {
      // full or refused: the next load starts cold
    }
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
    if (this.state === state) return;
    this.state = state;
    for (const l of [...this.listeners]) l(state);
  }

  connectionError(error) {
    this.error = error;
    for (const l of [...this.errorListeners]) l(error);
  }

  /**
   * The local copy of one document, or undefined. With `options`, the copy
   * of the subscription to `topic` with those options (a projected one).
   */
  get(topic, options) {
    const normalized = subscriptionOptions(options);
    if (!normalized) return this.store.get(topic);
    const key = optionsKey(normalized);
    for (const sub of this.subs.values()) {
      if (!sub.query && optionsKey(sub.options) === key && sub.patterns.some((p) => matches(p, topic))) {
        const doc = sub.store.get(topic);
        if (doc !== undefined) return doc;
      }
    }
    return undefined;
  }

  /** Local documents matching `patterns` (a string or an array), by topic. */
  select(patterns, options) {
    const list = [].concat(patterns);
    return this.storeOf(list, options).select(list);
  }

  /**
   * Where the documents of a subscription live: the shared copy, or for a
   * subscription with options its own (projected documents, coalesced
   * revisions: not to be mixed with whole ones).
   */
  storeOf(patterns, options) {
    const normalized = subscriptionOptions(options);
    if (!normalized) return this.store;
    return this.byKey.get(keyOf(patterns, normalized))?.store ?? EMPTY_STORE;
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
   * Subscribes to topic patterns. `onEvent` gets every change of a local
   * document matching them ({type: 'snapshot'|'patch'|'removed', topic, rev,
   * doc, previous, patch?}), `{type: 'synced', resumed}` when the initial
   * snapshots (or the replay) are in, `{type: 'status', status, error}` when
   * the subscription's status changes and `{type: 'error', code, message,
   * error}` when the gateway refuses it. Returns the unsubscribe function.
   *
   * `options` (`{debounceMs, fields}`, as second or third argument) asks the
   * gateway to coalesce changes and to project documents onto JSON
   * pointers; such a subscription keeps its own copy of its documents (read
   * it with `get`/`select`/`status` and the same options).
   */
  subscribe(patterns, onEvent = () => {}, options = undefined) {
    if (typeof onEvent === 'object' && onEvent !== null) [onEvent, options] = [options ?? (() => {}), onEvent];
    const list = patternList(patterns);
    if (this.closed) throw new Error('kube-pulse: the client is closed');
    const normalized = subscriptionOptions(options);
    const key = keyOf(list, normalized);
    const sub = this.acquire(key, () => ({
      id: `s${++nextId}`,
      patterns: list,
      options: normalized,
      store: normalized ? new DocumentStore() : this.store,
    }));
    return this.hold(sub, { onEvent });
  }

  /**
   * The subscription of `key`, made with the members `make` gives (beside
   * the state every subscription starts with) and opened when there is none.
   */
  acquire(key, make) {
    let sub = this.byKey.get(key);
    if (!sub) {
      sub = {
        key,
        holders: new Set(),
        cursor: undefined,
        synced: false,
        fresh: null,
        abort: null,
        status: 'loading',
        error: null,
        dead: false,
        retryTimer: null,
        releaseTimer: null,
        ...make(),
      };
      this.subs.set(sub.id, sub);
      this.byKey.set(key, sub);
      const warm = !sub.options && this.warm.get(key);
      if (warm) {
        // The last load's documents, shown as `stale` until the gateway
        // has sent what changed since its cursor (or fresh snapshots).
        this.warm.delete(key);
        sub.cursor = warm.cursor;
        for (const [topic, [rev, epoch, doc]] of Object.entries(warm.docs)) {
          if (!this.store.docs.has(topic)) this.store.docs.set(topic, { rev, epoch, doc });
        }
        sub.status = 'stale';
      }
      this.open(sub);
    }
    return sub;
  }

  /**
   * Adds `holder` to `sub`; returns the function that takes it away. A
   * subscription left without holders is released a moment later, so that
   * React StrictMode's unsubscribe-resubscribe keeps it (and the socket).
   */
  hold(sub, holder) {
    clearTimeout(sub.releaseTimer);
    sub.releaseTimer = null;
    sub.holders.add(holder);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      sub.holders.delete(holder);
      if (sub.holders.size === 0 && !sub.releaseTimer) {
        sub.releaseTimer = setTimeout(() => {
          sub.releaseTimer = null;
          if (sub.holders.size === 0) this.release(sub);
        }, 0);
      }
    };
  }

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
  query(patterns, query = {}, onChange = () => {}) {
    const list = patternList(patterns);
    if (this.closed) throw new Error('kube-pulse: the client is closed');
    const normalized = liveQuery(query);
    const key = queryKey(list, normalized);
    const sub = this.acquire(key, () => ({
      id: `q${++nextId}`,
      patterns: list,
      // The members go on the wire like options; a query never resumes from a cursor.
      options: normalized,
      query: normalized,
      store: EMPTY_STORE,
      window: LOADING,
      rowsIn: false,
      awaitSubscribed: false,
    }));
    const holder = { onEvent: (event) => onChange(sub.window, event) };
    const end = this.hold(sub, holder);
    if (sub.rowsIn) {
      // A holder that joins a window already there hears it too.
      queueMicrotask(() => {
        if (sub.holders.has(holder)) onChange(sub.window, { type: 'rows' });
      });
    }
    return end;
  }

  /** The current result of the live query `query` over `patterns` (loading when it is not subscribed). */
  queryResult(patterns, query = {}) {
    const sub = this.byKey.get(queryKey([].concat(patterns), liveQuery(query)));
    return sub ? sub.window : LOADING;
  }

  release(sub) {
    if (this.subs.get(sub.id) !== sub) return;
    this.subs.delete(sub.id);
    this.byKey.delete(sub.key);
    clearTimeout(sub.retryTimer);
    sub.abort?.abort();
    sub.abort = null;
    sub.streaming = false;
    if (this.scout === sub) {
      // The streams that waited for its answer go without it.
      this.scout = null;
      if (this.transport === 'sse') queueMicrotask(() => this.reconnectNow());
    }
    this.queue = this.queue.filter((s) => s !== sub);
    if (this.ws && this.ws.readyState === 1 && sub.sent) {
      this.ws.send(JSON.stringify({ op: 'unsubscribe', id: sub.id }));
    }
    // Documents no other subscription covers are dropped: kept, they would
    // go stale unseen and be shown as current to the next holder. (A
    // subscription with options takes its own copy with it.)
    const covered = (topic) =>
      [...this.subs.values()].some((s) => !s.options && s.patterns.some((p) => matches(p, topic)));
    if (!sub.options) this.store.drop((topic) => !covered(topic));
    if (this.subs.size === 0) this.idle();
  }

  /** Nothing is subscribed: no socket, stream or timer is left. */
  idle() {
    clearTimeout(this.timer);
    clearTimeout(this.wsRetryTimer);
    clearTimeout(this.pumpTimer);
    this.timer = this.wsRetryTimer = this.pumpTimer = null;
    this.probeAbort?.abort();
    this.probeAbort = null;
    this.queue = [];
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.onclose = null;
      ws.onopen = null;
      ws.onmessage = null;
      ws.close(1000);
    }
    for (const [, p] of this.pending) p.reject(new PulseError('closed', 'the connection closed', { retrying: false }));
    this.pending.clear();
    this.attempt = 0;
    this.wsFailures = 0;
    this.everLive = false;
    this.paused = false;
    this.transport = this.preferred;
    if (!this.closed) this.setState('idle');
  }

  /** Closes everything; the client goes `offline` and stays so. */
  close() {
    this.closed = true;
    globalThis.removeEventListener?.('online', this.onOnline);
    globalThis.removeEventListener?.('offline', this.onOffline);
    globalThis.removeEventListener?.('pagehide', this.onPageHide);
    globalThis.document?.removeEventListener?.('visibilitychange', this.onVisibility);
    clearTimeout(this.hideTimer);
    for (const sub of [...this.subs.values()]) {
      clearTimeout(sub.releaseTimer);
      this.release(sub);
    }
    this.idle();
    this.setState('offline');
  }

  /** Tries to connect again now (e.g. after the user logged in). */
  reconnect() {
    if (this.closed || this.subs.size === 0) return;
    this.attempt = 0;
    for (const sub of this.subs.values()) {
      if (sub.status !== 'error' || permanent(sub.error)) continue;
      sub.dead = false;
      clearTimeout(sub.retryTimer);
      sub.retryTimer = null;
      if (this.transport === 'ws' && this.wsReady()) this.enqueue(sub);
    }
    this.reconnectNow();
  }

  /** The socket is open and its token (if any) was sent. */
  wsReady() {
    return this.ws?.readyState === 1;
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

  open(sub) {
    if (this.closed || this.paused) return;
    if (this.state === 'idle') this.setState('connecting');
    if (this.transport === 'ws') this.openSocket(sub);
    else this.openStream(sub);
  }

  // ---- delivery ----------------------------------------------------------

  /** Calls every holder of `sub`. */
  emit(sub, event) {
    for (const h of [...sub.holders]) h.onEvent(event);
  }

  /** A change of the local copy goes to every subscription matching its topic. */
  broadcast(change) {
    for (const sub of [...this.subs.values()]) {
      if (!sub.options && sub.patterns.some((p) => matches(p, change.topic))) this.emit(sub, change);
    }
  }

  /** A change of `sub`'s copy: the shared one goes to every subscription, its own to it. */
  changed(sub, change) {
    if (sub.options) this.emit(sub, change);
    else this.broadcast(change);
  }

  setStatus(sub, status, error = null) {
    if (sub.status === status && sub.error === error) return;
    sub.status = status;
    sub.error = error;
    if (sub.query) sub.window = Object.freeze({ ...sub.window, status, error });
    this.emit(sub, { type: 'status', status, error });
  }

  deliver(sub, message) {
    if (sub.query) {
      this.deliverQuery(sub, message);
      return;
    }
    if (message.cursor && message.type !== 'error') sub.cursor = message.cursor;
    if (message.type === 'synced') {
      sub.synced = true;
      sub.retries = 0;
      let removed = [];
      if (!message.resumed && sub.fresh) removed = sub.store.prune(sub.patterns, sub.fresh);
      sub.fresh = null;
      for (const change of removed) this.changed(sub, change);
      this.attempt = 0;
      this.setStatus(sub, 'live');
      this.emit(sub, { type: 'synced', resumed: message.resumed, reason: message.reason });
      return;
    }
    if (message.type === 'error') {
      this.refused(sub, new PulseError(message.code, message.message));
      return;
    }
    if (!message.topic) return;
    if (message.type === 'snapshot' && sub.fresh) sub.fresh.add(message.topic);
    const change = sub.store.apply(message);
    if (change?.gap) {
      // A patch we cannot apply: start this subscription over from snapshots.
      sub.cursor = undefined;
      this.restart(sub);
      return;
    }
    if (change) this.changed(sub, change);
  }

  /**
   * A live query's message (docs/PROTOCOL.md "Live queries"): `rows`
   * replaces the window; `enter`, `leave`, `move` and `patch` apply only
   * where they fit (the index in bounds and at the named topic, a patch on
   * exactly its `base`, the window within its limit); `total` and `groups`
   * replace the counts. One that does not fit drops the window and
   * subscribes again: a window is the gateway's or none.
   */
  deliverQuery(sub, message) {
    const { type } = message;
    if (type === 'error') {
      this.refused(sub, new PulseError(message.code, message.message));
      return;
    }
    // After an unsubscribe the old subscription's last messages may still
    // come (with the same id): nothing counts before the new `subscribed`.
    if (sub.awaitSubscribed) {
      if (type === 'subscribed') sub.awaitSubscribed = false;
      return;
    }
    if (message.cursor) sub.cursor = message.cursor;
    if (type === 'subscribed' || type === 'stopped' || type === 'heartbeat') return;
    if (type === 'synced') {
      if (!sub.rowsIn) {
        this.mismatch(sub, '`synced` before `rows`');
        return;
      }
      sub.synced = true;
      sub.retries = 0;
      this.attempt = 0;
      this.setStatus(sub, 'live');
      this.emit(sub, { type: 'synced' });
      return;
    }
    if (type === 'rows') {
      const problem = this.badRows(sub, message);
      if (problem) {
        this.mismatch(sub, problem);
        return;
      }
      sub.rowsIn = true;
      const window = {
        rows: Object.freeze(message.rows.map(({ topic, rev, doc }) => Object.freeze({ topic, rev, doc }))),
        total: message.total,
      };
      if (message.groups !== undefined) window.groups = message.groups;
      if (message.next !== undefined) window.next = message.next;
      this.update(sub, window, { type: 'rows' });
      return;
    }
    if (!['enter', 'leave', 'move', 'patch', 'total', 'groups'].includes(type)) return; // not a query's
    if (!sub.rowsIn) {
      this.mismatch(sub, `\`${type}\` before \`rows\``);
      return;
    }
    const { rows, total } = sub.window;
    const at = (i) => Number.isInteger(i) && i >= 0 && i < rows.length;
    const next = [...rows];
    let problem = null;
    if (type === 'enter') {
      const { topic, rev, index, doc } = message;
      if (!Number.isInteger(index) || index < 0 || index > rows.length) problem = `enter at ${index} of ${rows.length} rows`;
      else if (rows.some((r) => r.topic === topic)) problem = `${topic} entered twice`;
      else if (rows.length + 1 > sub.query.limit) problem = `more rows than the limit ${sub.query.limit}`;
      else if (!this.rowFits(sub, { topic, rev, doc })) problem = `a bad row ${topic}`;
      else next.splice(index, 0, Object.freeze({ topic, rev, doc }));
      if (!problem) this.update(sub, { ...sub.window, rows: Object.freeze(next) }, { type, topic, index });
    } else if (type === 'leave') {
      const { topic, index } = message;
      if (!at(index) || rows[index].topic !== topic) problem = `leave of ${topic} at ${index}, which is ${rows[index]?.topic}`;
      else next.splice(index, 1);
      if (!problem) this.update(sub, { ...sub.window, rows: Object.freeze(next) }, { type, topic, index });
    } else if (type === 'move') {
      const { topic, from, to } = message;
      if (!at(from) || rows[from].topic !== topic || !at(to)) problem = `move of ${topic} from ${from} (${rows[from]?.topic}) to ${to}`;
      else next.splice(to, 0, ...next.splice(from, 1));
      if (!problem) this.update(sub, { ...sub.window, rows: Object.freeze(next) }, { type, topic, from, to });
    } else if (type === 'patch') {
      const { topic, rev, base } = message;
      const index = rows.findIndex((r) => r.topic === topic);
      const row = rows[index];
      if (!row) problem = `a patch of ${topic}, not in the window`;
      else if (row.rev !== base || !(rev > base)) problem = `a patch of ${topic} from ${base} to ${rev} on revision ${row.rev}`;
      else {
        next[index] = Object.freeze({ topic, rev, doc: mergePatch(row.doc, message.patch) });
        this.update(sub, { ...sub.window, rows: Object.freeze(next) }, { type, topic, index, rev });
      }
    } else if (type === 'total') {
      if (!Number.isInteger(message.total) || message.total < rows.length) problem = `a total of ${message.total} with ${rows.length} rows`;
      else if (message.total !== total) this.update(sub, { ...sub.window, total: message.total }, { type, total: message.total });
    } else if (type === 'groups') {
      if (sub.query.groupBy === undefined || message.groups === null || typeof message.groups !== 'object') problem = 'groups without groupBy';
      else this.update(sub, { ...sub.window, groups: message.groups }, { type, groups: message.groups });
    }
    if (problem) this.mismatch(sub, problem);
  }

  /** Why a `rows` message cannot be the window of `sub` (null when it can). */
  badRows(sub, message) {
    const { rows, total } = message;
    if (!Array.isArray(rows)) return 'rows that are not a list';
    if (rows.length > sub.query.limit) return `${rows.length} rows over the limit ${sub.query.limit}`;
    if (!Number.isInteger(total) || total < rows.length) return `a total of ${total} with ${rows.length} rows`;
    if (new Set(rows.map((r) => r?.topic)).size !== rows.length) return 'a topic twice';
    if (!rows.every((r) => this.rowFits(sub, r ?? {}))) return 'a bad row';
    if ((sub.query.groupBy !== undefined) !== (message.groups !== undefined)) return 'groups without groupBy, or none with it';
    return null;
  }

  /** A row has a topic of the query's patterns, a revision and a document. */
  rowFits(sub, { topic, rev, doc }) {
    return (
      typeof topic === 'string' &&
      sub.patterns.some((p) => matches(p, topic)) &&
      Number.isInteger(rev) &&
      doc !== null &&
      typeof doc === 'object'
    );
  }

  /** A live query's new window (status and error kept) goes to its holders. */
  update(sub, window, event) {
    sub.window = Object.freeze({ ...window, status: sub.status, error: sub.error });
    this.emit(sub, event);
  }

  /**
   * A message that does not fit a live query's window: the window is
   * dropped (loading, no rows) and the query subscribed again.
   */
  mismatch(sub, reason) {
    sub.rowsIn = false;
    sub.synced = false;
    sub.status = 'loading';
    sub.error = null;
    this.update(sub, LOADING, { type: 'reset', reason });
    if (this.transport === 'ws') {
      if (this.ws?.readyState === 1 && sub.sent) {
        this.ws.send(JSON.stringify({ op: 'unsubscribe', id: sub.id }));
        sub.sent = false;
      }
      if (this.ws?.readyState === 1) this.enqueue(sub);
    } else {
      sub.abort?.abort();
      sub.abort = null;
      sub.streaming = false;
      this.openStream(sub);
    }
  }

  /** The gateway refused (or ended) a subscription. */
  refused(sub, error, retryAfterMs) {
    sub.synced = false;
    sub.sent = false;
    if (sub.query) {
      // A refused query has no window.
      sub.rowsIn = false;
      sub.awaitSubscribed = false;
      sub.window = LOADING;
    }
    this.setStatus(sub, 'error', error);
    this.emit(sub, { type: 'error', code: error.code, message: error.message, error });
    if (error.auth) {
      this.authRefused(error, sub);
      return;
    }
    if (!error.retrying) {
      sub.dead = true;
      return;
    }
    clearTimeout(sub.retryTimer);
    sub.retries = (sub.retries ?? 0) + 1;
    const initialMs = 2 * (this.backoff.initialMs ?? DEFAULT_BACKOFF.initialMs);
    const delay = retryAfterMs ?? backoffDelay(sub.retries - 1, { ...this.backoff, initialMs });
    sub.retryTimer = setTimeout(() => {
      sub.retryTimer = null;
      if (this.subs.get(sub.id) !== sub) return;
      if (this.transport === 'ws') {
        if (this.ws?.readyState === 1) this.enqueue(sub);
      } else if (!sub.abort) this.openStream(sub);
    }, delay);
  }

  /**
   * The credential was refused: every subscription still waiting on the
   * connection hears why, not only the one whose answer came first, and the
   * connection starts over (after a backoff) with the token of that time.
   */
  authRefused(error, except) {
    this.connectionError(error);
    this.sseToken = undefined;
    for (const other of this.subs.values()) {
      if (other === except || other.status !== 'loading') continue;
      other.sent = false;
      this.setStatus(other, 'error', error);
      this.emit(other, { type: 'error', code: error.code, message: error.message, error });
    }
    if (this.transport === 'ws' && this.ws && this.wsOpened) {
      // What the socket still says (the subscribes that followed a refused
      // token, each `unauthenticated`) is about a connection that is over.
      this.ws.onmessage = null;
      this.ws.close(1000);
    }
  }

  restart(sub) {
    sub.synced = false;
    sub.fresh = new Set();
    if (this.transport === 'ws' && this.ws?.readyState === 1) {
      this.ws.send(JSON.stringify({ op: 'unsubscribe', id: sub.id }));
      sub.sent = false;
      this.enqueue(sub);
    } else if (this.transport === 'sse') {
      sub.abort?.abort();
      sub.abort = null;
      sub.streaming = false;
      this.openStream(sub);
    }
  }

  /** The connection is lost: every subscription goes stale until it syncs again. */
  lost() {
    if (this.closed || this.subs.size === 0) return;
    for (const sub of this.subs.values()) {
      sub.synced = false;
      sub.sent = false;
      if (sub.status === 'live') this.setStatus(sub, 'stale', sub.error);
    }
    this.schedule();
  }

  /**
   * The next attempt, after the backoff or, when the gateway said when
   * (`Retry-After` of a lockout), then (plus up to half a second, so that
   * tabs do not come back at once): an attempt before that would be
   * refused again.
   */
  schedule(retryAfterMs) {
    if (this.closed || this.subs.size === 0 || this.timer || this.paused) return;
    if (this.state === 'offline') return; // `online` resumes
    // Over SSE the connection is live while any stream is.
    const streaming = this.transport === 'sse' && [...this.subs.values()].some((s) => s.streaming);
    if (!streaming) this.setState(this.everLive ? 'reconnecting' : 'connecting');
    const backoff = backoffDelay(this.attempt++, this.backoff);
    const delay = retryAfterMs > 0 ? retryAfterMs + Math.round(Math.random() * 500) : backoff;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.reconnectNow();
    }, delay);
  }

  reconnectNow() {
    if (this.closed || this.subs.size === 0 || this.paused) return;
    clearTimeout(this.timer);
    this.timer = null;
    if (this.state === 'offline') this.setState(this.everLive ? 'reconnecting' : 'connecting');
    if (this.transport === 'ws') {
      if (!this.ws) this.openSocket();
    } else {
      for (const sub of this.subs.values()) if (!sub.abort && !sub.dead) this.openStream(sub);
    }
  }

  // ---- WebSocket ----------------------------------------------------------

  /** Subscribe operations leave at most `subscribeRate` per second (the gateway refuses more). */
  enqueue(sub) {
    if (!this.queue.includes(sub)) this.queue.push(sub);
    this.pump();
  }

  pump() {
    if (this.pumpTimer) return;
    const burst = Math.min(this.subscribeRate, 20);
    for (;;) {
      if (!this.ws || this.ws.readyState !== 1) {
        this.queue = [];
        return;
      }
      if (this.queue.length === 0) return;
      const now = Date.now();
      this.tokens = Math.min(burst, this.tokens + ((now - this.lastRefill) / 1000) * this.subscribeRate);
      this.lastRefill = now;
      if (this.tokens < 1) {
        const wait = Math.ceil(((1 - this.tokens) / this.subscribeRate) * 1000);
        this.pumpTimer = setTimeout(() => {
          this.pumpTimer = null;
          this.pump();
        }, wait);
        return;
      }
      this.tokens -= 1;
      this.sendSubscribe(this.queue.shift());
    }
  }

  sendSubscribe(sub) {
    if (this.subs.get(sub.id) !== sub || sub.dead) return;
    const op = { op: 'subscribe', id: sub.id, topics: sub.patterns, ...sub.options };
    // A subscription with options does not replay: no cursor to offer.
    if (sub.cursor && !sub.options) op.since = sub.cursor;
    sub.fresh = new Set();
    sub.sent = true;
    if (sub.query) {
      sub.rowsIn = false;
      sub.awaitSubscribed = true;
    }
    this.ws.send(JSON.stringify(op));
  }

  openSocket(sub) {
    if (this.ws) {
      if (this.ws.readyState === 1 && sub) this.enqueue(sub);
      return;
    }
    const url = new URL('api/v1/ws', this.base);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    // Browsers cannot set headers on a WebSocket: the token travels as a
    // subprotocol, the way the Kubernetes apiserver takes it.
    let ws;
    try {
      ws = new this.WebSocket(url.toString(), ['kube-pulse']);
    } catch {
      this.socketFailed();
      return;
    }
    this.ws = ws;
    this.wsOpened = false;
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.wsOpened = true;
      this.wsFailures = 0;
      this.setState('live');
      // The token goes in the socket's first operation, not in its
      // handshake: a refused token is then an answer the client reads (a
      // refused handshake is not), so no HTTP probe has to send the token
      // again, and each attempt costs the address's auth-failure budget
      // (docs/SECURITY.md) one failure at most. The gateway reads nothing
      // else until it has checked it, so the subscribes follow at once.
      const token = this.currentToken();
      this.authId = token ? `a${++nextId}` : null;
      if (token) ws.send(JSON.stringify({ op: 'auth', token, id: this.authId }));
      for (const s of this.subs.values()) if (this.revive(s)) this.enqueue(s);
    };
    ws.onmessage = (event) => {
      if (this.ws !== ws) return;
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
      clearTimeout(this.pumpTimer);
      this.pumpTimer = null;
      this.queue = [];
      for (const [, p] of this.pending) p.reject(new PulseError('closed', 'the connection closed', { retrying: false }));
      this.pending.clear();
      if (!this.wsOpened) {
        this.socketFailed();
        return;
      }
      if (event?.code === 4001 || event?.code === 4003) {
        this.connectionError(
          new PulseError(event.code === 4001 ? 'token_expired' : 'permissions_changed', event.reason || `closed with ${event.code}`),
        );
      }
      if (event?.code === 4029) {
        const reason = event.reason || '';
        this.connectionError(new PulseError(/^too_many_connections/.test(reason) ? 'too_many_connections' : 'too_many_auth_failures', reason));
      }
      this.lost();
    };
  }

  /** A WebSocket message goes to its subscription (`sub`, or the `id` of the refused operation). */
  route(message) {
    if (message.id && message.id === this.authId) {
      this.authId = null;
      // Refused: every subscription hears why, and the connection starts over.
      if (message.type === 'error') this.authRefused(new PulseError(message.code, message.message));
      return;
    }
    const sub = this.subs.get(message.sub ?? message.id);
    if (sub) {
      this.deliver(sub, message);
      return;
    }
    const pending = message.id && this.pending.get(message.id);
    if (pending) {
      this.pending.delete(message.id);
      if (message.type === 'error') pending.reject(new PulseError(message.code, message.message));
      else pending.resolve(message);
      return;
    }
    if (message.type === 'error' && message.code !== 'unknown_subscription') {
      this.connectionError(new PulseError(message.code, message.message));
    }
  }

  /**
   * Renews the token of the live WebSocket with the `auth` operation (same
   * subject and grants); resolves with `{subject, expires?}`. Over SSE the
   * next request carries the new token, so this resolves at once.
   */
  renewToken(token = this.currentToken()) {
    if (this.transport !== 'ws' || !this.ws || this.ws.readyState !== 1) return Promise.resolve(undefined);
    const id = `a${++nextId}`;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ op: 'auth', token, id }));
    });
  }

  /**
   * A socket did not open. Browsers do not say why, and the handshake
   * carries no token, so an HTTP request without one tells a refusal for
   * now (429 or 503: a lockout, a limit, a gateway starting; surfaced, and
   * the socket tried again when `Retry-After` says), a gateway that is down
   * (no answer) and a path that passes HTTP but not WebSockets (twice in a
   * row: SSE with `auto`, the error `websocket_refused` with `ws`).
   */
  async socketFailed() {
    this.ws = null;
    if (this.closed || this.subs.size === 0) return;
    this.setState(this.everLive ? 'reconnecting' : 'connecting');
    const verdict = await this.probe();
    if (this.closed || this.subs.size === 0 || verdict === 'aborted') return;
    if (verdict instanceof PulseError) {
      this.refuseAll(verdict);
      this.schedule(verdict.retryAfterMs);
      return;
    }
    if (verdict === 'http') {
      this.wsFailures++;
      if (!this.auto && this.wsFailures >= 2) {
        this.refuseAll(
          new PulseError('websocket_refused', 'the WebSocket did not open though HTTP passes: a proxy that refuses upgrades?', {
            retrying: true,
          }),
        );
      }
      if (this.auto && this.wsFailures >= 2) {
        // WebSockets cannot get through (a proxy, a policy): SSE for now,
        // and WebSocket again every wsRetryMs.
        this.transport = 'sse';
        this.retryWebSocketLater();
        for (const sub of this.subs.values()) if (!sub.abort && !sub.dead) this.openStream(sub);
        return;
      }
    }
    this.schedule();
  }

  /** Every subscription not refused for good hears `error` (a refusal of the connection). */
  refuseAll(error) {
    for (const sub of this.subs.values()) {
      if (sub.dead || (sub.status === 'error' && sub.error?.code === error.code)) continue;
      sub.synced = false;
      sub.sent = false;
      this.setStatus(sub, 'error', error);
      this.emit(sub, { type: 'error', code: error.code, message: error.message, error });
    }
    this.connectionError(error);
  }

  async probe() {
    if (!this.fetch) return 'down';
    const abort = new AbortController();
    this.probeAbort = abort;
    const timer = setTimeout(() => abort.abort(), 5000);
    try {
      // Without the token: the handshake had none either, so a bad token
      // is not why it failed, and a probe with one would cost the
      // address's auth-failure budget a second failure.
      const response = await this.fetch(new URL('api/v1/clusters', this.base).toString(), {
        headers: { Accept: 'application/json' },
        signal: abort.signal,
        cache: 'no-store',
      });
      // A refusal for now (a lockout, a rate limit, a gateway starting):
      // it says nothing of whether WebSockets pass, so no switch to SSE.
      if (BUSY_STATUSES.has(response.status)) {
        const body = await response.json().catch(() => ({}));
        const error = new PulseError(body.code ?? `http_${response.status}`, body.message ?? `HTTP ${response.status}`, {
          status: response.status,
          retrying: true,
        });
        const after = Number(response.headers?.get?.('Retry-After'));
        if (after > 0) error.retryAfterMs = after * 1000;
        return error;
      }
      return response.status >= 500 ? 'down' : 'http';
    } catch {
      return this.probeAbort === abort ? 'down' : 'aborted';
    } finally {
      clearTimeout(timer);
      if (this.probeAbort === abort) this.probeAbort = null;
    }
  }

  retryWebSocketLater() {
    clearTimeout(this.wsRetryTimer);
    this.wsRetryTimer = setTimeout(() => {
      this.wsRetryTimer = null;
      if (this.closed || this.subs.size === 0 || this.transport !== 'sse') return;
      // A trial socket without subscriptions: only once it opens do the
      // streams move over (resuming from their cursors).
      const url = new URL('api/v1/ws', this.base);
      url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
      const protocols = ['kube-pulse'];
      const token = this.currentToken();
      if (token) protocols.push(`base64url.bearer.authorization.k8s.io.${base64url(token)}`);
      let trial;
      try {
        trial = new this.WebSocket(url.toString(), protocols);
      } catch {
        this.retryWebSocketLater();
        return;
      }
      trial.onopen = () => {
        trial.onclose = null;
        trial.close(1000);
        if (this.closed || this.subs.size === 0 || this.transport !== 'sse' || this.paused) return;
        this.transport = 'ws';
        this.wsFailures = 0;
        for (const sub of this.subs.values()) {
          sub.abort?.abort();
          sub.abort = null;
          sub.streaming = false;
        }
        this.openSocket();
      };
      trial.onclose = () => this.retryWebSocketLater();
    }, this.wsRetryMs);
  }

  // ---- Server-Sent Events over fetch -------------------------------------

  async openStream(sub) {
    if (this.closed || this.subs.get(sub.id) !== sub || sub.dead) return;
    const token = this.currentToken();
    // A token not yet accepted over SSE goes in one stream first (the
    // scout); the others wait for its answer, so that a refused token costs
    // the address's auth-failure budget one failure, not one per stream.
    const unproven = token && token !== this.sseToken;
    if (unproven && this.scout && this.scout !== sub) return;
    if (unproven) this.scout = sub;
    const abort = new AbortController();
    sub.abort = abort;
    sub.fresh = new Set();
    const url = new URL('api/v1/events', this.base);
    for (const p of sub.patterns) url.searchParams.append('topic', p);
    if (sub.options?.debounceMs !== undefined) url.searchParams.set('debounceMs', String(sub.options.debounceMs));
    for (const f of sub.options?.fields ?? []) url.searchParams.append('field', f);
    if (sub.query) {
      const q = sub.query;
      if (q.filter !== undefined) url.searchParams.set('filter', JSON.stringify(q.filter));
      for (const field of q.sort ?? []) url.searchParams.append('sort', field);
      url.searchParams.set('limit', String(q.limit));
      if (q.offset !== undefined) url.searchParams.set('offset', String(q.offset));
      if (q.after !== undefined) url.searchParams.set('after', String(q.after));
      if (q.groupBy !== undefined) url.searchParams.set('groupBy', String(q.groupBy));
      sub.rowsIn = false;
      sub.awaitSubscribed = false;
    }
    if (this.eventSource) {
      this.openEventSource(sub, url, token, unproven, abort);
      return;
    }
    const headers = { Accept: 'text/event-stream' };
    if (token) headers.Authorization = `Bearer ${token}`;
    if (sub.cursor && !sub.options) headers['Last-Event-ID'] = sub.cursor;
    try {
      const response = await this.fetch(url.toString(), { headers, signal: abort.signal, cache: 'no-store' }).finally(() => {
        if (this.scout === sub) this.scout = null;
      });
      if (unproven && ![401, 403, 429].includes(response.status) && this.transport === 'sse') {
        // The token passed: the streams that waited for it go now.
        this.sseToken = token;
        queueMicrotask(() => this.reconnectNow());
      }
      if (!response.ok) {
        let body = {};
        try {
          body = await response.json();
        } catch {
          // not JSON
        }
        if (response.status >= 400 && response.status < 500) {
          if (sub.abort === abort) sub.abort = null;
          const code = body.code ?? `http_${response.status}`;
          const error = new PulseError(code, body.message ?? response.statusText, {
            status: response.status,
            retrying: RETRY_CODES.has(code) || BUSY_STATUSES.has(response.status),
          });
          const after = Number(response.headers?.get?.('Retry-After'));
          this.refused(sub, error, after > 0 ? after * 1000 : undefined);
          if (error.auth) this.schedule();
          if (code === 'too_many_auth_failures') {
            // The address is locked out: the streams waiting on this one hear it too.
            for (const other of this.subs.values()) if (other.status === 'loading') this.setStatus(other, 'error', error);
          }
          return;
        }
        throw new Error(`HTTP ${response.status}`);
      }
      sub.streaming = true;
      this.setState('live');
      if (sub.status === 'error') this.setStatus(sub, sub.synced ? 'live' : 'loading');
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      const feed = sseParser(({ data }) => {
        let message;
        try {
          message = JSON.parse(data);
        } catch {
          return;
        }
        if (this.subs.get(sub.id) === sub && sub.abort === abort) this.deliver(sub, message);
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
    if (abort.signal.aborted || this.subs.get(sub.id) !== sub) return;
    sub.synced = false;
    if (sub.status === 'live') this.setStatus(sub, 'stale');
    if (this.auto && this.transport === 'sse' && !this.wsRetryTimer) this.retryWebSocketLater();
    this.schedule();
  }

  /** A refused HTTP answer (its `{code, message}` body) as the refusal of `sub`. */
  async httpRefused(sub, response) {
    const body = await response.json().catch(() => ({}));
    const code = body.code ?? `http_${response.status}`;
    const error = new PulseError(code, body.message ?? `HTTP ${response.status}`, {
      status: response.status,
      retrying: RETRY_CODES.has(code) || BUSY_STATUSES.has(response.status),
    });
    const after = Number(response.headers?.get?.('Retry-After'));
    this.refused(sub, error, after > 0 ? after * 1000 : undefined);
    if (error.auth || error.status >= 500) this.schedule();
  }

  /**
   * A stream over the browser's native `EventSource`, authorized by an
   * HttpOnly cookie session (docs/SECURITY.md): the token is traded for
   * the cookie once (`POST api/v1/session`, which checks it), and the
   * streams carry no credential a script holds. `EventSource` does not say
   * why a stream failed, so after one ends the cookie is asked for again,
   * and that answer says.
   */
  async openEventSource(sub, url, token, unproven, abort) {
    // The cookie is asked for by the scout alone (openStream), as the token is sent.
    if (unproven) {
      let response;
      try {
        response = await this.fetch(new URL('api/v1/session', this.base).toString(), {
          method: 'POST',
          headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' },
          credentials: 'same-origin',
          signal: abort.signal,
        });
      } catch {
        response = null;
      }
      if (this.scout === sub) this.scout = null;
      if (abort.signal.aborted || this.subs.get(sub.id) !== sub) return;
      if (!response?.ok) {
        sub.abort = null;
        if (response) this.httpRefused(sub, response);
        else this.schedule();
        return;
      }
      this.sseToken = token;
      queueMicrotask(() => this.reconnectNow());
    }
    if (sub.cursor && !sub.options) url.searchParams.set('since', sub.cursor);
    const es = new this.EventSource(url.toString(), { withCredentials: true });
    abort.signal.addEventListener('abort', () => es.close());
    const mine = () => this.subs.get(sub.id) === sub && sub.abort === abort;
    const onMessage = (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return;
      }
      if (mine()) this.deliver(sub, message);
    };
    for (const type of ['snapshot', 'patch', 'removed', 'synced', 'rows', 'enter', 'leave', 'move', 'total', 'groups']) {
      es.addEventListener(type, onMessage);
    }
    es.onopen = () => {
      if (!mine()) return;
      sub.streaming = true;
      this.setState('live');
      this.revive(sub);
    };
    es.onerror = (event) => {
      if (event.data) {
        onMessage(event); // the gateway's `error` event (token_expired, permissions_changed)
        return;
      }
      if (!mine()) return;
      sub.streaming = false;
      if (sub.status === 'live') this.setStatus(sub, 'stale');
      // Connecting: the browser tries again by itself, from the last id.
      if (es.readyState !== 2) return;
      // Closed: refused (or not a stream). The cookie is asked for again.
      es.close();
      sub.abort = null;
      sub.synced = false;
      this.sseToken = undefined;
      this.schedule();
    };
  }

  /** Ends the cookie session (`DELETE api/v1/session`), e.g. at logout. */
  endSession() {
    this.sseToken = undefined;
    return this.request('DELETE', 'api/v1/session');
  }

  // ---- requests (tasks, REST) -----------------------------------------------

  /** A JSON request to the gateway with the bearer token; throws a `PulseError` with `status`. */
  async request(method, path, body) {
    const headers = { Accept: 'application/json' };
    const token = this.currentToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const response = await this.fetch(new URL(path.replace(/^\//, ''), this.base).toString(), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
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
}

/**
 * A store over the documents matching `patterns`, in the shape React's
 * `useSyncExternalStore` wants: `subscribe(listener)` and `getSnapshot()`,
 * which returns `{data, status, error}` — the same object until something
 * changes. `data` is the documents by topic, or with `{single: true}` the
 * one document of an exact topic.
 */
export function topicStore(client, patterns, { single = false, debounceMs, fields } = {}) {
  const list = patternList(patterns);
  const options = subscriptionOptions({ debounceMs, fields }) ?? undefined;
  const read = () => {
    const { status, error } = client.status(list, options);
    return { data: single ? client.get(list[0], options) : client.select(list, options), status, error };
  };
  let snapshot = read();
  const listeners = new Set();
  let unsubscribe = null;
  const changed = (event) => {
    if (event.type === 'synced') return; // its status event already came
    const next = read();
    if (next.data === snapshot.data && next.status === snapshot.status && next.error === snapshot.error && single) return;
    snapshot = next;
    for (const l of [...listeners]) l();
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
        if (listeners.size === 0 && unsubscribe) {
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
    for (const l of [...listeners]) l();
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
        if (listeners.size === 0 && stop) {
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
