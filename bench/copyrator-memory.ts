// What one CopyratorRule with very many copies costs the copyrator function: one rule copying
// --configmaps ConfigMaps of 1 KiB into --namespaces namespaces, reconciled three times (the
// first makes every copy, the next two find them in place) by the function served in a child
// process under a V8 heap limit of --heap MiB, against a real control plane run by this one
// (which outlives the child when it runs out of memory). Prints per reconcile its time, its API
// requests, and the peak heap and RSS of the function's process, sampled every 20 ms. A delivery
// stops at its deadline (30 s) and hands the rule on in its reply, which is delivered again at once
// as the broker would: a reconcile's row counts its deliveries.
//
//   npm run bench:copyrator-memory -- [--configmaps 50] [--namespaces 2000] [--heap 160]
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { CloudEvent } from 'cloudevents';
import copyrator from '../functions/copyrator/index.ts';
import { CopyratorRuleKind, DISTRIBUTE_LABEL } from '../functions/copyrator/desired.ts';
import { ConfigMap, Namespace } from '../functions/runtime/index.ts';
import { deliver, kubeFor, serveFunction, startTestCluster } from '../test/support/cluster.ts';
import { benchFlags, pooled } from './harness.ts';

const { values } = benchFlags(
  'npm run bench:copyrator-memory -- [--configmaps 50] [--namespaces 2000] [--heap 160]\n' +
    '  --configmaps  ConfigMaps (1 KiB each) the rule copies (default 50)\n' +
    "  --namespaces  namespaces each getting every copy, besides the control plane's own (default 2000)\n" +
    '  --heap        V8 heap limit in MiB of the process running the function (default 160)',
  () =>
    parseArgs({
      options: {
        configmaps: { type: 'string', default: '50' },
        namespaces: { type: 'string', default: '2000' },
        heap: { type: 'string', default: '160' },
        kubeconfig: { type: 'string' },
        help: { type: 'boolean', default: false },
      },
    }),
);
const [sources, namespaces, heap] = [Number(values.configmaps), Number(values.namespaces), Number(values.heap)];

const RULE_KEY = 'flant.com/CopyratorRule:source/everywhere';

if (values.kubeconfig) await measure(values.kubeconfig);
else await prepareAndRun();

/** The control plane and the objects, in this process; the function, under the heap limit, in a child whose death stops nothing here. */
async function prepareAndRun(): Promise<void> {
  const cluster = await startTestCluster({ controllerManager: false });
  const { kube } = cluster;
  try {
    process.stderr.write(`creating ${namespaces} namespaces and ${sources} ConfigMaps…\n`);
    await kube.create(Namespace, { metadata: { name: 'source', labels: { [DISTRIBUTE_LABEL]: 'true' } } });
    await pooled(namespaces, (index) => kube.create(Namespace, { metadata: { name: `target-${index}` } }));
    await pooled(sources, (index) =>
      kube.create(ConfigMap, {
        metadata: { name: `config-${index}`, namespace: 'source', labels: { copy: 'yes' } },
        data: { blob: 'x'.repeat(1024) },
      }),
    );
    await kube.create(CopyratorRuleKind, {
      apiVersion: 'flant.com/v1',
      kind: 'CopyratorRule',
      metadata: { name: 'everywhere', namespace: 'source' },
      ruleType: 'configmap',
      selector: { copy: 'yes' },
      namespace: 'source',
    });
    const child = spawnSync(
      process.execPath,
      [`--max-old-space-size=${heap}`, fileURLToPath(import.meta.url), ...process.argv.slice(2), '--kubeconfig', cluster.cp.kubeconfigPath],
      { stdio: 'inherit' },
    );
    if (child.status !== 0)
      console.log(
        `\nthe function's process ended with ${child.status ?? child.signal}${child.signal === 'SIGABRT' || child.status === 134 ? ' (out of memory)' : ''}`,
      );
  } finally {
    await cluster.stop();
  }
}

/** Serves the function and reconciles the rule three times, sampling this process's memory. */
async function measure(kubeconfigPath: string): Promise<void> {
  const fn = await serveFunction(copyrator, kubeconfigPath);
  const reader = kubeFor(kubeconfigPath);
  const requests = async () => (await fn.metrics.apiRequests.get()).values.reduce((sum, value) => sum + value.value, 0);
  const mib = (bytes: number) => Math.round(bytes / 2 ** 20);
  console.log(
    `\none CopyratorRule: ${sources} ConfigMaps of 1 KiB into ${namespaces} namespaces; the function's process: V8 heap limit ${heap} MiB, node ${process.version}\n`,
  );
  console.log('reconcile        deliveries  seconds  requests  copies  peak heap MiB  peak RSS MiB');
  const idle = process.memoryUsage();
  console.log(
    `${'(none yet)'.padEnd(15)}  ${''.padStart(10)}  ${''.padStart(7)}  ${''.padStart(8)}  ${''.padStart(6)}  ${String(mib(idle.heapUsed)).padStart(13)}  ${String(mib(idle.rss)).padStart(12)}`,
  );
  for (const round of ['makes copies', 'copies in place', 'copies in place']) {
    let [peakHeap, peakRss] = [0, 0];
    const takeSample = () => {
      const usage = process.memoryUsage();
      [peakHeap, peakRss] = [Math.max(peakHeap, usage.heapUsed), Math.max(peakRss, usage.rss)];
    };
    // Also at the start and the end: a reconcile shorter than one interval would report 0.
    takeSample();
    const sample = setInterval(takeSample, 20);
    const before = await requests();
    const started = performance.now();
    // A delivery that runs out of time hands the rule on in its reply; the broker would deliver it again at once.
    let deliveries = 0;
    for (
      let answer = { status: 200, body: { keys: [RULE_KEY] } as { keys?: string[] } };
      answer.body.keys?.includes(RULE_KEY);
      deliveries++
    ) {
      answer = await deliver(
        fn.url,
        new CloudEvent({
          type: 'dev.opfn.reconcile',
          source: '/bench',
          opfnfunction: 'copyrator',
          datacontenttype: 'application/json',
          data: { keys: [RULE_KEY] },
        }),
      );
      if (answer.status !== 200) throw new Error(`the function answered ${answer.status}: ${JSON.stringify(answer.body)}`);
    }
    clearInterval(sample);
    takeSample();
    const seconds = (performance.now() - started) / 1000;
    const rule = await reader.get(CopyratorRuleKind, { namespace: 'source', name: 'everywhere' });
    const copies = (rule?.status as { copies?: number } | undefined)?.copies;
    console.log(
      `${round.padEnd(15)}  ${String(deliveries).padStart(10)}  ${seconds.toFixed(1).padStart(7)}  ${String((await requests()) - before).padStart(8)}  ${String(copies).padStart(6)}  ${String(mib(peakHeap)).padStart(13)}  ${String(mib(peakRss)).padStart(12)}`,
    );
  }
  await fn.close();
}
