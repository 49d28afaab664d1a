// The drop-in Karpor pieces (@kube-pulse/client/karpor: antd 5 and React,
// in headless Chromium) against a real `kube-pulse demo`: the tabs' counts,
// each cluster's phase badge and the sync registry table equal what REST
// serves, after each settled change, without a reload; and each badge's
// asOf (and its usePulse's) moving with the gateway's heartbeats, stopping
// for a member lost, which turns grey, over the core client on WebSocket
// and the full client on SSE.

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
          const entries = { '': 'esm/kube-pulse.js', '/core': 'esm/core.js', '/react': 'esm/react.js', '/karpor': 'esm/karpor.js' };
          b.onResolve({ filter: /^@kube-pulse\/client(\/core|\/react|\/karpor)?$/ }, (args) => ({
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

const fault = (cluster, body, at = base) =>
  fetch(`${at}_sim/clusters/${cluster}/faults`, {
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

/**
 * A page of `context` on the gateway at `at` (its origin, so that the
 * WebSocket's origin check passes) with the harness loaded; resolves the
 * page and the errors it throws.
 */
async function harnessPage(context, at) {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (err) => errors.push(err.message));
  await page.route(`${at}__harness/karpor.js`, (route) => route.fulfill({ contentType: 'text/javascript', body: bundle }));
  await page.goto(`${at}__harness/`);
  await page.setContent(`<!doctype html><meta charset="utf-8"><div id="root"></div><script type="module" src="${at}__harness/karpor.js"></script>`);
  await page.waitForFunction(() => window.harnessReady === true, null, { timeout: WAIT });
  return { page, errors };
}

test('the tabs (counts and names), phase badges and sync registry table equal REST after each settled change (issue 39, 6)', async () => {
  const context = await browser.newContext();
  try {
    const { page, errors } = await harnessPage(context, base);
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

// A badge turns grey past this age here: the demo probes every 2 s and the
// gateway below sends a heartbeat every second, so a current member is at
// most about 3 s old.
const STALE_MS = 8000;

for (const [entry, transport] of [
  ['core', 'ws'],
  ['full', 'sse'],
]) {
  test(`each badge's asOf moves with the heartbeats; a member lost stops, turns grey past staleAfterMs and comes back healed (${entry} client, ${transport})`, async () => {
    const port = await freePort();
    const at = `http://127.0.0.1:${port}/`;
    const gateway = await startGateway(port, ['--heartbeat-seconds', '1']);
    const context = await browser.newContext();
    try {
      const { page, errors } = await harnessPage(context, at);
      await page.evaluate((o) => window.mount(o), { url: at, names: CLUSTERS, core: entry === 'core', transport, staleAfterMs: STALE_MS });
      /** Each cluster's asOf as its badge and its usePulse show it, and the badge as shown. */
      const shown = async () => {
        const s = await page.evaluate(() => window.shown());
        const badges = Object.fromEntries(s.badges.map((b) => [b.cluster, b]));
        const hooks = Object.fromEntries(s.freshness.map((f) => [f.cluster, f]));
        return { badges, hooks, transport: s.transport, asOf: Object.fromEntries(CLUSTERS.map((c) => [c, badges[c]?.asOf ?? ''])) };
      };
      const first = await until('every badge live, with an asOf, current', async () => {
        const s = await shown();
        const ok = CLUSTERS.every((c) => s.badges[c]?.status === 'live' && s.asOf[c] !== '' && s.badges[c].old === 'false');
        return ok ? s : { wrong: s };
      });
      assert.equal(first.transport, transport);
      for (const c of CLUSTERS) {
        assert.equal(first.hooks[c].asOf, first.asOf[c], `${c}: the hook and the badge read the same asOf`);
        assert.ok(Number(first.hooks[c].age) >= 0 && Number(first.hooks[c].age) < STALE_MS, `${c}: age ${first.hooks[c].age}`);
      }
      // The heartbeats bring each member's later probes.
      await until('every asOf moved on', async () => {
        const s = await shown();
        return CLUSTERS.every((c) => s.asOf[c] > first.asOf[c]) || { wrong: { first: first.asOf, now: s.asOf } };
      }, 15_000);

      // prod's simulator refuses every request: its asOf stops, the others' go on, and its badge turns grey.
      assert.equal((await fault('prod', { refuse: true }, at)).status, 200);
      const lost = await until('prod grey: as of … ago', async () => {
        const s = await shown();
        const prod = s.badges.prod;
        return (prod?.old === 'true' && /· as of \d+s ago/.test(prod.text) && s) || { wrong: prod };
      }, 30_000);
      assert.ok(Number(lost.hooks.prod.age) > STALE_MS, `prod's usePulse age ${lost.hooks.prod.age}`);
      const later = await until('dev and staging moved on while prod is lost', async () => {
        const s = await shown();
        return (s.asOf.dev > lost.asOf.dev && s.asOf.staging > lost.asOf.staging && s) || { wrong: s.asOf };
      }, 15_000);
      assert.equal(later.asOf.prod, lost.asOf.prod, "prod's asOf stands still while it is lost");
      assert.deepEqual([later.badges.dev.old, later.badges.staging.old], ['false', 'false']);

      // Healed: prod's asOf moves again and its badge is current.
      assert.equal((await fault('prod', null, at)).status, 200);
      await until('prod current again', async () => {
        const s = await shown();
        return (s.asOf.prod > lost.asOf.prod && s.badges.prod.old === 'false' && s.badges.prod.phase === 'Healthy') || { wrong: s.badges.prod };
      }, 30_000);
      assert.deepEqual(errors, []);
    } finally {
      await context.close();
      await stopGateway(gateway);
    }
  });
}
