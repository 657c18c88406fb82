// Builds one self-contained CommonJS module per function: `dist/<name>.cjs` holds that
// function's declaration, the shared runtime and every npm dependency it reaches, and nothing
// of the other functions (each is a Knative Service of its own and scales from zero, so the
// less it loads the sooner it answers). The file is the module's CommonJS wrapper function, run
// by dist/main.mjs (`node dist/<name>.cjs` does nothing). Also writes:
//
//   dist/main.mjs        the image's entry: picks `dist/$FUNCTION.cjs` (or argv[2]) at start,
//                        with one clear line when the name is missing or unknown, and runs it
//                        from its V8 code cache `dist/<name>.code-cache` when there is one
//                        (else writes one at exit, where it can; NODE_DISABLE_COMPILE_CACHE=1
//                        turns that off);
//   dist/warm-cache.mjs  starts every function once (probes and a refused event, no cluster
//                        needed) and stops it, which writes its code cache (see Dockerfile).
//
// Why a code cache of our own rather than Node's NODE_COMPILE_CACHE: Node saves a module's code
// cache right after compiling it, before it runs, so it holds only the top level (190 KiB for
// the bundle); the bundle's modules (esbuild wraps each in a function called on first require)
// were compiled again on every start. `vm.Script#createCachedData()` taken at exit holds every
// function compiled by then (1.5 MiB). Measured side by side: ready 190–230 ms with Node's
// cache, about 145 ms with this one. CommonJS because vm.Script runs scripts (vm modules are
// experimental).
//
// Usage: node bin/build.ts [--outdir dist] [--metafile <file>] [--quiet]
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { build, type Metafile } from 'esbuild';
import { isRunning } from '../processes/index.ts';
import { functionModules } from '../functions/index.ts';
import { bundleNarrowing } from './bundle-narrowing.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const REGISTRY = join(ROOT, 'functions', 'index.ts');

export interface FunctionEntry {
  name: string;
  /** The declaration module, relative to the repository root (e.g. functions/immortal-container/index.ts). */
  module: string;
}

/** The functions of `functions/index.ts`, with their declaration modules relative to the repository root. */
export function registeredFunctions(): FunctionEntry[] {
  return Object.entries(functionModules).map(([name, module]) => ({ name, module: relative(ROOT, resolve(dirname(REGISTRY), module)) }));
}

/** The generated entry of one bundle: only this function's declaration and the runtime. */
function entrySource(entry: FunctionEntry): string {
  return [
    `import declaration from './${entry.module}';`,
    `import { serve } from './functions/runtime/server.ts';`,
    `serve(declaration).catch((error: Error) => {`,
    `  console.error(\`cannot start function \${declaration.name}: \${error.message}\`);`,
    `  process.exit(1);`,
    `});`,
  ].join('\n');
}

/**
 * Node flags the image runs dist/main.mjs with (Dockerfile ENTRYPOINT, and its warm-up RUN, since
 * V8 accepts a code cache only from a process with the same flags; test/integration/bundle.test.ts
 * checks both). A function instance idles most of its life, so memory counts. Measured on the
 * idle RSS after a first reconcile (bench/cold-start.ts):
 *
 *   --max-semi-space-size=1   young generation capped at 1 MiB per semi-space (it grows to about
 *                             3 during start-up and stays): −2 MiB. More scavenges under a burst
 *                             (each cheap: the garbage of a reconcile dies young). The local
 *                             plane (opfn dev) runs main.mjs without it.
 *
 * The other memory setting, WebAssembly kept at its baseline tier, is not a command-line flag:
 * see LATE_V8_FLAGS.
 */
export const IMAGE_NODE_FLAGS = ['--max-semi-space-size=1'];

