// The demo page's applications table is a live query: in headless Chromium
// against a real `kube-pulse demo`, after each scenario change (a task
// stops an app, a cluster short of pod capacity degrades apps, a cluster is
// disconnected and healed, the app started again) and for each filter
// setting (all clusters or one, "only not Running" or not), the table's
// rows, in order, with their state and readiness, and its total equal the
// query evaluated here on what REST serves (`GET /api/v1/apps`, filtered,
// sorted by state, then by topic). Every wait is bounded; loopback only.
// Run after `cargo build`: KUBE_PULSE_BIN overrides the binary.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { WAIT, freePort, launchBrowser, startGateway, stopGateway, until } from './lib.mjs';

const CLUSTERS = ['dev', 'prod', 'staging'];
/** The filter settings each step is checked under: [cluster ('' for all), only not Running]. */
const SETTINGS = [
  ['', false],
  ['staging', false],
  ['', true],
  ['dev', true],
  ['prod', false],
];

let base; // http://127.0.0.1:PORT/
let gateway;
let browser;
let page;
const pageErrors = [];

async function api(method, path, body) {
  const response = await fetch(new URL(path, base), {
    method,
    headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(WAIT),
  });
  const text = await response.text();
  assert.ok(response.ok, `${method} ${path}: HTTP ${response.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

/** Byte order of UTF-8 strings, as the gateway sorts (here the strings are ASCII). */
const compare = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

/** The query the page's filters stand for, evaluated on REST's apps: rows in order and the total. */
async function expected(cluster, notRunning) {
  const { items } = await api('GET', 'api/v1/apps');
  const rows = items
    .map((a) => ({ topic: `apps/${a.cluster}/${a.namespace}/${a.app}`, cluster: a.cluster, state: a.state, ready: `${a.ready}/${a.expected}` }))
    .filter((a) => (!cluster || a.cluster === cluster) && (!notRunning || a.state !== 'Running'))
    .sort((a, b) => compare(a.state, b.state) || compare(a.topic, b.topic))
    .map(({ topic, state, ready }) => ({ topic, state, ready }));
  return { rows, total: `${rows.length} ${rows.length === 1 ? 'app' : 'apps'}` };
}

/** What the page's table shows: its rows in order, its total and the query's status. */
const shown = () =>
  page.evaluate(() => ({
    rows: [...document.querySelectorAll('#apps > tr')].map((tr) => ({
      topic: tr.dataset.topic,
      state: tr.dataset.state,
      ready: tr.querySelector('.ready').textContent,
    })),
    total: document.getElementById('app-total').textContent,
    status: document.getElementById('apps-table').dataset.status,
    query: document.getElementById('apps-table').dataset.query,
  }));

/** Sets the page's filters (as a user would) and waits for the table to equal the query on REST. */
async function tableEqualsRest(step, cluster, notRunning) {
  await page.selectOption('#app-cluster', cluster);
  await page.setChecked('#app-not-running', notRunning);
  return until(`the table equal to REST (${step}; cluster ${cluster || 'all'}, only not Running ${notRunning})`, async () => {
    const want = await expected(cluster, notRunning);
    const got = await shown();
    const equal = got.status === 'live' && JSON.stringify(got.rows) === JSON.stringify(want.rows) && got.total === want.total;
    return equal ? got : { wrong: true, got, want };
  });
}

/** Every filter setting, one after the other. */
async function everySetting(step) {
  for (const [cluster, notRunning] of SETTINGS) await tableEqualsRest(step, cluster, notRunning);
}

const appIs = (topic, ok) =>
  until(`${topic} in REST`, async () => {
    const doc = await api('GET', `api/v1/${topic}`);
    return ok(doc) || { wrong: true, state: doc.state, task: doc.task };
  });

before(async () => {
  const port = await freePort();
  base = `http://127.0.0.1:${port}/`;
  gateway = await startGateway(port);
  await until('every simulated app Running', async () => {
    const { items } = await api('GET', 'api/v1/apps');
    return (items.length === 15 && items.every((a) => a.state === 'Running')) || { wrong: true, states: items.map((a) => a.state) };
  });
  browser = await launchBrowser();
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('pageerror', (err) => pageErrors.push(err.message));
  await page.goto(base, { timeout: WAIT });
  // The cluster filter offers every cluster once its card is there.
  await page.waitForFunction(
    (names) => names.every((n) => document.querySelector(`#app-cluster option[value="${n}"]`)),
    CLUSTERS,
    { timeout: WAIT },
  );
});

