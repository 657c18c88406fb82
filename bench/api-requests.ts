// Kubernetes API requests per reconcile of ImmortalContainer, counted by the API server itself:
// `apiserver_request_total` from kube-apiserver's /metrics (summed over every label set) just
// before and just after each delivery. Cases:
//   create    a new ImmortalContainer, its add event (Reference mode)
//   no-op     the same add event delivered again (a retrying sender), nothing to do
//   own-status the update event of the function's own status write (Resource mode, as the
//             source sends the reconciled kind): generation == observedGeneration, skippable
//   recreate  its pod deleted, the pod's delete event (Resource mode, as the source sends for
//             owned kinds)
// The control plane runs without kube-controller-manager by default: its garbage collector
// reacts to each new pod by reading the pod's owner (a varying number of requests inside the
// window, depending on timing), which is load caused by the pod, not by the reconcile;
// --controller-manager keeps it in. The API server's own loopback controllers remain, so each
// case runs --reps times and the table shows the most common count (how many repetitions agree
// is printed); "scrape pair" is two scrapes with nothing in between: what the measurement itself
// and the background add. The function's own count
// (opfn_kube_api_requests_total) is printed alongside as a cross-check.
//
// Usage: npm run bench:api-requests -- [--reps N] [--label L] [--controller-manager]   (default 5 repetitions)
// Writes its results as JSON outside the repository (bench/harness.ts, resultsFolder).
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import type { CloudEvent } from 'cloudevents';
import { apiServerSourceEvent } from '../eventing/apiserver-events.ts';
import immortalContainer from '../functions/immortal-container/index.ts';
import { ImmortalContainerKind, type ImmortalContainer, type PodObject } from '../functions/immortal-container/desired.ts';
import { Pod } from '../functions/runtime/index.ts';
import { deliver, serveFunction, startTestCluster, type TestCluster } from '../test/support/cluster.ts';
import { requestDifference, scrapeRequestTotals, type RequestCounts } from './apiserver-metrics.ts';
import { benchFlags, writeResults } from './harness.ts';

/** Counters are incremented when the handler returns, a moment after the client has its answer. */
const SETTLE_MS = 150;
const CASES = ['scrape pair', 'create', 'no-op', 'own-status', 'recreate'] as const;
type Case = (typeof CASES)[number];
type Counts = RequestCounts;

/** Requests the API server counted while `action` ran. */
async function measure(cluster: TestCluster, action: () => Promise<void>): Promise<Counts> {
  await sleep(SETTLE_MS);
  const before = await scrapeRequestTotals(cluster.cp);
  await action();
  await sleep(SETTLE_MS);
  // Non-resource paths (the /metrics scrape itself) stay in, under "(other)".
  return requestDifference(before, await scrapeRequestTotals(cluster.cp), true);
}

/** The most common result of the repetitions and how many had it. */
function mode(results: Counts[]): { counts: Counts; agree: number } {
  const tally = new Map<string, { counts: Counts; agree: number }>();
  for (const counts of results) {
    const key = JSON.stringify(Object.entries(counts.byResource).sort());
    const entry = tally.get(key) ?? { counts, agree: 0 };
    entry.agree++;
    tally.set(key, entry);
  }
  return [...tally.values()].sort((a, b) => b.agree - a.agree || a.counts.total - b.counts.total)[0];
}

