// The documents side of the kube-pulse client, with no connection in it:
// topic patterns, JSON merge patches, the local copy that applies protocol
// messages in revision order (docs/PROTOCOL.md "Applying messages"), the
// checks of patterns and subscription options, and how current a topic is
// from a subscription's heartbeats (`asOf`). Every entry of the package
// (core and full) builds on this module.

/** Whether topic pattern `pattern` matches `topic` (`*` one segment, `**` the rest). */
export function matches(pattern, topic) {
  const p = pattern.split('/');
  const t = topic.split('/');
  for (let i = 0; i < p.length; i++) {
    if (p[i] === '**') return t.length > i;
    if (i >= t.length || (p[i] !== '*' && p[i] !== t[i])) return false;
  }
  return p.length === t.length;
}

/** Whether any of `patterns` matches `topic`. */
export const matchesAny = (patterns, topic) => patterns.some((p) => matches(p, topic));

const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);

/** RFC 7386 JSON merge patch: returns a new value, leaving `target` untouched. */
export function mergePatch(target, patch) {
  if (!isObject(patch)) return patch;
  const out = isObject(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = mergePatch(out[key], value);
  }
  return out;
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
function epochOf(cursor = '', topic = '') {
  const [process, stream] = cursor.split('.');
  return stream !== undefined && /^(clusters|apps)\//.test(topic) ? `stream:${nameOf(stream)}` : nameOf(process);
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
    for (const [topic, { doc }] of this.docs) if (matchesAny(patterns, topic)) out[topic] = doc;
    return out;
  }

  apply(message) {
    const { type, topic, rev } = message;
    const epoch = epochOf(message.cursor, topic);
    const have = this.docs.get(topic);
    const previous = have?.doc;
    const sameProcess = have?.epoch === epoch;
    if (type === 'snapshot') {
      if (sameProcess && have.rev >= rev) return null;
      this.docs.set(topic, { rev, epoch, doc: message.doc });
      return { type, topic, rev, doc: message.doc, previous };
    }
    if (type === 'patch') {
      if (sameProcess && rev <= have.rev) return null;
      // A coalesced or projected patch names its base; any other's is rev - 1.
      if (!sameProcess || have.rev !== (message.base ?? rev - 1)) return { gap: true, topic };
      const doc = mergePatch(previous, message.patch);
      this.docs.set(topic, { rev, epoch, doc });
      return { type, topic, rev, doc, patch: message.patch, previous };
    }
    if (type === 'removed' && have) {
      this.docs.delete(topic);
      return { type, topic, rev, doc: undefined, previous };
    }
    return null;
  }

  /** Drops documents matching `patterns` except `keep` (after fresh snapshots). */
  prune(patterns, keep) {
    return this.drop((topic) => !keep.has(topic) && matchesAny(patterns, topic));
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

/**
 * Subscription options, checked and normalized as the gateway does
 * (docs/PROTOCOL.md "Subscription options"); null when there are none.
 */
export function subscriptionOptions({ debounceMs, fields } = {}) {
  if (debounceMs === undefined && fields === undefined) return null;
  const out = {};
  if (debounceMs !== undefined) {
    if (!Number.isInteger(debounceMs) || debounceMs < 50 || debounceMs > 60000) {
      throw new Error(`kube-pulse: debounceMs is a whole number from 50 to 60000, not ${debounceMs}`);
    }
    out.debounceMs = debounceMs;
  }
  if (fields !== undefined) {
    const list = [...new Set([].concat(fields))].sort();
    if (!list.length || list.length > 32 || list.some((f) => typeof f !== 'string' || f[0] !== '/' || f.length > 256)) {
      throw new Error('kube-pulse: fields are 1 to 32 JSON pointers such as "/phase"');
    }
    out.fields = list;
  }
  return out;
}

/**
 * The patterns of a subscription, a list without duplicates; a segment
 * `undefined` or `null` throws: it is a template topic whose name was not
 * known yet (`clusters/${name}`), not a cluster to subscribe to.
 */
export function patternList(patterns) {
  const list = [...new Set([].concat(patterns))];
  if (!list.length) throw new Error('kube-pulse: subscribe to at least one pattern');
  for (const p of list) {
    if (typeof p !== 'string') throw new TypeError(`kube-pulse: a pattern is a string, not ${p}`);
    const bad = p.split('/').find((segment) => segment === 'undefined' || segment === 'null');
    if (bad) {
      throw new TypeError(`kube-pulse: "${p}" has a segment "${bad}": a name in a template topic was ${bad}; subscribe once it is known`);
    }
  }
  return list;
}

/** The part of a subscription's key that its options make. */
export const optionsKey = (options) => (options ? `\n#${options.debounceMs ?? ''}#${(options.fields ?? []).join('\t')}` : '');

/** What identifies a subscription: its patterns, sorted, and its options. */
export const keyOf = (patterns, options = null) => [...new Set(patterns)].sort().join('\n') + optionsKey(options);

/**
 * When the source of a topic's document was last known current, in the
 * gateway's clock (ms), from a subscription heartbeat's `asOf` (member
 * cluster → RFC 3339; docs/WEB.md "How current"): `clusters/{m}`,
 * `clusters/{m}/sync/…`, `apps/{m}/…` and `summary/apps/{m}/…` take `m`'s
 * entry, `tasks/{id}` its target cluster's, `summary/clusters` the oldest
 * entry; anything else, or a member without an entry, is unknown (NaN).
 */
export function asOfMs(asOf, topic, doc) {
  const member = topic.startsWith('tasks/') ? doc?.target?.cluster : /^(clusters|apps|summary\/apps)\/([^/]+)/.exec(topic)?.[2];
  const times = topic === 'summary/clusters' ? Object.values(asOf) : [asOf[member]];
  return times.length ? Math.min(...times.map((t) => Date.parse(t))) : NaN;
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
