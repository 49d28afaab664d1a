// The kube-pulse demo page: one subscription to every cluster, sync and
// task document, one to the apps' history (projected) for the transition
// log, and a live query for the applications table (its filters, sorted by
// state, then by topic), rendered into keyed elements that are updated in
// place and moved where the query says (no re-render of whole tables, so
// nothing flashes on updates).

import { connect } from './client/kube-pulse.js';

const base = new URL('..', import.meta.url);
const params = new URLSearchParams(location.search);
const client = connect({
  url: base.href,
  transport: params.get('transport') ?? 'auto',
  token: () => localStorage.getItem('kube-pulse-token') ?? undefined,
});

const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') node.className = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  node.append(...children);
  return node;
};
/** Sets text only when it differs, so unchanged nodes are not touched. */
const text = (node, value) => {
  const v = value == null ? '' : String(value);
  if (node.textContent !== v) node.textContent = v;
};
const attr = (node, name, value) => {
  if (node.getAttribute(name) !== value) node.setAttribute(name, value);
};
/** Sets an attribute, or removes it when `value` is null or undefined. */
const optAttr = (node, name, value) => {
  if (value == null) node.removeAttribute(name);
  else attr(node, name, value);
};
/** Points a `time[data-since]` at `iso` (the clock below keeps its "ago" current). */
const since = (node, iso) => {
  if (node.dataset.since === iso) return;
  node.dataset.since = iso;
  node.setAttribute('datetime', iso);
  text(node, ago(iso));
};

// ---- connection -------------------------------------------------------------

const LABELS = { idle: 'Idle', connecting: 'Connecting…', live: 'Live', reconnecting: 'Reconnecting…', offline: 'Offline', paused: 'Paused' };
function showState(state) {
  const box = $('connection');
  attr(box, 'data-state', state);
  text(box.querySelector('.label'), LABELS[state] ?? state);
}
client.onState(showState);
showState(client.state);
// A refused token (or one that expired) is said, not just retried.
client.onError((error) => {
  if (error.auth) notice(`${error.code}: ${error.message} (set localStorage['kube-pulse-token'])`);
});

// ---- time -------------------------------------------------------------------

function ago(iso) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}
function clock(date = new Date()) {
  const time = date.toLocaleTimeString([], { hour12: false });
  return date.toDateString() === new Date().toDateString() ? time : `${date.toLocaleDateString()} ${time}`;
}
setInterval(() => {
  for (const t of document.querySelectorAll('time[data-since]')) text(t, ago(t.dataset.since));
  renderAsOf();
}, 1000);

// ---- clusters and their sync registries ------------------------------------

// How old a member's documents may be (the subscription's heartbeats: the
// gateway's clock, docs/PROTOCOL.md "Heartbeats and asOf"). Past three
// default heartbeats (15 s) without news of the member, its card greys out.
const STALE_AFTER_MS = 45_000;
function renderAsOf() {
  for (const [name, card] of clusterCards) {
    const age = client.age(`clusters/${name}`);
    const dd = card.querySelector('.asof');
    text(dd, age == null ? '—' : `${ago(new Date(Date.now() - age).toISOString())} ago`);
    optAttr(dd, 'data-age-ms', age == null ? null : String(Math.round(age)));
    optAttr(card, 'data-stale-data', age != null && age > STALE_AFTER_MS ? '' : null);
  }
}

const clusterCards = new Map();

