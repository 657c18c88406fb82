// ImmortalContainers converging through the local plane vs pooled direct writes doing the same
// work, side by side in one run against one real control plane:
//
//   plane   the user creates N ImmortalContainers (32 at a time); the source, broker, activator
//           and function (as `npm start` runs them: bundled) create each pod and write its
//           status. The function instance has converged `--warm` objects (default 200) of its
//           own first, so V8 runs its hot path compiled, as it runs the writer's below
//   fresh   the same with an instance that has converged one object: a function that has just
//           scaled from zero meets the burst with its hot path still interpreted and its API
//           connections still to open, costs the direct writer never pays again (bench:cold-start
//           measures the start itself). Printed beside the goal's ratio, not read against it
//   zero    the same with no instance running when the burst starts (scaled to zero): the
//           burst's first event makes the activator start one, which buffers the events meanwhile
//           and hands them to the instance once it answers its readiness probe. The burst meets
//           the process's start, its first connections and its JIT warm-up all at once
//   direct  one writer does that work itself, 32 objects at a time: create the ImmortalContainer,
//           create its pod (the function's own desiredPod: controller ownerReference), write the
//           status the function would write (nextStatus) with one merge patch
//
// Why the goal (issue 7: ≤ 1.5× direct writes) is read on `plane`: both sides of that ratio do
// the same work in the same state. The writer is a process V8 has compiled (the unmeasured
// round below) with its connections open, and so is the function; a fresh function also
// compiles and connects inside the measured window, which is start-up, not throughput. Both
// readings come from every repetition, side by side.
//
// Both sides use the same client (KubeClient, which reuses connections: one pool per identity)
// and detect completion the same way: a WATCH on the namespace sees every object converged
// (status names its pod, startTimes 1). Requests per object are counted by the API server itself
// (`apiserver_request_total`, bench/apiserver-metrics.ts) from before the user's first create to
// the moment the whole system is quiet again, so every reconcile the burst causes counts, the
// ones after convergence included. CPU seconds over the same window (bench/cpu-time.ts: this
// process, the function processes, kube-apiserver, etcd) are printed per object beside them: on
// a machine shared with other work they vary far less than the wall-clock ratio. The summary
// also gives the CPU ratio up to convergence, the window the convergence ratio measures (both
// sides are CPU-bound there on 2 cores, so the two ratios track each other), and what the
// neighbours took up to convergence: other processes' CPU and time stolen by the hypervisor,
// which say when a run's numbers moved for reasons outside the code. Between runs the
// objects are deleted and the plane stopped, so the plane never sees the direct side's objects.
// kube-controller-manager is not started (its garbage collector reads each new pod's owner, the
// same load for both sides); --controller-manager keeps it in.
//
// Usage: npm run bench -- [--n 200,500,2000] [--reps 1] [--label before] [--warm 200] [--no-fresh] [--no-zero] [--sources] [--controller-manager] [--cpu-prof DIR]
// Writes its results as JSON outside the repository (bench/harness.ts, resultsFolder).
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { Writable } from 'node:stream';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { pino, type Logger } from 'pino';
import type { FunctionStats } from '../eventing/activator/index.ts';
import { bundledFunctions } from '../build/index.ts';
import { EventPlane } from '../eventing/plane.ts';
import immortalContainer from '../functions/immortal-container/index.ts';
import { type FunctionDeclaration, Pod, KubeClient } from '../functions/runtime/index.ts';
import {
  desiredPod,
  ImmortalContainerKind,
  nextStatus,
  type ImmortalContainer,
  type PodObject,
} from '../functions/immortal-container/desired.ts';
import { startTestCluster, type TestCluster } from '../test/support/cluster.ts';
import { tempDir } from '../test/support/temp.ts';
import { requestDifference, scrapeRequestTotals } from './apiserver-metrics.ts';
import { ConvergenceWatch } from './convergence.ts';
import {
  benchFlags,
  clearNamespace,
  brokerTotal,
  CONCURRENCY,
  createNamespace,
  measure,
  planeStateDir,
  pooled,
  writeResults,
  type Measured,
} from './harness.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** Objects of the unmeasured round each side runs first (main), and the default of `--warm`. */
const WARM_UP_OBJECTS = 200;
type Side = 'plane' | 'fresh' | 'zero' | 'direct';
type PlaneSide = Exclude<Side, 'direct'>;
/** Objects the function converges before the burst, by side: none on `zero`, the process is not running. */
const warmObjectsOf = (side: PlaneSide, warmObjects: number): number => (side === 'plane' ? warmObjects : side === 'fresh' ? 1 : 0);
/** Repetition `rep`'s order of the sides: rotated each time, so that none always runs first or after the same one. */
const orderOf = (sides: Side[], rep: number): Side[] =>
  sides.map((_, i) => sides[(((i - rep) % sides.length) + sides.length) % sides.length]);
