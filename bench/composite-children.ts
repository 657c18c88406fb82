// One parent of a CompositeController whose sync hook answers --children ConfigMaps (as a hostile
// or careless hook may), synced by the composite function served in a child process under the
// generated Knative Service's memory (eventing/manifests/service.ts: a 256 Mi limit, so V8's heap
// is limited with --heap, by default what V8 picks for a 256 MiB machine), next to direct writes
// of the same children, side by side in one run against one real control plane:
//
//   function  this process acts as the broker: it delivers the parent's key, then each reply as
//             it comes (a reply naming the parent again is due at once: the delivery stopped at
//             its deadline, deliveryBudgetMs), until no reply is left; then, for a --quiet
//             window, every requeue the replies ask for at its time. The hook is served here,
//             so its memory is not the function's. Printed: time until every child exists, the
//             deliveries and hook calls it took, the bytes sent to the hook, API requests per
//             child counted by the API server, CPU per child (the function's process,
//             kube-apiserver and etcd), the peak heap and RSS of the function's process
//             (sampled every 20 ms, and the kernel's VmHWM). Then the hook calls and requests
//             during the quiet window (a converged parent asks for nothing: 0), and what one
//             more sync of the converged parent costs (each event of the parent or a child that
//             reaches the function is one)
//   direct    one writer creates the same children itself, 32 at a time (forCreate: the
//             last-applied annotation, the controller reference, the controller-uid label)
//
// kube-controller-manager is not started (its garbage collector reads each new child's owner:
// the same load on both sides).
//
// With --bundle the function is the image's: dist/main.mjs (npm run build first) with the
// Dockerfile's Node flags and the Service's environment, its memory read from /proc (RSS only:
// its heap is not visible from outside). Without, the function's process runs the TypeScript
// sources and the test support, which cost it about 100 MiB of RSS at rest that the image does
// not have; its heap is sampled from inside.
//
//   npm run bench:composite-children -- [--children 50000] [--heap 128] [--budget 30] [--quiet 60] [--bundle] [--label x]
import { fork, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { PerformanceObserver, constants } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { IMAGE_NODE_FLAGS } from '../build/index.ts';
import { applyCrds } from '../eventing/crds.ts';
import { READINESS_PATH } from '../eventing/manifests/index.ts';
import { DELIVERY_BUDGET_ENV } from '../functions/runtime/host/index.ts';
import { freePort } from '../processes/index.ts';
import composite, { CompositeControllerKind } from '../functions/composite/index.ts';
import { controllerRefFor, CONTROLLER_UID_LABEL, forCreate, serveHooks } from '../functions/composite/metacontroller/index.ts';
import { ConfigMap, type KubeObject, type ResourceKind } from '../functions/runtime/index.ts';
import { kubeFor, serveFunction, startTestCluster, type TestCluster } from '../test/support/cluster.ts';
import { crdFor } from '../test/support/examples.ts';
import { awaitQuiet, requestDifference, scrapeRequestTotals, type RequestCounts } from './apiserver-metrics.ts';
import { cpuBetween, cpuSnapshot, type CpuSeconds } from './cpu-time.ts';
import { benchFlags, createNamespace, pooled, writeResults } from './harness.ts';

const USAGE =
  'npm run bench:composite-children -- [--children 50000] [--heap 128] [--budget 30] [--quiet 60] [--bundle] [--label x]\n' +
  '  --children  ConfigMaps the hook answers for its one parent (default 50000)\n' +
  "  --heap      V8 heap limit (MiB) of the function's process (default 128: V8's own pick under the Service's 256 Mi)\n" +
  "  --budget    the delivery budget in seconds (default 30: the generated Service's)\n" +
  '  --quiet     seconds watched after convergence for syncs nobody asked for (default 60)\n' +
  '  --bundle    run the function as the image does: dist/main.mjs (npm run build first)\n' +
  '  --label     names the results file (default local)';
const { values } = benchFlags(USAGE, () =>
  parseArgs({
    options: {
      children: { type: 'string', default: '50000' },
      heap: { type: 'string', default: '128' },
      budget: { type: 'string', default: '30' },
      quiet: { type: 'string', default: '60' },
      bundle: { type: 'boolean', default: false },
      label: { type: 'string', default: 'local' },
      serve: { type: 'string' },
      hook: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  }),
);
const N = Number(values.children);
const HEAP = Number(values.heap);

const Swarm: ResourceKind = { group: 'bench.example.com', version: 'v1', kind: 'Swarm', plural: 'swarms', namespaced: true };
const HOOK_URL = 'http://swarm-controller.bench/';
const PARENT_KEY = 'bench.example.com/Swarm:swarm/hive';

/** The hook's child i: a small ConfigMap (the hook's whole answer is ~100 bytes a child). */
const childOf = (namespace: string, i: number): KubeObject => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name: `hive-${i}`, namespace },
  data: { index: String(i) },
});

