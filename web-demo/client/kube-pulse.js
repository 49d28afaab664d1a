// kube-pulse browser client: a dependency-free ES module.
//
// connect() opens one WebSocket (or Server-Sent Events over fetch, so a
// bearer token can be sent) to a kube-pulse gateway, keeps a local copy of
// every document its subscriptions match — snapshots first, then JSON merge
// patches — and reconnects with exponential backoff and jitter, resuming
// each subscription from its last cursor. Wire format: docs/PROTOCOL.md.

/** Connection states, in the order a healthy client goes through them. */
export const STATES = Object.freeze(['connecting', 'live', 'reconnecting', 'offline']);

const DEFAULT_BACKOFF = Object.freeze({ initialMs: 500, maxMs: 30000, factor: 2, jitter: 0.5 });

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

/** The gateway process a cursor (`{epoch}-{seq}`) comes from. */
function epochOf(cursor) {
  const dash = cursor?.lastIndexOf('-') ?? -1;
  return dash > 0 ? cursor.slice(0, dash) : '';
}

/**
 * The local copy of documents, applying protocol messages in revision order.
 * Revisions count per gateway process, so a snapshot from another process
 * (a restart, another replica) replaces a document whatever its revision.
 * `apply` returns the change to report, or null when the message changed nothing.
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
    const epoch = epochOf(message.cursor);
    const have = this.docs.get(topic);
    const sameProcess = have && have.epoch === epoch;
    if (type === 'snapshot') {
      if (sameProcess && have.rev > rev) return null;
      this.docs.set(topic, { rev, epoch, doc: message.doc });
      return { type, topic, rev, doc: message.doc, previous: have?.doc };
    }
    if (type === 'patch') {
      if (!sameProcess) return { gap: true, topic };
      if (rev <= have.rev) return null;
      if (rev !== have.rev + 1) return { gap: true, topic };
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
    const gone = [];
    for (const [topic, { doc }] of this.docs) {
      if (!keep.has(topic) && patterns.some((p) => matches(p, topic))) {
        this.docs.delete(topic);
        gone.push({ type: 'removed', topic, doc: undefined, previous: doc });
      }
    }
    return gone;
  }
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

let nextId = 0;

/**
 * Connects to a gateway.
 *
 * @param {object} options
 * @param {string} options.url  base URL of the gateway (`https://host/` or `/pulse/`)
 * @param {string|(() => string|undefined)} [options.token]  bearer token (or a getter, read at each connect)
 * @param {'ws'|'sse'|'auto'} [options.transport]  `auto`: WebSocket, falling back to SSE when it cannot open
 * @param {object} [options.backoff]  `{initialMs, maxMs, factor, jitter}`
 */
export function connect(options) {
  return new KubePulse(options);
}

export class KubePulse {
  constructor({ url, token, transport = 'auto', backoff = {}, WebSocket: WS, fetch: fetchImpl } = {}) {
    if (!url) throw new Error('kube-pulse: connect({url}) needs the gateway URL');
    if (!['ws', 'sse', 'auto'].includes(transport)) {
      throw new Error(`kube-pulse: transport must be 'ws', 'sse' or 'auto', not ${transport}`);
    }
    this.base = httpBase(url);
    this.token = token;
    this.transport = transport === 'sse' ? 'sse' : 'ws';
    this.fallback = transport === 'auto';
    this.backoff = backoff;
    this.WebSocket = WS ?? globalThis.WebSocket;
    this.fetch = fetchImpl ?? globalThis.fetch?.bind(globalThis);
    this.store = new DocumentStore();
    this.state = 'connecting';
    this.subs = new Map();
    this.listeners = new Set();
    this.attempt = 0;
    this.closed = false;
    this.timer = null;
    this.ws = null;
    this.wsOpened = false;
    this.onOnline = () => this.reconnectNow();
    this.onOffline = () => this.setState('offline');
    globalThis.addEventListener?.('online', this.onOnline);
    globalThis.addEventListener?.('offline', this.onOffline);
  }

  /** The current bearer token, if any. */
  currentToken() {
    return typeof this.token === 'function' ? this.token() : this.token;
  }

