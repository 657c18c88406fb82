// Cold start of a function, measured the way Knative experiences it: from process spawn to the
// first reconcile done, i.e. the first 200 answer to an ApiServerSource add event delivered as
// soon as /health/readiness answers (polled every 5 ms). Every run reconciles a fresh
// ImmortalContainer against a real control plane, so every run does the real work (read the
// object, create the pod, record an Event, write status) over a fresh TLS connection.
//
// Variants, interleaved run by run (the starting variant rotates) so a noisy machine hurts them
// alike:
//   (a) unbundled:                node functions/main.ts immortal-container
//   (b) bundled, no cache:        NODE_DISABLE_COMPILE_CACHE=1 node dist/main.mjs immortal-container
//   (c) the image's entry:        node <IMAGE_NODE_FLAGS> dist/main.mjs immortal-container, the
//                                 bundle run from the V8 code cache that dist/warm-cache.mjs
//                                 wrote (as the Dockerfile does, before any measured run)
//   (d) unbundled, compile cache: NODE_COMPILE_CACHE=<warm dir> node functions/main.ts …
//   (f) floor:                    a bare node:http server (node -e, answers 200), spawn → first
//                                 response: what any Node process costs before doing anything
// (a), (b) and (f) run with NODE_DISABLE_COMPILE_CACHE=1 (which main.mjs honours too); (c) with
// neither variable, as the image. A first, unmeasured round runs every variant once: it fills the cache of (d) and
// warms the OS file cache for all.
// After each run's first answer the process idles IDLE_MS and its resident set (VmRSS) is read:
// a function at rest next to the bare server at rest. Goals: (c) ready ≤ 2× the floor, idle RSS
// ≤ 1.5× the floor's.
//
// Usage: npm run bench:cold-start -- [--runs N] [--label L]   (default 7 runs)
// Writes its results as JSON outside the repository (bench/harness.ts, resultsFolder).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { freePort, killOnExit, stopProcess } from '../processes/index.ts';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { buildFunctions, IMAGE_NODE_FLAGS } from '../build/index.ts';
import { apiServerSourceEvent } from '../eventing/apiserver-events.ts';
import { ImmortalContainerKind, type ImmortalContainer, type PodObject } from '../functions/immortal-container/desired.ts';
import { Pod } from '../functions/runtime/index.ts';
import { deliver, startTestCluster, type TestCluster } from '../test/support/cluster.ts';
import { benchFlags, median, writeResults } from './harness.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const FUNCTION = 'immortal-container';
const POLL_MS = 5;
const RUN_TIMEOUT_MS = 30_000;
const IDLE_MS = 1000;
/** Variant.cache of the image's entry: the code cache dist/warm-cache.mjs wrote. */
const IMAGE_CACHE = 'image';
/** The floor: the least a Node HTTP server can do. */
const BARE_SERVER = "require('node:http').createServer((req, res) => res.end('ok')).listen(Number(process.env.PORT), process.env.HOST)";

interface Variant {
  id: string;
  label: string;
  args: string[];
  /** Node's compile cache folder (warm after the first round); IMAGE_CACHE: the image's code cache; undefined: caches off. */
  cache?: string;
  /** The bare server: its first answer is the whole run. */
  floor?: boolean;
}

interface Sample {
  /** spawn → /health/readiness 200 */
  readyMs: number;
  /** spawn → first reconcile answered 200 */
  doneMs: number;
  /** the process's own `startupMs` (performance.now() when listening) */
  startupMs?: number;
  /** resident set after the first answer and IDLE_MS at rest, KiB */
  idleRssKiB: number;
}

function rssKiB(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((candidate) => candidate.startsWith('VmRSS:'));
  return Number(line?.split(/\s+/)[1] ?? NaN);
}

