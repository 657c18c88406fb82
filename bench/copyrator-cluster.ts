// Idle CopyratorRules in a cluster full of ConfigMaps that none of them concerns: what settling,
// a resync, and a change made during a resync cost, and how that grows with the cluster's size
// (run with --configmaps 0 beside --configmaps 10000) and with the rules (--rules N beside 5N).
//   npm run bench:copyrator-cluster -- [--rules 1000] [--configmaps 10000] [--bundled]
//   settle   the rules are created (32 at a time) → every one has a status for its generation;
//            beside it, what a perfect controller would write (no function running): each rule
//            created, its finalizer added, its status written, 32 rules at a time
//   resync   the plane's resync event → the function has answered it
//   change   during a second resync, a new source ConfigMap for one rule → its copies in every
//            namespace; beside it, the same copies written directly (16 at a time)
// The rules live in 10 distributing namespaces and select a label no ConfigMap carries (idle);
// the unrelated ConfigMaps are spread over 10 namespaces of their own (harness.ts fillCluster),
// which get copies like every other. Requests are counted by the API server, CPU read from /proc.
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { bundledFunctions } from '../build/index.ts';
import { EventPlane, resyncEvent } from '../eventing/plane.ts';
import copyrator from '../functions/copyrator/index.ts';
import { CopyratorRuleKind, DISTRIBUTE_LABEL, FINALIZER, nextStatus, type CopyratorRule } from '../functions/copyrator/desired.ts';
import { ConfigMap, Namespace, forEachLimited } from '../functions/runtime/index.ts';
import { startTestCluster } from '../test/support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../test/support/rbac.ts';
import { tempDir } from '../test/support/temp.ts';
import { awaitQuiet, requestDifference, type RequestCounts } from './apiserver-metrics.ts';
import { WatchedObjects } from './convergence.ts';
import { cpuBetween, cpuSnapshot, type CpuSeconds } from './cpu-time.ts';
import { benchFlags, fillCluster, planeStateDir, pooled, writeResults } from './harness.ts';

const { values } = benchFlags(
  'npm run bench:copyrator-cluster -- [--rules 1000] [--configmaps 10000] [--bundled]\n' +
    '  --rules       idle CopyratorRules (default 1000)\n' +
    '  --configmaps  unrelated ConfigMaps filling the cluster (default 10000; 0 for the small cluster)\n' +
    '  --bundled     run the function bundled, as npm start does (default: its TypeScript sources)',
  () =>
    parseArgs({
      options: {
        rules: { type: 'string', default: '1000' },
        configmaps: { type: 'string', default: '10000' },
        bundled: { type: 'boolean', default: false },
        help: { type: 'boolean', default: false },
      },
    }),
);
const ruleCount = Number(values.rules);
const configMapCount = Number(values.configmaps);
const RULE_NAMESPACES = 10;

const bundled = values.bundled ? await bundledFunctions(tempDir('opfn-bench-dist-')) : undefined;
const cluster = await startTestCluster();
const { kube } = cluster;

await fillCluster(cluster, kube, ConfigMap, configMapCount, (namespace, name) => ({
  metadata: { name, namespace, labels: { app: 'unrelated' } },
  data: { payload: 'x'.repeat(512) },
}));
const ruleNamespace = (i: number) => `rules-${i % RULE_NAMESPACES}`;
for (let i = 0; i < RULE_NAMESPACES; i++)
  await kube.create(Namespace, { metadata: { name: ruleNamespace(i), labels: { [DISTRIBUTE_LABEL]: 'true' } } });
const rule = (i: number): CopyratorRule => ({
  apiVersion: 'flant.com/v1',
  kind: 'CopyratorRule',
  metadata: { name: `rule-${i}`, namespace: ruleNamespace(i) },
  ruleType: 'configmap',
  selector: { 'bench-rule': `r${i}` },
  namespace: ruleNamespace(i),
});

const state = planeStateDir();
const plane = new EventPlane({
  functions: [copyrator],
  kube,
  kubeconfigPath: await kubeconfigWithDeclaredRbac(cluster.cp, copyrator),
  log: pino({ level: 'silent' }),
  stateDir: state.dir,
  // Warm through the whole run: what is measured is the work, not a cold start.
  idleTimeoutMs: 3_600_000,
  resyncIntervalMs: 0,
  env: { LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'warn' },
  command: bundled?.command,
});
await plane.start();
while (plane.activator.instances(copyrator.name) === 0) await sleep(50);
await awaitQuiet(cluster.cp, { quietMs: 2000 });

