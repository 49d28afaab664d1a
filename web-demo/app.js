// The kube-pulse demo page: one subscription to every cluster, sync, app and
// task document, rendered into keyed elements that are updated in place (no
// re-render of whole tables, so nothing flashes on updates).

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

// ---- connection -------------------------------------------------------------

const LABELS = { idle: 'Idle', connecting: 'Connecting…', live: 'Live', reconnecting: 'Reconnecting…', offline: 'Offline' };
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
  return date.toLocaleTimeString([], { hour12: false });
}
setInterval(() => {
  for (const t of document.querySelectorAll('time[data-since]')) text(t, ago(t.dataset.since));
}, 1000);

// ---- clusters and their sync registries ------------------------------------

const clusterCards = new Map();

function clusterCard(name) {
  let card = clusterCards.get(name);
  if (card) return card;
  card = el(
    'article',
    { class: 'cluster', 'data-cluster': name },
    el('header', {}, el('h3', {}, name), el('span', { class: 'badge phase' })),
    el('p', { class: 'reason' }, el('span', { class: 'why' }), ' · for ', el('time', { class: 'since' })),
    el(
      'dl',
      { class: 'facts' },
      el('div', {}, el('dt', {}, 'probe'), el('dd', { class: 'latency' })),
      el('div', {}, el('dt', {}, 'version'), el('dd', { class: 'version' })),
      el('div', {}, el('dt', {}, 'resources'), el('dd', { class: 'resources' })),
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
  const badge = card.querySelector('.phase');
  text(badge, doc.phase);
  attr(badge, 'data-phase', doc.phase);
  text(card.querySelector('.why'), doc.reason);
  const since = card.querySelector('.since');
  if (since.dataset.since !== doc.since) {
    since.dataset.since = doc.since;
    since.setAttribute('datetime', doc.since);
    text(since, ago(doc.since));
  }
  const latency = doc.probe?.latencyMs;
  text(card.querySelector('.latency'), latency == null ? '—' : `${latency} ms`);
  text(card.querySelector('.version'), doc.probe?.serverVersion ?? '—');
  const r = doc.resources ?? {};
  const objects = doc.cache?.objects;
  text(card.querySelector('.resources'), `${r.synced ?? 0}/${r.total ?? 0} syncing${r.failing ? `, ${r.failing} failing` : ''}${objects == null ? '' : `, ${objects} objects`}`);
  text(card.querySelector('.message'), doc.message);
}

function renderSync(doc, topic) {
  const card = clusterCard(doc.cluster);
  const body = card.querySelector('.sync tbody');
  let row = body.querySelector(`tr[data-topic="${CSS.escape(topic)}"]`);
  const res = doc.resource ?? {};
  const label = `${res.group ? `${res.group}/` : ''}${res.resource}`;
  if (!row) {
    row = el('tr', { 'data-topic': topic, 'data-resource': label },
      el('td', { class: 'res' }, label),
      el('td', {}, el('span', { class: 'badge small' })),
      el('td', { class: 'num objects' }),
      el('td', { class: 'why' }));
    const after = [...body.rows].find((r) => r.dataset.resource > label);
    body.insertBefore(row, after ?? null);
  }
  const badge = row.querySelector('.badge');
  text(badge, doc.phase);
  attr(badge, 'data-phase', doc.phase);
  text(row.querySelector('.objects'), doc.objects ?? 0);
  text(row.querySelector('.why'), doc.reason);
  attr(row, 'title', doc.message ?? '');
}

// ---- applications -----------------------------------------------------------

const appRows = new Map();

function appRow(topic, doc) {
  let row = appRows.get(topic);
  if (row) return row;
  const act = (type) => el('button', { type: 'button', class: `act ${type.toLowerCase()}`, 'data-action': type, onclick: () => task(type, doc) }, type);
  row = el(
    'tr',
    { 'data-topic': topic, 'data-cluster': doc.cluster, 'data-app': `${doc.namespace}/${doc.app}` },
    el('td', { class: 'cluster-name' }, doc.cluster),
    el('td', { class: 'name' }, el('span', { class: 'ns' }, `${doc.namespace}/`), doc.app),
    el('td', { class: 'state-cell' },
      el('span', { class: 'badge state' }),
      el('div', { class: 'progress', hidden: '' }, el('div', { class: 'fill' }), el('span', { class: 'pct' }))),
    el('td', { class: 'num ready' }),
    el('td', { class: 'detail' },
      el('span', { class: 'message' }),
      el('ul', { class: 'pod-problems', hidden: '' }),
      el('p', { class: 'last-warning', hidden: '' })),
    el('td', { class: 'actions' }, act('Stop'), act('Start'), act('Update')),
  );
  appRows.set(topic, row);
  const body = $('apps');
  const after = [...appRows.keys()].sort().find((t) => t > topic);
  body.insertBefore(row, after ? appRows.get(after) : null);
  filterApps();
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
  // Stable states the actions make sense from; none while a task runs.
  const workloads = Object.values(doc.workloads ?? {});
  const busy = Boolean(doc.task) || doc.phase === 'NotExisted' || workloads.length === 0;
  row.querySelector('[data-action=Stop]').disabled = busy || doc.phase === 'Stopped';
  row.querySelector('[data-action=Start]').disabled = busy || doc.phase === 'Running';
  row.querySelector('[data-action=Update]').disabled = busy;
  row.dataset.image = workloads[0]?.images?.[0] ?? '';
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

function filterApps() {
  const cluster = $('app-cluster').value;
  for (const row of appRows.values()) row.hidden = Boolean(cluster) && row.dataset.cluster !== cluster;
}
$('app-cluster').addEventListener('change', filterApps);

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

const LOG_SIZE = 200;
function log(what, from, to, why) {
  const list = $('log');
  const entry = el('li', { 'data-to': to },
    el('time', {}, clock()),
    el('span', { class: 'what' }, what),
    el('span', { class: 'change' }, from ? `${from} → ` : '', el('b', { 'data-phase': to }, to)),
    why ? el('span', { class: 'why' }, why) : '');
  list.prepend(entry);
  while (list.children.length > LOG_SIZE) list.lastChild.remove();
}

// ---- one subscription for everything ----------------------------------------

client.subscribe(['clusters/**', 'apps/**', 'tasks/*'], (change) => {
  if (change.type === 'error') {
    if (!change.error.auth) notice(`subscription refused: ${change.message}`);
    return;
  }
  if (!change.topic) return;
  const { topic, doc, previous } = change;
  const parts = topic.split('/');
  if (change.type === 'removed') {
    if (parts[0] === 'apps') {
      appRows.get(topic)?.remove();
      appRows.delete(topic);
    } else if (parts[0] === 'clusters' && parts.length === 2) {
      clusterCards.get(parts[1])?.remove();
      clusterCards.delete(parts[1]);
    } else {
      document.querySelector(`tr[data-topic="${CSS.escape(topic)}"]`)?.remove();
    }
    return;
  }
  if (parts[0] === 'clusters' && parts.length === 2) {
    renderCluster(doc);
    if (previous && (previous.phase !== doc.phase || previous.reason !== doc.reason)) {
      log(`cluster ${doc.name}`, `${previous.phase}`, doc.phase, doc.reason);
    }
  } else if (parts[0] === 'clusters') {
    renderSync(doc, topic);
    if (previous && previous.phase !== doc.phase) {
      log(`${doc.cluster} ${doc.resource?.resource}`, previous.phase, doc.phase, doc.reason);
    }
  } else if (parts[0] === 'apps') {
    renderApp(doc, topic);
    const was = previous && (previous.state ?? previous.phase);
    const now = doc.state ?? doc.phase;
    if (was && was !== now) log(`${doc.cluster}/${doc.namespace}/${doc.app}`, was, now, doc.task ? `task ${doc.task.status}` : doc.reason);
  } else if (parts[0] === 'tasks' && previous && previous.status !== doc.status && !['Pending', 'Running'].includes(doc.status)) {
    const t = doc.target;
    log(`${doc.type} ${t.cluster}/${t.namespace}/${t.app}`, '', doc.status, doc.reason ? `${doc.reason}: ${doc.message}` : doc.message);
  }
  renderSummary();
});

function renderSummary() {
  const phases = {};
  for (const card of clusterCards.values()) phases[card.dataset.phase] = (phases[card.dataset.phase] ?? 0) + 1;
  const parts = Object.entries(phases).sort().map(([p, n]) => `${n} ${p}`);
  text($('summary'), `${clusterCards.size} clusters${parts.length ? ` · ${parts.join(' · ')}` : ''} · ${appRows.size} apps`);
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
    list.append(
      el('li', { 'data-cluster': c.name },
        el('span', { class: 'name' }, c.name),
        el('button', { type: 'button', class: 'act', 'data-fault': 'refuse', onclick: () => send('PUT', { refuse: true }) }, 'Disconnect'),
        el('button', { type: 'button', class: 'act', 'data-fault': 'stall', onclick: () => send('PUT', { stall: true }) }, 'Stall'),
        el('button', { type: 'button', class: 'act', 'data-fault': 'heal', onclick: () => send('DELETE') }, 'Heal')),
    );
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
