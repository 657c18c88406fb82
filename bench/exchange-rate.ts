// ExchangeRates converging through the local plane vs direct writes of the same objects, side by
// side in one run against one real control plane, then what a resync of them costs:
//
//   plane   as `npm start` runs it: the function bundled, behind the plane's source, broker and
//           activator, asking the loopback rate provider (test/support/rate-provider.ts, the
//           Frankfurter stand-in; the real endpoint stays the product's default). The function
//           has converged `--warm` objects first (V8 has compiled its hot path, its connections
//           are open, its slot cache holds the refresh slot's answer, as in a running install).
//           The user creates N ExchangeRates, 32 at a time; the function makes each ConfigMap and
//           writes each status
//   direct  one writer does the end state itself, 32 at a time: create the ExchangeRate, create
//           its ConfigMap (the function's own desiredConfigMap) and write the status the
//           function would write (its nextStatus) with one PUT, from one provider answer
//   resync  the function's resync ping (its PingSource's event, published to the plane's
//           broker) once the plane's N objects have converged: the runtime lists ExchangeRates
//           and reconciles every one; nothing is due, so nothing should be written. Timed until
//           the broker is idle again (the delivery answered); requests counted until the API server is quiet
//
// Converged: status holds the provider's rate, names the ConfigMap, observes the generation, and
// Ready is True, seen by a watch. Requests per object are counted by the API server itself
// (apiserver_request_total, bench/apiserver-metrics.ts) from the first create until it is quiet
// again; CPU seconds over the same window (bench/cpu-time.ts: this process, the function
// processes, kube-apiserver, etcd). kube-controller-manager is not started (its garbage
// collector reads each new ConfigMap's owner: the same load on both sides).
//
// Cluster size (`--unrelated-configmaps 0,10000`): the plane's source watches ConfigMaps (by the
// owner label); each size after the first fills the cluster with that many unrelated ConfigMaps
// (fillCluster) and runs every side again in the same control plane.
//
// Usage: npm run bench:exchange-rate -- [--n 2000] [--warm 200] [--unrelated-configmaps 0] [--label local]
// Writes its results as JSON outside the repository (bench/harness.ts, resultsFolder).
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { bundledFunctions } from '../build/index.ts';
import { EventPlane, resyncEvent } from '../eventing/plane.ts';
import exchangeRate from '../functions/exchange-rate/index.ts';
import {
  desiredConfigMap,
  ExchangeRateKind,
  nextStatus,
  slotEnd,
  slotOf,
  type ExchangeRate,
  type RateConfigMap,
  type RateValues,
} from '../functions/exchange-rate/desired.ts';
import { ConfigMap, KubeClient, type KubeObject } from '../functions/runtime/index.ts';
import { startTestCluster, type TestCluster } from '../test/support/cluster.ts';
import { startRateProvider, type StandInProvider } from '../test/support/rate-provider.ts';
import { tempDir } from '../test/support/temp.ts';
import { awaitQuiet, requestDifference, type RequestCounts } from './apiserver-metrics.ts';
import { ConvergenceWatch } from './convergence.ts';
import { cpuBetween, cpuSnapshot, type CpuSeconds } from './cpu-time.ts';
import {
  benchFlags,
  clearNamespace,
  brokerTotal,
  CONCURRENCY,
  createNamespace,
  fillCluster,
  measure,
  planeStateDir,
  pooled,
  writeResults,
  type Measured,
} from './harness.ts';

/** The refresh interval of both sides: the function's default (an hour), so no refresh falls inside a run. */
const REFRESH_SECONDS = 3600;
const CURRENCIES = ['CAD', 'CHF', 'GBP', 'JPY', 'PLN', 'USD'];
const currencyOf = (i: number) => CURRENCIES[i % CURRENCIES.length]!;

const newRate = (namespace: string, name: string, currency: string): ExchangeRate => ({
  apiVersion: 'operators.brennerm.github.io/v1',
  kind: 'ExchangeRate',
  metadata: { name, namespace },
  spec: { currency },
});

/** The stand-in's rate of the object's currency in status, the ConfigMap named, the generation observed, Ready. */
const convergedOn =
  (provider: StandInProvider) =>
  (object: KubeObject): boolean => {
    const rate = object as ExchangeRate;
    const status = rate.status;
    return (
      status?.rate === String(provider.rates[rate.spec.currency]) &&
      status.configMap === rate.metadata.name &&
      status.observedGeneration === rate.metadata.generation &&
      status.conditions?.some((condition) => condition.type === 'Ready' && condition.status === 'True') === true
    );
  };