  /** Listens to connection state changes; returns the function that stops listening. */
  onState(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  setState(state) {
    if (this.state === state) return;
    this.state = state;
    for (const l of [...this.listeners]) l(state);
  }

  /** The local copy of one document, or undefined. */
  get(topic) {
    return this.store.get(topic);
  }

  /** Local documents matching `patterns` (a string or an array), by topic. */
  select(patterns) {
    return this.store.select([].concat(patterns));
  }

  /**
   * Subscribes to topic patterns. `onChange(change)` gets every change of a
   * matched document ({type: 'snapshot'|'patch'|'removed', topic, rev, doc,
   * previous, patch?}) and `{type: 'synced', resumed}` when the initial
   * snapshots (or the replay) are in. Returns the unsubscribe function.
   */
  subscribe(patterns, onChange = () => {}) {
    const list = [].concat(patterns);
    if (list.length === 0) throw new Error('kube-pulse: subscribe needs at least one pattern');
    const sub = {
      id: `s${++nextId}`,
      patterns: list,
      onChange,
      cursor: undefined,
      synced: false,
      fresh: null,
      abort: null,
    };
    this.subs.set(sub.id, sub);
    this.open(sub);
    return () => this.unsubscribe(sub);
  }

  unsubscribe(sub) {
    if (!this.subs.delete(sub.id)) return;
    sub.abort?.abort();
    if (this.ws && this.ws.readyState === 1) {
      this.ws.send(JSON.stringify({ op: 'unsubscribe', id: sub.id }));
    }
    if (this.subs.size === 0 && this.ws) {
      this.ws.onclose = null;
      this.ws.close(1000);
      this.ws = null;
    }
  }

  /** Closes everything; the client goes `offline` and stays so. */
  close() {
    this.closed = true;
    clearTimeout(this.timer);
    globalThis.removeEventListener?.('online', this.onOnline);
    globalThis.removeEventListener?.('offline', this.onOffline);
    for (const sub of this.subs.values()) sub.abort?.abort();
    if (this.ws) {
      this.ws.onclose = null;
      this.ws.close(1000);
      this.ws = null;
    }
    this.setState('offline');
  }

  open(sub) {
    if (this.closed) return;
    if (this.transport === 'ws') this.openSocket(sub);
    else this.openStream(sub);
  }

  // ---- delivery ----------------------------------------------------------

  deliver(sub, message) {
    if (message.cursor) sub.cursor = message.cursor;
    if (message.type === 'synced') {
      sub.synced = true;
      let removed = [];
      if (!message.resumed && sub.fresh) removed = this.store.prune(sub.patterns, sub.fresh);
      sub.fresh = null;
      for (const change of removed) sub.onChange(change);
      sub.onChange({ type: 'synced', resumed: message.resumed, reason: message.reason });
      this.attempt = 0;
      if ([...this.subs.values()].every((s) => s.synced)) this.setState('live');
      return;
    }
    if (message.type === 'error') {
      sub.onChange({ type: 'error', code: message.code, message: message.message });
      return;
    }
    if (!message.topic) return;
    if (message.type === 'snapshot' && sub.fresh) sub.fresh.add(message.topic);
    const change = this.store.apply(message);
    if (change?.gap) {
      // A patch we cannot apply: start this subscription over from snapshots.
      sub.cursor = undefined;
      this.restart(sub);
      return;
    }
    if (change) sub.onChange(change);
  }

  restart(sub) {
    sub.synced = false;
    sub.fresh = new Set();
    if (this.transport === 'ws' && this.ws?.readyState === 1) {
      this.ws.send(JSON.stringify({ op: 'unsubscribe', id: sub.id }));
      this.sendSubscribe(sub);
    } else if (this.transport === 'sse') {
      sub.abort?.abort();
      this.openStream(sub);
    }
  }

  lost() {
    if (this.closed) return;
    for (const sub of this.subs.values()) sub.synced = false;
    if (this.subs.size === 0) return;
    if (this.state !== 'offline') this.setState(this.state === 'connecting' ? 'connecting' : 'reconnecting');
    if (this.timer) return;
    const delay = backoffDelay(this.attempt++, this.backoff);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.reconnectNow();
    }, delay);
  }

  reconnectNow() {
    if (this.closed) return;
    clearTimeout(this.timer);
    this.timer = null;
    if (this.state === 'offline') this.setState('reconnecting');
    if (this.transport === 'ws') {
      if (!this.ws) this.openSocket();
    } else {
      for (const sub of this.subs.values()) if (!sub.abort) this.openStream(sub);
    }
  }

  // ---- WebSocket ----------------------------------------------------------

  sendSubscribe(sub) {
    const op = { op: 'subscribe', id: sub.id, topics: sub.patterns };
    if (sub.cursor) op.since = sub.cursor;
    sub.fresh = new Set();
    this.ws.send(JSON.stringify(op));
  }

  openSocket(sub) {
    if (this.ws) {
      if (this.ws.readyState === 1 && sub) this.sendSubscribe(sub);
      return;
    }
    const url = new URL('api/v1/ws', this.base);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    // Browsers cannot set headers on a WebSocket: the token travels as a
    // subprotocol, the way the Kubernetes apiserver takes it.
    const protocols = ['kube-pulse'];
    const token = this.currentToken();
    if (token) protocols.push(`base64url.bearer.authorization.k8s.io.${base64url(token)}`);
    let ws;
    try {
      ws = new this.WebSocket(url.toString(), protocols);
    } catch {
      this.socketFailed();
      return;
    }
    this.ws = ws;
    this.wsOpened = false;
    ws.onopen = () => {
      this.wsOpened = true;
      for (const s of this.subs.values()) this.sendSubscribe(s);
    };
    ws.onmessage = (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return;
      }
      const s = message.sub ? this.subs.get(message.sub) : undefined;
      if (s) this.deliver(s, message);
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (!this.wsOpened) this.socketFailed();
      else this.lost();
    };
  }

  socketFailed() {
    this.ws = null;
    if (this.fallback) {
      // WebSocket cannot get through (a proxy, a policy): stay on SSE.
      this.transport = 'sse';
      this.fallback = false;
      for (const sub of this.subs.values()) this.openStream(sub);
      return;
    }
    this.lost();
  }

  // ---- Server-Sent Events over fetch -------------------------------------

  async openStream(sub) {
    if (this.closed || !this.subs.has(sub.id)) return;
    const abort = new AbortController();
    sub.abort = abort;
    sub.fresh = new Set();
    const url = new URL('api/v1/events', this.base);
    for (const p of sub.patterns) url.searchParams.append('topic', p);
    const headers = { Accept: 'text/event-stream' };
    const token = this.currentToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    if (sub.cursor) headers['Last-Event-ID'] = sub.cursor;
    try {
      const response = await this.fetch(url.toString(), { headers, signal: abort.signal, cache: 'no-store' });
      if (!response.ok) {
        let body = {};
        try {
          body = await response.json();
        } catch {
          // not JSON
        }
        if (response.status >= 400 && response.status < 500 && response.status !== 429) {
          // The request itself is wrong (a bad pattern): retrying cannot help.
          sub.onChange({ type: 'error', code: body.code ?? `http_${response.status}`, message: body.message ?? response.statusText });
          sub.abort = null;
          return;
        }
        throw new Error(`HTTP ${response.status}`);
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      const feed = sseParser(({ data }) => {
        let message;
        try {
          message = JSON.parse(data);
        } catch {
          return;
        }
        this.deliver(sub, message);
      });
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        feed(decoder.decode(value, { stream: true }));
      }
    } catch (err) {
      if (abort.signal.aborted) return;
    }
    if (sub.abort === abort) sub.abort = null;
    if (!abort.signal.aborted && this.subs.has(sub.id)) this.lost();
  }

  // ---- requests (tasks) ---------------------------------------------------

  /** A JSON request to the gateway with the bearer token; throws `{status, code, message}`. */
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
    const json = text ? JSON.parse(text) : null;
    if (!response.ok) {
      const error = new Error(json?.message ?? `HTTP ${response.status}`);
      error.status = response.status;
      error.code = json?.code;
      throw error;
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
}

/**
 * A store over the documents matching `patterns`, in the shape React's
 * `useSyncExternalStore` wants: `subscribe(listener)` and `getSnapshot()`
 * (the same object until something changes).
 */
export function topicStore(client, patterns) {
  const list = [].concat(patterns);
  let snapshot = client.select(list);
  const listeners = new Set();
  let unsubscribe = null;
  const changed = (change) => {
    if (change.type === 'synced' || change.type === 'error') return;
    snapshot = client.select(list);
    for (const l of [...listeners]) l();
  };
  return {
    subscribe(listener) {
      listeners.add(listener);
      if (!unsubscribe) unsubscribe = client.subscribe(list, changed);
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
