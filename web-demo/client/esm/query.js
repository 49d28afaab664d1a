// Live queries (docs/PROTOCOL.md "Live queries"), the full client's: a
// query holds its window — its rows in order, the total and the counts per
// group — kept equal to the gateway's by applying its
// rows/enter/leave/move/patch/total/groups messages, and started over
// whenever one does not fit. `KubePulse` (./kube-pulse.js) calls these
// with itself; the subscription machinery (sharing, pacing, retries) is
// the core's.

import { matchesAny, mergePatch, patternList, subscriptionOptions } from './documents.js';
import { PulseError, newId } from './client.js';

/** The members of a live query, in the order they go on the wire. */
const QUERY_MEMBERS = ['filter', 'sort', 'limit', 'offset', 'after', 'groupBy', 'fields'];

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

const queryKey = (patterns, query) =>
  `query\n${[...new Set(patterns)].sort().join('\n')}\n${JSON.stringify(QUERY_MEMBERS.map((m) => query[m] ?? null))}`;

/** A live query's result before its rows are in. */
export const LOADING = /* @__PURE__ */ Object.freeze({ rows: Object.freeze([]), total: 0, status: 'loading', error: null });

/** `client.query(patterns, query, onChange)`: see `KubePulse.query`. */
export function query(client, patterns, members, onChange) {
  const list = patternList(patterns);
  const normalized = liveQuery(members);
  const sub = client.acquire(queryKey(list, normalized), () => ({
    id: newId('q'),
    patterns: list,
    // The members go on the wire like options; a query never resumes from a cursor.
    options: normalized,
    query: normalized,
    window: LOADING,
  }));
  const holder = { onEvent: (event) => onChange(sub.window, event) };
  const end = client.hold(sub, holder);
  if (sub.rowsIn) {
    // A holder that joins a window already there hears it too.
    queueMicrotask(() => {
      if (sub.holders.has(holder)) onChange(sub.window, { type: 'rows' });
    });
  }
  return end;
}

/** The current result of a live query (loading when it is not subscribed). */
export function queryResult(client, patterns, members) {
  return client.byKey.get(queryKey([].concat(patterns), liveQuery(members)))?.window ?? LOADING;
}

/** A query's subscribe goes out: nothing counts until the gateway's new `subscribed` (WebSocket) or `rows`. */
export function subscribing(sub, ws) {
  sub.rowsIn = false;
  sub.awaitSubscribed = ws;
}

/** A refused query has no window. */
export function unwindow(sub) {
  subscribing(sub, false);
  sub.window = LOADING;
}

/** A live query's new window (status and error kept) goes to its holders. */
function update(client, sub, window, event) {
  sub.window = Object.freeze({ ...window, status: sub.status, error: sub.error });
  client.emit(sub, event);
}

/**
 * A message that does not fit a live query's window: the window is
 * dropped (loading, no rows) and the query subscribed again.
 */
export function mismatch(client, sub, reason) {
  sub.rowsIn = false;
  sub.status = 'loading';
  sub.error = null;
  update(client, sub, LOADING, { type: 'reset', reason });
  client.restart(sub);
}

/** A row has a topic of the query's patterns, a revision and a document. */
const rowFits = (sub, { topic, rev, doc } = {}) =>
  typeof topic === 'string' && matchesAny(sub.patterns, topic) && Number.isInteger(rev) && doc !== null && typeof doc === 'object';

/** Why a `rows` message cannot be the window of `sub` (null when it can). */
function badRows(sub, { rows, total, groups }) {
  if (!Array.isArray(rows)) return 'rows that are not a list';
  if (rows.length > sub.query.limit) return `${rows.length} rows over the limit ${sub.query.limit}`;
  if (!Number.isInteger(total) || total < rows.length) return `a total of ${total} with ${rows.length} rows`;
  if (new Set(rows.map((r) => r?.topic)).size !== rows.length) return 'a topic twice';
  if (!rows.every((r) => rowFits(sub, r ?? {}))) return 'a bad row';
  if ((sub.query.groupBy !== undefined) !== (groups !== undefined)) return 'groups without groupBy, or none with it';
  return null;
}

/**
 * A live query's message (docs/PROTOCOL.md "Live queries"): `rows`
 * replaces the window; `enter`, `leave`, `move` and `patch` apply only
 * where they fit (the index in bounds and at the named topic, a patch on
 * exactly its `base`, the window within its limit); `total` and `groups`
 * replace the counts. One that does not fit drops the window and
 * subscribes again: a window is the gateway's or none.
 */
