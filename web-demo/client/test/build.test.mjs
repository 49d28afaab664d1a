// The committed generated files (client/cjs/, the CommonJS build and the
// entries' declarations again) are what client/build.mjs writes from the ES
// modules in client/esm/ and the top-level .d.ts files now: a source
// changed without `npm run build` fails here, and so does a CommonJS file
// whose source is gone. The manifests name those declarations for
// `require`.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { DECLARATIONS, generatedFiles } from '../build.mjs';

const CLIENT = fileURLToPath(new URL('..', import.meta.url));

test('the committed CommonJS build is up to date with the ES modules', () => {
  const files = generatedFiles();
  for (const [file, text] of Object.entries(files)) {
    assert.equal(readFileSync(path.join(CLIENT, file), 'utf8'), text, `client/${file} is stale: run npm run build in web-demo/`);
  }
  const cjs = readdirSync(path.join(CLIENT, 'cjs')).map((f) => `cjs/${f}`);
  assert.deepEqual(cjs.filter((f) => !(f in files)), [], 'CommonJS files without a source in esm/');
});

test('every entry requires its CommonJS file and that file\'s declarations, which the build writes', () => {
  const files = generatedFiles();
  const manifest = JSON.parse(readFileSync(path.join(CLIENT, 'package.json'), 'utf8'));
  const entries = Object.entries(manifest.exports).filter(([key]) => key !== './package.json');
  assert.equal(entries.length, DECLARATIONS.length);
  const local = (file) => path.posix.normalize(file.replace(/^\.\//, ''));
  for (const [key, conditions] of entries) {
    const { import: esm, require: cjs } = conditions;
    // ES module and CommonJS each with its own types: the top-level .d.ts, its cjs/ copy.
    assert.match(local(esm.default), /^esm\/[\w-]+\.js$/, key);
    assert.equal(local(esm.types), `${path.posix.basename(esm.default, '.js')}.d.ts`, key);
    assert.equal(local(cjs.default), esm.default.replace('./esm/', 'cjs/'), key);
    assert.equal(local(cjs.types), `cjs/${local(esm.types)}`, key);
    assert.ok(local(cjs.types) in files, `${key}: ${cjs.types} is not written by build.mjs`);
    // A condition object's keys are tried in order: a `types` before `require` would give CommonJS the ES declarations.
    assert.deepEqual(Object.keys(conditions), ['import', 'require', 'default'], key);
  }
  // `types` beside `main`, at the top and in the subpaths' directories (moduleResolution node reads these).
  assert.equal(local(manifest.types), local(manifest.exports['.'].require.types));
  for (const dir of ['core', 'react', 'karpor']) {
    const sub = JSON.parse(readFileSync(path.join(CLIENT, dir, 'package.json'), 'utf8'));
    assert.equal(path.posix.join(dir, sub.main), local(manifest.exports[`./${dir}`].require.default), dir);
    assert.equal(path.posix.join(dir, sub.types), local(manifest.exports[`./${dir}`].require.types), dir);
  }
});
