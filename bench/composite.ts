// The seed's Metacontroller ImmortalContainer (its CompositeController manifest unchanged, its
// sync hook served on loopback) converging through the local plane, next to direct writes of the
// same objects, side by side in one run against one real control plane:
//
//   plane   as `npm start` runs it on its own control plane: the generated objects in the API
//           server, the composite function bundled and warm, the controller's ApiServerSources
//           written by the function and run by the plane; the user creates N parents (32 at a
//           time); the function syncs each through the hook on loopback, creates its pod, writes
//           its status (and syncs again when the pod's event arrives, as Metacontroller does)
//   direct  one writer does the end state itself, 32 parents at a time: create the parent,
//           create the pod the hook answers (controller ownerReference, controller-uid label,
//           last-applied annotation), write the final status (the pod named, observedGeneration)
//
// Each side first converges --warm parents (default 200) that are not measured, as bench:plane's
// warm-up round: the function and the writer meet the burst with their hot paths compiled. The
// two sides run --reps times (default 3), in turn first; the ratios are read on the medians.
//
// Converged: status.currentPod names the pod and observedGeneration is the parent's generation,
// seen by a watch. Requests are counted by the API server (apiserver_request_total) from the first
// create until it is quiet again. kube-controller-manager is not started (its garbage collector
// reads each new pod's owner: the same load on both sides).
//
// With --unrelated-pods K, the cluster first gets K Pods no parent concerns (in namespaces of their
// own, bench/harness.ts fillCluster), for both sides: the same work in a bigger cluster, where a
// cost that grows with the cluster's Pods rather than with the parents shows.
//
// Usage: npm run bench:composite -- [--n 200] [--reps 3] [--unrelated-pods 10000] [--warm 200] [--ignore-status-changes] [--label local] [--profile DIR] [--profile-seconds 10]
// Writes its results as JSON outside the repository (bench/harness.ts, resultsFolder).
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { Agent, fetch } from 'undici';
import { parse as parseYaml } from 'yaml';
import { ApiServerSource, applyGeneratedObjects } from '../eventing/knative/index.ts';
import { DEFAULT_OPTIONS } from '../eventing/manifests/index.ts';
import { bundledFunctions } from '../build/index.ts';
import { EventPlane } from '../eventing/plane.ts';
import { sync } from '../examples/immortal-container-hook/hook.ts';
import composite, { CompositeControllerKind, sourceName } from '../functions/composite/index.ts';
import { controllerRefFor, CONTROLLER_UID_LABEL, forCreate, serveHooks } from '../functions/composite/metacontroller/index.ts';
import { Pod, type KubeObject, KubeClient } from '../functions/runtime/index.ts';
import { eventually, startTestCluster, type TestCluster } from '../test/support/cluster.ts';
import { MetaImmortalContainer, metacontrollerExample, SEED_HOOK_URL } from '../test/support/examples.ts';
import { tempDir } from '../test/support/temp.ts';
import { ConvergenceWatch } from './convergence.ts';
import {
  benchFlags,
  clearNamespace,
  CONCURRENCY,
  createNamespace,
  fillCluster,
  measure,
  median,
  planeStateDir,
  pooled,
  writeResults,
  type Measured,
} from './harness.ts';

const Parent = MetaImmortalContainer;
/** Parents each side converges unmeasured before its burst (the default of --warm), as bench:plane's warm-up round. */
const WARM_PARENTS = 200;

type ParentObject = KubeObject & { spec?: { image?: string }; status?: { currentPod?: string; observedGeneration?: number } };
const converged = (object: KubeObject): boolean => {
  const parent = object as ParentObject;
  return (
    parent.status?.currentPod === `${parent.metadata.name}-immortalpod` && parent.status.observedGeneration === parent.metadata.generation
  );
};
const watchParents = (kube: KubeClient, namespace: string) => new ConvergenceWatch(kube, namespace, { kind: Parent, converged });
const newParent = (namespace: string, name: string): ParentObject => ({
  apiVersion: 'immortalcontainers.flugel.it/v1alpha1',
  kind: 'ImmortalContainer',
  metadata: { name, namespace },
  spec: { image: 'nginx:latest' },
});

interface RunResult extends Measured {
  side: 'plane' | 'direct';
  /** the repetition, from 0 */
  rep: number;
  n: number;
  /** parents without exactly one pod at the end */
  anomalies: string[];
}

