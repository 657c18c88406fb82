// Local plane latency and throughput, measured side by side in one run against a real
// control plane:  npx node bench/plane.ts [--runs N] [--burst N]
//   cold   create an ImmortalContainer while the function is at zero → its pod exists
//   warm   the same with the function already running
//   direct the same pod written straight to the API (the floor any operator sits on)
//   burst  N ImmortalContainers at once → N pods, vs writing the N pods directly
// --bundled runs the functions from their esbuild bundles with a compile cache, as the image does.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { bundledFunctions, EventPlane } from '../eventing/plane.ts';
import immortalContainer from '../functions/immortal-container/index.ts';
import { desiredPod, ImmortalContainerKind, type ImmortalContainer } from '../functions/immortal-container/desired.ts';
import { Pod } from '../functions/runtime/kinds.ts';
import { startTestCluster } from '../test/support/cluster.ts';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '5' }, burst: { type: 'string', default: '200' }, bundled: { type: 'boolean', default: false } } });
const runs = Number(values.runs);
const burst = Number(values.burst);

const bundled = values.bundled ? await bundledFunctions(mkdtempSync(join(tmpdir(), 'opfn-bench-dist-'))) : undefined;
const cluster = await startTestCluster();
const { kube } = cluster;
const idleTimeoutMs = 1000;
const plane = new EventPlane({
  functions: [immortalContainer],
  kube,
  kubeconfigPath: cluster.cp.kubeconfigPath,
  log: pino({ level: 'silent' }),
  stateDir: mkdtempSync(join(tmpdir(), 'opfn-bench-')),
  idleTimeoutMs,
  resyncIntervalMs: 0,
  env: { LOG_LEVEL: 'warn', ...bundled?.env },
  command: bundled?.command,
});
await plane.start();

const ic = (namespace: string, name: string): ImmortalContainer => ({ apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: { name, namespace }, spec: { image: 'nginx' } });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
async function waitForPods(namespace: string, count: number): Promise<void> {
  while ((await kube.list(Pod, { namespace })).items.length < count) await sleep(10);
}
async function namespace(name: string) {
  await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name } });
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const samples = { cold: [] as number[], warm: [] as number[], direct: [] as number[] };
await namespace('latency');
for (let run = 0; run < runs; run++) {
  // Cold: wait until the activator has scaled the function to zero.
  while (plane.activator.instances(immortalContainer.name) > 0) await sleep(50);
  let started = performance.now();
  await kube.create(ImmortalContainerKind, ic('latency', `cold-${run}`));
  while (!(await kube.get(Pod, { namespace: 'latency', name: `cold-${run}-immortalpod` }))) await sleep(5);
  samples.cold.push(performance.now() - started);

  started = performance.now();
  await kube.create(ImmortalContainerKind, ic('latency', `warm-${run}`));
  while (!(await kube.get(Pod, { namespace: 'latency', name: `warm-${run}-immortalpod` }))) await sleep(5);
  samples.warm.push(performance.now() - started);

  const owner = await kube.create<ImmortalContainer>(ImmortalContainerKind, { ...ic('latency', `direct-${run}`), metadata: { name: `direct-${run}`, namespace: 'latency', labels: { bench: 'no-operator' } } });
  started = performance.now();
  await kube.create(Pod, { ...desiredPod(owner), metadata: { ...desiredPod(owner).metadata, name: `direct-${run}-pod`, labels: {} } });
  samples.direct.push(performance.now() - started);
}

// Throughput: a burst through the plane vs the same pods written directly.
await namespace('burst');
await namespace('direct');
let started = performance.now();
const emittedBefore = plane.source.stats().emitted;
for (let i = 0; i < burst; i += 32) await Promise.all(Array.from({ length: Math.min(32, burst - i) }, (_, j) => kube.create(ImmortalContainerKind, ic('burst', `b-${i + j}`))));
await waitForPods('burst', burst);
// Let the status updates the reconciles caused flow through as well, then count events.
while (plane.broker.stats()[immortalContainer.name].queued + plane.broker.stats()[immortalContainer.name].inFlight > 0) await sleep(20);
const planeSeconds = (performance.now() - started) / 1000;
const events = plane.source.stats().emitted - emittedBefore;

started = performance.now();
for (let i = 0; i < burst; i += 32) await Promise.all(Array.from({ length: Math.min(32, burst - i) }, (_, j) => kube.create(Pod, { metadata: { name: `d-${i + j}`, namespace: 'direct' }, spec: { containers: [{ name: 'acontainer', image: 'nginx' }] } })));
const directSeconds = (performance.now() - started) / 1000;

const row = (name: string, xs: number[]) => `${name.padEnd(34)} ${median(xs).toFixed(0).padStart(7)} ms   (min ${Math.min(...xs).toFixed(0)}, max ${Math.max(...xs).toFixed(0)}, n=${xs.length})`;
console.log(`\nkubectl apply → pod created (medians, ${runs} runs, interleaved; functions ${values.bundled ? 'bundled, compile cache' : 'from TypeScript sources'})`);
console.log(row('cold (function at zero)', samples.cold));
console.log(row('warm (function running)', samples.warm));
console.log(row('direct pod write (no operator)', samples.direct));
console.log(`cold / warm = ${(median(samples.cold) / median(samples.warm)).toFixed(1)}x   warm / direct = ${(median(samples.warm) / median(samples.direct)).toFixed(1)}x`);
console.log(`\nburst of ${burst} ImmortalContainers → ${burst} pods`);
console.log(`through the plane: ${planeSeconds.toFixed(2)} s, ${events} events → ${(events / planeSeconds).toFixed(0)} events/s, ${(burst / planeSeconds).toFixed(0)} objects/s`);
console.log(`direct pod writes: ${directSeconds.toFixed(2)} s → ${(burst / directSeconds).toFixed(0)} pods/s;  plane / direct = ${(planeSeconds / directSeconds).toFixed(1)}x`);

await plane.stop();
await cluster.stop();