/**
 * V8 flags dist/main.mjs sets once the bundle has loaded: undici parses HTTP with llhttp compiled
 * to WebAssembly, and once hot (the first reconcile) V8 recompiles it with TurboFan in a
 * background thread, which leaves a 12 MiB malloc arena behind (idle RSS 86 → 72 MiB). Liftoff,
 * the baseline tier, parses an API server answer in microseconds.
 * Why not `--liftoff-only` on the command line (the image's choice before): a V8 flag like it
 * given at start changes the flag hash that Node's built-in modules' embedded code cache was made
 * with, so V8 refuses it and compiles https, tls, crypto… on every start (ready +14 ms, a third
 * of the bare node:http floor). Set after the bundle has loaded, they only touch what is
 * compiled later; main.mjs sets them back (each negates a V8 default) before it writes the
 * bundle's code cache at exit, so that cache carries the hash of a fresh start. They apply wherever main.mjs runs: the image and
 * the local plane's bundled functions.
 */
export const LATE_V8_FLAGS = ['--no-wasm-tier-up', '--no-wasm-dynamic-tiering'];

function mainSource(names: string[]): string {
  return `// Generated by bin/build.ts. The image's entry: node dist/main.mjs, function chosen by FUNCTION (or the first argument).
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { debuglog } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { Script } from 'node:vm';
const lateV8Flags = ${JSON.stringify(LATE_V8_FLAGS)};
const known = ${JSON.stringify(names)};
const name = process.argv[2] ?? process.env.FUNCTION;
if (!name) {
  console.error(\`no function chosen: set FUNCTION to one of \${known.join(', ')} (e.g. FUNCTION=\${known[0]})\`);
  process.exit(2);
}
if (!known.includes(name)) {
  console.error(\`unknown function "\${name}" (FUNCTION): this build has \${known.join(', ')}\`);
  process.exit(2);
}
const debug = debuglog('opfn');
const file = join(dirname(fileURLToPath(import.meta.url)), \`\${name}.cjs\`);
const cacheFile = join(dirname(file), \`\${name}.code-cache\`);
// Node's switch for its own compile cache turns this one off too.
const useCache = !process.env.NODE_DISABLE_COMPILE_CACHE;
let cachedData;
try {
  if (useCache) cachedData = readFileSync(cacheFile);
} catch {
  debug('no code cache %s: compiling %s', cacheFile, file);
}
// The file is the module's CommonJS wrapper function (see bin/build.ts): compiling the text as
// read keeps a single copy of it in memory, as the script's source.
const script = new Script(readFileSync(file, 'utf8'), { filename: file, cachedData });
if (cachedData && script.cachedDataRejected) {
  console.error(\`code cache \${cacheFile} rejected (made by another Node version or with other V8 flags): compiling \${file}, which starts slower\`);
} else if (cachedData) {
  debug('code cache %s accepted', cacheFile);
}
if (useCache && (!cachedData || script.cachedDataRejected)) {
  // Taken at exit, the cache holds every function compiled by then. Where the folder is
  // read-only (the image at run time) there is nothing to do.
  process.once('exit', () => {
    try {
      // The cache records V8's flags: those of a fresh start, before the late ones.
      for (const flag of lateV8Flags) setFlagsFromString(flag.replace(/^--no-/, '--'));
      const scratch = \`\${cacheFile}.\${process.pid}\`;
      writeFileSync(scratch, script.createCachedData());
      renameSync(scratch, cacheFile);
      debug('wrote code cache %s', cacheFile);
    } catch (error) {
      debug('cannot write code cache %s: %s', cacheFile, error.message);
    }
  });
}
cachedData = undefined;
const module = { exports: {}, filename: file, id: '.', loaded: false };
script.runInThisContext()(module.exports, createRequire(file), module, file, dirname(file));
// Now, not as node flags: see LATE_V8_FLAGS in bin/build.ts.
for (const flag of lateV8Flags) setFlagsFromString(flag);
`;
}

