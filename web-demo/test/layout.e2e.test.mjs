// The demo page's layout and its memory, in headless Chromium against a real
// `kube-pulse demo`: at 1024, 1280 and 1600 px nothing overflows a card, a
// panel or the page (long text wraps, or is cut with an ellipsis and a
// title that holds it whole); the Transitions panel shows transitions that
// happened before the page loaded (from the documents' `history`), then live
// ones, each once; and the action buttons follow the app's state. Run after
// `cargo build`: KUBE_PULSE_BIN overrides the binary.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { WAIT, freePort, launchBrowser, startGateway, stopGateway, until } from './lib.mjs';

const SHOTS = fileURLToPath(new URL('./screenshots/', import.meta.url));
const WIDTHS = [1024, 1280, 1600];
const CLUSTERS = ['dev', 'prod', 'staging'];
// Before the page loads: one app stopped, one Degraded (scaled up past the
// cluster's pod capacity: pod problems and a Warning under its message),
// one left running.
const STOPPED = { cluster: 'dev', namespace: 'analytics', app: 'ingest' };
const DEGRADED = { cluster: 'staging', namespace: 'shop', app: 'web' };
const RUNNING = 'apps/prod/shop/web';
const topicOf = (app) => `apps/${app.cluster}/${app.namespace}/${app.app}`;

let base; // http://127.0.0.1:PORT/
let gateway;
let browser;
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

/** The REST history of `topic` once it holds a transition to `to` (and `reason`), else a timeout. */
function transitionTo(topic, to, reason, ms = WAIT) {
  return until(`${topic} → ${to} in /api/v1/history`, async () => {
    const { history } = await api('GET', `api/v1/history?topic=${encodeURIComponent(topic)}`);
    return history.findLast((t) => t.to === to && (!reason || t.reason === reason));
  }, ms);
}

/**
 * Denies config maps on staging once it is Healthy: its configmaps sync
 * fails (Forbidden), the cluster turns Degraded. (Denied while its first
 * lists run, it would go from Initializing to Degraded, never Healthy.)
 */
async function degradeStaging() {
  await transitionTo('clusters/staging', 'Healthy', 'Ready');
  await api('PUT', '_sim/clusters/staging/deny', { rules: ['core/configmaps'] });
  await api('POST', '_sim/clusters/staging/actions/close-watches');
  return transitionTo('clusters/staging', 'Degraded', 'ResourcesFailing');
}

async function openPage(width) {
  const page = await browser.newPage({ viewport: { width, height: 900 } });
  page.on('pageerror', (err) => pageErrors.push(err.message));
  await page.goto(base, { timeout: WAIT });
  await page.waitForFunction(
    (names) => names.every((n) => document.querySelector(`article.cluster[data-cluster="${n}"]`)),
    CLUSTERS,
    { timeout: WAIT },
  );
  await page.waitForSelector('article[data-cluster="staging"][data-phase="Degraded"]', { timeout: WAIT });
  await page.waitForSelector(`tr[data-topic="${RUNNING}"][data-state="Running"]`, { timeout: WAIT });
  await page.waitForSelector('#connection[data-state="live"]', { timeout: WAIT });
  return page;
}

/**
 * Every element of every card (a cluster card or a panel) whose box leaves
 * its card, every clipping element whose content is wider than it (unless
 * it is cut with an ellipsis and its title holds the whole text), and a
 * page wider than the window. Elements inside a card's own scroll area
 * (the transition log) are only held to the card's width.
 */