// Messages between this process and the function's.
type Ask = { type: 'sample' } | { type: 'stop' };
type Told =
  | { type: 'ready'; url: string; pid: number }
  | { type: 'sample'; peakHeap: number; peakLive: number; peakRss: number; hwm: number; cpu: number };

/** The function's process: serves composite, samples its own memory, answers the bench's asks. */
async function serve(kubeconfigPath: string, hookUrl: string): Promise<void> {
  const fn = await serveFunction(composite, kubeconfigPath, {
    config: { COMPOSITE_HOOK_URLS: `${HOOK_URL}=${hookUrl}/`, COMPOSITE_EVENT_SOURCES: 'plane' },
    deliveryBudgetMs: Number(values.budget) * 1000,
  });
  let [peakHeap, peakRss, peakLive] = [0, 0, 0];
  // What a full GC leaves: the heap the function really holds, garbage aside.
  const gcs = new PerformanceObserver((list) => {
    if (
      list
        .getEntries()
        .some((entry) => (entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR)
    )
      peakLive = Math.max(peakLive, process.memoryUsage().heapUsed);
  });
  gcs.observe({ entryTypes: ['gc'] });
  const take = () => {
    const usage = process.memoryUsage();
    [peakHeap, peakRss] = [Math.max(peakHeap, usage.heapUsed), Math.max(peakRss, usage.rss)];
  };
  const sampler = setInterval(take, 20);
  process.on('message', async (ask: Ask) => {
    if (ask.type === 'stop') {
      clearInterval(sampler);
      await fn.close();
      process.exit(0);
    }
    take();
    const hwm = Number(/VmHWM:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0) * 1024;
    const usage = process.cpuUsage();
    process.send!({ type: 'sample', peakHeap, peakLive, peakRss, hwm, cpu: (usage.user + usage.system) / 1e6 } satisfies Told);
    [peakHeap, peakRss, peakLive] = [0, 0, 0];
  });
  process.send!({ type: 'ready', url: fn.url, pid: process.pid } satisfies Told);
}

interface Answer {
  status: number;
  headers: Record<string, string>;
  text: string;
}
async function post(url: string, headers: Record<string, string>, body: string): Promise<Answer> {
  const response = await fetch(url, { method: 'POST', headers, body });
  return { status: response.status, headers: Object.fromEntries(response.headers), text: await response.text() };
}
const reconcileOf = (key: string) => ({
  headers: {
    'content-type': 'application/json',
    'ce-specversion': '1.0',
    'ce-id': `bench-${Math.random()}`,
    'ce-source': '/bench',
    'ce-type': 'dev.opfn.reconcile',
    'ce-opfnfunction': composite.name,
  },
  body: JSON.stringify({ keys: [key] }),
});
/** The reply of an answer (a CloudEvent in binary mode), when it has one, and when it is due. */
function replyOf(answer: Answer): { headers: Record<string, string>; body: string; due: number } | undefined {
  if (answer.status !== 200 || !answer.headers['ce-type']) return undefined;
  const headers = Object.fromEntries(Object.entries(answer.headers).filter(([name]) => name.startsWith('ce-') || name === 'content-type'));
  const notBefore = answer.headers['ce-opfnnotbefore'];
  return { headers, body: answer.text, due: notBefore ? Date.parse(notBefore) : 0 };
}

/** 503 answers delivered again, as the broker's retries would, before the bench gives up. */
const MAX_RETRIES = 5;

const mib = (bytes: number) => Math.round(bytes / 2 ** 20);
/** The function's heap, when this process can see it (not with --bundle). */
const heapMib = (bytes: number) => (values.bundle ? 'n/a' : `${mib(bytes)} MiB`);
const perChild = (value: number) => (value / N).toFixed(value / N < 0.01 ? 5 : 3);
const cpuLine = (cpu: CpuSeconds | undefined, fnCpu: number) =>
  cpu
    ? `CPU s: function ${fnCpu.toFixed(1)}, kube-apiserver ${cpu.apiServer.toFixed(1)}, etcd ${cpu.etcd.toFixed(1)}, bench ${cpu.bench.toFixed(1)}; per child ${(((fnCpu + cpu.apiServer + cpu.etcd) / N) * 1000).toFixed(3)} ms (bench excluded); neighbours ${cpu.others?.toFixed(1) ?? '?'} s, steal ${cpu.steal?.toFixed(1) ?? '?'} s`
    : 'CPU: not measured (no /proc)';
const requestsLine = (requests: RequestCounts) =>
  `${requests.total} requests (${perChild(requests.total)} per child): ${Object.entries(requests.byResource)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 6)
    .map(([what, count]) => `${what} ${count}`)
    .join(', ')}`;

async function run(): Promise<void> {
  const cluster = await startTestCluster({ controllerManager: false });
  const { kube } = cluster;
  let hookCalls = 0;
  let hookBytes = 0;
  let hookChildrenSeen = 0;
  const hooks = await serveHooks({
    hooks: {
      '/sync': (request: { parent: KubeObject; children: Record<string, Record<string, unknown>> }) => {
        hookCalls++;
        hookChildrenSeen = Object.keys(request.children['ConfigMap.v1'] ?? {}).length;
        return {
          status: { seen: hookChildrenSeen },
          children: Array.from({ length: N }, (_, i) => childOf(request.parent.metadata.namespace!, i)),
        };
      },
    },
    maxRequestBytes: 1024 * 2 ** 20,
  });
  // The hook server reads each request whole: its length is what the function sent.
  hooks.server.on('request', (request) => request.on('data', (chunk: Buffer) => (hookBytes += chunk.length)));
  const functionProcess = values.bundle ? await bundleProcess(cluster, hooks.url) : await forkedProcess(cluster, hooks.url);
  const { sample } = functionProcess;
  try {
    const url = await functionProcess.ready;
    await applyCrds(kube, [crdFor(Swarm)]);
    for (const namespace of ['swarm', 'direct']) await createNamespace(cluster, namespace);
    await waitServed(cluster);
    await kube.create(CompositeControllerKind, {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: 'swarms' },
      spec: {
        parentResource: { apiVersion: 'bench.example.com/v1', resource: 'swarms' },
        childResources: [{ apiVersion: 'v1', resource: 'configmaps' }],
        generateSelector: true,
        hooks: { sync: { webhook: { url: `${HOOK_URL}sync`, timeout: '60s' } } },
      },
    });
    console.log(
      `\none parent whose hook answers ${N} ConfigMaps; the function's process: V8 heap limit ${HEAP} MiB (the Service's memory limit: 256 Mi), delivery budget ${values.budget} s; node ${process.version}, ${cpus().length} CPUs, load ${loadavg()
        .map((value) => value.toFixed(2))
        .join(' ')}\n`,
    );

    // direct: the end state written by one writer, 32 at a time.
    const directParent = await kube.create<KubeObject>(Swarm, {
      apiVersion: 'bench.example.com/v1',
      kind: 'Swarm',
      metadata: { name: 'hive', namespace: 'direct' },
    });
    const reference = controllerRefFor(directParent, 'bench.example.com/v1', 'Swarm');
    const direct = await measured(cluster, async () => {
      await pooled(N, (i) => {
        const object = forCreate(childOf('direct', i));
        object.metadata = {
          ...object.metadata,
          labels: { [CONTROLLER_UID_LABEL]: directParent.metadata.uid! },
          ownerReferences: [reference],
        };
        return kube.create(ConfigMap, object);
      });
    });
    console.log(`direct    ${(direct.ms / 1000).toFixed(1)} s to ${N} children; ${requestsLine(direct.requests)}`);
    console.log(`          ${cpuLine(direct.cpu, 0)}`);

    // function: the broker's part, done here. At rest first: this process has loaded the
    // TypeScript sources and the test support, which the image's bundle does not.
    await sample();
    const rest = await sample();
    const cpuBefore = rest.cpu;
    await kube.create(Swarm, { apiVersion: 'bench.example.com/v1', kind: 'Swarm', metadata: { name: 'hive', namespace: 'swarm' } });
    let deliveries = 0;
    let unanswered: string | undefined;
    const failures: string[] = [];
    let lastReply: ReturnType<typeof replyOf>;
    const fn = await measured(cluster, async () => {
      let next: { headers: Record<string, string>; body: string } | undefined = reconcileOf(PARENT_KEY);
      while (next) {
        deliveries++;
        let answer: Answer;
        try {
          answer = await post(url, next.headers, next.body);
        } catch (error) {
          // fetch waits 300 s for an answer's headers, as long as the Service's request timeout.
          unanswered = `delivery ${deliveries} not answered: ${String((error as { cause?: unknown }).cause ?? error)}`;
          break;
        }
        // A 503 is a failed sync (a hook call cut, say): the broker delivers the event again after a backoff.
        if (answer.status === 503 && failures.length < MAX_RETRIES) {
          failures.push(`delivery ${deliveries}: ${answer.text.slice(0, 300)}`);
          await sleep(1000);
          continue;
        }
        if (answer.status !== 200) throw new Error(`delivery ${deliveries} answered ${answer.status}: ${answer.text}`);
        const reply = replyOf(answer);
        lastReply = reply;
        // Due at once: the delivery stopped at its deadline. Due later: a requeue, for the quiet window.
        next = reply && reply.due <= Date.now() ? reply : undefined;
      }
    });
    const exited = functionProcess.exited();
    if (exited) {
      const created = (await kube.list(ConfigMap, { namespace: 'swarm' })).items.length;
      console.log(
        `function  the function's process ended (${exited}${exited === '134' ? ': out of memory' : ''}) in delivery ${deliveries}, after ${(fn.ms / 1000).toFixed(1)} s and ${created} children created, ${hookCalls} hook calls`,
      );
      return;
    }
    const memory = await sample();
    const fnCpu = memory.cpu - cpuBefore;
    const children = (await kube.list(ConfigMap, { namespace: 'swarm' })).items.length;
    const parent = await kube.get<KubeObject & { status?: { seen?: number } }>(Swarm, { namespace: 'swarm', name: 'hive' });
    const [callsToConverge, bytesToConverge] = [hookCalls, hookBytes];
    console.log(
      `function  ${(fn.ms / 1000).toFixed(1)} s to ${children} children (${(fn.ms / direct.ms).toFixed(2)}× direct) in ${deliveries} deliveries, ${callsToConverge} hook calls (${mib(bytesToConverge)} MiB sent to the hook); status.seen ${parent?.status?.seen}${failures.length ? `; ${failures.length} answered 503 and delivered again: ${failures.join(' | ')}` : ''}`,
    );
    console.log(`          ${requestsLine(fn.requests)}`);
    console.log(`          ${cpuLine(fn.cpu, fnCpu)}`);
    console.log(
      `          peak heap ${heapMib(memory.peakHeap)} (after a full GC ${heapMib(memory.peakLive)}), peak RSS ${mib(memory.peakRss)} MiB sampled, VmHWM ${mib(memory.hwm)} MiB (limit 256); at rest before: heap ${heapMib(rest.peakHeap)}, RSS ${mib(rest.peakRss)} MiB`,
    );

    if (unanswered) {
      console.log(`          ${unanswered}: the broker would retry it, and the sync would start over`);
      writeResults({
        benchmark: 'composite-children',
        label: values.label!,
        date: new Date().toISOString(),
        command: `npm run bench:composite-children -- ${process.argv.slice(2).join(' ')}`.trim(),
        children: N,
        direct,
        function: { ...fn, unanswered, deliveries, hookCalls, childrenCreated: children, functionCpu: fnCpu, memory },
      });
      return;
    }

    // The quiet window: what the function asks for by itself once converged.
    const quietMs = Number(values.quiet) * 1000;
    const quietStart = Date.now();
    const beforeQuiet = await scrapeRequestTotals(cluster.cp);
    const [callsBefore, cpuQuietBefore] = [hookCalls, (await sample()).cpu];
    let requeued = 0;
    for (let reply = lastReply; reply && reply.due < quietStart + quietMs;) {
      await sleep(Math.max(0, reply.due - Date.now()));
      requeued++;
      reply = replyOf(await post(url, reply.headers, reply.body));
    }
    await sleep(Math.max(0, quietStart + quietMs - Date.now()));
    const quiet = requestDifference(beforeQuiet, await scrapeRequestTotals(cluster.cp));
    const quietCpu = (await sample()).cpu - cpuQuietBefore;
    console.log(
      `quiet     ${values.quiet} s after convergence: ${requeued} requeues asked for, ${hookCalls - callsBefore} hook calls, ${quiet.total} requests, function CPU ${quietCpu.toFixed(1)} s${lastReply ? ` (last reply due ${new Date(lastReply.due).toISOString()})` : ''}`,
    );

    // One more sync of the converged parent: what each of its events costs when it is synced.
    const beforeOne = await scrapeRequestTotals(cluster.cp);
    const [callsOne, bytesOne, cpuOne] = [hookCalls, hookBytes, (await sample()).cpu];
    const oneStarted = performance.now();
    const one = await post(url, reconcileOf(PARENT_KEY).headers, reconcileOf(PARENT_KEY).body);
    const oneMs = performance.now() - oneStarted;
    const oneMemory = await sample();
    const oneRequests = requestDifference(beforeOne, (await awaitQuiet(cluster.cp)).totals);
    console.log(
      `one sync  of the converged parent: ${one.status}, ${(oneMs / 1000).toFixed(1)} s, ${hookCalls - callsOne} hook call (${mib(hookBytes - bytesOne)} MiB sent), ${oneRequests.total} requests, function CPU ${(oneMemory.cpu - cpuOne).toFixed(1)} s, peak heap ${heapMib(oneMemory.peakHeap)}, peak RSS ${mib(oneMemory.peakRss)} MiB`,
    );

    writeResults({
      benchmark: 'composite-children',
      label: values.label!,
      date: new Date().toISOString(),
      command: `npm run bench:composite-children -- ${process.argv.slice(2).join(' ')}`.trim(),
      children: N,
      heapLimitMiB: HEAP,
      budgetSeconds: Number(values.budget),
      direct,
      function: {
        ...fn,
        deliveries,
        failures,
        hookCalls: callsToConverge,
        hookBytes: bytesToConverge,
        childrenCreated: children,
        functionCpu: fnCpu,
        memory,
        rest,
      },
      quiet: { seconds: Number(values.quiet), requeued, hookCalls: hookCalls - callsBefore, requests: quiet, functionCpu: quietCpu },
      oneSync: { ms: oneMs, status: one.status, requests: oneRequests, memory: oneMemory },
      summary: {
        [`direct s (N=${N})`]: direct.ms / 1000,
        [`function s (N=${N})`]: fn.ms / 1000,
        [`function/direct (N=${N})`]: fn.ms / direct.ms,
        [`deliveries (N=${N})`]: deliveries,
        [`requests per child (N=${N})`]: fn.requests.total / N,
        [`peak RSS MiB (N=${N})`]: mib(memory.hwm),
        [`peak heap MiB (N=${N})`]: mib(memory.peakHeap),
        [`peak heap after a full GC MiB (N=${N})`]: mib(memory.peakLive),
        [`RSS at rest MiB (N=${N})`]: mib(rest.peakRss),
        [`hook calls in quiet window (N=${N})`]: hookCalls - callsBefore,
      },
    });
  } finally {
    functionProcess.stop();
    await hooks.close();
    await cluster.stop();
  }
}

