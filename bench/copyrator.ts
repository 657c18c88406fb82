// CopyratorRule convergence through the local plane vs direct writes of the same copies, side by
// side in one run against a real control plane:
//   npm run bench:copyrator -- [--namespaces 50] [--configmaps 20] [--reps 3] [--bundled]
//   create   a rule is created → every copy exists (namespaces × configmaps)
//   update   every source changes → every copy carries the change
//   delete   the rule is deleted → every copy is gone (its finalizer)
//   direct   the same copies created, updated, deleted straight through the API, 16 at a time
//            (the concurrency one rule's reconcile writes with)
// The function runs under its generated least-privilege identity. Per phase: events the sources
// emitted to the broker and events the broker delivered to the function (no source watches the
// copies, so both are the sources' and the rule's own changes), API requests counted by the API
// server from the phase's first write until it is quiet again (the bench's own reads of the rule
// left out), and CPU seconds until convergence, which a watch of the copies sees on both sides.
// Each side runs its phases --reps times; the ratios are read on the medians.
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { bundledFunctions } from '../build/index.ts';
import { EventPlane } from '../eventing/plane.ts';
import copyrator from '../functions/copyrator/index.ts';
import {
  CopyratorRuleKind,
  desiredCopy,
  DISTRIBUTE_LABEL,
  type CopyableObject,
  type CopyratorRule,
} from '../functions/copyrator/desired.ts';
import { ConfigMap, Namespace, forEachLimited } from '../functions/runtime/index.ts';
import { startTestCluster } from '../test/support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../test/support/rbac.ts';
import { tempDir } from '../test/support/temp.ts';
import { awaitQuiet, requestDifference, type RequestCounts } from './apiserver-metrics.ts';
import { WatchedObjects } from './convergence.ts';
import { cpuBetween, cpuSnapshot, type CpuSeconds } from './cpu-time.ts';
import { benchFlags, median, planeStateDir, writeResults } from './harness.ts';

const { values } = benchFlags(
  'npm run bench:copyrator -- [--namespaces 50] [--configmaps 20] [--reps 3] [--bundled]\n' +
    "  --namespaces  namespaces of the bench, each getting every copy, besides the control plane's own (default 50)\n" +
    '  --configmaps  ConfigMaps the rule copies from its source namespace (default 20)\n' +
    '  --reps        repetitions of the three phases on each side; ratios of the medians (default 3)\n' +
    '  --bundled     run the function bundled, as npm start does (default: its TypeScript sources)',
  () =>
    parseArgs({
      options: {
        namespaces: { type: 'string', default: '50' },
        configmaps: { type: 'string', default: '20' },
        reps: { type: 'string', default: '3' },
        bundled: { type: 'boolean', default: false },
        help: { type: 'boolean', default: false },
      },
    }),
);
const namespaceCount = Number(values.namespaces);
const configMapCount = Number(values.configmaps);
const reps = Number(values.reps);
if (!Number.isInteger(reps) || reps < 1) throw new Error(`--reps must be a positive integer, not ${values.reps}`);
const WRITE_CONCURRENCY = 16;

const bundled = values.bundled ? await bundledFunctions(tempDir('opfn-bench-dist-')) : undefined;
const cluster = await startTestCluster();
const { kube } = cluster;

const inParallel = <T>(items: T[], work: (item: T) => Promise<unknown>): Promise<void> =>
  forEachLimited(items, WRITE_CONCURRENCY, async (item) => void (await work(item)));

// Targets: the bench's own namespaces; the control plane's kube-* and default get copies too and
// are counted in `expected`.
const SOURCE = 'bench-src';
const targets = Array.from({ length: namespaceCount }, (_, i) => `bench-${i}`);
// The source namespace distributes: an administrator's label (functions/copyrator/README.md).
await inParallel([SOURCE, ...targets], (name) =>
  kube.create(Namespace, { metadata: { name, ...(name === SOURCE ? { labels: { [DISTRIBUTE_LABEL]: 'true' } } : {}) } }),
);
const sourceName = (i: number) => `settings-${i}`;
const source = (i: number, version: string): CopyableObject => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name: sourceName(i), namespace: SOURCE, labels: { copyrator: 'bench' } },
  data: { version, payload: 'x'.repeat(512) },
});
await inParallel(
  Array.from({ length: configMapCount }, (_, i) => i),
  (i) => kube.create(ConfigMap, source(i, 'v1')),
);
const activeNamespaces = (await kube.list(Namespace)).items.map((ns) => ns.metadata.name!).filter((name) => name !== SOURCE);
const expected = activeNamespaces.length * configMapCount;