/** One cold start of `variant` reconciling a fresh ImmortalContainer named `name`. */
async function coldStart(cluster: TestCluster, variant: Variant, name: string): Promise<Sample> {
  if (variant.floor) return floorStart(variant);
  const ic = await cluster.kube.create<ImmortalContainer>(ImmortalContainerKind, {
    apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
    kind: 'ImmortalContainer',
    metadata: { name, namespace: 'default' },
    spec: { image: 'nginx:1.27' },
  });
  const event = apiServerSourceEvent({
    server: cluster.cp.server,
    kind: ImmortalContainerKind,
    object: ic,
    action: 'add',
    mode: 'Reference',
  });
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    KUBECONFIG: cluster.cp.kubeconfigPath,
    PORT: String(port),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
  };
  delete env.NODE_COMPILE_CACHE;
  delete env.NODE_DISABLE_COMPILE_CACHE;
  if (!variant.cache) env.NODE_DISABLE_COMPILE_CACHE = '1';
  else if (variant.cache !== IMAGE_CACHE) env.NODE_COMPILE_CACHE = variant.cache;
  const url = `http://127.0.0.1:${port}/`;

  const started = performance.now();
  const child = spawn(process.execPath, variant.args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  killOnExit(child);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const died = () => child.exitCode !== null || child.signalCode !== null;
  try {
    let readyMs: number | undefined;
    while (readyMs === undefined) {
      if (died())
        throw new Error(
          `${variant.label} exited (${child.exitCode ?? child.signalCode}) before it was ready: ${(stderr || stdout).trim().split('\n').slice(-3).join(' | ')}`,
        );
      if (performance.now() - started > RUN_TIMEOUT_MS) throw new Error(`${variant.label} not ready after ${RUN_TIMEOUT_MS / 1000}s`);
      try {
        const response = await fetch(`${url}health/readiness`);
        await response.arrayBuffer();
        if (response.status === 200) readyMs = performance.now() - started;
      } catch {
        // not listening yet
      }
      if (readyMs === undefined) await sleep(POLL_MS);
    }
    const answer = await deliver(url, event);
    const doneMs = performance.now() - started;
    if (answer.status !== 200)
      throw new Error(`${variant.label}: the add event was answered ${answer.status} ${JSON.stringify(answer.body)}`);

    // The run counts only if it did the real work.
    const pod = await cluster.kube.get<PodObject>(Pod, { namespace: 'default', name: `${name}-immortalpod` });
    const status = (await cluster.kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'default', name }))?.status;
    if (!pod || status?.startTimes !== 1)
      throw new Error(`${variant.label}: reconcile answered 200 but pod=${Boolean(pod)} startTimes=${status?.startTimes}`);

    const readyLine = stdout.split('\n').find((line) => line.includes('"startupMs"'));
    const startupMs = readyLine ? (JSON.parse(readyLine) as { startupMs?: number }).startupMs : undefined;
    await sleep(IDLE_MS);
    return { readyMs, doneMs, startupMs, idleRssKiB: rssKiB(child.pid!) };
  } finally {
    await stopProcess(child);
  }
}

/** The floor: spawn a bare node:http server, poll it the same way until it answers. */
async function floorStart(variant: Variant): Promise<Sample> {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), HOST: '127.0.0.1', NODE_DISABLE_COMPILE_CACHE: '1' };
  delete env.NODE_COMPILE_CACHE;
  const started = performance.now();
  const child = killOnExit(spawn(process.execPath, variant.args, { cwd: ROOT, env, stdio: 'ignore' }));
  try {
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(`${variant.label} exited (${child.exitCode ?? child.signalCode})`);
      if (performance.now() - started > RUN_TIMEOUT_MS) throw new Error(`${variant.label} not answering after ${RUN_TIMEOUT_MS / 1000}s`);
      try {
        const response = await fetch(`http://127.0.0.1:${port}/`);
        await response.arrayBuffer();
        if (response.status === 200) break;
      } catch {
        // not listening yet
      }
      await sleep(POLL_MS);
    }
    const readyMs = performance.now() - started;
    await sleep(IDLE_MS);
    return { readyMs, doneMs: readyMs, idleRssKiB: rssKiB(child.pid!) };
  } finally {
    await stopProcess(child);
  }
}