type Sample = Extract<Told, { type: 'sample' }>;

/** The function's process as the bench sees it: its URL once ready, its memory and CPU, its end. */
interface FunctionProcess {
  ready: Promise<string>;
  /** Peaks since the last sample (heap 0 when not visible), VmHWM and CPU seconds so far. */
  sample(): Promise<Sample>;
  /** Its exit code or signal once it ended. */
  exited(): string | undefined;
  stop(): void;
}

const endedMessage = (exited: string | undefined) => `the function's process ended (${exited})${exited === '134' ? ': out of memory' : ''}`;

/** This file again, serving the function from the sources (serve above), sampling itself. */
function forkedProcess(cluster: TestCluster, hookUrl: string): FunctionProcess {
  const child = fork(fileURLToPath(import.meta.url), [...process.argv.slice(2), '--serve', cluster.cp.kubeconfigPath, '--hook', hookUrl], {
    // The image's flags (build/node-flags.ts), with V8's heap limit under the Service's memory limit.
    execArgv: [...IMAGE_NODE_FLAGS, `--max-old-space-size=${HEAP}`],
    stdio: 'inherit',
  });
  let exited: string | undefined;
  child.on('exit', (code, signal) => (exited = `${code ?? signal}`));
  const told = (type: Told['type']) =>
    new Promise<Told>((resolve, reject) => {
      const onMessage = (message: Told) => {
        if (message.type !== type) return;
        child.off('message', onMessage);
        resolve(message);
      };
      child.on('message', onMessage);
      child.once('exit', () => reject(new Error(endedMessage(exited))));
    });
  return {
    ready: told('ready').then((message) => (message as Extract<Told, { type: 'ready' }>).url),
    sample: async () => {
      const answer = told('sample');
      child.send({ type: 'sample' } satisfies Ask);
      return (await answer) as Sample;
    },
    exited: () => exited,
    stop: () => {
      if (!exited && child.connected) child.send({ type: 'stop' } satisfies Ask);
    },
  };
}