const state = planeStateDir();
const plane = new EventPlane({
  functions: [copyrator],
  kube,
  kubeconfigPath: await kubeconfigWithDeclaredRbac(cluster.cp, copyrator),
  log: pino({ level: 'silent' }),
  stateDir: state.dir,
  idleTimeoutMs: 30_000,
  resyncIntervalMs: 0,
  env: { LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'warn' },
  command: bundled?.command,
});
await plane.start();
// Measure a warm function: the source's initial adds (every ConfigMap and Namespace) start it;
// let them drain first. A cold start is bench/cold-start.ts's subject.
while (plane.activator.instances(copyrator.name) === 0) await sleep(50);
await sleep(2000);

// The copies as a watch shows them, on both sides alike: polling them with LISTs would cost the
// API server more than the writes measured.
const copyVersions = new WatchedObjects<CopyableObject, string>(
  kube,
  ConfigMap,
  (copy) => copy.data?.version ?? '',
  'copyrator.flant.com/rule=bench',
);
const copies = (version?: string) => [...copyVersions.values.values()].filter((seen) => !version || seen === version).length;
let polls = 0;
const ruleGone = async () => {
  polls++;
  return !(await kube.get(CopyratorRuleKind, { namespace: SOURCE, name: 'bench' }));
};
async function until(check: () => boolean | Promise<boolean>): Promise<void> {
  while (!(await check())) await sleep(20);
}

interface Phase {
  seconds: number;
  /** Emitted by the sources / delivered to the function (the plane side only). */
  events?: number;
  delivered?: number;
  requests: RequestCounts;
  cpu?: CpuSeconds;
}
const delivered = () => Object.values(plane.stats().broker).reduce((sum, trigger) => sum + trigger.delivered, 0);
/** One phase: `run`, until `done`; requests until the API server is quiet again, less the bench's own polls. */
async function measured(run: () => Promise<unknown>, done?: () => boolean | Promise<boolean>, onPlane = true): Promise<Phase> {
  const { totals: before } = await awaitQuiet(cluster.cp, { quietMs: 1000 });
  const [emitted0, delivered0, polls0] = onPlane ? [plane.source.stats().emitted, delivered(), polls] : [0, 0, polls];
  const cpu0 = cpuSnapshot(cluster.cp.dir);
  const started = performance.now();
  await run();
  if (done) await until(done);
  const seconds = (performance.now() - started) / 1000;
  const cpu = cpuBetween(cpu0, cpuSnapshot(cluster.cp.dir));
  const own = polls - polls0;
  const { totals: after } = await awaitQuiet(cluster.cp);
  // Counted once the API server is quiet: a delivery is answered after the run it woke.
  const events = onPlane ? { events: plane.source.stats().emitted - emitted0, delivered: delivered() - delivered0 } : {};
  const requests = requestDifference(before, after);
  requests.total -= own;
  requests.byVerb.GET = (requests.byVerb.GET ?? 0) - own;
  requests.byResource['GET copyrators'] = (requests.byResource['GET copyrators'] ?? 0) - own;
  return { seconds, ...events, requests, cpu };
}

const rule: CopyratorRule = {
  apiVersion: 'flant.com/v1',
  kind: 'CopyratorRule',
  metadata: { name: 'bench', namespace: SOURCE },
  ruleType: 'configmap',
  selector: { copyrator: 'bench' },
  namespace: SOURCE,
};
// A rule's own changes reach the function through its ApiServerSource, as every other change.
// Each repetition starts from the sources as the last one left them.
let version = 'v1';
type Phases = Record<'create' | 'update' | 'delete', Phase>;
const viaPlane: Phases[] = [];
for (let rep = 0; rep < reps; rep++) {
  const created = version;
  const updated = `v${rep + 2}`;
  viaPlane.push({
    create: await measured(
      () => kube.create(CopyratorRuleKind, rule),
      () => copies(created) === expected,
    ),
    update: await measured(
      () =>
        inParallel(
          Array.from({ length: configMapCount }, (_, i) => i),
          (i) => kube.mergePatch(ConfigMap, { namespace: SOURCE, name: sourceName(i) }, { data: { version: updated } }),
        ),
      () => copies(updated) === expected,
    ),
    delete: await measured(
      () => kube.delete(CopyratorRuleKind, { namespace: SOURCE, name: 'bench' }),
      async () => copies() === 0 && (await ruleGone()),
    ),
  });
  version = updated;
}
await plane.stop();
state.release(plane);

// The same copies, written directly.
const stored: CopyratorRule = { ...rule, metadata: { ...rule.metadata, uid: 'bench' } };
const all = activeNamespaces.flatMap((namespace) =>
  Array.from({ length: configMapCount }, (_, i) => desiredCopy(stored, source(i, 'v1'), namespace)),
);
const direct: Phases[] = [];
for (let rep = 0; rep < reps; rep++)
  direct.push({
    create: await measured(
      () => inParallel(all, (copy) => kube.create(ConfigMap, copy)),
      () => copies('v1') === expected,
      false,
    ),
    update: await measured(
      () =>
        inParallel(all, (copy) =>
          kube.mergePatch(
            ConfigMap,
            { namespace: copy.metadata.namespace!, name: copy.metadata.name! },
            { data: { version: `v${rep + 2}` } },
          ),
        ),
      () => copies(`v${rep + 2}`) === expected,
      false,
    ),
    delete: await measured(
      () => inParallel(all, (copy) => kube.delete(ConfigMap, { namespace: copy.metadata.namespace!, name: copy.metadata.name! })),
      () => copies() === 0,
      false,
    ),
  });