/** Where and for how long the run is profiled (--profile DIR --profile-seconds S); none by default. */
interface Profiling {
  dir: string;
  seconds: number;
}

/**
 * kube-apiserver's CPU profile over the first `seconds` of a side's window (its pprof endpoint,
 * turned on by --profiling for a profiled run), written to DIR/apiserver-<side>-<rep>.pprof.
 */
async function profileApiServer(cluster: TestCluster, profiling: Profiling, side: string): Promise<void> {
  const config = readKubeconfig(cluster.cp.kubeconfigPath);
  const response = await fetch(`${config.server}/debug/pprof/profile?seconds=${profiling.seconds}`, {
    headers: { authorization: `Bearer ${config.token}` },
    dispatcher: new Agent({ connect: { ca: config.ca } }),
  });
  if (!response.ok) throw new Error(`kube-apiserver profile: ${response.status} ${await response.text()}`);
  writeFileSync(join(profiling.dir, `apiserver-${side}.pprof`), Buffer.from(await response.arrayBuffer()));
}

function readKubeconfig(path: string): { server: string; token: string; ca: Buffer } {
  const config = parseYaml(readFileSync(path, 'utf8')) as {
    clusters: { cluster: { server: string; 'certificate-authority'?: string } }[];
    users: { user: { token: string } }[];
  };
  const cluster = config.clusters[0]!.cluster;
  return { server: cluster.server, token: config.users[0]!.user.token, ca: readFileSync(cluster['certificate-authority']!) };
}

async function anomalies(kube: KubeClient, namespace: string, n: number): Promise<string[]> {
  const parents = (await kube.list(Parent, { namespace })).items;
  const pods = (await kube.list(Pod, { namespace })).items;
  const found: string[] = [];
  if (parents.length !== n) found.push(`${parents.length} parents instead of ${n}`);
  if (pods.length !== n) found.push(`${pods.length} pods instead of ${n}`);
  return found;
}

/** The work of a side, with kube-apiserver profiled over its first seconds when asked. */
const profiled =
  (cluster: TestCluster, profiling: Profiling | undefined, side: string, work: () => Promise<void>) => async (): Promise<void> => {
    const profile = profiling ? profileApiServer(cluster, profiling, side) : undefined;
    await work();
    await profile;
  };

/** What a side is asked to do: N parents measured, after `warm` parents that are not. */
interface SideRun {
  rep: number;
  n: number;
  warm: number;
  writer: KubeClient;
  watcher: KubeClient;
  profiling?: Profiling;
}

/** The end state of parent `name`, written directly: the parent, the pod the hook answers, the final status. */
async function writeDirectly(writer: KubeClient, namespace: string, name: string): Promise<void> {
  const parent = await writer.create<ParentObject>(Parent, newParent(namespace, name));
  const [child] = sync({ parent, children: {} }).children as KubeObject[];
  const owned = {
    ...child!,
    metadata: {
      ...child!.metadata,
      labels: { [CONTROLLER_UID_LABEL]: parent.metadata.uid! },
      ownerReferences: [controllerRefFor(parent, parent.apiVersion!, parent.kind!)],
    },
  };
  await writer.create(Pod, forCreate(owned));
  await writer.replace(
    Parent,
    { ...parent, status: { currentPod: child!.metadata.name, observedGeneration: parent.metadata.generation } },
    'status',
  );
}

/** The namespaces of the sides (each cleared after its side: the next side starts from the same state). */
const NAMESPACES = { direct: 'direct', directWarm: 'direct-warm', plane: 'plane', planeWarm: 'warm' };

async function runDirect(cluster: TestCluster, { rep, n, warm, writer, watcher, profiling }: SideRun): Promise<RunResult> {
  // Unmeasured, as the plane's warm parents: the writer's code compiled by V8 before the burst.
  await pooled(warm, (i) => writeDirectly(writer, NAMESPACES.directWarm, `warm-${i}`));
  await clearNamespace(cluster, NAMESPACES.directWarm, [Parent, Pod]);
  const namespace = NAMESPACES.direct;
  const measured = await measure(
    cluster,
    watchParents(watcher, namespace),
    n,
    profiled(cluster, profiling, `direct-${rep}`, () => pooled(n, (i) => writeDirectly(writer, namespace, `ic-${i}`))),
  );
  const result: RunResult = { side: 'direct', rep, n, ...measured, anomalies: await anomalies(writer, namespace, n) };
  // The plane's sweep would otherwise sync these parents inside its own measured window.
  await clearNamespace(cluster, namespace, [Parent, Pod]);
  return result;
}