export function deliverQuery(client, sub, message) {
  const { type } = message;
  if (type === 'error') {
    client.refused(sub, new PulseError(message.code, message.message));
    return;
  }
  // After an unsubscribe the old subscription's last messages may still
  // come (with the same id): nothing counts before the new `subscribed`.
  if (sub.awaitSubscribed) {
    if (type === 'subscribed') sub.awaitSubscribed = false;
    return;
  }
  if (type === 'subscribed' || type === 'stopped' || type === 'heartbeat') return;
  if (message.cursor) sub.cursor = message.cursor;
  if (type === 'synced') {
    if (!sub.rowsIn) {
      mismatch(client, sub, '`synced` before `rows`');
      return;
    }
    sub.synced = true;
    sub.retries = client.attempt = 0;
    client.setStatus(sub, 'live');
    client.emit(sub, { type: 'synced' });
    return;
  }
  if (type === 'rows') {
    const problem = badRows(sub, message);
    if (problem) {
      mismatch(client, sub, problem);
      return;
    }
    sub.rowsIn = true;
    const window = {
      rows: Object.freeze(message.rows.map(({ topic, rev, doc }) => Object.freeze({ topic, rev, doc }))),
      total: message.total,
    };
    if (message.groups !== undefined) window.groups = message.groups;
    if (message.next !== undefined) window.next = message.next;
    update(client, sub, window, { type: 'rows' });
    return;
  }
  if (!['enter', 'leave', 'move', 'patch', 'total', 'groups'].includes(type)) return; // not a query's
  if (!sub.rowsIn) {
    mismatch(client, sub, `\`${type}\` before \`rows\``);
    return;
  }
  const { rows, total } = sub.window;
  const at = (i) => Number.isInteger(i) && i >= 0 && i < rows.length;
  const next = [...rows];
  const apply = (event) => update(client, sub, { ...sub.window, rows: Object.freeze(next) }, event);
  let problem = null;
  if (type === 'enter') {
    const { topic, rev, index, doc } = message;
    if (!Number.isInteger(index) || index < 0 || index > rows.length) problem = `enter at ${index} of ${rows.length} rows`;
    else if (rows.some((r) => r.topic === topic)) problem = `${topic} entered twice`;
    else if (rows.length + 1 > sub.query.limit) problem = `more rows than the limit ${sub.query.limit}`;
    else if (!rowFits(sub, { topic, rev, doc })) problem = `a bad row ${topic}`;
    else {
      next.splice(index, 0, Object.freeze({ topic, rev, doc }));
      apply({ type, topic, index });
    }
  } else if (type === 'leave') {
    const { topic, index } = message;
    if (!at(index) || rows[index].topic !== topic) problem = `leave of ${topic} at ${index}, which is ${rows[index]?.topic}`;
    else {
      next.splice(index, 1);
      apply({ type, topic, index });
    }
  } else if (type === 'move') {
    const { topic, from, to } = message;
    if (!at(from) || rows[from].topic !== topic || !at(to)) problem = `move of ${topic} from ${from} (${rows[from]?.topic}) to ${to}`;
    else {
      next.splice(to, 0, ...next.splice(from, 1));
      apply({ type, topic, from, to });
    }
  } else if (type === 'patch') {
    const { topic, rev, base } = message;
    const index = rows.findIndex((r) => r.topic === topic);
    const row = rows[index];
    if (!row) problem = `a patch of ${topic}, not in the window`;
    else if (row.rev !== base || !(rev > base)) problem = `a patch of ${topic} from ${base} to ${rev} on revision ${row.rev}`;
    else {
      next[index] = Object.freeze({ topic, rev, doc: mergePatch(row.doc, message.patch) });
      apply({ type, topic, index, rev });
    }
  } else if (type === 'total') {
    if (!Number.isInteger(message.total) || message.total < rows.length) problem = `a total of ${message.total} with ${rows.length} rows`;
    else if (message.total !== total) update(client, sub, { ...sub.window, total: message.total }, { type, total: message.total });
  } else if (type === 'groups') {
    if (sub.query.groupBy === undefined || message.groups === null || typeof message.groups !== 'object') problem = 'groups without groupBy';
    else update(client, sub, { ...sub.window, groups: message.groups }, { type, groups: message.groups });
  }
  if (problem) mismatch(client, sub, problem);
}

/** The SSE query parameters of a live query (docs/PROTOCOL.md "Server-Sent Events"). */
export function queryParameters(params, q) {
  if (q.filter !== undefined) params.set('filter', JSON.stringify(q.filter));
  for (const field of q.sort ?? []) params.append('sort', field);
  params.set('limit', String(q.limit));
  for (const member of ['offset', 'after', 'groupBy']) if (q[member] !== undefined) params.set(member, String(q[member]));
}