/** dist/main.mjs as the image runs it (Dockerfile ENTRYPOINT, the Service's environment), sampled from /proc. */
async function bundleProcess(cluster: TestCluster, hookUrl: string): Promise<FunctionProcess> {
  const dist = fileURLToPath(new URL('../dist/', import.meta.url));
  if (!existsSync(`${dist}composite.cjs`)) throw new Error('--bundle runs dist/main.mjs: npm run build first');
  const port = await freePort();
  const child = spawn(process.execPath, [...IMAGE_NODE_FLAGS, `--max-old-space-size=${HEAP}`, `${dist}main.mjs`], {
    env: {
      PATH: process.env.PATH,
      NODE_ENV: 'production',
      FUNCTION: composite.name,
      PORT: String(port),
      KUBECONFIG: cluster.cp.kubeconfigPath,
      [DELIVERY_BUDGET_ENV]: values.budget,
      COMPOSITE_HOOK_URLS: `${HOOK_URL}=${hookUrl}/`,
      COMPOSITE_EVENT_SOURCES: 'plane',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  let exited: string | undefined;
  child.on('exit', (code, signal) => (exited = `${code ?? signal}`));
  const status = (field: string) =>
    Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;
  let peakRss = 0;
  const sampler = setInterval(() => {
    if (!exited) peakRss = Math.max(peakRss, status('VmRSS'));
  }, 20);
  const ready = (async () => {
    const url = `http://127.0.0.1:${port}/`;
    for (const deadline = Date.now() + 30_000; Date.now() < deadline; await sleep(50)) {
      if (exited) throw new Error(endedMessage(exited));
      if (
        (await fetch(`${url}${READINESS_PATH.slice(1)}`).then(
          (r) => r.status,
          () => 0,
        )) === 200
      )
        return url;
    }
    throw new Error('dist/main.mjs not ready after 30 s');
  })();
  return {
    ready,
    sample: async () => {
      if (exited) throw new Error(endedMessage(exited));
      peakRss = Math.max(peakRss, status('VmRSS'));
      // utime and stime, in clock ticks (100 a second), after the command name (which may hold spaces).
      const [utime, stime] = readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ').slice(11, 13).map(Number);
      const sample: Sample = { type: 'sample', peakHeap: 0, peakLive: 0, peakRss, hwm: status('VmHWM'), cpu: (utime! + stime!) / 100 };
      peakRss = 0;
      return sample;
    },
    exited: () => exited,
    stop: () => {
      clearInterval(sampler);
      if (!exited) child.kill('SIGTERM');
    },
  };
}

/** From before `work` until the API server is quiet again, its time (until `work` resolves), requests and CPU. */
async function measured(
  cluster: TestCluster,
  work: () => Promise<void>,
): Promise<{ ms: number; requests: RequestCounts; cpu?: CpuSeconds }> {
  const { totals: before } = await awaitQuiet(cluster.cp, { quietMs: 1000 });
  const cpuBefore = cpuSnapshot(cluster.cp.dir);
  const started = performance.now();
  await work();
  const ms = performance.now() - started;
  const { totals: after } = await awaitQuiet(cluster.cp);
  return { ms, requests: requestDifference(before, after), cpu: cpuBetween(cpuBefore, cpuSnapshot(cluster.cp.dir)) };
}

/** The Swarm kind is served (its CRD established). */
async function waitServed(cluster: TestCluster): Promise<void> {
  const reader = kubeFor(cluster.cp.kubeconfigPath);
  for (let tries = 0; tries < 100; tries++) {
    try {
      await reader.list(Swarm, { namespace: 'swarm' });
      return;
    } catch {
      await sleep(100);
    }
  }
  throw new Error('swarms.bench.example.com is not served');
}

if (values.serve) await serve(values.serve, values.hook!);
else await run();