const ms = (value: number | undefined) => (value === undefined || Number.isNaN(value) ? '-' : `${Math.round(value)}`);

async function main(): Promise<void> {
  const { values } = benchFlags(
    'npm run bench:cold-start -- [--runs 7] [--label name]\n' +
      '  --runs   interleaved runs of each variant, after one unmeasured round (default 7)\n' +
      '  --label  a name for this run, part of the result file name (default local)',
    () =>
      parseArgs({
        options: {
          runs: { type: 'string', default: '7' },
          label: { type: 'string', default: 'local' },
          help: { type: 'boolean', default: false },
        },
      }),
  );
  const runs = Number(values.runs);
  if (!Number.isInteger(runs) || runs < 1) {
    console.error(`--runs must be a positive integer, got "${values.runs}"`);
    process.exit(2);
  }

  // Measure the code as it is now.
  const built = await buildFunctions();
  const bundle = built.bundles.find((candidate) => candidate.name === FUNCTION)!;
  const warm = spawnSync(process.execPath, [...IMAGE_NODE_FLAGS, join(built.outdir, 'warm-cache.mjs')], { cwd: ROOT, encoding: 'utf8' });
  if (warm.status !== 0) throw new Error(`dist/warm-cache.mjs failed: ${warm.stdout}${warm.stderr}`);
  const entry = join(relative(ROOT, built.outdir), 'main.mjs');
  const cacheRoot = mkdtempSync(join(tmpdir(), 'opfn-bench-compile-cache-'));
  const variants: Variant[] = [
    { id: 'a', label: '(a) unbundled', args: ['functions/main.ts', FUNCTION] },
    { id: 'b', label: '(b) bundled, no cache', args: [entry, FUNCTION] },
    { id: 'c', label: '(c) image entry + code cache', args: [...IMAGE_NODE_FLAGS, entry, FUNCTION], cache: IMAGE_CACHE },
    { id: 'd', label: '(d) unbundled + compile cache', args: ['functions/main.ts', FUNCTION], cache: join(cacheRoot, 'unbundled') },
    { id: 'f', label: '(f) floor: bare node:http', args: ['-e', BARE_SERVER], floor: true },
  ];

  const cluster = await startTestCluster();
  const samples = new Map<string, Sample[]>(variants.map((variant) => [variant.id, []]));
  try {
    const commands = variants.map(
      (variant) =>
        `  ${variant.label.padEnd(31)} ${variant.cache === IMAGE_CACHE ? '(code cache of dist/warm-cache.mjs)' : variant.cache ? `NODE_COMPILE_CACHE=${variant.cache}` : 'NODE_DISABLE_COMPILE_CACHE=1'} ${process.execPath} ${variant.args.map((arg) => (arg.includes(' ') ? JSON.stringify(arg) : arg)).join(' ')}`,
    );
    console.log(
      `node ${process.version}, ${cpus().length} CPU(s) (${cpus()[0]?.model ?? 'unknown'}), load ${loadavg()
        .map((load) => load.toFixed(2))
        .join(' ')}`,
    );
    console.log(
      `bundle ${bundle.file}: ${(bundle.bytes / 1024).toFixed(0)} KiB, its code cache ${(statSync(join(built.outdir, `${FUNCTION}.code-cache`)).size / 1024).toFixed(0)} KiB`,
    );
    console.log(`each run: KUBECONFIG=<admin> PORT=<free> HOST=127.0.0.1, cwd ${ROOT}`);
    console.log(commands.join('\n'));

    // Round 0 is not measured: it fills the compile caches of (c) and (d).
    for (const variant of variants) await coldStart(cluster, variant, `cold-warmup-${variant.id}`);
    for (let round = 0; round < runs; round++) {
      const order = variants.map((_, index) => variants[(index + round) % variants.length]);
      for (const variant of order) samples.get(variant.id)!.push(await coldStart(cluster, variant, `cold-${variant.id}-${round}`));
      process.stderr.write(
        `round ${round + 1}/${runs}: ${order.map((variant) => `${variant.id} ${ms(samples.get(variant.id)!.at(-1)!.doneMs)} ms`).join(', ')}\n`,
      );
    }
  } finally {
    await cluster.stop();
    rmSync(cacheRoot, { recursive: true, force: true });
  }

  const baseline = median(samples.get('a')!.map((sample) => sample.doneMs));
  console.log(
    `\nspawn → first reconcile done (ms), ${runs} runs per variant, interleaved; ready = spawn → /health/readiness 200; startupMs = the process's own clock at listen`,
  );
  const floorReady = median(samples.get('f')!.map((sample) => sample.readyMs));
  const floorRss = median(samples.get('f')!.map((sample) => sample.idleRssKiB));
  const header = [
    'variant',
    'median',
    'min',
    'max',
    'ready med',
    'startupMs med',
    'reconcile med',
    'vs (a)',
    'ready / floor',
    'idle RSS MiB',
    'RSS / floor',
  ];
  const rows = variants.map((variant) => {
    const list = samples.get(variant.id)!;
    const done = list.map((sample) => sample.doneMs);
    const ready = median(list.map((sample) => sample.readyMs));
    const startup = list.every((sample) => sample.startupMs !== undefined) ? median(list.map((sample) => sample.startupMs!)) : undefined;
    const reconcile = median(list.map((sample) => sample.doneMs - sample.readyMs));
    const rss = median(list.map((sample) => sample.idleRssKiB));
    return [
      variant.label,
      ms(median(done)),
      ms(Math.min(...done)),
      ms(Math.max(...done)),
      ms(ready),
      ms(startup),
      ms(reconcile),
      `${(median(done) / baseline).toFixed(2)}×`,
      `${(ready / floorReady).toFixed(2)}×`,
      (rss / 1024).toFixed(1),
      `${(rss / floorRss).toFixed(2)}×`,
    ];
  });
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column].length)));
  const line = (cells: string[]) =>
    cells.map((cell, column) => (column === 0 ? cell.padEnd(widths[column]) : cell.padStart(widths[column]))).join('  ');
  console.log(line(header));
  for (const row of rows) console.log(line(row));
  console.log(
    `\nraw spawn → done (ms):\n${variants
      .map(
        (variant) =>
          `  ${variant.id}: ${samples
            .get(variant.id)!
            .map((sample) => ms(sample.doneMs))
            .join(' ')}`,
      )
      .join('\n')}`,
  );

  const production = samples.get('c')!;
  const summary = {
    floorReadyMs: floorReady,
    floorIdleRssKiB: floorRss,
    bundledCachedReadyMs: median(production.map((sample) => sample.readyMs)),
    bundledCachedDoneMs: median(production.map((sample) => sample.doneMs)),
    bundledCachedIdleRssKiB: median(production.map((sample) => sample.idleRssKiB)),
    readyVsFloor: median(production.map((sample) => sample.readyMs)) / floorReady,
    doneVsFloor: median(production.map((sample) => sample.doneMs)) / floorReady,
    idleRssVsFloor: median(production.map((sample) => sample.idleRssKiB)) / floorRss,
  };
  console.log(
    `\n(c) as the image runs it vs the bare node:http floor: ready ${summary.readyVsFloor.toFixed(2)}× (goal ≤ 2×), first reconcile done ${summary.doneVsFloor.toFixed(2)}×, idle RSS ${summary.idleRssVsFloor.toFixed(2)}× (goal ≤ 1.5×)`,
  );
  writeResults({
    benchmark: 'cold-start',
    label: values.label,
    date: new Date().toISOString(),
    command: `npm run bench:cold-start -- ${process.argv.slice(2).join(' ')}`.trim(),
    environment: {
      node: process.version,
      cpus: cpus().length,
      cpu: cpus()[0]?.model,
      loadavg: loadavg(),
      bundleBytes: bundle.bytes,
      idleMs: IDLE_MS,
    },
    summary,
    variants: Object.fromEntries(variants.map((variant) => [variant.id, { label: variant.label, samples: samples.get(variant.id) }])),
  });
}

await main();