interface RunResult extends Measured {
  side: Side;
  n: number;
  /** objects with a pod count other than one, or startTimes other than 1, at the end */
  anomalies: string[];
  /** plane only: most function instances seen running at once (polled every 100 ms) */
  maxInstances?: number;
  /** plane only: events the source emitted */
  events?: number;
  /** plane only: delivery attempts the broker retried (a dead-lettered event is an anomaly) */
  retried?: number;
  /** plane only: the activator's own stats, when it offers them */
  activatorStats?: Record<string, FunctionStats>;
  /** zero only: from the burst's first create to the instance's readiness, and the CPU seconds the process had used by then */
  start?: Start;
}

/**
 * The zero side's start, in ms from the burst's first create: the first create was answered, the
 * source published the first event, it reached the activator (it scaled 0 -> 1), the function's process started (from /proc, to 10 ms), the
 * activator saw it ready, and the first object converged; and the CPU seconds the process had
 * used when it was ready.
 */
interface Start {
  /** the first create answered, and the source handed the burst's first event to the broker */
  createdMs?: number;
  publishedMs?: number;
  scaleMs?: number;
  spawnMs?: number;
  readyMs: number;
  firstConvergedMs?: number;
  cpuSeconds: number;
}

const newIc = (namespace: string, name: string): ImmortalContainer => ({
  apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
  kind: 'ImmortalContainer',
  metadata: { name, namespace },
  spec: { image: 'nginx' },
});

/** Deletes every ImmortalContainer and pod of `namespace` (no garbage collector needed). */
/** Exactly one pod and startTimes 1 per object, or the names that differ. */
async function anomalies(kube: KubeClient, namespace: string, n: number): Promise<string[]> {
  const ics = (await kube.list<ImmortalContainer>(ImmortalContainerKind, { namespace })).items;
  const pods = (await kube.list<PodObject>(Pod, { namespace })).items;
  const podsByOwner = new Map<string, number>();
  for (const pod of pods) {
    const owner = pod.metadata.ownerReferences?.find((reference) => reference.controller)?.name ?? '(none)';
    podsByOwner.set(owner, (podsByOwner.get(owner) ?? 0) + 1);
  }
  const found = ics
    .filter((ic) => podsByOwner.get(ic.metadata.name!) !== 1 || ic.status?.startTimes !== 1)
    .map((ic) => `${ic.metadata.name}: pods ${podsByOwner.get(ic.metadata.name!) ?? 0}, startTimes ${ic.status?.startTimes}`);
  if (ics.length !== n) found.unshift(`${ics.length} objects instead of ${n}`);
  if (pods.length !== n) found.unshift(`${pods.length} pods instead of ${n}`);
  return found;
}

/** One measured run of `work` (bench/harness.ts); a startTimes above 1 is a double count, never expected. */
async function measureImmortals(
  cluster: TestCluster,
  watcher: KubeClient,
  namespace: string,
  n: number,
  work: () => Promise<void>,
): Promise<Measured & { firstConvergedAt: number }> {
  const watch = new ConvergenceWatch(watcher, namespace);
  const measured = await measure(cluster, watch, n, work);
  if (watch.overCounted.size) throw new Error(`startTimes above 1 seen on ${[...watch.overCounted].slice(0, 5).join(', ')}`);
  return { ...measured, firstConvergedAt: watch.firstAt };
}