async function main(): Promise<void> {
  const { values } = benchFlags(
    'npm run bench:api-requests -- [--reps 5] [--label name] [--controller-manager]\n' +
      '  --reps    repetitions of each case; the table shows the most common count (default 5)\n' +
      '  --label   a name for this run, part of the result file name (default local)\n' +
      "  --controller-manager  also run kube-controller-manager (its garbage collector reads new pods' owners)",
    () =>
      parseArgs({
        options: {
          reps: { type: 'string', default: '5' },
          label: { type: 'string', default: 'local' },
          'controller-manager': { type: 'boolean', default: false },
          help: { type: 'boolean', default: false },
        },
      }),
  );
  const reps = Number(values.reps);
  if (!Number.isInteger(reps) || reps < 1) {
    console.error(`--reps must be a positive integer, got "${values.reps}"`);
    process.exit(2);
  }

  // kube-controller-manager's garbage collector reads new pods' owners at unpredictable moments;
  // nothing here needs it unless asked for.
  const cluster = await startTestCluster({ controllerManager: values['controller-manager'] });
  // Served as in production: every request the function makes is counted in its own metrics too.
  const fn = await serveFunction(immortalContainer, cluster.cp.kubeconfigPath);
  const { metrics, url } = fn;

  const results = new Map<Case, Counts[]>(CASES.map((name) => [name, []]));
  const clientSide = new Map<Case, Record<string, number>[]>(CASES.map((name) => [name, []]));
  const clientCounts = async () =>
    Object.fromEntries(
      (await metrics.apiRequests.get()).values.map((value) => [
        `${value.labels.verb} ${value.labels.resource} ${value.labels.code}`,
        value.value,
      ]),
    );

  const run = async (name: Case, action: () => Promise<void>) => {
    const clientBefore = await clientCounts();
    results.get(name)!.push(await measure(cluster, action));
    const clientAfter = await clientCounts();
    clientSide.get(name)!.push(
      Object.fromEntries(
        Object.entries(clientAfter)
          .map(([key, value]) => [key, value - (clientBefore[key] ?? 0)])
          .filter(([, value]) => value !== 0),
      ),
    );
  };
  const deliverOk = async (event: CloudEvent<unknown>) => {
    const answer = await deliver(url, event);
    if (answer.status !== 200) throw new Error(`delivery answered ${answer.status}: ${JSON.stringify(answer.body)}`);
  };

  try {
    // Warm up connections (and the function's code) on an object of its own; let the
    // controller manager's start-up burst pass.
    const warm = await cluster.kube.create<ImmortalContainer>(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name: 'api-warmup', namespace: 'default' },
      spec: { image: 'nginx' },
    });
    await deliverOk(
      apiServerSourceEvent({ server: cluster.cp.server, kind: ImmortalContainerKind, object: warm, action: 'add', mode: 'Reference' }),
    );
    await sleep(2000);

    for (let rep = 0; rep < reps; rep++) {
      const name = `api-${rep}`;
      const podKey = { namespace: 'default', name: `${name}-immortalpod` };
      await run('scrape pair', async () => {});

      const ic = await cluster.kube.create<ImmortalContainer>(ImmortalContainerKind, {
        apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
        kind: 'ImmortalContainer',
        metadata: { name, namespace: 'default' },
        spec: { image: 'nginx' },
      });
      const added = apiServerSourceEvent({
        server: cluster.cp.server,
        kind: ImmortalContainerKind,
        object: ic,
        action: 'add',
        mode: 'Reference',
      });
      await run('create', () => deliverOk(added));

      await run('no-op', () => deliverOk(added));

      const written = (await cluster.kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'default', name }))!;
      await run('own-status', () =>
        deliverOk(
          apiServerSourceEvent({
            server: cluster.cp.server,
            kind: ImmortalContainerKind,
            object: written,
            action: 'update',
            mode: 'Resource',
          }),
        ),
      );

      const pod = (await cluster.kube.get<PodObject>(Pod, podKey))!;
      await cluster.kube.delete(Pod, podKey);
      await run('recreate', () =>
        deliverOk(apiServerSourceEvent({ server: cluster.cp.server, kind: Pod, object: pod, action: 'delete', mode: 'Resource' })),
      );
      const status = (await cluster.kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'default', name }))?.status;
      if (status?.startTimes !== 2 || !(await cluster.kube.get(Pod, podKey)))
        throw new Error(`${name}: expected a recreated pod and startTimes 2, got startTimes ${status?.startTimes}`);
    }
  } finally {
    await fn.close();
    await cluster.stop();
  }

  const chosen = new Map(CASES.map((name) => [name, mode(results.get(name)!)]));
  const table = (title: string, keyOf: (counts: Counts) => Record<string, number>) => {
    const rows = [...new Set(CASES.flatMap((name) => Object.keys(keyOf(chosen.get(name)!.counts))))].sort();
    const header = [title, ...CASES];
    const body = [
      ...rows.map((row) => [row, ...CASES.map((name) => String(keyOf(chosen.get(name)!.counts)[row] ?? 0))]),
      ['total', ...CASES.map((name) => String(chosen.get(name)!.counts.total))],
      ['agree', ...CASES.map((name) => `${chosen.get(name)!.agree}/${reps}`)],
    ];
    const widths = header.map((cell, column) => Math.max(cell.length, ...body.map((row) => row[column].length)));
    const line = (cells: string[]) =>
      cells.map((cell, column) => (column === 0 ? cell.padEnd(widths[column]) : cell.padStart(widths[column]))).join('  ');
    console.log(line(header));
    for (const row of body) console.log(line(row));
  };

  console.log(
    `API requests per reconcile (kube-apiserver apiserver_request_total, after − before; most common of ${reps} repetitions; kube-controller-manager ${values['controller-manager'] ? 'running' : 'not running'})\n`,
  );
  table('verb', (counts) => counts.byVerb);
  console.log('');
  table('verb resource', (counts) => counts.byResource);
  console.log("\nthe function's own count (opfn_kube_api_requests_total: verb resource code), same repetitions:");
  for (const name of CASES.slice(1)) {
    const seen = new Map<string, number>();
    for (const counts of clientSide.get(name)!) seen.set(JSON.stringify(counts), (seen.get(JSON.stringify(counts)) ?? 0) + 1);
    for (const [counts, times] of seen)
      console.log(
        `  ${name.padEnd(9)} ${times}/${reps}: ${Object.entries(JSON.parse(counts) as Record<string, number>)
          .map(([key, value]) => `${key} ×${value}`)
          .join(', ')}`,
      );
  }
  const outliers = CASES.flatMap((name) =>
    results
      .get(name)!
      .filter((counts) => counts.total !== chosen.get(name)!.counts.total)
      .map(
        (counts) =>
          `${name}: ${counts.total} (${Object.entries(counts.byResource)
            .map(([key, value]) => `${key} ×${value}`)
            .join(', ')})`,
      ),
  );
  if (outliers.length)
    console.log(`\nrepetitions that differ (other clients of the API server at the same moment):\n  ${outliers.join('\n  ')}`);

  writeResults(
    {
      benchmark: 'api-requests',
      label: values.label,
      date: new Date().toISOString(),
      command: `npm run bench:api-requests -- ${process.argv.slice(2).join(' ')}`.trim(),
      chosen: Object.fromEntries(CASES.map((name) => [name, { ...chosen.get(name)!.counts, agree: `${chosen.get(name)!.agree}/${reps}` }])),
      outliers,
    },
    'chosen',
  );
}

await main();
