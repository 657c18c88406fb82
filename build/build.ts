// Builds one self-contained CommonJS module per function: `dist/<name>.cjs` holds that
// function's declaration, the shared runtime and every npm dependency it reaches, and nothing
// of the other functions (each is a Knative Service of its own and scales from zero, so the
// less it loads the sooner it answers). The file is the module's CommonJS wrapper function, run
// by dist/main.mjs (`node dist/<name>.cjs` does nothing). Also builds the two programs of
// programs/ and the list of the functions they serve:
//
//   dist/main.mjs         the image's entry (programs/main.ts): runs `dist/$FUNCTION.cjs` from
//                         its V8 code cache `dist/<name>.code-cache`;
//   dist/warm-cache.mjs   starts every function once and stops it, which writes its code cache
//                         (programs/warm-cache.ts, see Dockerfile);
//   dist/functions.json   the names of the functions of this build.
//
// Why a code cache of our own rather than Node's NODE_COMPILE_CACHE: Node saves a module's code
// cache right after compiling it, before it runs, so it holds only the top level; the bundle's
// modules (esbuild wraps each in a function called on first require) were compiled again on
// every start. `vm.Script#createCachedData()` taken at exit holds every function compiled by
// then. CommonJS because vm.Script runs scripts (vm modules are experimental).
//
// Functions from outside this project (`opfn dev --functions <folder>`) are bundled the same way,
// each with the runtime of the package it imports ('operator-functions').
//
// Usage: node build/build.ts [--outdir dist] [--metafile <file>] [--quiet]
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, extname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { build, type Metafile } from 'esbuild';
import { builtInModulePath, functionNames } from '../functions/index.ts';
import { isRunning } from '../processes/index.ts';
import { bundleNarrowing } from './bundle-narrowing.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const PROGRAMS_DIR = join(ROOT, 'build', 'programs');
/** The extension of this project's modules as they run: .ts from the sources, .js in the npm package (compiled). */
const OWN_EXTENSION = extname(fileURLToPath(import.meta.url));
const HOST_FACE = join(ROOT, 'functions', 'runtime', 'host', `index${OWN_EXTENSION}`);

export interface FunctionEntry {
  name: string;
  /** The absolute path of the module whose default export is the function's declaration (or an array holding it). */
  module: string;
}

/** The functions of `functions/index.ts`, with their declaration modules. */
export function registeredFunctions(): FunctionEntry[] {
  return functionNames.map((name) => ({ name, module: builtInModulePath(name) }));
}

/** The generated entry of one bundle: only this function's declaration and the runtime. */
function entrySource(entry: FunctionEntry): string {
  return [
    `import exported from ${JSON.stringify(entry.module)};`,
    `import { serve } from ${JSON.stringify(HOST_FACE)};`,
    `const declaration = [exported].flat().find((candidate) => candidate.name === ${JSON.stringify(entry.name)});`,
    `serve(declaration).catch((error: Error) => {`,
    `  console.error(\`cannot start function \${declaration.name}: \${error.message}\`);`,
    `  process.exit(1);`,
    `});`,
  ].join('\n');
}

/** The programs of programs/, each built to one file of dist/ beside the bundles. */
const PROGRAMS = [
  { source: `main${OWN_EXTENSION}`, output: 'main.mjs' },
  { source: `warm-cache${OWN_EXTENSION}`, output: 'warm-cache.mjs' },
];

/** Builds programs/ into `outdir` (ES modules with Node's built-ins external; nothing else is imported). */
async function buildPrograms(outdir: string): Promise<void> {
  await Promise.all(
    PROGRAMS.map(({ source, output }) =>
      build({
        entryPoints: [join(PROGRAMS_DIR, source)],
        bundle: true,
        platform: 'node',
        format: 'esm',
        target: 'node24',
        outfile: join(outdir, output),
        banner: { js: `// Built by build/build.ts from build/programs/${source}.` },
        logLevel: 'silent',
      }),
    ),
  );
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
    if (pid !== undefined && (Number(pid) === process.pid || !isRunning(Number(pid))))
      rmSync(join(dirname(target), name), { recursive: true, force: true });
  }
}