async function runPlane(
  cluster: TestCluster,
  { rep, n, warm, writer, watcher, profiling }: SideRun,
  hookUrl: string,
  ignoreStatusChanges: boolean,
): Promise<RunResult> {
  const namespace = NAMESPACES.plane;
  await applyGeneratedObjects(cluster.kube, [composite]);
  const bundled = await bundledFunctions(tempDir('opfn-bench-dist-'));
  const state = planeStateDir();
  const plane = new EventPlane({
    functions: [composite],
    kube: KubeClient.fromFile(cluster.cp.kubeconfigPath),
    // Admin identity for the function and the sources: ServiceAccount tokens need
    // kube-controller-manager, which stays off (see above); identities change no request count.
    kubeconfigPath: cluster.cp.kubeconfigPath,
    log: pino({ level: 'silent' }),
    stateDir: state.dir,
    idleTimeoutMs: 60_000,
    env: { LOG_LEVEL: 'warn', COMPOSITE_HOOK_URLS: `${SEED_HOOK_URL}=${hookUrl}/` },
    // Profiled: the function from its sources (a bundle's minified names say nothing) under node
    // --cpu-prof, its profile written to DIR when it exits.
    command: profiling
      ? (declaration) => ({
          command: process.execPath,
          args: [
            '--cpu-prof',
            '--cpu-prof-dir',
            profiling.dir,
            fileURLToPath(new URL('../functions/main.ts', import.meta.url)),
            declaration.name,
          ],
        })
      : bundled.command,
    knativeObjects: {},
  });
  await plane.start();
  try {
    const controller = metacontrollerExample('CompositeController');
    if (ignoreStatusChanges)
      (controller.spec as { parentResource: { ignoreStatusChanges?: boolean } }).parentResource.ignoreStatusChanges = true;
    // A repetition finds the controller (and its sources) that the first one created.
    if (!(await writer.get(CompositeControllerKind, { namespace: '', name: controller.metadata.name! })))
      await writer.create(CompositeControllerKind, controller);
    for (const role of ['parents', 'children'] as const) {
      const name = sourceName(controller.metadata.name!, role);
      await eventually(
        async () => {
          const source = await cluster.kube.get<KubeObject & { status?: { conditions?: { type: string; status: string }[] } }>(
            ApiServerSource,
            { namespace: DEFAULT_OPTIONS.namespace, name },
          );
          return source?.status?.conditions?.some((condition) => condition.type === 'Ready' && condition.status === 'True');
        },
        60_000,
        `ApiServerSource ${name} Ready`,
      );
    }
    // Warm: parents converged first, so the run measures throughput, not a cold start
    // (bench:cold-start) nor V8 compiling the function's hot path (bench:plane's zero side).
    const warming = watchParents(watcher, NAMESPACES.planeWarm);
    await pooled(warm, (i) => writer.create(Parent, newParent(NAMESPACES.planeWarm, `warm-${i}`)));
    await warming.until(warm, 120_000);
    await warming.stop();
    const measured = await measure(
      cluster,
      watchParents(watcher, namespace),
      n,
      profiled(cluster, profiling, `plane-${rep}`, () =>
        pooled(n, async (i) => {
          await writer.create(Parent, newParent(namespace, `ic-${i}`));
        }),
      ),
    );
    return { side: 'plane', rep, n, ...measured, anomalies: await anomalies(writer, namespace, n) };
  } finally {
    await plane.stop();
    state.release(plane);
    await clearNamespace(cluster, NAMESPACES.planeWarm, [Parent, Pod]);
    await clearNamespace(cluster, namespace, [Parent, Pod]);
  }
}