interface Window {
  seconds: number;
  requests: RequestCounts;
  cpu?: CpuSeconds;
}
/** From `run` until `done` (or, without it, until the API server is quiet: its last request). */
async function measured(run: () => Promise<unknown>, done?: () => Promise<boolean>, pollMs = 50): Promise<Window> {
  const { totals: before } = await awaitQuiet(cluster.cp, { quietMs: 1000 });
  const cpu0 = cpuSnapshot(cluster.cp.dir);
  const started = performance.now();
  await run();
  if (done) while (!(await done())) await sleep(pollMs);
  const doneAt = performance.now();
  const cpuDone = cpuSnapshot(cluster.cp.dir);
  const { totals: after, lastChangeAt } = await awaitQuiet(cluster.cp, { timeoutMs: 900_000 });
  const seconds = ((done ? doneAt : lastChangeAt) - started) / 1000;
  const cpu = cpuBetween(cpu0, done ? cpuDone : cpuSnapshot(cluster.cp.dir));
  return { seconds, requests: requestDifference(before, after), cpu };
}

// The rules with a status for their generation, as a watch shows them: a poll listing every rule
// would cost the API server more than some of what is measured.
const settledRules = new WatchedObjects<CopyratorRule, true>(kube, CopyratorRuleKind, (rule) =>
  rule.status?.observedGeneration === rule.metadata.generation ? true : undefined,
);
const settle = await measured(
  () => pooled(ruleCount, (i) => kube.create(CopyratorRuleKind, rule(i))),
  async () => settledRules.values.size === ruleCount,
  20,
);
await settledRules.stop();
const delivered = () => Object.values(plane.stats().broker).reduce((sum, trigger) => sum + trigger.delivered, 0);
/** A resync, until the function has answered its event. */
function resyncing(): [() => Promise<unknown>, () => Promise<boolean>] {
  const before = delivered();
  return [() => plane.broker.publish(resyncEvent(copyrator)), async () => delivered() > before];
}
const resync = await measured(...resyncing());

// During a second resync: a new source for rule 0, until its copies are in every target namespace.
const targets = (await kube.list(Namespace)).items.map((ns) => ns.metadata.name!).filter((name) => name !== ruleNamespace(0));
const copiesOf = async (name: string) =>
  (await kube.list(ConfigMap, { fieldSelector: `metadata.name=${name}`, cached: true, metadataOnly: true })).items.filter(
    (cm) => cm.metadata.namespace !== ruleNamespace(0),
  ).length;
let changeSeconds = 0;
const duringResync = await measured(async () => {
  await plane.broker.publish(resyncEvent(copyrator));
  await sleep(200);
  const started = performance.now();
  await kube.create(ConfigMap, {
    metadata: { name: 'new-source', namespace: ruleNamespace(0), labels: { 'bench-rule': 'r0' } },
    data: { payload: 'x'.repeat(512) },
  });
  while ((await copiesOf('new-source')) < targets.length) await sleep(50);
  changeSeconds = (performance.now() - started) / 1000;
});
await plane.stop();
state.release(plane);

// The same copies written directly.
const direct = await measured(() =>
  forEachLimited(targets, 16, async (namespace) => {
    await kube.create(ConfigMap, {
      metadata: { name: 'direct-copy', namespace, labels: { 'bench-rule': 'r0' } },
      data: { payload: 'x'.repeat(512) },
    });
  }),
);
// The settle a perfect controller would give, with no function running: per rule the same
// create, then the finalizer and the status the function writes (nextStatus, as for a rule with no
// source), each answer the next write's base, 32 rules at a time.
const directSettle = await measured(() =>
  pooled(ruleCount, async (i) => {
    const created = await kube.create<CopyratorRule>(CopyratorRuleKind, {
      ...rule(i),
      metadata: { ...rule(i).metadata, name: `direct-${i}` },
    });
    const finalized = await kube.replace<CopyratorRule>(CopyratorRuleKind, {
      ...created,
      metadata: { ...created.metadata, finalizers: [FINALIZER] },
    });
    const status = nextStatus(finalized, finalized, { matched: 0, copies: 0, conflicts: [], failed: 0 }, undefined, '0'.repeat(64));
    await kube.replace(CopyratorRuleKind, { ...finalized, status }, 'status');
  }),
);
await cluster.stop();

