// What the benchmarks share: their flags, bounded-concurrency writes, namespaces, a cluster filled
// with unrelated objects, a plane's state folder, one measured run (convergence seen by a watch,
// API requests counted by the API server from the first write until it is quiet again), and
// where a run's results go.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import type { EventPlane } from '../eventing/plane.ts';
import { collectionPath, forEachLimited, type KubeClient, type KubeObject, type ResourceKind } from '../functions/runtime/index.ts';
import type { TestCluster } from '../test/support/cluster.ts';
import { tempFolder } from '../test/support/temp.ts';
import { awaitQuiet, requestDifference, type RequestCounts } from './apiserver-metrics.ts';
import type { ConvergenceWatch } from './convergence.ts';
import { cpuBetween, cpuSnapshot, type CpuSeconds } from './cpu-time.ts';

/**
 * A bench script's flags, parsed before anything starts: `--help` prints `usage` and exits 0; an
 * unknown or malformed flag is one line on stderr (`bench: Unknown option '--x'; --help lists
 * the flags`), exit 2, not a stack trace. `parse` is the script's `parseArgs` call, which must
 * declare `help`.
 */
export function benchFlags<T extends { values: { help?: boolean } }>(usage: string, parse: () => T): T {
  let parsed: T;
  try {
    parsed = parse();
  } catch (error) {
    if (!String((error as { code?: unknown }).code).startsWith('ERR_PARSE_ARGS_')) throw error;
    console.error(`bench: ${(error as Error).message}; --help lists the flags`);
    process.exit(2);
  }
  if (parsed.values.help) {
    console.log(usage);
    process.exit(0);
  }
  return parsed;
}

/** Writes in flight at once on the direct side, and the user's creates on the plane side. */
export const CONCURRENCY = 32;

/** Runs `work(i)` for i < n with at most CONCURRENCY at once. */
export function pooled(n: number, work: (i: number) => Promise<unknown>): Promise<void> {
  return forEachLimited(
    Array.from({ length: n }, (_, i) => i),
    CONCURRENCY,
    async (i) => void (await work(i)),
  );
}

/** The middle value; of an even count, the mean of the two middle ones. */
export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

/**
 * A folder for a benchmark plane's state (its dead-letter file), removed however the process ends.
 * `release(plane)` once the plane has stopped: the folder goes at once, unless the broker
 * dead-lettered events, which are kept for reading and the file named on stderr.
 */
export function planeStateDir(prefix = 'opfn-bench-'): { dir: string; release(plane: EventPlane): void } {
  const folder = tempFolder(prefix);
  return {
    dir: folder.dir,
    release(plane) {
      const count = brokerTotal(plane, 'deadLettered');
      if (count === 0) return folder.remove();
      folder.keep();
      process.stderr.write(`${count} dead-lettered events kept in ${plane.broker.deadLetterFile}\n`);
    },
  };
}

/** One of the broker's per-trigger counts (events given up on, retries), summed over all its triggers. */
export function brokerTotal(plane: EventPlane, count: 'deadLettered' | 'retried'): number {
  return Object.values(plane.stats().broker).reduce((sum, trigger) => sum + trigger[count], 0);
}

export async function createNamespace(cluster: TestCluster, name: string): Promise<void> {
  const answer = await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name } });
  if (answer.status !== 201) throw new Error(`creating namespace ${name}: ${answer.status}`);
}

/**
 * Fills the cluster with `count` objects no operator of the bench concerns (`make(namespace,
 * name)` builds each), spread over `namespaces` namespaces of their own (`unrelated-<i>`): the
 * cluster-size runs, where a cost that grows with the cluster rather than with the work shows.
 * Progress goes to stderr, every 1000 objects.
 */
export async function fillCluster(
  cluster: TestCluster,
  kube: KubeClient,
  kind: ResourceKind,
  count: number,
  make: (namespace: string, name: string) => KubeObject,
  namespaces = 10,
): Promise<void> {
  if (count <= 0) return;
  const names = Array.from({ length: Math.min(namespaces, count) }, (_, i) => `unrelated-${i}`);
  for (const name of names) await createNamespace(cluster, name);
  let created = 0;
  await pooled(count, async (i) => {
    await kube.create(kind, make(names[i % names.length]!, `unrelated-${i}`));
    if (++created % 1000 === 0 || created === count) process.stderr.write(`  unrelated ${kind.kind}s: ${created}/${count}\n`);
  });
}

/**
 * Deletes every object of `kinds` in `namespace` (one DELETE of each collection): what a side
 * leaves behind, so that the next side's functions never see it. No kube-controller-manager runs
 * in most benches, so deleting the namespace would not.
 */
export async function clearNamespace(cluster: TestCluster, namespace: string, kinds: ResourceKind[]): Promise<void> {
  for (const kind of kinds) {
    const answer = await cluster.cp.request('DELETE', collectionPath(kind, namespace));
    if (answer.status !== 200) throw new Error(`deleting ${kind.plural} in ${namespace}: ${answer.status}`);
  }
}

export interface Measured {
  /** first write sent → the watch saw the last object converge */
  convergedMs: number;
  /** first write sent → the API server counted no new request for 1.5 s (minus those 1.5 s) */
  quietMs: number;
  requests: RequestCounts;
  requestsPerObject: number;
  /** CPU seconds from the first write until quiet: this process, function processes, kube-apiserver, etcd (Linux only) */
  cpu?: CpuSeconds;
  /**
   * The same from the first write until convergence: the window the convergence time measures.
   * The window until quiet adds the same idle seconds to both sides of a ratio, which pulls it
   * towards 1.
   */
  cpuToConvergence?: CpuSeconds;
}