async function main(): Promise<void> {
  const { values } = benchFlags(
    "npm run bench:composite -- [--n 200] [--reps 3] [--unrelated-pods 0] [--label name]\n  --n               parents (one pod each), side by side with direct writes (default 200)\n  --reps            repetitions of both sides, each side first in turn; ratios of the medians (default 3)\n  --unrelated-pods  Pods no parent concerns, created first in namespaces of their own (default 0)\n  --label           a name for this run, part of the result file name (default local)\n  --profile DIR     write kube-apiserver's CPU profile of each side (pprof) and the function's (node --cpu-prof, run from its sources) there; run the bench itself under node --cpu-prof for the plane's\n  --profile-seconds how long kube-apiserver is profiled from the start of each side (default 10)\n  --warm            parents converged unmeasured before each side's burst (default 200: V8 has compiled each side's hot path)\n  --ignore-status-changes  the seed's controller with parentResource.ignoreStatusChanges: a sync does not ask the hook again after its status write",
    () =>
      parseArgs({
        options: {
          n: { type: 'string', default: '200' },
          reps: { type: 'string', default: '3' },
          'unrelated-pods': { type: 'string', default: '0' },
          label: { type: 'string', default: 'local' },
          profile: { type: 'string' },
          'profile-seconds': { type: 'string', default: '10' },
          warm: { type: 'string', default: String(WARM_PARENTS) },
          'ignore-status-changes': { type: 'boolean', default: false },
          help: { type: 'boolean', default: false },
        },
      }),
  );
  const n = Number(values.n);
  if (!Number.isInteger(n) || n < 1) {
    console.error(`--n takes a positive integer (got "${values.n}")`);
    process.exit(2);
  }
  const reps = Number(values.reps);
  if (!Number.isInteger(reps) || reps < 1) {
    console.error(`--reps takes a positive integer (got "${values.reps}")`);
    process.exit(2);
  }
  const warm = Number(values.warm);
  if (!Number.isInteger(warm) || warm < 1) {
    console.error(`--warm takes a positive integer (got "${values.warm}")`);
    process.exit(2);
  }
  const unrelatedPods = Number(values['unrelated-pods']);
  if (!Number.isInteger(unrelatedPods) || unrelatedPods < 0) {
    console.error(`--unrelated-pods takes a non-negative integer (got "${values['unrelated-pods']}")`);
    process.exit(2);
  }
  const profiling = values.profile ? { dir: resolve(values.profile), seconds: Number(values['profile-seconds']) } : undefined;
  if (profiling) mkdirSync(profiling.dir, { recursive: true });
  const cluster = await startTestCluster({ controllerManager: false, apiServerFlags: profiling ? ['--profiling=true'] : [] });
  const hooks = await serveHooks({ hooks: { '/sync': sync } });
  const writer = KubeClient.fromFile(cluster.cp.kubeconfigPath);
  const watcher = KubeClient.fromFile(cluster.cp.kubeconfigPath);
  const results: RunResult[] = [];
  try {
    // Labelled as a workload's pods are, without an owner: orphans no parent's selector matches.
    await fillCluster(cluster, writer, Pod, unrelatedPods, (namespace, name) => ({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace, labels: { app: 'unrelated' } },
      spec: { containers: [{ name: 'c', image: 'nginx:latest' }] },
    }));
    for (const namespace of Object.values(NAMESPACES)) await createNamespace(cluster, namespace);
    for (let rep = 0; rep < reps; rep++) {
      // Each side first in turn: what the machine does in the first minutes (or a neighbour in
      // one stretch of the run) does not always land on the same side.
      for (const side of rep % 2 === 0 ? (['direct', 'plane'] as const) : (['plane', 'direct'] as const)) {
        const run = { rep, n, warm, writer, watcher, profiling };
        const result =
          side === 'plane' ? await runPlane(cluster, run, hooks.url, values['ignore-status-changes']) : await runDirect(cluster, run);
        results.push(result);
        process.stderr.write(
          `N=${n} rep ${rep + 1}/${reps} ${side}: converged ${(result.convergedMs / 1000).toFixed(2)} s, ${result.requestsPerObject.toFixed(2)} requests/parent${result.anomalies.length ? `, ANOMALIES ${result.anomalies.join('; ')}` : ''}\n`,
        );
      }
    }
  } finally {
    await hooks.close();
    await cluster.stop();
  }
  const of = (side: RunResult['side'], pick: (r: RunResult) => number) => median(results.filter((r) => r.side === side).map(pick));
  const cpuTotal = (r: RunResult) => r.cpuToConvergence?.total ?? NaN;
  const environment = {
    node: process.version,
    cpus: cpus().length,
    cpu: cpus()[0]?.model,
    loadavg: loadavg(),
    functions: 'esbuild bundles + code cache',
    concurrency: CONCURRENCY,
  };
  console.log(
    `\nMetacontroller ImmortalContainers (seed CompositeController, sync hook on loopback): plane vs pooled direct writes (${CONCURRENCY} at a time); completion by watch; requests from apiserver_request_total`,
  );
  console.log(
    `node ${environment.node}, ${environment.cpus} CPU(s); ${unrelatedPods} unrelated Pods in the cluster${values['ignore-status-changes'] ? '; the controller with ignoreStatusChanges' : ''}\n`,
  );
  // CPU to convergence, per parent: the whole of it and each process's share (this process with
  // the plane and the hook server, the function, kube-apiserver, etcd), and the neighbours'
  // (other processes on the machine, and steal) in the same window.
  const ms = (seconds: number | undefined) => (seconds === undefined ? '-' : ((seconds * 1000) / n).toFixed(2));
  console.log(
    'side    rep  N     converged s  quiet s  req/parent  CPU ms/parent (bench+fn+apiserver+etcd)  neighbours s  requests by verb',
  );
  for (const r of results) {
    const cpu = r.cpuToConvergence;
    console.log(
      `${r.side.padEnd(6)}  ${String(r.rep + 1).padEnd(3)}  ${String(r.n).padEnd(4)}  ${(r.convergedMs / 1000).toFixed(2).padStart(11)}  ${(r.quietMs / 1000).toFixed(2).padStart(7)}  ${r.requestsPerObject.toFixed(2).padStart(10)}  ${`${ms(cpu?.total)} (${[cpu?.bench, cpu?.functions, cpu?.apiServer, cpu?.etcd].map(ms).join('+')})`.padStart(39)}  ${(cpu?.others === undefined ? '-' : `${cpu.others.toFixed(2)}/${(cpu.steal ?? 0).toFixed(2)}`).padStart(12)}  ${Object.entries(
        r.requests.byVerb,
      )
        .sort()
        .map(([verb, count]) => `${verb} ${count}`)
        .join(', ')}`,
    );
  }
  // Medians of the repetitions, each side's on its own.
  const summary = {
    n,
    reps,
    unrelatedPods,
    convergenceRatio: of('plane', (r) => r.convergedMs) / of('direct', (r) => r.convergedMs),
    planeSeconds: of('plane', (r) => r.convergedMs) / 1000,
    directSeconds: of('direct', (r) => r.convergedMs) / 1000,
    planeRequestsPerParent: of('plane', (r) => r.requestsPerObject),
    directRequestsPerParent: of('direct', (r) => r.requestsPerObject),
    cpuToConvergenceRatio: of('plane', cpuTotal) / of('direct', cpuTotal),
    planeCpuMsPerParent: (of('plane', cpuTotal) * 1000) / n,
    directCpuMsPerParent: (of('direct', cpuTotal) * 1000) / n,
  };
  const perRep = Array.from({ length: reps }, (_, rep) => {
    const [direct, plane] = (['direct', 'plane'] as const).map((side) => results.find((r) => r.side === side && r.rep === rep)!);
    return `${(plane!.convergedMs / direct!.convergedMs).toFixed(2)}×`;
  });
  console.log(
    `\nmedians of ${reps} repetition(s): convergence ${summary.convergenceRatio.toFixed(2)}× direct writes (each repetition ${perRep.join(', ')}); CPU to convergence ${summary.cpuToConvergenceRatio.toFixed(2)}× (${summary.planeCpuMsPerParent.toFixed(1)} vs ${summary.directCpuMsPerParent.toFixed(1)} ms/parent); requests/parent ${summary.planeRequestsPerParent.toFixed(2)} vs ${summary.directRequestsPerParent.toFixed(2)}`,
  );
  for (const r of results)
    console.log(
      `  ${r.side.padEnd(6)} ${r.rep + 1}  ${Object.entries(r.requests.byResource)
        .filter(([, count]) => count / n >= 0.005)
        .sort()
        .map(([key, count]) => `${key} ${(count / n).toFixed(2)}`)
        .join(', ')}`,
    );
  console.log();
  writeResults({
    benchmark: 'composite',
    label: values.label,
    date: new Date().toISOString(),
    command: `npm run bench:composite -- ${process.argv.slice(2).join(' ')}`.trim(),
    environment,
    summary,
    runs: results,
  });
}

await main();