/**
 * Of process `pid` (/proc/<pid>/stat, in clock ticks of 10 ms): the CPU seconds it has used (utime
 * + stime), and when it started, as a performance.now(); NaNs where there is no /proc.
 */
function processTimes(pid: number): { cpuSeconds: number; startedAt: number } {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8')
      .replace(/^.*\) /s, '')
      .split(' ');
    const uptimeSeconds = Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]);
    return {
      cpuSeconds: (Number(fields[11]) + Number(fields[12])) / 100,
      startedAt: performance.now() - (uptimeSeconds - Number(fields[19]) / 100) * 1000,
    };
  } catch {
    return { cpuSeconds: NaN, startedAt: NaN };
  }
}

/**
 * A logger for the plane that keeps only the moments of a start (the activator logs them at
 * info): when the first event made it scale from zero, and when the instance reported ready,
 * with when its process started and the CPU it had used by then: what the start cost inside the burst.
 */
function readinessLog(): {
  log: Logger;
  ready: () => { scaledAt?: number; spawnedAt: number; at: number; cpuSeconds: number } | undefined;
} {
  let scaledAt: number | undefined;
  let ready: { at: number; spawnedAt: number; cpuSeconds: number } | undefined;
  const sink = new Writable({
    write(chunk, _encoding, done) {
      const at = performance.now();
      for (const line of String(chunk).split('\n')) {
        if (scaledAt === undefined && line.includes(' 0 -> 1: ')) scaledAt = at;
        if (!ready && line.includes('function instance') && line.includes(' ready"')) {
          const { pid } = JSON.parse(line) as { pid: number };
          const { cpuSeconds, startedAt } = processTimes(pid);
          ready = { at, spawnedAt: startedAt, cpuSeconds };
        }
      }
      done();
    },
  });
  return { log: pino({ level: 'info' }, sink), ready: () => (ready ? { scaledAt, ...ready } : undefined) };
}

/** The function's command under `node --cpu-prof`, its profile written to `dir` when it exits. */
function profiled(dir: string, command?: (declaration: FunctionDeclaration) => { command: string; args: string[] }) {
  return (declaration: FunctionDeclaration) => {
    const { args } = command?.(declaration) ?? { args: [join(ROOT, 'functions/main.ts'), declaration.name] };
    return { command: process.execPath, args: ['--cpu-prof', '--cpu-prof-dir', dir, ...args] };
  };
}