function warmCacheSource(names: string[]): string {
  return `// Generated by bin/build.ts. Writes each function's V8 code cache (dist/<name>.code-cache):
// starts it through main.mjs, asks its probes and metrics, sends it an event it refuses (so the
// intake's code is compiled too), and stops it with SIGTERM, the way Knative does; main.mjs
// writes the cache at exit. No cluster is needed: the kubeconfig below only lets the function
// start; nothing contacts that address.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
const known = ${JSON.stringify(names)};
const here = dirname(fileURLToPath(import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'opfn-warm-'));
const kubeconfig = join(scratch, 'kubeconfig');
writeFileSync(kubeconfig, 'apiVersion: v1\\nkind: Config\\nclusters: [{name: warm, cluster: {server: "https://127.0.0.1:9"}}]\\nusers: [{name: warm, user: {token: warm}}]\\ncontexts: [{name: warm, context: {cluster: warm, user: warm}}]\\ncurrent-context: warm\\n');
const freePort = () => new Promise((resolve, reject) => {
  const server = createServer().once('error', reject).listen(0, '127.0.0.1', () => {
    const { port } = server.address();
    server.close(() => resolve(port));
  });
});
let failed = false;
for (const name of known) {
  const started = performance.now();
  const port = await freePort();
  const cacheFile = join(here, \`\${name}.code-cache\`);
  rmSync(cacheFile, { force: true });
  const env = { ...process.env, FUNCTION: name, KUBECONFIG: kubeconfig, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'info' };
  delete env.NODE_OPTIONS; // the cache is only accepted by a process with the same V8 flags
  delete env.NODE_DISABLE_COMPILE_CACHE; // which would stop main.mjs writing it
  // With this process's node flags: run it as the image runs main.mjs (see IMAGE_NODE_FLAGS).
  const child = spawn(process.execPath, [...process.execArgv, join(here, 'main.mjs')], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  let warming = false;
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  child.stdout.setEncoding('utf8').on('data', async (chunk) => {
    out += chunk;
    if (!/"msg":"[^"]* ready"/.test(out) || warming) return;
    warming = true;
    const base = \`http://127.0.0.1:\${port}\`;
    try {
      for (const path of ['/health/readiness', '/health/liveness', '/metrics']) await (await fetch(base + path)).arrayBuffer();
      await (await fetch(base + '/', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).arrayBuffer();
    } catch (error) {
      console.error(\`warm-cache: \${name}: \${error.message}\`);
    }
    child.kill('SIGTERM');
  });
  const code = await new Promise((resolve) => child.on('exit', (exitCode, signal) => resolve(exitCode ?? signal)));
  clearTimeout(timer);
  if (code !== 0 || !existsSync(cacheFile)) {
    failed = true;
    console.error(\`warm-cache: \${name} did not start and stop cleanly (exit \${code}\${existsSync(cacheFile) ? '' : ', no code cache written'}); its output:\\n\${out.trim().split('\\n').slice(-5).join('\\n')}\`);
  } else {
    console.log(\`warm-cache: \${name}: \${cacheFile} (\${Math.round(performance.now() - started)} ms)\`);
  }
}
rmSync(scratch, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
`;
}

export interface BuildResult {
  outdir: string;
  bundles: { name: string; file: string; bytes: number; mapBytes: number; inputs: number; ms: number }[];
  metafiles: Record<string, Metafile>;
  ms: number;
}

/** Removes what a build killed midway left beside `target` (its `.building-<pid>` or `.previous-<pid>` folder). */
function removeAbandonedBuilds(target: string): void {
  const prefix = `${basename(target)}.`;
  const entries = existsSync(dirname(target)) ? readdirSync(dirname(target)) : [];
  for (const name of entries) {
    const pid = /^(?:building|previous)-(\d+)$/.exec(name.startsWith(prefix) ? name.slice(prefix.length) : '')?.[1];
    if (pid !== undefined && (Number(pid) === process.pid || !isRunning(Number(pid)))) rmSync(join(dirname(target), name), { recursive: true, force: true });
  }
}

/**
 * Bundles every registered function into `outdir` (default dist/). The bundles are written into a
 * folder beside it and swapped in at the end: a plane running from `outdir` (a second `opfn dev`
 * in the same project rebuilds `.opfn/dist`) keeps starting instances throughout, where removing
 * the folder first made every cold start meanwhile fail.
 */
