// The page's life, the full client's: a hidden tab pauses its
// subscriptions after a grace (documents and cursors kept, nothing open)
// and resumes them from their cursors when shown; when the page is hidden
// or left, the synced whole-document subscriptions are kept in
// `sessionStorage` (cursor and documents, bounded in bytes, tagged with
// the token) for the next load of the page in the tab to resume from
// instead of taking snapshots (a warm start). `KubePulse`
// (./kube-pulse.js) calls these with itself.

import { matchesAny } from './documents.js';
import { retryWebSocketLater, stopStream } from './sse.js';

/** A short tag of a token (FNV-1a), so that a warm start is not shown to another user of the tab. */
function tokenTag(token = '') {
  let h = 0x811c9dc5;
  for (let i = 0; i < token.length; i++) h = Math.imul(h ^ token.charCodeAt(i), 0x01000193);
  return (h >>> 0).toString(36);
}

/**
 * The `sessionStorage` key of a warm start: one per gateway URL. Read when
 * used, not when the client is made: a server render has no page to
 * resolve a relative URL against (nor any storage).
 */
const warmKey = (client) => `kube-pulse:${client.base.href}`;

/**
 * Watches the page for `client`: `visibilitychange` (pause after
 * `hiddenGraceMs`, null: never; resume when shown) and `pagehide` (keep
 * what a warm start needs, at most `warmBytes`, false: nothing), and reads
 * what the last load kept.
 */
export function watchPage(client, hiddenGraceMs, warmBytes) {
  client.hiddenGraceMs = hiddenGraceMs;
  client.warmBytes = warmBytes;
  client.warm = loadWarm(client);
  client.listen(
    'visibilitychange',
    () => {
      client.hideTimer = clearTimeout(client.hideTimer);
      if (globalThis.document.visibilityState === 'hidden') {
        if (hiddenGraceMs != null && hiddenGraceMs !== Infinity) client.hideTimer = setTimeout(() => pause(client), hiddenGraceMs);
        saveWarm(client);
      } else if (client.paused) resume(client);
    },
    globalThis.document,
  );
  client.listen('pagehide', () => saveWarm(client));
}

/**
 * The tab is hidden and its grace is over: sockets and streams close,
 * subscriptions keep their documents and cursors (status `stale`), and
 * nothing reconnects until the tab is shown.
 */
export function pause(client) {
  client.hideTimer = null;
  if (!client.active() || client.paused) return;
  client.paused = true;
  clearTimeout(client.timer);
  clearTimeout(client.wsRetryTimer);
  client.timer = client.wsRetryTimer = null;
  client.probeAbort?.abort();
  client.closeSocket();
  for (const sub of client.subs.values()) {
    stopStream(sub);
    sub.synced = sub.sent = false;
    clearTimeout(sub.retryTimer);
    if (sub.status === 'live') client.setStatus(sub, 'stale', sub.error);
  }
  client.setState('paused');
}

/** The tab is shown again: every subscription resumes from its cursor. */
export function resume(client) {
  client.paused = false;
  if (!client.active()) return;
  client.setState(client.everLive ? 'reconnecting' : 'connecting');
  client.attempt = 0;
  client.reconnectNow();
  if (client.auto && client.transport === 'sse') retryWebSocketLater(client);
}

/**
 * What the last load of this page kept (`saveWarm`): by subscription
 * key, its cursor and documents, when the same token holds now.
 */
function loadWarm(client) {
  const warm = new Map();
  if (!client.warmBytes) return warm;
  try {
    const storage = globalThis.sessionStorage;
    const saved = JSON.parse(storage?.getItem(warmKey(client)) ?? 'null');
    storage?.removeItem(warmKey(client));
    if (saved?.v !== 1 || saved.who !== tokenTag(client.currentToken())) return warm;
    for (const sub of saved.subs) warm.set(sub.key, sub);
  } catch {
    // none, unreadable or refused: a cold start
  }
  return warm;
}

/**
 * A new subscription with the patterns of one the last load kept starts
 * with its documents, `stale` until the gateway has sent what changed
 * since its cursor (or fresh snapshots).
 */
export function warmUp(client, sub) {
  const warm = !sub.options && client.warm.get(sub.key);
  if (!warm) return;
  client.warm.delete(sub.key);
  sub.cursor = warm.cursor;
  for (const [topic, [rev, epoch, doc]] of Object.entries(warm.docs)) {
    if (!client.store.docs.has(topic)) client.store.docs.set(topic, { rev, epoch, doc });
  }
  sub.status = 'stale';
}

/**
 * Keeps, for the next load of this page in this tab, each synced
 * subscription's cursor and documents (whole-document subscriptions
 * only: options and live queries do not resume), as many subscriptions
 * as fit in `warmStart` bytes, and a tag of the token they were read with.
 */
export function saveWarm(client) {
  const storage = globalThis.sessionStorage;
  if (!client.warmBytes || !storage || client.closed) return;
  const subs = [];
  let bytes = 0;
  for (const sub of client.subs.values()) {
    if (sub.options || !sub.cursor || !(sub.synced || sub.status === 'stale')) continue;
    const docs = {};
    for (const [topic, { rev, epoch, doc }] of client.store.docs) {
      if (matchesAny(sub.patterns, topic)) docs[topic] = [rev, epoch, doc];
    }
    const entry = { key: sub.key, cursor: sub.cursor, docs };
    const size = JSON.stringify(entry).length;
    if (bytes + size > client.warmBytes) continue;
    bytes += size;
    subs.push(entry);
  }
  try {
    if (subs.length) storage.setItem(warmKey(client), JSON.stringify({ v: 1, who: tokenTag(client.currentToken()), subs }));
    else storage.removeItem(warmKey(client));
  } catch {
    // full or refused: the next load starts cold
  }
}
