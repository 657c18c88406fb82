// Builds what the npm package ships; `npm pack` runs it (prepack), and `--clean` (postpack)
// removes it again. Node refuses to strip types from .ts files under node_modules, so the
// package carries the project's code compiled to JavaScript, with the TypeScript declarations of
// the author's face, in lib/, laid out as the repository is, beside the files it reads at run
// time: the CRDs (lib/crds/), the control plane's provisioning scripts (lib/cluster/*.sh) and the
// templates of `opfn new` (lib/bin/templates/); `operator-functions/testing` is what a function's
// own integration test imports (test/support/function-tests.ts).
// `bin/opfn.mjs` runs lib/bin/opfn.js there, and the TypeScript sources in this repository.
//
// Usage: node build/package.ts [--clean]
import { execFileSync } from 'node:child_process';
import { cpSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const LIB = join(ROOT, 'lib');

rmSync(LIB, { recursive: true, force: true });
if (!process.argv.includes('--clean')) {
  const started = performance.now();
  const tsc = join(dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin', 'tsc');
  execFileSync(process.execPath, [tsc, '-p', join(ROOT, 'build', 'tsconfig.package.json')], { stdio: 'inherit' });
  cpSync(join(ROOT, 'crds'), join(LIB, 'crds'), { recursive: true, filter: (path) => !/\.[^/]+$/.test(path) || /\.ya?ml$/.test(path) });
  // The files `opfn new` fills in, read beside the compiled bin/new.js.
  cpSync(join(ROOT, 'bin', 'templates'), join(LIB, 'bin', 'templates'), { recursive: true });
  for (const script of readdirSync(join(ROOT, 'cluster')).filter((file) => file.endsWith('.sh')))
    cpSync(join(ROOT, 'cluster', script), join(LIB, 'cluster', script));
  console.error(`package: compiled to ${LIB} in ${Math.round(performance.now() - started)} ms`);
}
