// The package as a user gets it: `npm pack` of web-demo/client, installed
// offline into a fresh Vite + React + TypeScript app (test/fixture, strict),
// type-checked with TypeScript 4.9 (Karpor's) and 5.x under moduleResolution
// node, bundler (5.x only: 4.9 has none) and nodenext, together with every
// example of docs/WEB.md, and under bundler with exactOptionalPropertyTypes;
// a CommonJS module of the app (test/fixture/cjs, a .cts) under node16 and
// nodenext, where `require` takes the CommonJS files' types; then bundled
// with esbuild through the package's `exports`.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import * as esbuild from 'esbuild';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const CLIENT = path.resolve(HERE, '..');
const WEB = path.resolve(CLIENT, '..');
const MODULES = path.join(WEB, 'node_modules');
const DOCS = path.resolve(WEB, '../docs/WEB.md');

const TSC = {
  '4.9': path.join(MODULES, 'typescript49/bin/tsc'),
  '5.x': path.join(MODULES, 'typescript/bin/tsc'),
};
const REACT_TYPES = { '4.9': '@types/react18', '5.x': '@types/react' };

/** The code blocks of docs/WEB.md that name their file (`// ui/src/…`), by that path under src/. */
export function docExamples(markdown) {
  const out = {};
  for (const [, body] of markdown.matchAll(/```tsx?\n([\s\S]*?)```/g)) {
    const first = body.split('\n')[0];
    const m = first.match(/^\/\/ ui\/(src\/\S+\.tsx?)/);
    if (m) out[m[1]] = body;
  }
  return out;
}

/** The module and moduleResolution of each resolution the runs take. */
const RESOLUTIONS = {
  node: ['ESNext', 'node'],
  bundler: ['ESNext', 'bundler'],
  node16: ['Node16', 'Node16'],
  nodenext: ['NodeNext', 'NodeNext'],
};

function tsconfig(version, resolution, include) {
  const [module, moduleResolution] = RESOLUTIONS[resolution];
  return {
    compilerOptions: {
      target: 'ES2020',
      lib: ['ES2020', 'DOM', 'DOM.Iterable'],
      module,
      moduleResolution,
      ...(version === '5.x' ? { moduleDetection: 'force' } : {}),
      isolatedModules: true,
      noEmit: true,
      jsx: 'react-jsx',
      strict: true,
      noUnusedLocals: true,
      noUnusedParameters: true,
      noFallthroughCasesInSwitch: true,
      // The package's .d.ts files are checked too.
      skipLibCheck: false,
      baseUrl: '.',
      paths: { '@/*': ['./src/*'] },
      types: [],
    },
    include,
  };
}