function clusterCard(name) {
  let card = clusterCards.get(name);
  if (card) return card;
  card = el(
    'article',
    { class: 'cluster', 'data-cluster': name },
    el('header', {}, el('h3', {}, name), el('span', { class: 'badge phase' })),
    el('p', { class: 'reason' }, el('span', { class: 'why' }), ' · for ', el('time', { class: 'since' })),
    // Push members only (docs/AGENT.md): how the hub hears the member's agent.
    el(
      'p',
      { class: 'agent', hidden: '' },
      el('span', { class: 'badge small mode' }, 'push'),
      ' agent ',
      el('b', { class: 'link' }),
      el('span', { class: 'beat', hidden: '' }, ' · heartbeat ', el('time', { class: 'heartbeat' }), ' ago'),
    ),
    el(
      'dl',
      { class: 'facts' },
      el('div', {}, el('dt', {}, 'probe'), el('dd', { class: 'latency' })),
      el('div', {}, el('dt', {}, 'version'), el('dd', { class: 'version' })),
      el('div', {}, el('dt', {}, 'resources'), el('dd', { class: 'resources' })),
      el('div', {}, el('dt', {}, 'nodes'), el('dd', { class: 'nodes' })),
      el('div', { class: 'wide' }, el('dt', {}, 'capacity'), el('dd', { class: 'capacity' })),
      el('div', {}, el('dt', {}, 'as of'), el('dd', { class: 'asof' }, '—')),
    ),
    el('p', { class: 'message' }),
    el('table', { class: 'sync' }, el('tbody')),
  );
  clusterCards.set(name, card);
  const grid = $('clusters');
  grid.querySelector('.empty')?.remove();
  const after = [...clusterCards.keys()].sort().find((n) => n > name);
  grid.insertBefore(card, after ? clusterCards.get(after) : null);
  const option = el('option', { value: name }, name);
  const select = $('app-cluster');
  const next = [...select.options].find((o) => o.value > name);
  select.insertBefore(option, next ?? null);
  return card;
}

function renderCluster(doc) {
  const card = clusterCard(doc.name);
  attr(card, 'data-phase', doc.phase);
  attr(card, 'data-reason', doc.reason ?? '');
  const badge = card.querySelector('.phase');
  fact(badge, doc.phase);
  attr(badge, 'data-phase', doc.phase);
  attr(badge, 'data-reason', doc.reason ?? '');
  text(card.querySelector('.why'), doc.reason);
  since(card.querySelector('.since'), doc.since);
  renderAgent(card, doc);
  const latency = doc.probe?.latencyMs;
  fact(card.querySelector('.latency'), latency == null ? '—' : `${latency} ms`);
  fact(card.querySelector('.version'), doc.probe?.serverVersion ?? '—');
  const r = doc.resources ?? {};
  const objects = doc.cache?.objects;
  fact(card.querySelector('.resources'), `${r.synced ?? 0}/${r.total ?? 0} syncing${r.failing ? `, ${r.failing} failing` : ''}${objects == null ? '' : `, ${objects} objects`}`);
  fact(card.querySelector('.nodes'), nodesFact(doc.nodes));
  fact(card.querySelector('.capacity'), capacityFact(doc.nodes, doc.pods));
  text(card.querySelector('.message'), doc.message);
  logHistory(`clusters/${doc.name}`, doc, `cluster ${doc.name}`);
}

// The node watch's sums (docs/STATUS.md, "Nodes and capacity"): ready of
// all, and how many are cordoned.
function nodesFact(nodes) {
  if (!nodes) return '—';
  const cordoned = nodes.unschedulable ? `, ${nodes.unschedulable} cordoned` : '';
  return `${nodes.ready}/${nodes.total} ready${cordoned}`;
}

// Pods and their requests against what the nodes can hold.
function capacityFact(nodes, pods) {
  if (!nodes) return '—';
  const cores = (millis) => (millis / 1000).toFixed(millis % 1000 ? 1 : 0);
  const gib = (bytes) => (bytes / 2 ** 30).toFixed(1);
  const a = nodes.allocatable;
  if (!pods) return `${a.pods} pods · ${cores(a.cpuMillis)} CPU · ${gib(a.memoryBytes)} GiB`;
  const r = pods.requests;
  return `${pods.running}/${a.pods} pods · ${cores(r.cpuMillis)}/${cores(a.cpuMillis)} CPU · ${gib(r.memoryBytes)}/${gib(a.memoryBytes)} GiB requested`;
}