function overflows() {
  const TOLERANCE = 0.5;
  const problems = [];
  const name = (node) => {
    const keyed = node.closest('[data-cluster], [data-topic]');
    const key = keyed ? ` in ${keyed.dataset.topic ?? keyed.dataset.cluster}` : '';
    const cls = typeof node.className === 'string' && node.className ? `.${node.className.trim().split(/\s+/).join('.')}` : '';
    const text = node.textContent.trim().replace(/\s+/g, ' ').slice(0, 60);
    return `<${node.tagName.toLowerCase()}${cls}>${key} "${text}"`;
  };
  const px = (r) => `[${Math.round(r.left)}, ${Math.round(r.right)}] × [${Math.round(r.top)}, ${Math.round(r.bottom)}]`;
  for (const card of document.querySelectorAll('article.cluster, .panel')) {
    if (card.getClientRects().length === 0) continue;
    const box = card.getBoundingClientRect();
    for (const node of card.querySelectorAll('*')) {
      if (node.getClientRects().length === 0) continue; // not rendered
      const r = node.getBoundingClientRect();
      let scrolled = false;
      for (let p = node.parentElement; p && p !== card; p = p.parentElement) {
        if (/auto|scroll/.test(getComputedStyle(p).overflowY)) scrolled = true;
      }
      const outX = r.left < box.left - TOLERANCE || r.right > box.right + TOLERANCE;
      const outY = !scrolled && (r.top < box.top - TOLERANCE || r.bottom > box.bottom + TOLERANCE);
      if (outX || outY) problems.push(`${name(node)} ${px(r)} leaves ${name(card).slice(0, 40)} ${px(box)}`);
      const style = getComputedStyle(node);
      if (/hidden|clip|auto|scroll/.test(style.overflowX) && node.scrollWidth > node.clientWidth) {
        const text = node.textContent.trim();
        const ellipsized = style.textOverflow === 'ellipsis' && text !== '' && (node.title ?? '').includes(text);
        if (!ellipsized) {
          problems.push(`${name(node)} clips its content (scrollWidth ${node.scrollWidth} > clientWidth ${node.clientWidth}) without an ellipsis and a title holding it`);
        }
      }
    }
  }
  const page = document.documentElement.scrollWidth;
  if (page > window.innerWidth) problems.push(`the page is ${page} px wide in a ${window.innerWidth} px window`);
  return problems;
}

/** The Transitions panel's entries, newest first, as text. */
const logEntries = (page) => page.$$eval('#log > li', (items) => items.map((li) => li.innerText.replace(/\s+/g, ' ').trim()));

before(async () => {
  const port = await freePort();
  base = `http://127.0.0.1:${port}/`;
  gateway = await startGateway(port);
  // Before any page loads: staging turns Degraded, and an app is stopped.
  await until('the simulated apps', async () => (await api('GET', 'api/v1/apps')).items.length > 0);
  await degradeStaging();
  await api('POST', 'api/v1/tasks', { type: 'Stop', ...STOPPED });
  await until(`${topicOf(STOPPED)} Stopped`, async () => {
    const doc = await api('GET', `api/v1/${topicOf(STOPPED)}`);
    return doc.state === 'Stopped' && !doc.task;
  });
  await api('PUT', `_sim/clusters/${DEGRADED.cluster}/capacity`, { pods: 1 });
  await api('POST', 'api/v1/tasks', { type: 'Update', ...DEGRADED, replicas: 6, timeoutSeconds: 1 });
  await until(`${topicOf(DEGRADED)} Degraded with pod problems`, async () => {
    const doc = await api('GET', `api/v1/${topicOf(DEGRADED)}`);
    return doc.state === 'Degraded' && !doc.task && doc.pods?.problems?.length > 0 && doc.lastWarning;
  });
  browser = await launchBrowser();
  mkdirSync(SHOTS, { recursive: true });
});

after(async () => {
  await browser?.close();
  if (gateway) await stopGateway(gateway);
});

test('the Transitions panel shows a transition from before the page loaded', async () => {
  const before = await transitionTo('clusters/staging', 'Degraded', 'ResourcesFailing');
  const page = await openPage(1280);
  try {
    const entry = 'cluster staging Healthy → Degraded ResourcesFailing';
    await until('the transition in the panel', async () => (await logEntries(page)).some((e) => e.includes(entry)) || { wrong: await logEntries(page) }, 5_000);
    // Shown at the time it happened, not at the time the page loaded.
    const at = await page.$eval('#log', (log, text) => {
      const li = [...log.children].find((item) => item.innerText.replace(/\s+/g, ' ').includes(text));
      return li.querySelector('time').getAttribute('datetime');
    }, entry);
    assert.equal(Date.parse(at), Date.parse(before.at));
    // Sync documents' and apps' history too, newest first.
    const entries = await logEntries(page);
    assert.ok(entries.some((e) => /staging configmaps \S+ → (Error|Backoff) Forbidden/.test(e)), entries.join('\n'));
    assert.ok(entries.some((e) => /^\S+ dev\/analytics\/ingest .*→ Stopped/.test(e)), entries.join('\n'));
    const times = await page.$$eval('#log > li time', (ts) => ts.map((t) => Date.parse(t.getAttribute('datetime'))));
    assert.ok(times.every((t, i) => i === 0 || t <= times[i - 1]), `newest first: ${times}`);
    assert.ok(times.length <= 200, `bounded: ${times.length}`);
  } finally {
    await page.close();
  }
});

