// The drop-in Karpor pieces (@kube-pulse/client/karpor: antd 5 and React,
// in headless Chromium) against a real `kube-pulse demo`: the tabs' counts,
// each cluster's phase badge and the sync registry table equal what REST
// serves, after each settled change, without a reload.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import * as esbuild from 'esbuild';

import { WAIT, freePort, launchBrowser, startGateway, stopGateway, until } from './lib.mjs';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const CLIENT = path.join(HERE, '../client');
const CLUSTERS = ['dev', 'prod', 'staging'];

let bundle;
let browser;
let gateway;
let base;

before(async () => {
  const built = await esbuild.build({
    entryPoints: [path.join(HERE, 'harness/karpor.js')],
    bundle: true,
    format: 'esm',
    write: false,
    define: { 'process.env.NODE_ENV': '"production"' },
    nodePaths: [path.join(HERE, '../node_modules')],
    logLevel: 'silent',
    plugins: [
      {
        name: 'client',
        setup(b) {
          const entries = { '': 'esm/kube-pulse.js', '/react': 'esm/react.js', '/karpor': 'esm/karpor.js' };
          b.onResolve({ filter: /^@kube-pulse\/client(\/react|\/karpor)?$/ }, (args) => ({
            path: path.join(CLIENT, entries[args.path.slice('@kube-pulse/client'.length)]),
          }));
        },
      },
    ],
  });
  bundle = built.outputFiles[0].text;
  const port = await freePort();
  base = `http://127.0.0.1:${port}/`;
  gateway = await startGateway(port);
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  if (gateway) await stopGateway(gateway);
});

const fault = (cluster, body) =>
  fetch(`${base}_sim/clusters/${cluster}/faults`, {
    method: body ? 'PUT' : 'DELETE',
    headers: body ? { 'Content-Type': 'application/json' } : {},
    body: body && JSON.stringify(body),
  });

const json = async (p) => (await fetch(`${base}${p}`)).json();

/** What REST says the pieces should show. */
async function fromRest() {
  const { items } = await json('api/v1/clusters');
  const { items: sync } = await json('api/v1/clusters/dev/sync');
  const healthy = items.filter((c) => c.phase === 'Healthy').length;
  return {
    tabs: [`All (${items.length})`, `Healthy (${healthy})`, `Unhealthy (${items.length - healthy})`],
    names: [true, false].map((h) => items.filter((c) => (c.phase === 'Healthy') === h).map((c) => c.name).sort().join(',')),
    badges: Object.fromEntries(items.map((c) => [c.name, `${c.phase} (${c.reason})`])),
    sync: Object.fromEntries(
      sync.map((s) => [`clusters/dev/sync/${s.resource.group || 'core'}/${s.resource.version}/${s.resource.resource}`, `${s.phase}:${s.objects}`]),
    ),
  };
}

/** Waits for REST to settle (the same twice, 600 ms apart) and the pieces to show it, live. */
function equalToRest(page, want) {
  return until(
    'the Karpor pieces equal to REST',
    async () => {
      const a = await fromRest();
      await new Promise((r) => setTimeout(r, 600));
      const b = await fromRest();
      if (JSON.stringify(a) !== JSON.stringify(b)) return { wrong: 'REST still changing' };
      if (!want(b)) return { wrong: 'REST not there yet', rest: b };
      const shown = await page.evaluate(() => window.shown());
      const badges = Object.fromEntries(shown.badges.map((x) => [x.cluster, `${x.phase} (${x.reason})`]));
      const sync = Object.fromEntries(shown.sync.map((r) => [r.topic, `${r.phase}:${r.objects}`]));
      const live = shown.badges.every((x) => x.status === 'live') && shown.counts === 'live' && shown.syncStatus === 'live';
      const same =
        live &&
        JSON.stringify(shown.tabs) === JSON.stringify(b.tabs) &&
        JSON.stringify(shown.names) === JSON.stringify(b.names) &&
        JSON.stringify(badges) === JSON.stringify(b.badges) &&
        JSON.stringify(Object.entries(sync).sort()) === JSON.stringify(Object.entries(b.sync).sort());
      return same ? { shown, rest: b } : { wrong: 'mismatch', shown, rest: b };
    },
    20_000,
  );
}

test('the tabs (counts and names), phase badges and sync registry table equal REST after each settled change (issue 39, 6)', async () => {
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (err) => errors.push(err.message));
    await page.route(`${base}__harness/karpor.js`, (route) => route.fulfill({ contentType: 'text/javascript', body: bundle }));
    await page.goto(`${base}__harness/`);
    await page.setContent(`<!doctype html><meta charset="utf-8"><div id="root"></div><script type="module" src="${base}__harness/karpor.js"></script>`);
    await page.waitForFunction(() => window.harnessReady === true, null, { timeout: WAIT });
    await page.evaluate((o) => window.mount(o), { url: base, names: CLUSTERS });
    const { shown } = await equalToRest(page, (r) => r.tabs[1] === 'Healthy (3)');
    assert.ok(shown.sync.length >= 3, `the sync registry has rows: ${shown.sync.length}`);
    assert.match(shown.badges[0].text, /^Healthy \(\w+\) · \d+[smhd]$/, 'phase, reason and how long');
    for (const [cluster, body, tabs] of [
      ['prod', { refuse: true }, 'Unhealthy (1)'],
      ['dev', { refuse: true }, 'Unhealthy (2)'],
      ['dev', null, 'Unhealthy (1)'],
      ['prod', null, 'Unhealthy (0)'],
    ]) {
      assert.equal((await fault(cluster, body)).status, 200);
      await equalToRest(page, (r) => r.tabs[2] === tabs);
    }
    assert.deepEqual(errors, []);
  } finally {
    await context.close();
  }
});
