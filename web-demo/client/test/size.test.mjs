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

/** Bytes of a module that re-exports `entries` of the package, bundled and minified, then gzipped (level 9). */
export function gzipped(entries) {
  const { outputFiles } = esbuild.buildSync({
    stdin: { contents: entries.map((e) => `export * from './${e}';`).join('\n'), resolveDir: CLIENT },
    bundle: true,
    minify: true,
    format: 'esm',
    write: false,
    external: ['react', 'antd'],
  });
  const code = outputFiles[0].contents;
  return { minified: code.length, gzipped: gzipSync(code, { level: 9 }).length };
}

// Budgets (bytes, gzipped): docs/WEB.md "Size".
const BUDGETS = [
  ['the client', ['kube-pulse.js'], 10.25 * 1024],
  ['the client and its hooks', ['kube-pulse.js', 'esm/react.js'], 10.75 * 1024],
  ['the client, its hooks and the Karpor pieces', ['kube-pulse.js', 'esm/react.js', 'esm/karpor.js'], 11.75 * 1024],
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