interface ResyncResult {
  /** publish → the broker is idle again: the resync's delivery answered */
  ms: number;
  quietMs: number;
  requests: RequestCounts;
  requestsPerObject: number;
  cpu?: CpuSeconds;
  providerRequests: number;
}

interface RunResult extends Measured {
  side: 'plane' | 'direct';
  n: number;
  unrelatedConfigMaps: number;
  /** requests the rate provider received during the measured burst */
  providerRequests: number;
  /** objects without exactly their ConfigMap and status at the end */
  anomalies: string[];
  /** plane only: events the source emitted during the burst */
  events?: number;
  /** plane only: the resync of the N converged objects */
  resync?: ResyncResult;
}

/** Each object has its ConfigMap with the stand-in's rate and a converged status; else what differs. */
async function anomalies(kube: KubeClient, provider: StandInProvider, namespace: string, n: number): Promise<string[]> {
  const rates = (await kube.list<ExchangeRate>(ExchangeRateKind, { namespace })).items;
  const configMaps = new Map(
    (await kube.list<RateConfigMap>(ConfigMap, { namespace })).items.map((configMap) => [configMap.metadata.name!, configMap]),
  );
  const converged = convergedOn(provider);
  const found = rates
    .filter((rate) => !converged(rate) || configMaps.get(rate.metadata.name!)?.data?.rate !== rate.status?.rate)
    .map(
      (rate) =>
        `${rate.metadata.name}: status rate ${rate.status?.rate}, ConfigMap rate ${configMaps.get(rate.metadata.name!)?.data?.rate}`,
    );
  if (rates.length !== n) found.unshift(`${rates.length} ExchangeRates instead of ${n}`);
  return found;
}

const watchRates = (kube: KubeClient, namespace: string, provider: StandInProvider) =>
  new ConvergenceWatch(kube, namespace, { kind: ExchangeRateKind, converged: convergedOn(provider) });

/** The resync ping through the plane's broker, timed until the broker is idle again, requests counted until quiet. */
async function resync(cluster: TestCluster, plane: EventPlane, provider: StandInProvider, n: number): Promise<ResyncResult> {
  const { totals: before } = await awaitQuiet(cluster.cp, { quietMs: 1000 });
  const providerBefore = provider.requests.length;
  const cpuBefore = cpuSnapshot(cluster.cp.dir);
  const started = performance.now();
  await plane.broker.publish(resyncEvent(exchangeRate));
  // Idle: the resync's delivery answered, and any reply it made delivered (held requeues aside).
  const limit = Math.max(120_000, n * 100);
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    plane.broker.idle(),
    new Promise(
      (_, reject) => (timer = setTimeout(() => reject(new Error(`the resync was not answered within ${limit / 1000} s`)), limit)),
    ),
  ]).finally(() => clearTimeout(timer));
  const ms = performance.now() - started;
  const { totals: after, lastChangeAt } = await awaitQuiet(cluster.cp);
  const requests = requestDifference(before, after);
  return {
    ms,
    quietMs: Math.max(ms, lastChangeAt - started),
    requests,
    requestsPerObject: requests.total / n,
    cpu: cpuBetween(cpuBefore, cpuSnapshot(cluster.cp.dir)),
    providerRequests: provider.requests.length - providerBefore,
  };
}