await copyVersions.stop();
await cluster.stop();

console.log(
  `CopyratorRule: ${configMapCount} ConfigMaps × ${activeNamespaces.length} namespaces (${namespaceCount} + the control plane's own) = ${expected} copies${values.bundled ? ' (function bundled)' : ''}`,
);
console.log('phase    through the plane                                  direct writes (16 at a time)   plane / direct');
const verbs = (requests: RequestCounts) =>
  Object.entries(requests.byVerb)
    .filter(([, count]) => count > 0)
    .sort(([, a], [, b]) => b - a)
    .map(([verb, count]) => `${verb} ${count}`)
    .join(', ');
const perCopy = (value: number | undefined) => (value === undefined ? '?' : ((value * 1000) / expected).toFixed(2));
const summary: Record<string, unknown> = {};
for (const name of ['create', 'update', 'delete'] as const) {
  for (let rep = 0; rep < reps; rep++) {
    const p = viaPlane[rep][name];
    const d = direct[rep][name];
    console.log(
      `${(rep ? '' : name).padEnd(8)} ${p.seconds.toFixed(2).padStart(6)} s  ${String(p.events).padStart(5)} emitted ${String(p.delivered).padStart(5)} delivered  ${(expected / p.seconds).toFixed(0).padStart(5)} copies/s   ${d.seconds.toFixed(2).padStart(6)} s  ${(expected / d.seconds).toFixed(0).padStart(5)} copies/s   ${(p.seconds / d.seconds).toFixed(2).padStart(5)}x`,
    );
    for (const [side, run] of [
      ['plane', p],
      ['direct', d],
    ] as const)
      console.log(
        `           ${side.padEnd(6)} ${(run.requests.total / expected).toFixed(2)} requests/copy (${verbs(run.requests)}); CPU ms/copy: total ${perCopy(run.cpu?.total)}, apiserver ${perCopy(run.cpu?.apiServer)}, etcd ${perCopy(run.cpu?.etcd)}, function ${perCopy(run.cpu?.functions)}, bench+plane ${perCopy(run.cpu?.bench)} (others ${run.cpu?.others?.toFixed(1) ?? '?'} s, steal ${run.cpu?.steal?.toFixed(1) ?? '?'} s)`,
      );
  }
  const of = (side: Phases[], pick: (phase: Phase) => number) => median(side.map((phases) => pick(phases[name])));
  const [planeSeconds, directSeconds] = [of(viaPlane, (p) => p.seconds), of(direct, (p) => p.seconds)];
  const [planeCpu, directCpu] = [of(viaPlane, (p) => p.cpu?.total ?? NaN), of(direct, (p) => p.cpu?.total ?? NaN)];
  summary[name] = {
    ratio: planeSeconds / directSeconds,
    cpuRatio: planeCpu / directCpu,
    ratios: viaPlane.map((phases, rep) => phases[name].seconds / direct[rep][name].seconds),
    planeSeconds,
    directSeconds,
    emitted: of(viaPlane, (p) => p.events ?? NaN),
    delivered: of(viaPlane, (p) => p.delivered ?? NaN),
    planeRequestsPerCopy: of(viaPlane, (p) => p.requests.total) / expected,
    directRequestsPerCopy: of(direct, (p) => p.requests.total) / expected,
    planeCpuMsPerCopy: (planeCpu * 1000) / expected,
    directCpuMsPerCopy: (directCpu * 1000) / expected,
  };
}
console.log(`\nmedians of ${reps} repetitions (the goal, ≤ 1.5×, is read on these):`);
for (const [name, figures] of Object.entries(summary) as [string, Record<string, number>][])
  console.log(
    `${name.padEnd(8)} ${figures.planeSeconds.toFixed(2)} s vs ${figures.directSeconds.toFixed(2)} s = ${figures.ratio.toFixed(2)}x wall, ${figures.cpuRatio.toFixed(2)}x CPU; ${figures.delivered} delivered; ${figures.planeRequestsPerCopy.toFixed(2)} vs ${figures.directRequestsPerCopy.toFixed(2)} requests/copy`,
  );
writeResults({
  benchmark: 'copyrator',
  label: `${configMapCount}x${activeNamespaces.length}`,
  date: new Date().toISOString(),
  command: `npm run bench:copyrator -- ${process.argv.slice(2).join(' ')}`.trim(),
  copies: expected,
  summary,
  plane: viaPlane,
  direct,
});
