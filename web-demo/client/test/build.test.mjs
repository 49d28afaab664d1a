// The committed CommonJS build (client/cjs/) is what client/build.mjs
// writes from the ES modules now: a source changed without `npm run build`
// fails here.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { commonJs } from '../build.mjs';

const CLIENT = fileURLToPath(new URL('..', import.meta.url));

test('the committed CommonJS build is up to date with the ES modules', () => {
  for (const [file, text] of Object.entries(commonJs())) {
    assert.equal(readFileSync(path.join(CLIENT, file), 'utf8'), text, `client/${file} is stale: run npm run build in web-demo/`);
  }
});