export async function buildFunctions(options: { outdir?: string } = {}): Promise<BuildResult> {
  const target = resolve(ROOT, options.outdir ?? 'dist');
  const outdir = `${target}.building-${process.pid}`;
  const started = performance.now();
  const entries = registeredFunctions();
  removeAbandonedBuilds(target);
  mkdirSync(outdir, { recursive: true });

  const metafiles: Record<string, Metafile> = {};
  const bundles = await Promise.all(entries.map(async (entry) => {
    const bundleStarted = performance.now();
    const file = join(outdir, `${entry.name}.cjs`);
    const result = await build({
      stdin: { contents: entrySource(entry), resolveDir: ROOT, sourcefile: `<generated entry of ${entry.name}>`, loader: 'ts' },
      bundle: true,
      platform: 'node',
      format: 'cjs',
      // The module as the function Node's CommonJS loader would wrap it in, so that the file is
      // one script whose value is that function (dist/main.mjs compiles and runs it).
      banner: { js: `// Run by dist/main.mjs (running this file with node does nothing): function ${entry.name}, its runtime and dependencies.\n(function (exports, require, module, __filename, __dirname) {` },
      footer: { js: '})' },
      target: 'node24',
      minify: true,
      sourcemap: 'linked',
      outfile: file,
      metafile: true,
      logLevel: 'silent',
      plugins: bundleNarrowing,
    });
    for (const warning of result.warnings) console.warn(`warning (${entry.name}): ${warning.text}${warning.location ? ` (${warning.location.file}:${warning.location.line})` : ''}`);
    metafiles[entry.name] = result.metafile;
    return {
      name: entry.name,
      file: relative(ROOT, file),
      bytes: statSync(file).size,
      mapBytes: statSync(`${file}.map`).size,
      inputs: Object.keys(result.metafile.inputs).length,
      ms: Math.round(performance.now() - bundleStarted),
    };
  }));

  const names = entries.map((entry) => entry.name);
  writeFileSync(join(outdir, 'main.mjs'), mainSource(names));
  writeFileSync(join(outdir, 'warm-cache.mjs'), warmCacheSource(names));
  // Two renames: `target` is missing only between them.
  const previous = `${target}.previous-${process.pid}`;
  if (existsSync(target)) renameSync(target, previous);
  renameSync(outdir, target);
  rmSync(previous, { recursive: true, force: true });
  const bundled = bundles.map((bundle) => ({ ...bundle, file: relative(ROOT, join(target, basename(bundle.file))) }));
  return { outdir: target, bundles: bundled, metafiles, ms: Math.round(performance.now() - started) };
}

const kib = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { outdir: { type: 'string' }, metafile: { type: 'string' }, quiet: { type: 'boolean', default: false } },
  });
  let result: BuildResult;
  try {
    result = await buildFunctions({ outdir: values.outdir });
  } catch (error) {
    const errors = (error as { errors?: { text: string; location?: { file: string; line: number } | null }[] }).errors;
    const first = errors?.[0];
    const why = first ? `${first.text}${first.location ? ` (${first.location.file}:${first.location.line})` : ''}${errors!.length > 1 ? ` and ${errors!.length - 1} more error(s)` : ''}` : (error as Error).message;
    console.error(`build failed: ${why}`);
    process.exit(1);
  }
  if (values.metafile) writeFileSync(resolve(values.metafile), JSON.stringify(result.metafiles));
  if (!values.quiet) {
    const width = Math.max(...result.bundles.map((bundle) => bundle.file.length));
    for (const bundle of result.bundles) {
      console.log(`${bundle.file.padEnd(width)}  ${kib(bundle.bytes).padStart(10)}  (map ${kib(bundle.mapBytes)}, ${bundle.inputs} inputs, ${bundle.ms} ms)`);
    }
    console.log(`${relative(ROOT, join(result.outdir, 'main.mjs'))}, ${relative(ROOT, join(result.outdir, 'warm-cache.mjs'))}`);
    console.log(`built ${result.bundles.length} function bundle(s) in ${result.ms} ms`);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main();