for (const width of WIDTHS) {
  test(`nothing overflows its card or the page at ${width} px`, async () => {
    const page = await openPage(width);
    try {
      // The long lines this test is about are there: a failing resource, a long server version.
      assert.match(await page.textContent('article[data-cluster="staging"] .resources'), /9\/10 syncing, 1 failing, \d+ objects/);
      await page.waitForSelector(`tr[data-topic="${topicOf(STOPPED)}"][data-state="Stopped"]`, { timeout: WAIT });
      await page.waitForSelector(`tr[data-topic="${topicOf(DEGRADED)}"][data-state="Degraded"] .last-warning:not([hidden])`, { timeout: WAIT });
      await page.screenshot({ path: `${SHOTS}layout-${width}.png`, fullPage: true });
      const problems = await page.evaluate(overflows);
      assert.deepEqual(problems, [], `at ${width} px:\n${problems.join('\n')}`);
    } finally {
      await page.close();
    }
  });
}

test('action buttons are enabled only where the action applies', async () => {
  const page = await openPage(1280);
  try {
    const stopped = `tr[data-topic="${topicOf(STOPPED)}"]`;
    const degraded = `tr[data-topic="${topicOf(DEGRADED)}"]`;
    const running = `tr[data-topic="${RUNNING}"]`;
    await page.waitForSelector(`${stopped}[data-state="Stopped"]`, { timeout: WAIT });
    await page.waitForSelector(`${degraded}[data-state="Degraded"]`, { timeout: WAIT });
    const enabled = (row) =>
      page.$eval(row, (tr) => Object.fromEntries([...tr.querySelectorAll('button[data-action]')].map((b) => [b.dataset.action, !b.disabled])));
    assert.deepEqual(await enabled(running), { Stop: true, Start: false, Update: true }, 'a Running app');
    assert.deepEqual(await enabled(degraded), { Stop: true, Start: false, Update: true }, 'a Degraded app');
    assert.deepEqual(await enabled(stopped), { Stop: false, Start: true, Update: true }, 'a Stopped app');
    // While its task runs, none.
    await page.click(`${stopped} [data-action="Start"]`);
    await page.waitForSelector(`${stopped}[data-state="Starting"]`, { timeout: WAIT });
    assert.deepEqual(await enabled(stopped), { Stop: false, Start: false, Update: false }, 'a Starting app');
    await page.waitForSelector(`${stopped}[data-state="Running"]`, { timeout: WAIT });
    assert.deepEqual(await enabled(stopped), { Stop: true, Start: false, Update: true }, 'the app once started');
  } finally {
    await page.close();
  }
});

test('live transitions join the panel once, newest first', async () => {
  const page = await openPage(1280);
  try {
    const degraded = 'cluster staging Healthy → Degraded ResourcesFailing';
    const healed = 'cluster staging Degraded → Healthy Ready';
    await api('PUT', '_sim/clusters/staging/deny', { rules: [] });
    // The config maps list is retried after its backoff, which grows to 30 s.
    await transitionTo('clusters/staging', 'Healthy', 'Ready', 2 * WAIT + 5_000);
    await page.waitForSelector('article[data-cluster="staging"][data-phase="Healthy"]', { timeout: WAIT });
    // Let a few more patches of the same documents (with their whole history) arrive.
    await page.waitForTimeout(3_000);
    const entries = await logEntries(page);
    const count = (text) => entries.filter((e) => e.includes(text)).length;
    assert.equal(count(degraded), 1, entries.join('\n'));
    assert.equal(count(healed), 1, entries.join('\n'));
    assert.ok(entries.findIndex((e) => e.includes(healed)) < entries.findIndex((e) => e.includes(degraded)), entries.join('\n'));
    assert.deepEqual(pageErrors, []);
  } finally {
    await page.close();
  }
});
