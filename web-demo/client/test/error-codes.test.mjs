// Every error code the gateway sends is in the client's `KnownErrorCode`
// (kube-pulse.d.ts): the codes are read from the gateway's source (error
// bodies, WebSocket `error` messages, SSE `error` events, the `code()` of
// its error types), so a code added there without the type fails here.
// The client's own codes are the table of docs/WEB.md "Errors of the
// client", neither more nor fewer.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const SRC = path.resolve(HERE, '../../../src');

function rustFiles(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? rustFiles(path.join(dir, e.name)) : e.name.endsWith('.rs') ? [path.join(dir, e.name)] : [],
  );
}

/** The codes the gateway's source sends, with where each was found. */
export function gatewayCodes() {
  const found = new Map();
  const add = (code, file) => found.set(code, path.relative(SRC, file));
  for (const file of rustFiles(SRC)) {
    // Tests assert on codes; only what the gateway itself sends counts.
    const text = readFileSync(file, 'utf8').split(/\n#\[cfg\(test\)\]\nmod tests/)[0];
    // HTTP error bodies: error_response(status, "code", …).
    for (const [, code] of text.matchAll(/error_response\(\s*[^,()]+(?:\([^)]*\))?,\s*"([a-z_]+)"/g)) add(code, file);
    // WebSocket error messages: error("code", …).
    for (const [, code] of text.matchAll(/(?<![.\w])error\(\s*"([a-z_]+)"/g)) add(code, file);
    // The code() of an error type: every string of its match.
    for (const [, body] of text.matchAll(/fn code\(&self\) -> &'static str \{([\s\S]*?)\n {4}\}/g)) {
      for (const [, code] of body.matchAll(/"([a-z_]+)"/g)) add(code, file);
    }
    // SSE error events: ServerMessage::Error { code, … } after a (code, message) match.
    if (text.includes('ServerMessage::Error {')) {
      for (const [, code] of text.matchAll(/=> \(\s*"([a-z_]+)",/g)) add(code, file);
    }
  }
  return found;
}

/** The body of `KnownErrorCode` in kube-pulse.d.ts (to the `;` that ends a line: its comments hold some). */
function knownBody() {
  const dts = readFileSync(path.join(HERE, '../kube-pulse.d.ts'), 'utf8');
  return dts.match(/export type KnownErrorCode =([\s\S]*?);\n/)[1];
}

/** The members of `KnownErrorCode` in kube-pulse.d.ts. */
export function knownCodes() {
  return new Set([...knownBody().matchAll(/\| '([a-z_]+)'/g)].map((m) => m[1]));
}

/** The client's own codes: the members after the type's comment that says so, `http_${number}` as `http_{status}`. */
export function clientCodes() {
  const own = knownBody().split("// The client's")[1];
  return [...own.matchAll(/\| (?:'([a-z_]+)'|`(http)_\$\{number\}`)/g)].map((m) => m[1] ?? `${m[2]}_{status}`);
}

test('every code the gateway sends is a KnownErrorCode', () => {
  const sent = gatewayCodes();
  // The scan finds what it should: one code of each kind.
  for (const code of ['misdirected_request', 'bad_option', 'unauthenticated', 'too_many_auth_failures', 'token_expired', 'not_found']) {
    assert.ok(sent.has(code), `the scan misses ${code}: ${[...sent.keys()]}`);
  }
  const known = knownCodes();
  const missing = [...sent].filter(([code]) => !known.has(code)).map(([code, file]) => `${code} (${file})`);
  assert.deepEqual(missing, [], 'codes the gateway sends that ErrorCode lacks');
});

test("docs/WEB.md's table of the client's errors is the client's own codes of KnownErrorCode", () => {
  const docs = readFileSync(path.resolve(HERE, '../../../docs/WEB.md'), 'utf8');
  const section = docs.split('### Errors of the client')[1]?.split('\n## ')[0];
  assert.ok(section, 'docs/WEB.md has the section');
  const documented = [...section.matchAll(/^\| `([a-z_{}]+)` \|/gm)].map((m) => m[1]);
  const own = clientCodes();
  assert.ok(own.includes('websocket_refused') && own.includes('http_{status}'), `${own}`);
  assert.deepEqual(documented.sort(), own.sort());
  // Each is a known code (the gateway's scan leaves them out: it sends none of them).
  for (const code of own) if (code !== 'http_{status}') assert.ok(knownCodes().has(code), code);
});