const verbs = (requests: RequestCounts) =>
  Object.entries(requests.byResource)
    .filter(([, count]) => count > 0)
    .sort(([, a], [, b]) => b - a)
    .slice(0, 6)
    .map(([what, count]) => `${what} ${count}`)
    .join(', ');
const cpuLine = (cpu?: CpuSeconds) =>
  cpu
    ? `CPU s: apiserver ${cpu.apiServer.toFixed(1)}, etcd ${cpu.etcd.toFixed(1)}, function ${cpu.functions.toFixed(1)}, bench+plane ${cpu.bench.toFixed(1)} (others ${cpu.others?.toFixed(1) ?? '?'}, steal ${cpu.steal?.toFixed(1) ?? '?'})`
    : 'CPU: not measured';
console.log(
  `CopyratorRule: ${ruleCount} idle rules, ${configMapCount} unrelated ConfigMaps, ${targets.length} target namespaces${values.bundled ? ' (function bundled)' : ''}`,
);
for (const [name, window] of [
  ['settle', settle],
  ['resync', resync],
] as const) {
  console.log(
    `${name.padEnd(7)} ${window.seconds.toFixed(2).padStart(7)} s  ${(window.requests.total / ruleCount).toFixed(2)} requests/rule (${verbs(window.requests)})`,
  );
  console.log(
    `        apiserver ${(window.cpu ? window.cpu.apiServer / window.seconds : 0).toFixed(2)} core; ${cpuLine(window.cpu)}; CPU ms/rule ${window.cpu ? ((window.cpu.total * 1000) / ruleCount).toFixed(2) : '?'}`,
  );
}
console.log(
  `direct  ${directSettle.seconds.toFixed(2).padStart(7)} s  ${(directSettle.requests.total / ruleCount).toFixed(2)} requests/rule (${verbs(directSettle.requests)}); settle / direct ${(settle.seconds / directSettle.seconds).toFixed(2)}x`,
);
console.log(
  `        apiserver ${(directSettle.cpu ? directSettle.cpu.apiServer / directSettle.seconds : 0).toFixed(2)} core; ${cpuLine(directSettle.cpu)}; CPU ms/rule ${directSettle.cpu ? ((directSettle.cpu.total * 1000) / ruleCount).toFixed(2) : '?'}`,
);
console.log(
  `change  a new source during a resync: its ${targets.length} copies in ${changeSeconds.toFixed(2)} s (direct writes of the same copies: ${direct.seconds.toFixed(2)} s, ${(changeSeconds / direct.seconds).toFixed(2)}x); the resync with it: ${duringResync.seconds.toFixed(2)} s, ${duringResync.requests.total} requests`,
);
writeResults({
  benchmark: 'copyrator-cluster',
  label: `${ruleCount}r-${configMapCount}cm`,
  date: new Date().toISOString(),
  command: `npm run bench:copyrator-cluster -- ${process.argv.slice(2).join(' ')}`.trim(),
  summary: {
    settleSeconds: settle.seconds,
    settleRequestsPerRule: settle.requests.total / ruleCount,
    settleCpuMsPerRule: settle.cpu ? (settle.cpu.total * 1000) / ruleCount : undefined,
    directSettleSeconds: directSettle.seconds,
    directSettleCpuMsPerRule: directSettle.cpu ? (directSettle.cpu.total * 1000) / ruleCount : undefined,
    resyncSeconds: resync.seconds,
    resyncRequestsPerRule: resync.requests.total / ruleCount,
    resyncApiServerCores: resync.cpu ? resync.cpu.apiServer / resync.seconds : undefined,
    resyncCpuMsPerRule: resync.cpu ? (resync.cpu.total * 1000) / ruleCount : undefined,
    changeSeconds,
    directSeconds: direct.seconds,
  },
  settle,
  resync,
  duringResync,
  direct,
  directSettle,
});
