// What the package costs an app: its entries minified (esbuild, as an app's
// bundler would) and gzipped, against its budget in docs/WEB.md's size
// table. Over budget fails: a feature that grows the client says so here
// and in that table.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import * as esbuild from 'esbuild';

const CLIENT = fileURLToPath(new URL('..', import.meta.url));

/**
 * Bytes of a module that re-exports `entries` of the package (a module's
 * path, everything it exports; or `[path, names]`, those), bundled and
 * minified, then gzipped (level 9).
 */
export function gzipped(entries) {
  const code = bundled(entries);
  return { minified: code.length, gzipped: gzipSync(code, { level: 9 }).length };
}

/** `entries` bundled and minified, as `gzipped` measures them. */
function bundled(entries) {
  const line = (e) => (Array.isArray(e) ? `export { ${e[1].join(', ')} } from './${e[0]}';` : `export * from './${e}';`);
  const { outputFiles } = esbuild.buildSync({
    stdin: { contents: entries.map(line).join('\n'), resolveDir: CLIENT },
    bundle: true,
    minify: true,
    format: 'esm',
    write: false,
    external: ['react', 'antd'],
  });
  return outputFiles[0].contents;
}

/** The hooks that take a core client. */
const DOCUMENT_HOOKS = ['esm/react.js', ['usePulse', 'usePulseTopics', 'useTopic', 'useDocument', 'useConnectionState']];

// Budgets (bytes, gzipped): docs/WEB.md "Size".
const BUDGETS = [
  ['the core client', ['esm/core.js'], 5 * 1024],
  ['the core client and the hooks that take it', ['esm/core.js', DOCUMENT_HOOKS], 5.5 * 1024],
  ['the client', ['esm/kube-pulse.js'], 10.25 * 1024],
  ['the client and its hooks', ['esm/kube-pulse.js', 'esm/react.js'], 10.75 * 1024],
  ['the client, its hooks and the Karpor pieces', ['esm/kube-pulse.js', 'esm/react.js', 'esm/karpor.js'], 12 * 1024],
];

test('each entry minified and gzipped stays within its budget', () => {
  const over = [];
  for (const [what, entries, budget] of BUDGETS) {
    const size = gzipped(entries);
    console.log(`${what}: ${size.minified} B minified, ${size.gzipped} B gzipped (budget ${budget})`);
    if (size.gzipped > budget) over.push(`${what}: ${size.gzipped} B gzipped, over its budget of ${budget}`);
  }
  assert.deepEqual(over, []);
});

test('the core entry, with or without its hooks, bundles none of what it leaves out', () => {
  for (const entries of [['esm/core.js'], ['esm/core.js', DOCUMENT_HOOKS]]) {
    const text = new TextDecoder().decode(bundled(entries));
    // SSE, the cookie session, live queries, the warm start, the REST helpers.
    for (const mark of ['api/v1/events', 'api/v1/session', 'groupBy', 'sessionStorage', 'api/v1/tasks', 'visibilitychange']) {
      assert.ok(!text.includes(mark), `${entries.flat().join(' + ')} holds ${mark}`);
    }
    assert.ok(text.includes('api/v1/ws'));
  }
});
