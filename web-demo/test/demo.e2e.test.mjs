// The demo page in headless Chromium (Debian's, driven by playwright-core)
// against a real `kube-pulse demo`: every simulated cluster shows, a cluster
// made unreachable turns Unhealthy (Disconnected) without a reload, Stop
// shows Stopping with progress then Stopped, and a gateway restart is
// survived. Run after `cargo build`: KUBE_PULSE_BIN overrides the binary.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { WAIT, freePort, launchBrowser, startGateway, stopGateway } from './lib.mjs';

const SHOTS = fileURLToPath(new URL('./screenshots/', import.meta.url));

let port;
let url;
let gateway;
let browser;
let page;
const pageErrors = [];

before(async () => {
  port = await freePort();
  url = `http://127.0.0.1:${port}`;
  // Heartbeats every second: the cards' "as of" moves within the test.
  gateway = await startGateway(port, ['--heartbeat-seconds', '1']);
  browser = await launchBrowser();
  page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.on('pageerror', (err) => pageErrors.push(err.message));
  await page.goto(`${url}/`);
  // Set once: if the page reloaded, it would be gone.
  await page.evaluate(() => {
    window.loadedOnce = true;
  });
});

after(async () => {
  await browser?.close();
  if (gateway) await stopGateway(gateway);
});

const notReloaded = () => page.evaluate(() => window.loadedOnce === true);

test('the page shows every simulated cluster, live', async () => {
  await page.waitForFunction(
    () => ['dev', 'staging', 'prod'].every((n) => document.querySelector(`article[data-cluster="${n}"][data-phase="Healthy"]`)),
    null,
    { timeout: WAIT },
  );
  const names = await page.$$eval('article.cluster h3', (hs) => hs.map((h) => h.textContent));
  assert.deepEqual(names, ['dev', 'prod', 'staging']);
  await page.waitForSelector('#connection[data-state="live"]', { timeout: WAIT });
  await page.waitForSelector('tr[data-topic="apps/prod/shop/web"][data-state="Running"]', { timeout: WAIT });
  const syncRows = await page.$$eval('article[data-cluster="dev"] .sync tr', (rows) => rows.length);
  assert.equal(
    syncRows,
    10,
    'deployments, statefulsets, configmaps, namespaces, nodes, pods, events, collasets, clonesets, rollouts',
  );
});

test('cluster cards show the nodes and capacity REST serves', async () => {
  // The node watch's sums, as the card words them (app.js nodesFact).
  for (const name of ['dev', 'staging', 'prod']) {
    let want = '';
    const deadline = Date.now() + WAIT;
    for (;;) {
      const doc = await (await fetch(`${url}/api/v1/clusters/${name}`)).json();
      const n = doc.nodes;
      want = n ? `${n.ready}/${n.total} ready${n.unschedulable ? `, ${n.unschedulable} cordoned` : ''}` : '';
      const shown = await page.textContent(`article[data-cluster="${name}"] .nodes`);
      if (n && shown === want) break;
      assert.ok(Date.now() < deadline, `${name}: the card shows ${shown}, REST ${want}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    const capacity = await page.textContent(`article[data-cluster="${name}"] .capacity`);
    assert.match(capacity, /^\d+\/\d+ pods · [\d.]+\/[\d.]+ CPU · [\d.]+\/[\d.]+ GiB requested$/, capacity);
  }
});

test('a cluster made unreachable turns Unhealthy (Disconnected) without a reload', async () => {
  const response = await fetch(`${url}/_sim/clusters/staging/faults`, {
    method: 'PUT',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ refuse: true }),
  });
  assert.equal(response.status, 200);
  await page.waitForFunction(
    () => {
      const card = document.querySelector('article[data-cluster="staging"]');
      return card?.dataset.phase === 'Unhealthy' && card.querySelector('.why').textContent === 'Disconnected';
    },
    null,
    { timeout: WAIT },
  );
  assert.equal(await page.textContent('article[data-cluster="staging"] .phase'), 'Unhealthy');
  assert.ok(await notReloaded());
  // Its "as of" grows with the heartbeats while a healthy member's stays
  // within a few probes.
  const ageOf = (name) => page.$eval(`article[data-cluster="${name}"] .asof`, (dd) => Number(dd.dataset.ageMs));
  const lost = await ageOf('staging');
  await page.waitForFunction(
    (before) => Number(document.querySelector('article[data-cluster="staging"] .asof').dataset.ageMs) >= before + 2000,
    lost,
    { timeout: WAIT },
  );
  assert.ok((await ageOf('prod')) < 10_000, 'prod is current');
  // The transition is in the log.
  const log = await page.textContent('#log');
  assert.match(log, /cluster staging\s*Healthy → Unhealthy\s*Disconnected/);
});

test('Stop shows Stopping with progress, then Stopped', async () => {
  const row = 'tr[data-topic="apps/prod/shop/web"]';
  // Record every state and progress value the row shows, however briefly.
  await page.evaluate((selector) => {
    const tr = document.querySelector(selector);
    window.seen = { states: [], progress: [] };
    const record = () => {
      const state = tr.dataset.state;
      if (window.seen.states.at(-1) !== state) window.seen.states.push(state);
      const bar = tr.querySelector('.progress');
      if (!bar.hidden) {
        const pct = Number.parseInt(bar.querySelector('.pct').textContent, 10);
        if (window.seen.progress.at(-1) !== pct) window.seen.progress.push(pct);
      }
    };
    new MutationObserver(record).observe(tr, { subtree: true, attributes: true, childList: true, characterData: true });
  }, row);
  await page.click(`${row} [data-action="Stop"]`);
  await page.waitForSelector(`${row}[data-state="Stopped"]`, { timeout: WAIT });
  const seen = await page.evaluate(() => window.seen);
  assert.equal(seen.states[0], 'Stopping', JSON.stringify(seen));
  assert.equal(seen.states.at(-1), 'Stopped', JSON.stringify(seen));
  assert.ok(seen.progress.some((p) => p > 0 && p < 100), `progress between 0 and 100: ${JSON.stringify(seen)}`);
  assert.ok(
    seen.progress.every((p, i) => i === 0 || p >= seen.progress[i - 1]),
    `progress never goes back: ${JSON.stringify(seen)}`,
  );
  assert.equal(await page.isHidden(`${row} .progress`), true, 'no bar once the task ended');
  assert.equal(await page.isEnabled(`${row} [data-action="Start"]`), true);
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: `${SHOTS}demo.png`, fullPage: true });
});

test('the page reconnects after a gateway restart and shows the current state', async () => {
  await stopGateway(gateway);
  await page.waitForSelector('#connection[data-state="reconnecting"]', { timeout: WAIT });
  gateway = await startGateway(port);
  // A new process: fresh simulated clusters, so prod/shop/web runs again and
  // staging is reachable again; the page must show that without a reload.
  await page.waitForSelector('#connection[data-state="live"]', { timeout: WAIT });
  await page.waitForSelector('tr[data-topic="apps/prod/shop/web"][data-state="Running"]', { timeout: WAIT });
  await page.waitForSelector('article[data-cluster="staging"][data-phase="Healthy"]', { timeout: WAIT });
  assert.ok(await notReloaded());
  await page.screenshot({ path: `${SHOTS}after-restart.png`, fullPage: true });
  assert.deepEqual(pageErrors, []);
});