// A push member's agent as the hub hears it: `connected` while its
// heartbeats arrive within the grace, `lost` once they stopped (the member is
// then `Unknown (AgentLost)` and its other documents `stale`), `awaited`
// before the first one.
function renderAgent(card, doc) {
  const line = card.querySelector('.agent');
  const pushed = doc.mode === 'push';
  optAttr(card, 'data-mode', pushed ? 'push' : null);
  line.hidden = !pushed;
  if (!pushed) {
    optAttr(card, 'data-agent', null);
    return;
  }
  const agent = doc.agent ?? {};
  const state = agent.connected ? 'connected' : agent.lastHeartbeatAt ? 'lost' : 'awaited';
  attr(card, 'data-agent', state);
  attr(line, 'data-agent', state);
  text(line.querySelector('.link'), { connected: 'connected', lost: 'lost', awaited: 'not heard yet' }[state]);
  const beat = line.querySelector('.beat');
  beat.hidden = !agent.lastHeartbeatAt;
  if (agent.lastHeartbeatAt) since(beat.querySelector('time'), agent.lastHeartbeatAt);
  const heard = agent.lastHeartbeatAt ? `, last heartbeat ${new Date(agent.lastHeartbeatAt).toLocaleString()}` : '';
  attr(line, 'title', `pushed by its agent${agent.version ? ` (kube-pulse ${agent.version})` : ''}${heard}`);
}

/** A value that may be cut (with an ellipsis) where its box is narrow: the title holds it whole. */
function fact(node, value) {
  text(node, value);
  attr(node, 'title', value);
}

function renderSync(doc, topic) {
  const card = clusterCard(doc.cluster);
  const body = card.querySelector('.sync tbody');
  let row = body.querySelector(`tr[data-topic="${CSS.escape(topic)}"]`);
  const res = doc.resource ?? {};
  const label = `${res.group ? `${res.group}/` : ''}${res.resource}`;
  if (!row) {
    row = el('tr', { 'data-topic': topic, 'data-resource': label },
      el('td', { class: 'res', title: `${label} (${res.version})` }, label),
      el('td', { class: 'phase' }, el('span', { class: 'badge small' })),
      el('td', { class: 'num objects' }),
      el('td', { class: 'why' }));
    const after = [...body.rows].find((r) => r.dataset.resource > label);
    body.insertBefore(row, after ?? null);
  }
  const badge = row.querySelector('.badge');
  fact(badge, doc.phase);
  attr(badge, 'data-phase', doc.phase);
  fact(row.querySelector('.objects'), `${doc.objects ?? 0}`);
  text(row.querySelector('.why'), doc.reason);
  attr(row.querySelector('.why'), 'title', `${doc.message ? `${doc.reason}: ${doc.message}` : doc.reason ?? ''}${staleNote(doc)}`);
  optAttr(row, 'data-stale', doc.stale?.reason);
  logHistory(topic, doc, `${doc.cluster} ${res.resource}`);
}

// ---- applications -----------------------------------------------------------

/** The table's rows by topic: those of the live query's window, in its order. */
const appRows = new Map();
/** The document each row last rendered (rows are new objects when they change). */
const renderedDocs = new Map();

function appRow(topic, doc) {
  let row = appRows.get(topic);
  if (row) return row;
  const act = (type) => el('button', { type: 'button', class: `act ${type.toLowerCase()}`, 'data-action': type, disabled: '', onclick: () => task(type, doc) }, type);
  row = el(
    'tr',
    { 'data-topic': topic, 'data-cluster': doc.cluster, 'data-app': `${doc.namespace}/${doc.app}` },
    el('td', { class: 'cluster-name' }, doc.cluster),
    el('td', { class: 'name' }, el('span', { class: 'ns' }, `${doc.namespace}/`), doc.app),
    el('td', { class: 'state-cell' },
      el('span', { class: 'badge state' }),
      el('span', { class: 'stale', hidden: '' }, 'stale'),
      el('div', { class: 'progress', hidden: '' }, el('div', { class: 'fill' }), el('span', { class: 'pct' }))),
    el('td', { class: 'num ready' }),
    el('td', { class: 'detail' },
      el('span', { class: 'message' }),
      el('ul', { class: 'pod-problems', hidden: '' }),
      el('p', { class: 'last-warning', hidden: '' })),
    el('td', { class: 'actions' }, act('Stop'), act('Start'), act('Update')),
  );
  appRows.set(topic, row);
  return row;
}