/** One measured run of `work` producing `n` objects that `watch` sees converge. */
export async function measure(cluster: TestCluster, watch: ConvergenceWatch, n: number, work: () => Promise<void>): Promise<Measured> {
  await sleep(300); // the watch is established (it sends nothing until the first object anyway)
  const { totals: before } = await awaitQuiet(cluster.cp, { quietMs: 1000 });
  const cpuBefore = cpuSnapshot(cluster.cp.dir);
  const started = performance.now();
  const working = work();
  await watch.until(n, Math.max(120_000, n * 200));
  const cpuToConvergence = cpuBetween(cpuBefore, cpuSnapshot(cluster.cp.dir));
  const convergedMs = watch.lastAt - started;
  await working;
  const { totals: after, lastChangeAt } = await awaitQuiet(cluster.cp);
  const cpu = cpuBetween(cpuBefore, cpuSnapshot(cluster.cp.dir));
  await watch.stop();
  const requests = requestDifference(before, after);
  return {
    convergedMs,
    quietMs: Math.max(convergedMs, lastChangeAt - started),
    requests,
    requestsPerObject: requests.total / n,
    cpu,
    cpuToConvergence,
  };
}

/**
 * Where runs write their results: `$OPFN_BENCH_RESULTS`, else the user's cache folder. Never the
 * repository: a run is one machine's moment, and only a benchmark's baseline is committed.
 */
export function resultsFolder(): string {
  const cache = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
  return resolve(process.env.OPFN_BENCH_RESULTS || join(cache, 'operator-functions', 'bench-results'));
}

const BASELINES = join(dirname(fileURLToPath(import.meta.url)), 'baselines');

/** What every result file holds; `compared` names its field of figures, compared with the baseline's. */
export interface BenchResult {
  benchmark: string;
  label: string;
  date: string;
  command: string;
  [field: string]: unknown;
}

/**
 * Writes a run's results as `<benchmark>-<label>-<date>.json` in resultsFolder() and prints the
 * path, then each figure of `result[compared]` beside the same figure of the committed baseline,
 * bench/baselines/<benchmark>.json, and their ratio. Returns the file written.
 */
export function writeResults(result: BenchResult, compared = 'summary'): string {
  const folder = resultsFolder();
  mkdirSync(folder, { recursive: true });
  const stamp = result.date.replace(/[:]/g, '').replace(/\..*/, 'Z');
  const file = join(folder, `${result.benchmark}-${result.label}-${stamp}.json`);
  writeFileSync(file, JSON.stringify(result, null, 2) + '\n');
  console.log(`results: ${file}`);
  const baselineFile = join(BASELINES, `${result.benchmark}.json`);
  if (existsSync(baselineFile))
    printComparison(JSON.parse(readFileSync(baselineFile, 'utf8')) as BenchResult, result, compared, relative(process.cwd(), baselineFile));
  return file;
}

function printComparison(baseline: BenchResult, run: BenchResult, compared: string, baselineFile: string): void {
  const before = figures(baseline[compared]);
  const now = figures(run[compared]);
  const shared = [...now.keys()].filter((key) => before.has(key));
  console.log(`\nagainst the baseline ${baselineFile} (${baseline.date.slice(0, 10)}: ${baseline.command}):`);
  if (shared.length === 0) return console.log('  no figure in common (other sizes or options)');
  const width = Math.max(...shared.map((key) => key.length));
  const number = (value: number) => (Number.isInteger(value) ? String(value) : value.toPrecision(4));
  console.log(`  ${'figure'.padEnd(width)}  ${'baseline'.padStart(10)}  ${'this run'.padStart(10)}  this / baseline`);
  for (const key of shared) {
    const [old, current] = [before.get(key)!, now.get(key)!];
    const ratio = old === 0 ? (current === 0 ? '=' : '-') : `${(current / old).toFixed(2)}×`;
    console.log(`  ${key.padEnd(width)}  ${number(old).padStart(10)}  ${number(current).padStart(10)}  ${ratio}`);
  }
}

/**
 * The numbers of a result's summary by path (`N=500.convergenceRatio`, `create.total`). A row of a
 * list is named by its `n` or its `role` (without a pid), so runs of other sizes line up; lists of
 * bare numbers (the repetitions) are left out.
 */
function figures(value: unknown, path = '', found = new Map<string, number>()): Map<string, number> {
  const at = (key: string) => (path ? `${path}.${key}` : key);
  if (typeof value === 'number' && Number.isFinite(value)) found.set(path, value);
  else if (Array.isArray(value)) {
    value.forEach((row: unknown, index) => {
      if (typeof row !== 'object' || row === null) return;
      const { n, role } = row as { n?: unknown; role?: unknown };
      figures(row, at(n !== undefined ? `N=${n}` : typeof role === 'string' ? role.replace(/ \[\d+\]$/, '') : String(index)), found);
    });
  } else if (typeof value === 'object' && value !== null) {
    for (const [key, field] of Object.entries(value)) if (key !== 'n' && key !== 'role') figures(field, at(key), found);
  }
  return found;
}
