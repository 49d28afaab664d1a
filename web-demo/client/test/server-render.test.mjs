// A server render (Next.js, Remix, a test renderer under node): no
// `window`, no `location`, no WebSocket or storage. A client made at
// module level with the URL relative to the page, as the docs' examples
// make it, must not throw there, and the hooks and the Karpor pieces
// render their loading state; using the client there (a subscription, a
// request) fails, saying why.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createElement as h } from 'react';
import { renderToString } from 'react-dom/server';

import { connect } from '../esm/kube-pulse.js';
import { connect as connectCore } from '../esm/core.js';
import { useConnectionState, useCount, useLiveQuery, usePulse, usePulseTopics } from '../esm/react.js';
import { ClusterPhaseBadge, SyncRegistryTable, useClusterSummary } from '../esm/karpor.js';

// Made when the module loads, as an app's `usePulse.ts` does.
const pulse = connect({ url: '/pulse/', getToken: () => 'token' });
const core = connectCore({ url: '/pulse/' });

test('there is no page here', () => {
  assert.equal(typeof window, 'undefined');
  assert.equal(globalThis.location, undefined);
  assert.equal(globalThis.sessionStorage, undefined);
});

test('clients with a URL relative to the page are made without one, and render every hook and Karpor piece', () => {
  for (const [name, client] of [
    ['full', pulse],
    ['core', core],
  ]) {
    function Page() {
      const dev = usePulse(client, 'clusters/dev');
      const apps = usePulseTopics(client, 'apps/**');
      const state = useConnectionState(client);
      const summary = useClusterSummary(client);
      const live = client.query ? [useLiveQuery(client, 'apps/**', { limit: 3 }).status, useCount(client, 'apps/**').count] : [];
      return h(
        'div',
        null,
        `${dev.status} ${Object.keys(apps.data).length} ${state} ${summary.totalCount} ${live.join(' ')}`,
        h(ClusterPhaseBadge, { client, name: 'dev' }),
        h(SyncRegistryTable, { client, cluster: 'dev' }),
      );
    }
    const html = renderToString(h(Page));
    assert.match(html, name === 'full' ? /^<div>loading 0 idle 0 loading 0/ : /^<div>loading 0 idle 0 </, name);
    assert.match(html, /class="kp-cluster-phase" data-cluster="dev" data-status="loading"/);
    assert.match(html, /class="kp-sync-registry" data-cluster="dev" data-status="loading"/);
    // Rendering subscribed nothing: nothing to open, nothing left behind.
    assert.equal(client.subs.size, 0);
    assert.equal(client.state, 'idle');
  }
});

test('used where there is no page, the client says why, and holds nothing', async () => {
  const why = /kube-pulse: no page to resolve \/pulse\/ against: give an absolute URL/;
  for (const client of [pulse, core]) {
    assert.throws(() => client.subscribe('clusters/dev'), why);
    assert.equal(client.subs.size, 0);
    assert.equal(client.state, 'idle');
  }
  assert.throws(() => pulse.query('apps/**', { limit: 3 }), why);
  await assert.rejects(pulse.history('clusters/dev'), why);
  // An absolute URL works anywhere.
  const absolute = connect({ url: 'http://127.0.0.1:9/pulse', fetch: async (url) => ({ ok: true, status: 200, text: async () => JSON.stringify({ url }) }) });
  assert.deepEqual(await absolute.history('clusters/dev'), { url: 'http://127.0.0.1:9/pulse/api/v1/history?topic=clusters%2Fdev' });
  absolute.close();
  pulse.close();
  core.close();
});