function renderApp(doc, topic) {
  const row = appRow(topic, doc);
  const state = doc.state ?? doc.phase;
  attr(row, 'data-state', state);
  const badge = row.querySelector('.state');
  text(badge, state);
  attr(badge, 'data-phase', state);
  attr(badge, 'title', doc.task ? `stable state: ${doc.phase} (${doc.reason})` : doc.reason);
  // A push member's app while its agent is lost: the agent's last report.
  optAttr(row, 'data-stale', doc.stale?.reason);
  const stale = row.querySelector('.stale');
  stale.hidden = !doc.stale;
  attr(stale, 'title', staleNote(doc).replace(/^ · /, ''));
  const bar = row.querySelector('.progress');
  if (doc.task) {
    bar.hidden = false;
    bar.querySelector('.fill').style.width = `${doc.task.progress}%`;
    text(bar.querySelector('.pct'), `${doc.task.progress}%`);
    attr(bar, 'aria-valuenow', String(doc.task.progress));
  } else {
    bar.hidden = true;
  }
  text(row.querySelector('.ready'), `${doc.ready}/${doc.expected}`);
  text(row.querySelector('.detail .message'), doc.message);
  renderPods(row, doc);
  renderActions(row, doc);
  row.dataset.image = Object.values(doc.workloads ?? {})[0]?.images?.[0] ?? '';
}

/** What a document's `stale` mark says, for a title (empty without one). */
function staleNote(doc) {
  if (!doc.stale) return '';
  return ` · stale (${doc.stale.reason}) since ${new Date(doc.stale.since).toLocaleString()}: the agent's last report`;
}

// Which actions apply to an app, by its state (docs/TASKS.md, docs/STATUS.md):
//
// | App state                                    | Stop | Start | Update |
// |----------------------------------------------|------|-------|--------|
// | Running, Degraded, Panic                     | yes  | no    | yes    |
// | Stopped with workloads (ScaledToZero)        | no   | yes   | yes    |
// | Stopped without workloads (NoWorkloads)      | no   | no    | no     |
// | NotExisted (namespace gone)                  | no   | no    | no     |
// | Starting, Stopping, Updating, Deleting       | no   | no    | no     |
// | any other state                              | no   | no    | no     |
// | any state, marked `stale` (its agent is lost) | no   | no    | no     |
//
// A transitional state means a task runs (`task` is set): the gateway
// refuses a second active task on the app (409), so nothing is offered until
// it ends. A stale app's agent is not heard: a task would fail at once
// (`AgentUnreachable`), so nothing is offered until it is back. Without workloads Start, Stop and Update are refused too (409).
// Start applies only to a stopped app: on a running one (Degraded and Panic
// included) it would change nothing. Update of a stopped app changes its
// image and leaves it Stopped.
const ACTIONS = {
  Running: ['Stop', 'Update'],
  Degraded: ['Stop', 'Update'],
  Panic: ['Stop', 'Update'],
  Stopped: ['Start', 'Update'],
};
function allowedActions(doc) {
  if (doc.task || doc.stale) return [];
  if (Object.keys(doc.workloads ?? {}).length === 0) return [];
  return ACTIONS[doc.state ?? doc.phase] ?? [];
}
function renderActions(row, doc) {
  const allowed = allowedActions(doc);
  for (const button of row.querySelectorAll('button[data-action]')) button.disabled = !allowed.includes(button.dataset.action);
}

// The app's pod problems (at most five, then "+N more") and its latest
// Warning event, under the message; both absent while the pod watch is off.
function renderPods(row, doc) {
  const list = row.querySelector('.pod-problems');
  const problems = doc.pods?.problems ?? [];
  const lines = problems.map((p) => {
    const exit = p.exitCode !== undefined ? `, exit ${p.exitCode}` : '';
    const restarts = p.restarts ? `, ${p.restarts} restarts` : '';
    return `${p.pod}${p.container ? `/${p.container}` : ''}: ${p.reason}${exit}${restarts}`;
  });
  if (doc.pods?.more) lines.push(`+${doc.pods.more} more`);
  const key = lines.join('\n');
  if (list.dataset.key !== key) {
    list.dataset.key = key;
    list.replaceChildren(...lines.map((line) => el('li', {}, line)));
  }
  list.hidden = lines.length === 0;
  const warning = row.querySelector('.last-warning');
  const w = doc.lastWarning;
  text(warning, w ? `⚠ ${w.reason} ${w.object}: ${w.message}${w.count > 1 ? ` (×${w.count})` : ''}` : '');
  attr(warning, 'title', w ? `last seen ${w.lastSeen}` : '');
  warning.hidden = !w;
}