/**
 * Builds the functions' bundles into `outdir` and says how to run them as the container image
 * does (dist/main.mjs, which runs a bundle from its V8 code cache and writes that cache when the
 * first instance exits). Without the image's memory flag (IMAGE_NODE_FLAGS, a capped young
 * generation): the local plane's instances come and go, and more scavenges would only slow
 * their bursts.
 */
export async function bundledFunctions(
  outdir: string,
  functions?: FunctionEntry[],
): Promise<{ command: (declaration: { name: string }) => { command: string; args: string[] } }> {
  await buildFunctions({ outdir, functions });
  return { command: (declaration) => ({ command: process.execPath, args: [join(outdir, 'main.mjs'), declaration.name] }) };
}

/**
 * Bundles `functions` (default: every registered function) into `outdir` (default dist/). The bundles are written into a
 * folder beside it and swapped in at the end: a plane running from `outdir` (a second `opfn dev`
 * in the same project rebuilds `.opfn/dist`) keeps starting instances throughout, where removing
 * the folder first made every cold start meanwhile fail.
 */
export async function buildFunctions(options: { outdir?: string; functions?: FunctionEntry[] } = {}): Promise<BuildResult> {
  const target = resolve(ROOT, options.outdir ?? 'dist');
  const outdir = `${target}.building-${process.pid}`;
  const started = performance.now();
  const entries = options.functions ?? registeredFunctions();
  removeAbandonedBuilds(target);
  mkdirSync(outdir, { recursive: true });

  const metafiles: Record<string, Metafile> = {};
  const bundles = await Promise.all(
    entries.map(async (entry) => {
      const bundleStarted = performance.now();
      const file = join(outdir, `${entry.name}.cjs`);
      const result = await build({
        stdin: { contents: entrySource(entry), resolveDir: ROOT, sourcefile: `<generated entry of ${entry.name}>`, loader: 'ts' },
        bundle: true,
        platform: 'node',
        format: 'cjs',
        // The module as the function Node's CommonJS loader would wrap it in, so that the file is
        // one script whose value is that function (dist/main.mjs compiles and runs it).
        banner: {
          js: `// Run by dist/main.mjs (running this file with node does nothing): function ${entry.name}, its runtime and dependencies.\n(function (exports, require, module, __filename, __dirname) {`,
        },
        footer: { js: '})' },
        target: 'node24',
        minify: true,
        sourcemap: 'linked',
        outfile: file,
        metafile: true,
        logLevel: 'silent',
        plugins: bundleNarrowing,
      });
      for (const warning of result.warnings)
        console.warn(
          `warning (${entry.name}): ${warning.text}${warning.location ? ` (${warning.location.file}:${warning.location.line})` : ''}`,
        );
      metafiles[entry.name] = result.metafile;
      return {
        name: entry.name,
        file: relative(ROOT, file),
        bytes: statSync(file).size,
        mapBytes: statSync(`${file}.map`).size,
        inputs: Object.keys(result.metafile.inputs).length,
        ms: Math.round(performance.now() - bundleStarted),
      };
    }),
  );

  writeFileSync(join(outdir, 'functions.json'), JSON.stringify(entries.map((entry) => entry.name)));
  await buildPrograms(outdir);
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
    const why = first
      ? `${first.text}${first.location ? ` (${first.location.file}:${first.location.line})` : ''}${errors!.length > 1 ? ` and ${errors!.length - 1} more error(s)` : ''}`
      : (error as Error).message;
    console.error(`build failed: ${why}`);
    process.exit(1);
  }
  if (values.metafile) writeFileSync(resolve(values.metafile), JSON.stringify(result.metafiles));
  if (!values.quiet) {
    const width = Math.max(...result.bundles.map((bundle) => bundle.file.length));
    for (const bundle of result.bundles) {
      console.log(
        `${bundle.file.padEnd(width)}  ${kib(bundle.bytes).padStart(10)}  (map ${kib(bundle.mapBytes)}, ${bundle.inputs} inputs, ${bundle.ms} ms)`,
      );
    }
    console.log(PROGRAMS.map(({ output }) => relative(ROOT, join(result.outdir, output))).join(', '));
    console.log(`built ${result.bundles.length} function bundle(s) in ${result.ms} ms`);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main();