async function runPlane(
  cluster: TestCluster,
  options: {
    n: number;
    round: string;
    warmObjects: number;
    unrelatedConfigMaps: number;
    bundled: Awaited<ReturnType<typeof bundledFunctions>>;
    provider: StandInProvider;
    writer: KubeClient;
    watcher: KubeClient;
  },
): Promise<RunResult> {
  const { n, round, warmObjects, provider, writer, watcher } = options;
  const namespace = `plane-${round}`;
  const warmNamespace = `warm-plane-${round}`;
  await createNamespace(cluster, namespace);
  await createNamespace(cluster, warmNamespace);
  const state = planeStateDir();
  const plane = new EventPlane({
    functions: [exchangeRate],
    kube: KubeClient.fromFile(cluster.cp.kubeconfigPath),
    // Admin identity for the function and the sources: ServiceAccount tokens need
    // kube-controller-manager, which stays off (see above); identities change no request count.
    kubeconfigPath: cluster.cp.kubeconfigPath,
    log: pino({ level: 'silent' }),
    stateDir: state.dir,
    idleTimeoutMs: 120_000,
    // Resyncs only when the bench sends one.
    resyncIntervalMs: 0,
    env: { LOG_LEVEL: 'warn', EXCHANGE_RATE_PROVIDER_URL: provider.url, EXCHANGE_RATE_REFRESH_SECONDS: String(REFRESH_SECONDS) },
    command: options.bundled.command,
  });
  await plane.start();
  try {
    const warm = watchRates(watcher, warmNamespace, provider);
    await pooled(warmObjects, (i) => writer.create(ExchangeRateKind, newRate(warmNamespace, `warm-${i}`, currencyOf(i))));
    await warm.until(warmObjects, 120_000);
    await warm.stop();
    const emittedBefore = plane.source.stats().emitted;
    const providerBefore = provider.requests.length;
    const measured = await measure(cluster, watchRates(watcher, namespace, provider), n, () =>
      pooled(n, (i) => writer.create(ExchangeRateKind, newRate(namespace, `rate-${i}`, currencyOf(i)))),
    );
    const providerRequests = provider.requests.length - providerBefore;
    const events = plane.source.stats().emitted - emittedBefore;
    // The warm namespace goes first: the resync then lists the N measured objects only.
    await clearNamespace(cluster, warmNamespace, [ExchangeRateKind, ConfigMap]);
    await awaitQuiet(cluster.cp);
    const resynced = await resync(cluster, plane, provider, n);
    const found = await anomalies(writer, provider, namespace, n);
    const deadLetters = brokerTotal(plane, 'deadLettered');
    if (deadLetters) found.unshift(`${deadLetters} events dead-lettered (${plane.broker.deadLetterFile})`);
    return {
      side: 'plane',
      n,
      unrelatedConfigMaps: options.unrelatedConfigMaps,
      ...measured,
      providerRequests,
      anomalies: found,
      events,
      resync: resynced,
    };
  } finally {
    await plane.stop();
    state.release(plane);
    await clearNamespace(cluster, namespace, [ExchangeRateKind, ConfigMap]);
    await clearNamespace(cluster, warmNamespace, [ExchangeRateKind, ConfigMap]);
  }
}

async function runDirect(
  cluster: TestCluster,
  options: { n: number; round: string; unrelatedConfigMaps: number; provider: StandInProvider; writer: KubeClient; watcher: KubeClient },
): Promise<RunResult> {
  const { n, round, provider, writer, watcher } = options;
  const namespace = `direct-${round}`;
  await createNamespace(cluster, namespace);
  try {
    const providerBefore = provider.requests.length;
    const measured = await measure(cluster, watchRates(watcher, namespace, provider), n, async () => {
      // One provider answer for every object, as the function's slot cache shares one.
      const answer = (await (await fetch(`${provider.url}/v1/latest?from=EUR&to=${CURRENCIES.join(',')}`)).json()) as {
        base: string;
        date: string;
        rates: Record<string, number>;
      };
      await pooled(n, async (i) => {
        const currency = currencyOf(i);
        const values: RateValues = { rate: String(answer.rates[currency]), base: answer.base, date: answer.date };
        const owner = await writer.create<ExchangeRate>(ExchangeRateKind, newRate(namespace, `rate-${i}`, currency));
        await writer.create(ConfigMap, desiredConfigMap(owner, values));
        const now = new Date();
        const status = nextStatus(owner, owner, {
          fetched: values,
          now,
          nextRefreshAt: slotEnd(slotOf(now, REFRESH_SECONDS), REFRESH_SECONDS),
        });
        await writer.replace(ExchangeRateKind, { ...owner, status }, 'status');
      });
    });
    return {
      side: 'direct',
      n,
      unrelatedConfigMaps: options.unrelatedConfigMaps,
      ...measured,
      providerRequests: provider.requests.length - providerBefore,
      anomalies: await anomalies(writer, provider, namespace, n),
    };
  } finally {
    await clearNamespace(cluster, namespace, [ExchangeRateKind, ConfigMap]);
  }
}

const perObject = (seconds: number | undefined, n: number) => (seconds === undefined ? '-' : ((seconds * 1000) / n).toFixed(2));
const byResource = (requests: RequestCounts, n: number) =>
  Object.entries(requests.byResource)
    .filter(([, count]) => count / n >= 0.005)
    .sort()
    .map(([key, count]) => `${key} ${(count / n).toFixed(2)}`)
    .join(', ');
const failed = (requests: RequestCounts) => {
  const entries = Object.entries(requests.failed).sort();
  return entries.length ? `; not 2xx: ${entries.map(([key, count]) => `${key} ×${count}`).join(', ')}` : '';
};

