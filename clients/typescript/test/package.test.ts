// What `npm publish` would upload: `npm pack --dry-run --json` (which runs
// prepack: the LICENSE copy and the build) lists the files; a user gets the
// ES modules, their types, the README and the LICENSE, and nothing of the
// tests, the build of the tests or node_modules. Every source map points at
// a file that is in the package. The package's exports map is then resolved
// as a user's import resolves it (a package may import itself by name).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

test('npm pack ships the modules, their types, README and LICENSE only', async () => {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--silent'], {
    cwd: pkgDir,
    encoding: 'utf8',
    env: { ...process.env, npm_config_update_notifier: 'false' },
  });
  const [packed] = JSON.parse(out) as Array<{ files: Array<{ path: string }> }>;
  const files = new Set(packed.files.map((f) => f.path));

  for (const want of ['package.json', 'README.md', 'LICENSE', 'dist/index.js', 'dist/index.d.ts']) {
    assert.ok(files.has(want), `the package lacks ${want}`);
  }
  assert.equal(readFileSync(join(pkgDir, 'LICENSE'), 'utf8'), readFileSync(join(pkgDir, '..', '..', 'LICENSE'), 'utf8'), 'LICENSE is the repository\'s');
  for (const f of files) {
    assert.doesNotMatch(f, /(^|\/)(node_modules|test|build|scripts)\//, `${f} is not for users`);
    assert.doesNotMatch(f, /\.test\.|^tsconfig|package-lock\.json$/, `${f} is not for users`);
    // Every module has its declarations.
    if (f.endsWith('.js')) assert.ok(files.has(f.replace(/\.js$/, '.d.ts')), `${f} has no .d.ts`);
    if (!f.endsWith('.map')) continue;
    const map = JSON.parse(readFileSync(join(pkgDir, f), 'utf8')) as { sources: string[] };
    for (const source of map.sources) {
      const target = normalize(join(dirname(f), source));
      assert.ok(!target.startsWith('..'), `${f} points outside the package: ${source}`);
      assert.ok(files.has(target), `${f} points at ${target}, which is not in the package`);
    }
  }

  const manifest = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
  assert.equal(manifest.private, undefined, 'a private package cannot be published');
  assert.equal(manifest.type, 'module');
  assert.match(manifest.engines.node, /^>=22\./);
  const root = manifest.exports['.'];
  assert.deepEqual(Object.keys(root), ['types', 'import'], 'types first, as TypeScript resolves conditions in order');
  for (const target of [root.types, root.import]) assert.ok(files.has(target.replace(/^\.\//, '')), `exports names ${target}, which is not packed`);

  // The name resolves through the exports map to the built ES module.
  const mod = await import(manifest.name);
  for (const helper of ['ensureReady', 'startHeartbeat', 'snapshotAndWait', 'forkAndWait', 'claimSandbox', 'namespaceQuotaStatus']) {
    assert.equal(typeof mod[helper], 'function', `the package does not export ${helper}`);
  }
});