async function runPlane(
  cluster: TestCluster,
  options: {
    side: PlaneSide;
    n: number;
    round: string;
    warmObjects: number;
    bundled?: Awaited<ReturnType<typeof bundledFunctions>>;
    writer: KubeClient;
    watcher: KubeClient;
    profileDir?: string;
  },
): Promise<RunResult> {
  const { side, n, round, warmObjects, writer, watcher } = options;
  const namespace = `${side}-${n}-${round}`;
  const warmNamespace = `warm-${side}-${n}-${round}`;
  await createNamespace(cluster, namespace);
  await createNamespace(cluster, warmNamespace);
  const state = planeStateDir();
  const readiness = side === 'zero' ? readinessLog() : undefined;
  const plane = new EventPlane({
    functions: [immortalContainer],
    // The source has its own client (its own connections), as in its own process.
    kube: KubeClient.fromFile(cluster.cp.kubeconfigPath),
    kubeconfigPath: cluster.cp.kubeconfigPath,
    log: readiness?.log ?? pino({ level: 'silent' }),
    stateDir: state.dir,
    idleTimeoutMs: 60_000,
    resyncIntervalMs: 0,
    // A line per pod created at npm start's `info` would flood the bench's output. Neither the
    // level nor these admin credentials in place of the function's ServiceAccount change
    // convergence (docs/benchmarks.md).
    env: { LOG_LEVEL: 'warn' },
    command: options.profileDir ? profiled(options.profileDir, options.bundled?.command) : options.bundled?.command,
  });
  await plane.start();
  // When the source hands the burst's first event to the broker (the zero side's timeline).
  let publishedAt: number | undefined;
  if (readiness) {
    const publish = plane.broker.publish.bind(plane.broker);
    plane.broker.publish = (event) => {
      if (publishedAt === undefined && (event.data as { metadata?: { namespace?: string } })?.metadata?.namespace === namespace)
        publishedAt = performance.now();
      return publish(event);
    };
  }
  let maxInstances = 0;
  const poll = setInterval(() => (maxInstances = Math.max(maxInstances, plane.activator.instances(immortalContainer.name))), 100);
  try {
    // The function has started and converged `warmObjects` objects: with a round of them, V8 has
    // compiled its hot path and its connections to the API server are open, as the writer's are;
    // with one (the fresh side), the burst also pays for both.
    // With none (the zero side), no instance runs when the burst starts.
    if (warmObjects > 0) {
      const warm = new ConvergenceWatch(watcher, warmNamespace);
      await pooled(warmObjects, (i) => writer.create(ImmortalContainerKind, newIc(warmNamespace, `warm-${i}`)));
      await warm.until(warmObjects, 120_000);
      await warm.stop();
    } else if (plane.activator.instances(immortalContainer.name) !== 0) {
      throw new Error('the zero side found an instance running before its burst');
    }
    maxInstances = 0;
    const emittedBefore = plane.source.stats().emitted;
    let burstStarted = 0;
    let createdAt: number | undefined;
    const { firstConvergedAt, ...measured } = await measureImmortals(cluster, watcher, namespace, n, () =>
      pooled(n, async (i) => {
        if (i === 0) burstStarted = performance.now();
        await writer.create(ImmortalContainerKind, newIc(namespace, `ic-${i}`));
        createdAt ??= performance.now();
      }),
    );
    const ready = readiness?.ready();
    const since = (at: number | undefined) => (at === undefined || Number.isNaN(at) ? undefined : at - burstStarted);
    // The bench runs without resyncs, so an event the broker gave up on is an object that never
    // converges: say so rather than only time out.
    const deadLetters = brokerTotal(plane, 'deadLettered');
    const found = await anomalies(writer, namespace, n);
    if (deadLetters) found.unshift(`${deadLetters} events dead-lettered (${plane.broker.deadLetterFile})`);
    return {
      side,
      n,
      ...measured,
      anomalies: found,
      maxInstances,
      events: plane.source.stats().emitted - emittedBefore,
      retried: brokerTotal(plane, 'retried'),
      activatorStats: plane.activator.stats(),
      ...(ready
        ? {
            start: {
              createdMs: since(createdAt),
              publishedMs: since(publishedAt),
              scaleMs: since(ready.scaledAt),
              spawnMs: since(ready.spawnedAt),
              readyMs: ready.at - burstStarted,
              firstConvergedMs: since(firstConvergedAt),
              cpuSeconds: ready.cpuSeconds,
            },
          }
        : {}),
    };
  } catch (error) {
    (error as Error).message += ` (the plane's dead letters, if any: ${plane.broker.deadLetterFile})`;
    throw error;
  } finally {
    clearInterval(poll);
    await plane.stop();
    state.release(plane);
    await clearNamespace(cluster, namespace, [ImmortalContainerKind, Pod]);
    await clearNamespace(cluster, warmNamespace, [ImmortalContainerKind, Pod]);
  }
}

async function runDirect(
  cluster: TestCluster,
  options: { n: number; round: string; writer: KubeClient; watcher: KubeClient },
): Promise<RunResult> {
  const { n, round, writer, watcher } = options;
  const namespace = `direct-${n}-${round}`;
  await createNamespace(cluster, namespace);
  try {
    const measured = await measureImmortals(cluster, watcher, namespace, n, () =>
      pooled(n, async (i) => {
        const owner = await writer.create<ImmortalContainer>(ImmortalContainerKind, newIc(namespace, `ic-${i}`));
        const pod = await writer.create<PodObject>(Pod, desiredPod(owner));
        await writer.mergePatch(
          ImmortalContainerKind,
          { namespace, name: owner.metadata.name! },
          { status: nextStatus(owner, owner, pod) },
          'status',
        );
      }),
    );
    return { side: 'direct', n, ...measured, anomalies: await anomalies(writer, namespace, n) };
  } finally {
    await clearNamespace(cluster, namespace, [ImmortalContainerKind, Pod]);
  }
}