after(async () => {
  await browser?.close();
  if (gateway) await stopGateway(gateway);
});

test('the table is the live query: filters sent as the gateway takes them', async () => {
  await tableEqualsRest('at start', '', false);
  await page.selectOption('#app-cluster', 'dev');
  await page.setChecked('#app-not-running', true);
  await until('the query of both filters', async () => {
    const { query } = await shown();
    return query && JSON.parse(query);
  });
  assert.deepEqual(JSON.parse((await shown()).query), {
    filter: { and: [{ eq: ['/cluster', 'dev'] }, { ne: ['/state', 'Running'] }] },
    sort: ['/state'],
    limit: 500,
  });
  await everySetting('at start');
});

test('after a task stops an app, the table equals the query on REST under every filter', async () => {
  await tableEqualsRest('before the stop', '', false);
  // The row is moved where the query says, not made again.
  await page.$eval('tr[data-topic="apps/dev/analytics/ingest"]', (tr) => (tr.dataset.mark = 'kept'));
  await api('POST', 'api/v1/tasks', { type: 'Stop', cluster: 'dev', namespace: 'analytics', app: 'ingest' });
  await appIs('apps/dev/analytics/ingest', (d) => d.state === 'Stopped' && !d.task);
  const all = await tableEqualsRest('an app stopped', '', false);
  assert.equal(all.rows.at(-1).topic, 'apps/dev/analytics/ingest', 'Stopped sorts after Running');
  assert.equal(await page.getAttribute('tr[data-topic="apps/dev/analytics/ingest"]', 'data-mark'), 'kept');
  await everySetting('an app stopped');
});

test('after a cluster runs short of pods and an app degrades, the table equals the query on REST under every filter', async () => {
  await api('PUT', '_sim/clusters/staging/capacity', { pods: 1 });
  await api('POST', 'api/v1/tasks', { type: 'Update', cluster: 'staging', namespace: 'shop', app: 'web', replicas: 6, timeoutSeconds: 1 });
  await appIs('apps/staging/shop/web', (d) => d.state === 'Degraded' && !d.task);
  await everySetting('staging short of pods');
  const notRunning = await tableEqualsRest('staging short of pods', '', true);
  assert.ok(notRunning.rows.some((r) => r.topic === 'apps/staging/shop/web' && r.state === 'Degraded'), JSON.stringify(notRunning.rows));
});

test('while a cluster is disconnected and once it is healed, the table equals the query on REST', async () => {
  await api('PUT', '_sim/clusters/prod/faults', { refuse: true });
  await until('prod Unhealthy', async () => (await api('GET', 'api/v1/clusters/prod')).phase === 'Unhealthy' || { wrong: true });
  await everySetting('prod disconnected');
  await api('DELETE', '_sim/clusters/prod/faults');
  await until('prod Healthy', async () => (await api('GET', 'api/v1/clusters/prod')).phase === 'Healthy' || { wrong: true });
  await everySetting('prod healed');
});

test('after the app is started and staging has room again, the table equals the query on REST', async () => {
  await api('PUT', '_sim/clusters/staging/capacity', { pods: null });
  await api('POST', 'api/v1/tasks', { type: 'Start', cluster: 'dev', namespace: 'analytics', app: 'ingest' });
  await appIs('apps/dev/analytics/ingest', (d) => d.state === 'Running' && !d.task);
  await everySetting('the app started, staging has room');
  // Nothing is left for "only not Running" on dev.
  const none = await tableEqualsRest('the app started', 'dev', true);
  assert.deepEqual(none.rows, []);
  assert.equal(none.total, '0 apps');
  assert.deepEqual(pageErrors, []);
});