test('npm pack, installed offline into a Vite + React + TS app, type-checks strictly under TS 4.9 and 5.x', () => {
  // Outside web-demo/: its node_modules (antd, for the browser tests) must
  // not stand in for what the app installs (antd's types are stubbed there).
  const work = mkdtempSync(path.join(tmpdir(), 'kube-pulse-fixture-'));
  try {
    const packed = JSON.parse(
      execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: CLIENT, encoding: 'utf8' }),
    )[0];
    assert.deepEqual(packed.files.map((f) => f.path).sort(), [
      'cjs/client.js',
      'cjs/core.d.ts',
      'cjs/core.js',
      'cjs/documents.js',
      'cjs/event-source.js',
      'cjs/karpor.d.ts',
      'cjs/karpor.js',
      'cjs/kube-pulse.d.ts',
      'cjs/kube-pulse.js',
      'cjs/package.json',
      'cjs/query.js',
      'cjs/react.d.ts',
      'cjs/react.js',
      'cjs/rest.js',
      'cjs/sse.js',
      'cjs/stores.js',
      'cjs/tab.js',
      'core.d.ts',
      'core/package.json',
      'esm/client.js',
      'esm/core.js',
      'esm/documents.js',
      'esm/event-source.js',
      'esm/karpor.js',
      'esm/kube-pulse.js',
      'esm/query.js',
      'esm/react.js',
      'esm/rest.js',
      'esm/sse.js',
      'esm/stores.js',
      'esm/tab.js',
      'karpor.d.ts',
      'karpor/package.json',
      'kube-pulse.d.ts',
      'kube-pulse.js',
      'package.json',
      'react.d.ts',
      'react/package.json',
    ]);
    const manifest = JSON.parse(readFileSync(path.join(CLIENT, 'package.json'), 'utf8'));
    assert.equal(manifest.dependencies, undefined, 'no runtime dependencies');
    assert.equal(manifest.peerDependenciesMeta.react.optional, true);

    const app = path.join(work, 'app');
    cpSync(path.join(HERE, 'fixture'), app, { recursive: true });
    for (const [file, body] of Object.entries(docExamples(readFileSync(DOCS, 'utf8')))) {
      mkdirSync(path.dirname(path.join(app, 'docs', file)), { recursive: true });
      writeFileSync(path.join(app, 'docs', file), body);
    }
    execFileSync(
      'npm',
      ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error', path.join(work, packed.filename)],
      { cwd: app, encoding: 'utf8' },
    );
    const installed = JSON.parse(readFileSync(path.join(app, 'node_modules/@kube-pulse/client/package.json'), 'utf8'));
    assert.equal(installed.version, manifest.version);

    // [TypeScript, moduleResolution, what is checked, compiler options beside the fixture's].
    const runs = [
      ['4.9', 'node', 'app'],
      ['4.9', 'nodenext', 'app'],
      ['5.x', 'node', 'app'],
      ['5.x', 'bundler', 'app'],
      ['5.x', 'nodenext', 'app'],
      // Optional members given a value that may be undefined (a prop, a
      // state) where `?:` means absent only. antd is stubbed in the
      // fixture (src/antd.d.ts), so only the package's types and the
      // examples are judged, not antd's own.
      ['5.x', 'bundler', 'app', { exactOptionalPropertyTypes: true }],
      // A CommonJS consumer: `require` conditions, the cjs/*.d.ts copies.
      ['5.x', 'node16', 'cjs'],
      ['5.x', 'nodenext', 'cjs'],
    ];
    const failures = [];
    for (const [version, resolution, what, extra = {}] of runs) {
      // React's types for that TypeScript (Karpor: React 18 with TS 4.9).
      rmSync(path.join(app, 'node_modules/@types'), { recursive: true, force: true });
      mkdirSync(path.join(app, 'node_modules/@types'), { recursive: true });
      symlinkSync(path.join(MODULES, REACT_TYPES[version]), path.join(app, 'node_modules/@types/react'));
      // The docs' examples import `@/hooks/…` as Karpor's Vite alias does,
      // which nodenext's ESM resolution does not take: they are checked
      // under node and bundler, the app itself under all three.
      const include = what === 'cjs' ? ['cjs'] : resolution === 'nodenext' ? ['src'] : ['src', 'docs'];
      const config = tsconfig(version, resolution, include);
      Object.assign(config.compilerOptions, extra);
      if (what === 'app' && resolution !== 'nodenext') config.compilerOptions.paths = { '@/*': ['./docs/src/*'] };
      writeFileSync(path.join(app, 'tsconfig.json'), JSON.stringify(config, null, 2));
      try {
        execFileSync(process.execPath, [TSC[version], '-p', 'tsconfig.json'], { cwd: app, encoding: 'utf8' });
      } catch (err) {
        failures.push(`TypeScript ${version}, moduleResolution ${resolution}, ${what} ${JSON.stringify(extra)}:\n${err.stdout}${err.stderr}`);
      }
    }
    assert.deepEqual(failures, []);

    // The bundler finds the runtime through `exports`.
    const built = esbuild.buildSync({
      entryPoints: [path.join(app, 'src/main.tsx')],
      bundle: true,
      write: false,
      format: 'esm',
      jsx: 'automatic',
      nodePaths: [MODULES],
      logLevel: 'silent',
    });
    assert.match(built.outputFiles[0].text, /kube-pulse/);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test('docs/WEB.md has examples to check', () => {
  const files = Object.keys(docExamples(readFileSync(DOCS, 'utf8')));
  assert.ok(files.length >= 2, `${files}`);
});