/** When a zero side's instance became ready and what its start cost, as a suffix; nothing for other sides. */
const startNote = (start: RunResult['start']) => {
  if (!start) return '';
  const at = (ms: number | undefined) => (ms === undefined ? '?' : (ms / 1000).toFixed(2));
  return `, instance ready ${at(start.readyMs)} s after the first create (its start: ${start.cpuSeconds.toFixed(2)} s CPU; first create answered ${at(start.createdMs)} s, first event published ${at(start.publishedMs)} s, scaled from zero ${at(start.scaleMs)} s, process started ${at(start.spawnMs)} s, first object converged ${at(start.firstConvergedMs)} s)`;
};

/** The first anomalies a run left, as a suffix of its progress line; nothing when there are none. */
const anomalyNote = (result: RunResult) => (result.anomalies.length ? `, ANOMALIES ${result.anomalies.slice(0, 3).join('; ')}` : '');

function printTable(results: RunResult[]): void {
  const header = [
    'N',
    'side',
    'converged s',
    'quiet s',
    'req/object',
    'CPU ms/object (bench+fn+apiserver+etcd)',
    'neighbours s (others/steal)',
    'requests by verb',
    'instances',
    'anomalies',
  ];
  // Up to convergence: CPU of every other process on the machine and time stolen by the hypervisor.
  const neighbours = (cpu: RunResult['cpuToConvergence']) =>
    cpu?.others === undefined ? '-' : `${cpu.others.toFixed(2)}/${(cpu.steal ?? 0).toFixed(2)}`;
  const perObject = (seconds: number, n: number) => ((seconds * 1000) / n).toFixed(1);
  const rows = results.map((r) => [
    String(r.n),
    r.side,
    (r.convergedMs / 1000).toFixed(2),
    (r.quietMs / 1000).toFixed(2),
    r.requestsPerObject.toFixed(2),
    r.cpu
      ? `${perObject(r.cpu.total, r.n)} (${[r.cpu.bench, r.cpu.functions, r.cpu.apiServer, r.cpu.etcd].map((s) => perObject(s, r.n)).join('+')})`
      : '-',
    neighbours(r.cpuToConvergence),
    Object.entries(r.requests.byVerb)
      .sort()
      .map(([verb, count]) => `${verb} ${count}`)
      .join(', '),
    r.maxInstances === undefined ? '-' : String(r.maxInstances),
    String(r.anomalies.length),
  ]);
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column].length)));
  // Numbers align right; the one column of text aligns left.
  const textColumn = header.indexOf('requests by verb');
  const line = (cells: string[]) =>
    cells.map((cell, column) => (column === textColumn ? cell.padEnd(widths[column]) : cell.padStart(widths[column]))).join('  ');
  console.log(line(header));
  for (const row of rows) console.log(line(row));
}

