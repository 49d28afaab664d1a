// The packed package in the toolchains of an older React app, such as
// Karpor's (Create React App 5): Jest 27 with babel, which does not
// transform node_modules and does not read `exports` (it takes `main`,
// and a subpath's directory `package.json`), and webpack 5, which takes
// `exports` (`import`). Neither app has any setting for the package: the
// CommonJS build and the `react/` directory are what make them work.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import vm from 'node:vm';
import { fileURLToPath } from 'node:url';

import webpack from 'webpack';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const CLIENT = path.resolve(HERE, '..');
const WEB = path.resolve(CLIENT, '..');
const MODULES = path.join(WEB, 'node_modules');

/**
 * A new app under web-demo/ (so that babel, jest and react resolve from
 * web-demo/node_modules) with the packed package installed offline and
 * `files` written; resolves its directory, `done()` removes it.
 */
function appWith(files) {
  const work = mkdtempSync(path.join(WEB, '.fixture-toolchain-'));
  const packed = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: CLIENT, encoding: 'utf8' }))[0];
  const app = path.join(work, 'app');
  for (const [file, text] of Object.entries({ 'package.json': '{"name": "cra-like", "private": true}\n', ...files })) {
    mkdirSync(path.dirname(path.join(app, file)), { recursive: true });
    writeFileSync(path.join(app, file), text);
  }
  execFileSync(
    'npm',
    ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error', path.join(work, packed.filename)],
    { cwd: app, encoding: 'utf8' },
  );
  return { app, done: () => rmSync(work, { recursive: true, force: true }) };
}

// A CRA app's babel: its preset turns JSX and ES modules into what Jest runs.
const BABEL = `module.exports = { presets: [['@babel/preset-env', { targets: { node: 'current' } }], ['@babel/preset-react', { runtime: 'automatic' }]] };\n`;

test('Jest 27 + babel (as Create React App 5 runs it) imports the package and its hooks without any setting', () => {
  const { app, done } = appWith({
    'babel.config.js': BABEL,
    'src/Badge.js': `import { usePulse } from '@kube-pulse/client/react';
export function Badge({ client, name }) {
  const { data, status } = usePulse(client, \`clusters/\${name}\`);
  return <span data-status={status}>{data ? data.phase : '…'}</span>;
}
`,
    'src/Badge.test.js': `import { renderToString } from 'react-dom/server';
import { connect, matches, PulseError } from '@kube-pulse/client';
import { Badge } from './Badge';

test('the package loads as CommonJS and the hooks render', () => {
  expect(require.resolve('@kube-pulse/client')).toMatch(/cjs[\\\\/]kube-pulse\\.js$/);
  expect(require.resolve('@kube-pulse/client/react')).toMatch(/cjs[\\\\/]react\\.js$/);
  expect(matches('clusters/*', 'clusters/dev')).toBe(true);
  expect(new PulseError('rate_limited').retrying).toBe(true);
  const client = connect({ url: 'http://127.0.0.1:9/', WebSocket: class { send() {} close() {} } });
  expect(renderToString(<Badge client={client} name="dev" />)).toBe('<span data-status="loading">…</span>');
  expect(() => renderToString(<Badge client={client} name={undefined} />)).toThrow(/a name in a template topic was undefined/);
  // The Karpor pieces too (antd's CommonJS build beside them).
  expect(require.resolve('@kube-pulse/client/karpor')).toMatch(/cjs[\\\\/]karpor\\.js$/);
  const { ClusterPhaseBadge, sinceText } = require('@kube-pulse/client/karpor');
  expect(sinceText('2026-01-01T00:00:00Z', Date.parse('2026-01-01T00:05:00Z'))).toBe('5m');
  expect(renderToString(<ClusterPhaseBadge client={client} name="dev" />)).toContain('…');
  client.close();
  // The core entry, and the hooks over a core client.
  expect(require.resolve('@kube-pulse/client/core')).toMatch(/cjs[\\/]core\.js$/);
  const core = require('@kube-pulse/client/core').connect({ url: 'http://127.0.0.1:9/', WebSocket: class { send() {} close() {} } });
  expect(core.query).toBeUndefined();
  expect(renderToString(<Badge client={core} name="dev" />)).toBe('<span data-status="loading">…</span>');
  core.close();
});
`,
  });
  try {
    const out = execFileSync(process.execPath, [path.join(MODULES, 'jest/bin/jest.js'), '--ci', '--watchman=false', '--colors=false'], {
      cwd: app,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, CI: 'true' },
    });
    void out;
  } catch (err) {
    assert.fail(`jest failed:\n${err.stdout}${err.stderr}`);
  } finally {
    done();
  }
});

test('a CRA-like webpack 5 production build takes the ES modules through `exports`, and its bundle runs', async () => {
  const { app, done } = appWith({
    'src/index.js': `import { connect, matches } from '@kube-pulse/client';
import { connect as connectCore } from '@kube-pulse/client/core';
import { usePulse, useLiveQuery } from '@kube-pulse/client/react';
const client = connect({ url: 'http://127.0.0.1:9/' });
const core = connectCore({ url: 'http://127.0.0.1:9/' });
globalThis.result = {
  matches: matches('apps/**', 'apps/dev/shop/web'),
  hooks: [typeof usePulse, typeof useLiveQuery],
  state: client.state,
  core: [core.state, typeof core.query, core.asOf('clusters/dev')],
};
`,
  });
  try {
    const stats = await new Promise((resolve, reject) =>
      webpack(
        {
          mode: 'production',
          context: app,
          entry: './src/index.js',
          output: { path: path.join(app, 'build'), filename: 'main.js' },
          target: ['browserslist:last 2 chrome versions'],
          module: {
            rules: [
              {
                test: /\.(js|mjs|jsx)$/,
                exclude: /node_modules/,
                use: { loader: 'babel-loader', options: { presets: ['@babel/preset-env', ['@babel/preset-react', { runtime: 'automatic' }]] } },
              },
            ],
          },
          resolve: { modules: ['node_modules', MODULES] },
          resolveLoader: { modules: [MODULES] },
        },
        (err, result) => (err ? reject(err) : resolve(result)),
      ),
    );
    const info = stats.toJson({ all: false, errors: true, warnings: true, modules: true, nestedModules: true });
    assert.deepEqual(info.errors, [], 'no build errors');
    const names = info.modules.flatMap((m) => [m.name, ...(m.modules ?? []).map((n) => n.name)]).join('\n');
    assert.match(names, /@kube-pulse\/client\/esm\/kube-pulse\.js/, `the ES module, not the CommonJS build: ${names}`);
    assert.match(names, /@kube-pulse\/client\/esm\/core\.js/, `the core's ES module: ${names}`);
    assert.doesNotMatch(names, /client\/cjs\//);
    const bundle = readFileSync(path.join(app, 'build/main.js'), 'utf8');
    const context = { URL, console };
    context.globalThis = context;
    vm.runInNewContext(bundle, context);
    assert.deepEqual(JSON.parse(JSON.stringify(context.result)), {
      matches: true,
      hooks: ['function', 'function'],
      state: 'idle',
      core: ['idle', 'undefined', null],
    });
  } finally {
    done();
  }
});