// The table is a live query (docs/PROTOCOL.md "Live queries"): the gateway
// keeps its window — the apps that pass the filters, sorted by state, then by
// topic — and the client applies each change to it (rows entering, leaving,
// moving, patched), so the page only follows the window's order.

/** The query of the table's filters: a cluster, only the apps not Running. */
function appQuery() {
  const cluster = $('app-cluster').value;
  const nodes = [];
  if (cluster) nodes.push({ eq: ['/cluster', cluster] });
  if ($('app-not-running').checked) nodes.push({ ne: ['/state', 'Running'] });
  const filter = nodes.length === 0 ? undefined : nodes.length === 1 ? nodes[0] : { and: nodes };
  return { filter, sort: ['/state'], limit: 500 };
}

let stopAppQuery = null;
function queryApps() {
  stopAppQuery?.();
  const query = appQuery();
  attr($('apps-table'), 'data-query', JSON.stringify(query));
  attr($('apps-table'), 'data-status', 'loading');
  stopAppQuery = client.query('apps/**', query, (result, event) => {
    if (event.type === 'error' && !event.error.auth) notice(`apps query refused: ${event.message}`);
    renderAppWindow(result);
  });
}

/** Puts the table in the window's order: rows that left go, new ones are made, changed ones rendered. */
function renderAppWindow(result) {
  const table = $('apps-table');
  attr(table, 'data-status', result.status);
  // A new query's rows are on their way: the last ones stay (dimmed) until they come.
  if (result.status === 'loading' || result.status === 'error') return;
  const body = $('apps');
  const inWindow = new Set(result.rows.map((r) => r.topic));
  for (const [topic, row] of appRows) {
    if (inWindow.has(topic)) continue;
    row.remove();
    appRows.delete(topic);
    renderedDocs.delete(topic);
  }
  let previous = null;
  for (const { topic, doc } of result.rows) {
    const row = appRow(topic, doc);
    if (renderedDocs.get(topic) !== doc) {
      renderApp(doc, topic);
      renderedDocs.set(topic, doc);
    }
    const place = previous ? previous.nextSibling : body.firstChild;
    if (place !== row) body.insertBefore(row, place);
    previous = row;
  }
  const shown = result.rows.length < result.total ? ` (first ${result.rows.length})` : '';
  text($('app-total'), `${result.total} ${result.total === 1 ? 'app' : 'apps'}${shown}`);
  attr(table, 'data-total', String(result.total));
}

$('app-cluster').addEventListener('change', queryApps);
$('app-not-running').addEventListener('change', queryApps);
queryApps();

let noticeTimer;
function notice(message, kind = 'error') {
  const box = $('notice');
  box.dataset.kind = kind;
  text(box, message);
  box.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => (box.hidden = true), 6000);
}

async function task(type, doc) {
  const body = { type, cluster: doc.cluster, namespace: doc.namespace, app: doc.app };
  if (type === 'Update') {
    const row = appRows.get(`apps/${doc.cluster}/${doc.namespace}/${doc.app}`);
    const image = prompt(`New image for ${doc.namespace}/${doc.app}`, row?.dataset.image ?? '');
    if (!image) return;
    body.image = image;
  }
  try {
    await client.createTask(body);
  } catch (err) {
    notice(`${type} ${doc.namespace}/${doc.app}: ${err.message}`);
  }
}

// ---- transition log ---------------------------------------------------------

