// The committed generated files (client/cjs/, the CommonJS build) are what
// client/build.mjs writes from the ES modules in client/esm/ now: a source
// changed without `npm run build` fails here, and so does a CommonJS file
// whose source is gone.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { generatedFiles } from '../build.mjs';

const CLIENT = fileURLToPath(new URL('..', import.meta.url));

test('the committed CommonJS build is up to date with the ES modules', () => {
  const files = generatedFiles();
  for (const [file, text] of Object.entries(files)) {
    assert.equal(readFileSync(path.join(CLIENT, file), 'utf8'), text, `client/${file} is stale: run npm run build in web-demo/`);
  }
  const cjs = readdirSync(path.join(CLIENT, 'cjs')).map((f) => `cjs/${f}`);
  assert.deepEqual(cjs.filter((f) => !(f in files)), [], 'CommonJS files without a source in esm/');
});