async function main(): Promise<void> {
  const { values } = benchFlags(
    'npm run bench -- [--n 200,500,2000] [--reps 1] [--label name] [--warm 200] [--no-fresh] [--no-zero] [--sources] [--controller-manager] [--cpu-prof DIR]\n' +
      '  --n        object counts to run, side by side with direct writes (default 200,500)\n' +
      '  --reps     repetitions of each count (default 1)\n' +
      '  --label    a name for this run, part of the result file name (default local)\n' +
      "  --warm     objects the function converges before each measured plane burst (default 200: V8 has compiled its hot path, as the writer's)\n" +
      "  --no-fresh leave out the fresh side (a function that has converged one object: its JIT warm-up inside the burst), printed beside the goal's ratio\n" +
      '  --no-zero  leave out the zero side (no instance running when the burst starts: the activator starts one on its first event)\n' +
      '  --sources  run the function from its TypeScript sources instead of the bundle\n' +
      '  --controller-manager  also run kube-controller-manager (garbage collector) during the runs\n' +
      "  --cpu-prof DIR  write the function processes' CPU profiles there (run the bench itself under node --cpu-prof for the plane's)",
    () =>
      parseArgs({
        options: {
          n: { type: 'string', default: '200,500' },
          reps: { type: 'string', default: '1' },
          label: { type: 'string', default: 'local' },
          warm: { type: 'string', default: String(WARM_UP_OBJECTS) },
          fresh: { type: 'boolean', default: true },
          zero: { type: 'boolean', default: true },
          sources: { type: 'boolean', default: false },
          'controller-manager': { type: 'boolean', default: false },
          'cpu-prof': { type: 'string' },
          help: { type: 'boolean', default: false },
        },
        allowNegative: true,
      }),
  );
  const sizes = values.n.split(',').map(Number);
  const reps = Number(values.reps);
  const warmObjects = Number(values.warm);
  if (
    sizes.some((n) => !Number.isInteger(n) || n < 1) ||
    !Number.isInteger(reps) ||
    reps < 1 ||
    !Number.isInteger(warmObjects) ||
    warmObjects < 1
  ) {
    console.error(
      `--n takes positive integers separated by commas (got "${values.n}"), --reps and --warm a positive integer (got "${values.reps}", "${values.warm}")`,
    );
    process.exit(2);
  }
  /** The sides every repetition runs (fresh and zero unless left out). */
  const sides: Side[] = (['plane', 'fresh', 'zero', 'direct'] as const).filter((side) => values[side as 'fresh' | 'zero'] !== false);
  const bundled = values.sources ? undefined : await bundledFunctions(tempDir('opfn-bench-dist-'));
  const cluster = await startTestCluster({ controllerManager: values['controller-manager'] });
  const writer = KubeClient.fromFile(cluster.cp.kubeconfigPath);
  const watcher = KubeClient.fromFile(cluster.cp.kubeconfigPath);
  const results: RunResult[] = [];
  const background: number[] = [];
  try {
    // One round of each side that is not measured, as JMH runs warm-up iterations. It compiles
    // this process's own code (the plane's source, broker and activator, the writer, the watch),
    // which `npm start` keeps warm for as long as it runs, and its function process writes the
    // bundle's V8 code cache when it exits (dist/main.mjs), which the image ships ready-made;
    // without it the first measured plane burst alone would pay for both. Every measured plane
    // burst still starts a fresh function process.
    process.stderr.write(`warm-up round (not measured): ${WARM_UP_OBJECTS} objects through the plane, then written directly\n`);
    for (const warmUp of [
      await runPlane(cluster, { side: 'fresh', n: WARM_UP_OBJECTS, round: 'warm-up', warmObjects: 1, bundled, writer, watcher }),
      await runDirect(cluster, { n: WARM_UP_OBJECTS, round: 'warm-up', writer, watcher }),
    ]) {
      if (warmUp.anomalies.length) process.stderr.write(`warm-up round ${warmUp.side}${anomalyNote(warmUp)}\n`);
    }
    for (const n of sizes) {
      for (let rep = 0; rep < reps; rep++) {
        // What the API server does on its own, per second, counted over 3 idle seconds.
        const idleBefore = await scrapeRequestTotals(cluster.cp);
        await sleep(3000);
        background.push(requestDifference(idleBefore, await scrapeRequestTotals(cluster.cp)).total / 3);
        for (const side of orderOf(sides, rep)) {
          const result =
            side === 'direct'
              ? await runDirect(cluster, { n, round: String(rep), writer, watcher })
              : await runPlane(cluster, {
                  side,
                  n,
                  round: String(rep),
                  warmObjects: warmObjectsOf(side, warmObjects),
                  bundled,
                  writer,
                  watcher,
                  profileDir: values['cpu-prof'],
                });
          results.push(result);
          process.stderr.write(
            `N=${n} rep ${rep + 1}/${reps} ${side}: converged ${(result.convergedMs / 1000).toFixed(2)} s, ${result.requestsPerObject.toFixed(2)} requests/object${result.maxInstances ? `, up to ${result.maxInstances} instance(s)` : ''}${startNote(result.start)}${anomalyNote(result)}\n`,
          );
        }
      }
    }
  } finally {
    await cluster.stop();
  }

  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const environment = {
    node: process.version,
    cpus: cpus().length,
    cpu: cpus()[0]?.model,
    loadavg: loadavg(),
    functions: values.sources ? 'TypeScript sources' : 'esbuild bundles + code cache',
    controllerManager: values['controller-manager'],
    concurrency: CONCURRENCY,
    warmUpRoundObjects: WARM_UP_OBJECTS,
    warmObjects,
    fresh: values.fresh,
    zero: values.zero,
    backgroundRequestsPerSecond: median(background),
  };
  console.log(
    `\nImmortalContainers: plane vs pooled direct writes (${CONCURRENCY} at a time, one KubeClient pool), completion by watch; requests from apiserver_request_total over the whole run (user's creates included; background ≈ ${environment.backgroundRequestsPerSecond.toFixed(1)}/s)`,
  );
  console.log(
    `node ${environment.node}, ${environment.cpus} CPU(s), functions from ${environment.functions}, an unmeasured round of ${WARM_UP_OBJECTS} objects per side first; each plane burst on a new function process that first converged ${warmObjects} object(s)${values.fresh ? ', each fresh burst on one that converged 1' : ''}${values.zero ? ', each zero burst starting the function (no instance running)' : ''}; kube-controller-manager ${environment.controllerManager ? 'running' : 'not running'}\n`,
  );
  printTable(results);
  console.log('\nratios to direct writes (medians of the repetitions); the goal (≤ 1.5×) is read on plane:');
  const summary = sizes.map((n) => {
    const runsOf = (side: Side) => results.filter((r) => r.n === n && r.side === side);
    const of = (side: Side, pick: (r: RunResult) => number) => median(runsOf(side).map(pick));
    const direct = runsOf('direct');
    /**
     * One plane side against direct writes. Each repetition's sides run back to back, so their
     * ratio shows how far one run can stray on this machine; the medians are what the goal is read against.
     */
    const against = (side: PlaneSide) => ({
      seconds: of(side, (r) => r.convergedMs) / 1000,
      convergenceRatio: of(side, (r) => r.convergedMs) / of('direct', (r) => r.convergedMs),
      cpuRatio: of(side, (r) => r.cpu?.total ?? NaN) / of('direct', (r) => r.cpu?.total ?? NaN),
      cpuToConvergenceRatio: of(side, (r) => r.cpuToConvergence?.total ?? NaN) / of('direct', (r) => r.cpuToConvergence?.total ?? NaN),
      requestsPerObject: of(side, (r) => r.requestsPerObject),
      functionCpuMsPerObject: (of(side, (r) => r.cpuToConvergence?.functions ?? NaN) * 1000) / n,
      maxInstances: of(side, (r) => r.maxInstances ?? 0),
      repetitionRatios: runsOf(side).map((run, rep) => run.convergedMs / direct[rep].convergedMs),
    });
    const plane = against('plane');
    const fresh = values.fresh ? against('fresh') : undefined;
    const zero = values.zero ? against('zero') : undefined;
    const row = {
      n,
      planeSeconds: plane.seconds,
      directSeconds: of('direct', (r) => r.convergedMs) / 1000,
      convergenceRatio: plane.convergenceRatio,
      cpuRatio: plane.cpuRatio,
      cpuToConvergenceRatio: plane.cpuToConvergenceRatio,
      planeRequestsPerObject: plane.requestsPerObject,
      directRequestsPerObject: of('direct', (r) => r.requestsPerObject),
      maxInstances: plane.maxInstances,
      repetitionRatios: plane.repetitionRatios,
      ...(fresh ? { fresh } : {}),
      ...(zero ? { zero: { ...zero, start: runsOf('zero').map((r) => r.start) } } : {}),
    };
    const line = (side: PlaneSide, ratios: ReturnType<typeof against>) =>
      `  N=${String(n).padEnd(5)} ${side.padEnd(5)} convergence ${ratios.convergenceRatio.toFixed(2)}× (${ratios.seconds.toFixed(2)} s vs ${row.directSeconds.toFixed(2)} s${reps > 1 ? `; by repetition ${ratios.repetitionRatios.map((ratio) => `${ratio.toFixed(2)}×`).join(' ')}` : ''})   CPU ${Number.isNaN(ratios.cpuRatio) ? '-' : `${ratios.cpuToConvergenceRatio.toFixed(2)}× to convergence, ${ratios.cpuRatio.toFixed(2)}× until quiet; function ${ratios.functionCpuMsPerObject.toFixed(2)} ms/object`}   requests/object ${ratios.requestsPerObject.toFixed(2)} vs ${row.directRequestsPerObject.toFixed(2)}   function instances used: ${ratios.maxInstances}${ratios.maxInstances > 1 ? ' (scaled out)' : ''}`;
    /** The activator's counters of the side's first repetition: how many events went through it and how many straight to the instance. */
    const routed = (side: PlaneSide) => {
      const activator = results.find((r) => r.n === n && r.side === side)?.activatorStats?.[immortalContainer.name];
      return activator
        ? `; activator: ${Object.entries(activator)
            .filter(([key]) => key !== 'instances')
            .map(([key, value]) => `${key} ${value}`)
            .join(', ')}`
        : '';
    };
    console.log(line('plane', plane) + routed('plane'));
    if (fresh) console.log(line('fresh', fresh));
    const starts = runsOf('zero').flatMap((r) => (r.start ? [r.start] : []));
    const medianOf = (pick: (start: Start) => number | undefined) => {
      const known = starts.map(pick).filter((ms): ms is number => ms !== undefined);
      return known.length ? median(known) : undefined;
    };
    const started: Start | undefined = starts.length
      ? {
          createdMs: medianOf((start) => start.createdMs),
          publishedMs: medianOf((start) => start.publishedMs),
          scaleMs: medianOf((start) => start.scaleMs),
          spawnMs: medianOf((start) => start.spawnMs),
          readyMs: median(starts.map((start) => start.readyMs)),
          firstConvergedMs: medianOf((start) => start.firstConvergedMs),
          cpuSeconds: median(starts.map((start) => start.cpuSeconds)),
        }
      : undefined;
    if (zero) console.log(line('zero', zero) + startNote(started) + routed('zero'));
    return row;
  });
  console.log('\nrequests per object by verb and resource (first repetition of each N):');
  for (const n of sizes) {
    for (const side of sides) {
      const r = results.find((result) => result.n === n && result.side === side)!;
      const shown = Object.entries(r.requests.byResource)
        .filter(([, count]) => count / n >= 0.005)
        .sort();
      const failed = Object.entries(r.requests.failed).sort();
      console.log(
        `  N=${n} ${side.padEnd(6)} ${shown.map(([key, count]) => `${key} ${(count / n).toFixed(2)}`).join(', ')}${failed.length ? `; not 2xx: ${failed.map(([key, count]) => `${key} ×${count}`).join(', ')}` : ''}`,
      );
    }
  }
  console.log("(below 0.005 per object not shown: the API server's own controllers)");

  console.log();
  writeResults({
    benchmark: 'plane',
    label: values.label,
    date: new Date().toISOString(),
    command: `npm run bench -- ${process.argv.slice(2).join(' ')}`.trim(),
    environment,
    summary,
    runs: results,
  });
}

try {
  await main();
} catch (error) {
  // Bad flags and a missing control plane are the user's to fix: one line, not a stack trace.
  console.error(`bench: ${(error as Error).message}`);
  process.exit(1);
}