async function main(): Promise<void> {
  const { values } = benchFlags(
    'npm run bench:exchange-rate -- [--n 2000] [--warm 200] [--unrelated-configmaps 0] [--label name]\n' +
      '  --n                     ExchangeRates per run, a list runs each (default 2000)\n' +
      '  --warm                  objects the function converges before each measured burst (default 200)\n' +
      '  --unrelated-configmaps  cluster sizes: unrelated ConfigMaps in the cluster, a list runs each in turn (default 0; e.g. 0,10000)\n' +
      '  --label                 a name for this run, part of the result file name (default local)',
    () =>
      parseArgs({
        options: {
          n: { type: 'string', default: '2000' },
          warm: { type: 'string', default: '200' },
          'unrelated-configmaps': { type: 'string', default: '0' },
          label: { type: 'string', default: 'local' },
          help: { type: 'boolean', default: false },
        },
      }),
  );
  const sizes = values.n.split(',').map(Number);
  const clusterSizes = values['unrelated-configmaps'].split(',').map(Number);
  const warmObjects = Number(values.warm);
  if (
    sizes.some((n) => !Number.isInteger(n) || n < 1) ||
    clusterSizes.some((count, index) => !Number.isInteger(count) || count < 0 || (index > 0 && count < clusterSizes[index - 1]!)) ||
    !Number.isInteger(warmObjects) ||
    warmObjects < 1
  ) {
    console.error(
      `--n takes positive integers separated by commas (got "${values.n}"), --unrelated-configmaps growing counts (got "${values['unrelated-configmaps']}"), --warm a positive integer (got "${values.warm}")`,
    );
    process.exit(2);
  }
  const bundled = await bundledFunctions(tempDir('opfn-bench-dist-'));
  const [cluster, provider] = await Promise.all([startTestCluster({ controllerManager: false }), startRateProvider()]);
  const writer = KubeClient.fromFile(cluster.cp.kubeconfigPath);
  const watcher = KubeClient.fromFile(cluster.cp.kubeconfigPath);
  const results: RunResult[] = [];
  let filled = 0;
  try {
    // Unmeasured: compiles this process's code (plane, writer, watch) and writes the bundle's code cache.
    process.stderr.write(`warm-up round (not measured): ${warmObjects} objects through the plane, then written directly\n`);
    const common = { provider, writer, watcher, unrelatedConfigMaps: 0 };
    await runPlane(cluster, { ...common, n: warmObjects, round: 'warm-up', warmObjects: 1, bundled });
    await runDirect(cluster, { ...common, n: warmObjects, round: 'warm-up' });
    for (const unrelated of clusterSizes) {
      if (unrelated > filled) {
        await fillCluster(cluster, writer, ConfigMap, unrelated - filled, (namespace, name) => ({
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: { namespace, name: `${name}-${filled}` },
          data: { unrelated: 'yes' },
        }));
        filled = unrelated;
      }
      for (const n of sizes) {
        for (const side of ['plane', 'direct'] as const) {
          const round = `${n}-${unrelated}`;
          const options = { ...common, n, round, unrelatedConfigMaps: unrelated };
          const result =
            side === 'plane' ? await runPlane(cluster, { ...options, warmObjects, bundled }) : await runDirect(cluster, options);
          results.push(result);
          process.stderr.write(
            `N=${n} unrelated ConfigMaps ${unrelated} ${side}: converged ${(result.convergedMs / 1000).toFixed(2)} s, ${result.requestsPerObject.toFixed(2)} requests/object${result.resync ? `; resync ${(result.resync.ms / 1000).toFixed(2)} s, ${result.resync.requestsPerObject.toFixed(3)} requests/object` : ''}${result.anomalies.length ? `, ANOMALIES ${result.anomalies.slice(0, 3).join('; ')}` : ''}\n`,
          );
        }
      }
    }
  } finally {
    await provider.close();
    await cluster.stop();
  }

  const environment = {
    node: process.version,
    cpus: cpus().length,
    cpu: cpus()[0]?.model,
    loadavg: loadavg(),
    functions: 'esbuild bundles + code cache',
    concurrency: CONCURRENCY,
    warmObjects,
  };
  console.log(
    `\nExchangeRates (loopback rate provider): plane vs pooled direct writes (${CONCURRENCY} at a time, one KubeClient pool), completion by watch; requests from apiserver_request_total until quiet`,
  );
  console.log(
    `node ${environment.node}, ${environment.cpus} CPU(s), load ${environment.loadavg.map((x) => x.toFixed(2)).join(' ')}; each plane burst on a function process that first converged ${warmObjects} object(s)\n`,
  );
  const neighbours = (cpu: CpuSeconds | undefined) =>
    cpu?.others === undefined ? '-' : `${cpu.others.toFixed(2)}/${(cpu.steal ?? 0).toFixed(2)}`;
  console.log(
    'N      unrelated  side    converged s  quiet s  req/object  CPU ms/object (bench+fn+apiserver+etcd)  neighbours s  provider requests',
  );
  for (const r of results) {
    const cpu = r.cpu
      ? `${perObject(r.cpu.total, r.n)} (${[r.cpu.bench, r.cpu.functions, r.cpu.apiServer, r.cpu.etcd].map((s) => perObject(s, r.n)).join('+')})`
      : '-';
    console.log(
      `${String(r.n).padEnd(5)}  ${String(r.unrelatedConfigMaps).padStart(9)}  ${r.side.padEnd(6)}  ${(r.convergedMs / 1000).toFixed(2).padStart(11)}  ${(r.quietMs / 1000).toFixed(2).padStart(7)}  ${r.requestsPerObject.toFixed(2).padStart(10)}  ${cpu.padStart(39)}  ${neighbours(r.cpuToConvergence).padStart(12)}  ${String(r.providerRequests).padStart(17)}`,
    );
  }
  console.log('\nratios to direct writes; the goal is ≤ 1.5× at N=2000, and a resync of ≤ 1 request per object:');
  const summary = results
    .filter((r) => r.side === 'plane')
    .map((plane) => {
      const direct = results.find((r) => r.side === 'direct' && r.n === plane.n && r.unrelatedConfigMaps === plane.unrelatedConfigMaps)!;
      const row = {
        n: plane.n,
        unrelatedConfigMaps: plane.unrelatedConfigMaps,
        planeSeconds: plane.convergedMs / 1000,
        directSeconds: direct.convergedMs / 1000,
        convergenceRatio: plane.convergedMs / direct.convergedMs,
        cpuToConvergenceRatio: (plane.cpuToConvergence?.total ?? NaN) / (direct.cpuToConvergence?.total ?? NaN),
        planeRequestsPerObject: plane.requestsPerObject,
        directRequestsPerObject: direct.requestsPerObject,
        planeCpuMsPerObject: ((plane.cpu?.total ?? NaN) * 1000) / plane.n,
        directCpuMsPerObject: ((direct.cpu?.total ?? NaN) * 1000) / direct.n,
        functionCpuMsPerObject: ((plane.cpuToConvergence?.functions ?? NaN) * 1000) / plane.n,
        providerRequests: plane.providerRequests,
        resyncSeconds: plane.resync!.ms / 1000,
        resyncRequestsPerObject: plane.resync!.requestsPerObject,
        resyncCpuMsPerObject: ((plane.resync!.cpu?.total ?? NaN) * 1000) / plane.n,
        resyncProviderRequests: plane.resync!.providerRequests,
      };
      console.log(
        `  N=${String(row.n).padEnd(5)} unrelated ConfigMaps ${String(row.unrelatedConfigMaps).padEnd(6)} convergence ${row.convergenceRatio.toFixed(2)}× (${row.planeSeconds.toFixed(2)} s vs ${row.directSeconds.toFixed(2)} s)   CPU ${row.cpuToConvergenceRatio.toFixed(2)}× to convergence; function ${row.functionCpuMsPerObject.toFixed(2)} ms/object   requests/object ${row.planeRequestsPerObject.toFixed(2)} vs ${row.directRequestsPerObject.toFixed(2)}   provider requests ${row.providerRequests}`,
      );
      console.log(
        `  ${' '.repeat(34)}resync ${row.resyncSeconds.toFixed(2)} s, ${row.resyncRequestsPerObject.toFixed(3)} requests/object, CPU ${row.resyncCpuMsPerObject.toFixed(2)} ms/object, provider requests ${row.resyncProviderRequests}`,
      );
      return row;
    });
  console.log('\nrequests per object by verb and resource:');
  for (const r of results) {
    const label = `N=${r.n} unrelated ${r.unrelatedConfigMaps}`;
    console.log(`  ${label} ${r.side.padEnd(6)} ${byResource(r.requests, r.n)}${failed(r.requests)}`);
    // A resync's requests are few: counted, not divided.
    if (r.resync)
      console.log(
        `  ${label} resync ${Object.entries(r.resync.requests.byResource)
          .sort()
          .map(([key, count]) => `${key} ×${count}`)
          .join(', ')}${failed(r.resync.requests)}`,
      );
  }
  console.log("(below 0.005 per object not shown: the API server's own controllers)");
  console.log();
  writeResults({
    benchmark: 'exchange-rate',
    label: values.label,
    date: new Date().toISOString(),
    command: `npm run bench:exchange-rate -- ${process.argv.slice(2).join(' ')}`.trim(),
    environment,
    summary,
    runs: results,
  });
}

try {
  await main();
} catch (error) {
  console.error(`bench: ${(error as Error).stack ?? (error as Error).message}`);
  process.exit(1);
}