// Every status document carries its last transitions (`history`, keyed by
// number, docs/STATUS.md), so the log starts with what happened before the
// page loaded and goes on with what patches add. Entries are ordered by the
// time of the transition, newest first, and keyed (topic, number, time): a
// document seen again — every patch, a resubscription's snapshot — adds only
// the transitions not shown yet; a new gateway process numbers again, and its
// transitions have other times. Tasks add their start and end.

const LOG_SIZE = 200;
const logged = new Set();

function log(key, at, what, from, to, why) {
  if (logged.has(key)) return;
  const list = $('log');
  const time = Date.parse(at);
  if (Number.isNaN(time)) return;
  // Older than everything a full log keeps: it would fall out at once.
  if (list.children.length >= LOG_SIZE && time <= Number(list.lastElementChild.dataset.at)) return;
  const date = new Date(time);
  const entry = el('li', { 'data-to': to, 'data-key': key, 'data-at': String(time) },
    el('time', { datetime: at, title: date.toLocaleString() }, clock(date)),
    el('span', { class: 'what' }, what),
    el('span', { class: 'change' }, from ? `${from} → ` : '', el('b', { 'data-phase': to }, to)),
    why ? el('span', { class: 'why' }, why) : '');
  const next = [...list.children].find((li) => Number(li.dataset.at) <= time);
  list.insertBefore(entry, next ?? null);
  logged.add(key);
  while (list.children.length > LOG_SIZE) {
    logged.delete(list.lastElementChild.dataset.key);
    list.lastElementChild.remove();
  }
}

/** The transitions of a document's `history` the log does not show yet. */
function logHistory(topic, doc, what) {
  for (const [number, t] of Object.entries(doc.history ?? {})) {
    if (t?.at) log(`${topic}#${number}@${t.at}`, t.at, what, t.from, t.to, t.reason);
  }
}

/** A task's start (its transitional state) and, once it ended, its outcome. */
function logTask(topic, doc) {
  const t = doc.target ?? {};
  const what = `${doc.type} ${t.cluster}/${t.namespace}/${t.app}`;
  if (doc.created) log(`${topic}:created`, doc.created, what, '', doc.state, 'task created');
  if (doc.finished && !['Pending', 'Running'].includes(doc.status)) {
    log(`${topic}:finished`, doc.finished, what, '', doc.status, doc.reason ? `${doc.reason}: ${doc.message}` : doc.message);
  }
}

// ---- subscriptions for the cards and the log ------------------------------------

client.subscribe(['clusters/**', 'tasks/*'], (change) => {
  if (change.type === 'error') {
    if (!change.error.auth) notice(`subscription refused: ${change.message}`);
    return;
  }
  if (change.type === 'heartbeat') {
    renderAsOf();
    return;
  }
  if (!change.topic) return;
  const { topic, doc } = change;
  const parts = topic.split('/');
  if (change.type === 'removed') {
    if (parts[0] === 'clusters' && parts.length === 2) {
      clusterCards.get(parts[1])?.remove();
      clusterCards.delete(parts[1]);
    } else {
      document.querySelector(`tr[data-topic="${CSS.escape(topic)}"]`)?.remove();
    }
    return;
  }
  if (parts[0] === 'clusters' && parts.length === 2) {
    renderCluster(doc);
  } else if (parts[0] === 'clusters') {
    renderSync(doc, topic);
  } else if (parts[0] === 'tasks') {
    logTask(topic, doc);
  }
  renderSummary();
});

// Every app's transitions for the log, whatever the table's filters: the
// apps projected onto what the log shows (their own copy in the client).
const APP_LOG = { fields: ['/app', '/cluster', '/history', '/namespace'] };
client.subscribe('apps/**', APP_LOG, (change) => {
  if (change.type === 'snapshot' || change.type === 'patch') {
    const { doc } = change;
    logHistory(change.topic, doc, `${doc.cluster}/${doc.namespace}/${doc.app}`);
  }
  if (change.topic) renderSummary();
});

function renderSummary() {
  const phases = {};
  for (const card of clusterCards.values()) phases[card.dataset.phase] = (phases[card.dataset.phase] ?? 0) + 1;
  const parts = Object.entries(phases).sort().map(([p, n]) => `${n} ${p}`);
  const apps = Object.keys(client.select('apps/**', APP_LOG)).length;
  text($('summary'), `${clusterCards.size} clusters${parts.length ? ` · ${parts.join(' · ')}` : ''} · ${apps} apps`);
}

// ---- simulator controls (only `kube-pulse demo` serves them) ----------------

/** The page's token as a header, if it has one: `/_sim` needs the admin grant. */
function simHeaders(json) {
  const headers = {};
  const token = localStorage.getItem('kube-pulse-token');
  if (token) headers.Authorization = `Bearer ${token}`;
  if (json) headers['Content-Type'] = 'application/json';
  return headers;
}

async function simulator() {
  let clusters;
  try {
    const response = await fetch(new URL('_sim/clusters', base), { headers: simHeaders(false) });
    if (!response.ok) return;
    clusters = (await response.json()).items;
  } catch {
    return;
  }
  const list = $('sim');
  for (const c of clusters) {
    const faults = new URL(`_sim/clusters/${c.name}/faults`, base);
    const send = async (method, body) => {
      const r = await fetch(faults, { method, headers: simHeaders(body !== undefined), body: body && JSON.stringify(body) });
      if (!r.ok) notice(`simulator ${c.name}: HTTP ${r.status}`);
    };
    const item = el('li', { 'data-cluster': c.name },
      el('span', { class: 'name' }, c.name),
      el('button', { type: 'button', class: 'act', 'data-fault': 'refuse', onclick: () => send('PUT', { refuse: true }) }, 'Disconnect'),
      el('button', { type: 'button', class: 'act', 'data-fault': 'stall', onclick: () => send('PUT', { stall: true }) }, 'Stall'),
      el('button', { type: 'button', class: 'act', 'data-fault': 'heal', onclick: () => send('DELETE') }, 'Heal'));
    // `demo --push-member`: the member's agent runs in the demo; stop it to see AgentLost.
    if (c.pushed) {
      const agent = async (running) => {
        const r = await fetch(new URL('_sim/agent', base), { method: 'PUT', headers: simHeaders(true), body: JSON.stringify({ running }) });
        if (!r.ok) notice(`simulator ${c.name}'s agent: HTTP ${r.status}`);
      };
      item.dataset.pushed = '';
      item.append(
        el('span', { class: 'agent-controls' },
          el('button', { type: 'button', class: 'act', 'data-agent': 'stop', onclick: () => agent(false) }, 'Stop agent'),
          el('button', { type: 'button', class: 'act', 'data-agent': 'start', onclick: () => agent(true) }, 'Start agent')),
      );
    }
    list.append(item);
  }
  $('sim-panel').hidden = false;
  karpor();
}
simulator();

// ---- `demo --karpor`: what Karpor's own Cluster objects say -----------------

/** One line per cluster card: Karpor's `status.healthy` and `Ready` condition. */
function renderKarpor(item) {
  const card = clusterCards.get(item.name);
  if (!card) return;
  let line = card.querySelector('.karpor');
  if (!line) {
    line = el('p', { class: 'karpor', title: "status of Karpor's Cluster object, as kube-pulse wrote it" });
    card.querySelector('.message').after(line);
  }
  const status = item.status ?? {};
  const ready = (status.conditions ?? []).find((c) => c.type === 'Ready');
  // Go leaves a false `healthy` out of Karpor's JSON.
  const healthy = status.healthy === true;
  attr(line, 'data-healthy', String(healthy));
  text(line, `Karpor: healthy ${healthy}${ready ? ` · Ready=${ready.status} (${ready.reason})` : ''}`);
}

async function karpor() {
  const url = new URL('_sim/karpor', base);
  let first = true;
  for (;;) {
    try {
      const response = await fetch(url, { headers: simHeaders(false) });
      if (!response.ok) return;
      const view = await response.json();
      if (first) {
        first = false;
        $('sim').append(el('li', { class: 'karpor-server' }, `Karpor apiserver: kubectl --server ${view.server} get clusters -o yaml`));
      }
      for (const item of view.clusters) renderKarpor(item);
    } catch {
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}
