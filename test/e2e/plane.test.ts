// End to end through the whole local plane: real API server → ApiServerSource-compatible source
// → broker → scale-from-zero activator → function process → real API server.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Writable } from 'node:stream';
import { HTTP } from 'cloudevents';
import { pino } from 'pino';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import { EventPlane, FUNCTION_EXTENSION } from '../../eventing/plane.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind, type ImmortalContainer, type PodObject } from '../../functions/immortal-container/desired.ts';
import { Pod, type ObjectKey } from '../../functions/runtime/kinds.ts';
import type { KubeClient } from '../../functions/runtime/kube.ts';
import { eventually, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { exampleImmortalContainer } from '../support/examples.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';
import { serviceAccountName } from '../../eventing/rbac.ts';

let cluster: TestCluster;
let kube: KubeClient;
let plane: EventPlane;
let brokerUrl: string;
const stateDir = mkdtempSync(join(tmpdir(), 'opfn-e2e-'));
const scaleEvents: { from: number; to: number; reason: string }[] = [];
/** Function processes the activator reported ready, and the crashes it reported. */
const readyPids: number[] = [];
const crashes: { pid: number; msg: string }[] = [];

const newIc = (namespace: string, name: string, image = 'nginx:latest'): ImmortalContainer => ({
  apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: { name, namespace }, spec: { image },
});
const podKey = (key: ObjectKey) => ({ namespace: key.namespace, name: `${key.name}-immortalpod` });
const startTimes = async (key: ObjectKey) => (await kube.get<ImmortalContainer>(ImmortalContainerKind, key))?.status?.startTimes;

/** Creates, retrying while the API server is restarting. */
async function createWithRetry(ic: ImmortalContainer): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await kube.create(ImmortalContainerKind, ic);
      return;
    } catch (error) {
      if ((error as { reason?: string }).reason === 'AlreadyExists') return;
      if (attempt > 100) throw error;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

before(async () => {
  cluster = await startTestCluster();
  kube = cluster.kube;
  // Exists before the plane starts: Knative's ApiServerSource would never tell anyone about it.
  await kube.create(ImmortalContainerKind, newIc('default', 'before-start'));
  // The activator's scale decisions, read from its structured log lines.
  const log = pino({ level: 'info' }, new Writable({
    write(chunk, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) {
        const entry = JSON.parse(line);
        if (entry.component !== 'activator') continue;
        if ('from' in entry && 'to' in entry) scaleEvents.push(entry);
        if (/ ready$/.test(entry.msg)) readyPids.push(entry.pid);
        if (/ crashed /.test(entry.msg)) crashes.push(entry);
      }
      done();
    },
  }));
  plane = new EventPlane({
    functions: [immortalContainer],
    kube,
    // The function runs as its own ServiceAccount with exactly its generated RBAC.
    kubeconfigPath: await kubeconfigWithDeclaredRbac(cluster.cp, immortalContainer),
    log,
    stateDir,
    idleTimeoutMs: 1500,
    resyncIntervalMs: 0,
    // The functions' warnings (retries, crashes) reach the test output; their info lines would bury them.
    env: { LOG_LEVEL: 'warn' },
    delivery: { retry: 12, backoffPolicy: 'exponential', backoffDelay: 'PT0.2S' },
  });
  assert.equal(plane.activator.instances(immortalContainer.name), 0, 'every function starts at zero instances');
  ({ brokerUrl } = await plane.start());
});

after(async () => {
  await plane?.stop();
  await cluster?.stop();
});

describe('the seed walkthrough through the plane', () => {
  const key = { namespace: 'default', name: 'example-immortalcontainer' };

  test('objects that existed before the plane started are reconciled', async () => {
    await eventually(() => kube.get(Pod, podKey({ namespace: 'default', name: 'before-start' })), 30_000, 'pod of before-start');
    assert.ok(scaleEvents.some((e) => e.from === 0 && e.to === 1), 'the function was started from zero by the first event');
  });

  test('apply the example → pod; delete the pod → it returns with startTimes 2', async () => {
    await kube.create(ImmortalContainerKind, exampleImmortalContainer(), key.namespace);
    const pod = await eventually(() => kube.get<PodObject>(Pod, podKey(key)), 30_000, 'pod');
    assert.equal(pod.spec?.containers?.[0].image, 'nginx:latest');
    await eventually(async () => (await startTimes(key)) === 1, 10_000, 'startTimes 1');

    await kube.delete(Pod, podKey(key));
    const recreated = await eventually(async () => {
      const current = await kube.get<PodObject>(Pod, podKey(key));
      return current && current.metadata.uid !== pod.metadata.uid ? current : undefined;
    }, 30_000, 'recreated pod');
    assert.ok(recreated);
    await eventually(async () => (await startTimes(key)) === 2, 10_000, 'startTimes 2');
  });
});

test('an idle function scales to zero and the next event brings it back', async () => {
  await eventually(async () => plane.activator.instances(immortalContainer.name) === 0, 30_000, 'scale to zero');
  const coldStartsBefore = scaleEvents.filter((e) => e.from === 0).length;
  const key = { namespace: 'default', name: 'after-idle' };
  await kube.create(ImmortalContainerKind, newIc(key.namespace, key.name));
  await eventually(() => kube.get(Pod, podKey(key)), 30_000, 'pod after scale from zero');
  assert.equal(scaleEvents.filter((e) => e.from === 0).length, coldStartsBefore + 1, 'one more 0→1 scale event');
  assert.ok(scaleEvents.some((e) => e.to === 0 && /idle/.test(e.reason)), 'the scale to zero was logged with its reason');
});

test('an event the function refuses (400) reaches the dead-letter sink with the error extensions', async () => {
  // A well-formed CloudEvent whose object name is not a valid Kubernetes name: the function answers 400.
  const bad = apiServerSourceEvent({ server: cluster.cp.server, kind: ImmortalContainerKind, object: { metadata: { name: 'Not_A_Name', namespace: 'default' } }, action: 'add', mode: 'Reference', extensions: { [FUNCTION_EXTENSION]: immortalContainer.name } });
  const message = HTTP.binary(bad);
  const accepted = await fetch(brokerUrl, { method: 'POST', headers: message.headers as Record<string, string>, body: message.body as string });
  assert.equal(accepted.status, 202);
  const file = join(stateDir, 'dead-letters.jsonl');
  const letter = await eventually(async () => {
    if (!existsSync(file)) return undefined;
    return readFileSync(file, 'utf8').trim().split('\n').map((line) => JSON.parse(line)).find((entry) => entry.id === bad.id);
  }, 20_000, 'dead letter');
  assert.equal(String(letter.knativeerrorcode), '400');
  assert.match(String(letter.knativeerrordest), /immortal-container/);
  assert.ok(letter.knativeerrordata, 'the function\'s reason travels in knativeerrordata');
  assert.equal(letter.name, 'Not_A_Name', 'the original event is kept whole');
});

test('a function that fails for a while (500: its permissions revoked) is retried with backoff, then succeeds', async () => {
  const bindingPath = `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${serviceAccountName(immortalContainer)}`;
  const binding = (await cluster.cp.request('GET', bindingPath)).body;
  assert.equal((await cluster.cp.request('DELETE', bindingPath)).status, 200);
  const retriedBefore = plane.broker.stats()[immortalContainer.name].retried;
  const key = { namespace: 'default', name: 'while-forbidden' };
  await kube.create(ImmortalContainerKind, newIc(key.namespace, key.name));
  await eventually(async () => plane.broker.stats()[immortalContainer.name].retried >= retriedBefore + 2, 20_000, 'two retries of the failing delivery');
  assert.equal(await kube.get(Pod, podKey(key)), undefined, 'nothing was created without permission');

  const { metadata: { name }, roleRef, subjects } = binding;
  assert.equal((await cluster.cp.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', { metadata: { name }, roleRef, subjects })).status, 201);
  await eventually(() => kube.get(Pod, podKey(key)), 30_000, 'pod once the function may act again');
  await eventually(async () => (await startTimes(key)) === 1, 10_000, 'startTimes 1');
});

/** Creates `count` ImmortalContainers in a new namespace, 10 at a time; resolves when all exist. */
async function createBurst(namespace: string, count: number): Promise<void> {
  assert.equal((await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name: namespace } })).status, 201);
  const names = Array.from({ length: count }, (_, i) => `${namespace}-${i}`);
  for (let i = 0; i < names.length; i += 10) await Promise.all(names.slice(i, i + 10).map((name) => createWithRetry(newIc(namespace, name))));
}

/** Waits until every ImmortalContainer of `namespace` has its pod and `accepts` its status; on timeout, says where they are stuck. */
async function awaitConvergence(namespace: string, count: number, accepts: (ic: ImmortalContainer) => boolean, timeoutMs: number): Promise<void> {
  const diagnose = async () => {
    const pods = new Set((await kube.list(Pod, { namespace })).items.map((pod) => pod.metadata.name));
    const ics = (await kube.list<ImmortalContainer>(ImmortalContainerKind, { namespace })).items;
    const behind = ics.filter((ic) => !pods.has(`${ic.metadata.name}-immortalpod`) || !accepts(ic));
    return JSON.stringify({
      objects: ics.length,
      pods: pods.size,
      behind: behind.slice(0, 5).map((ic) => ({ name: ic.metadata.name, resourceVersion: ic.metadata.resourceVersion, status: ic.status })),
      source: plane.source.stats(),
      broker: plane.broker.stats(),
      instances: plane.activator.instances(immortalContainer.name),
    });
  };
  await eventually(async () => (await kube.list(Pod, { namespace })).items.length === count, timeoutMs, `${count} pods`, diagnose);
  await eventually(async () => {
    const list = await kube.list<ImmortalContainer>(ImmortalContainerKind, { namespace });
    return list.items.length === count && list.items.every(accepts);
  }, timeoutMs / 2, 'every status', diagnose);
}

test('API server restart during a burst of 200 creations: every object converges, nothing lost', async () => {
  const restartsBefore = plane.source.stats().watchRestarts + plane.source.stats().relists;
  const creating = createBurst('burst', 200);
  await new Promise((resolve) => setTimeout(resolve, 300));
  await cluster.cp.restartApiServer();
  await creating;

  // Converged: the status names the pod and counts it. Not necessarily `startTimes: 1`: for a
  // pod whose owner it has not seen yet, the controller-manager's garbage collector GETs the owner,
  // and a restarting API server answers 404 for custom resources for a moment; the collector then
  // deletes the pod and the function rightly recreates and counts it. (Exact counting is the
  // subject of the race test, and of the crash test below.)
  await awaitConvergence('burst', 200, (ic) => ic.status?.currentPod === `${ic.metadata.name}-immortalpod` && (ic.status.startTimes ?? 0) >= 1 && ic.status.observedGeneration === ic.metadata.generation, 120_000);
  const stats = plane.source.stats();
  assert.ok(stats.watchRestarts + stats.relists > restartsBefore, `the source noticed the broken watch: ${JSON.stringify(stats)}`);
});

test('a function process killed in the middle of a burst: its in-flight events are retried and every object converges', async () => {
  const retriedBefore = plane.broker.stats()[immortalContainer.name].retried;
  const creating = createBurst('crash', 200);
  const running = () => readyPids.filter((pid) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  });
  // Kill while the function works through the burst: it has created pods, and the broker has
  // deliveries open (checked and killed in one synchronous step, so they are still open).
  await eventually(async () => (await kube.list(Pod, { namespace: 'crash' })).items.length > 0, 30_000, 'the first pods of the burst');
  const killed = await eventually(async () => {
    const pids = running();
    if (pids.length === 0 || plane.broker.stats()[immortalContainer.name].inFlight < 3) return undefined;
    for (const pid of pids) process.kill(pid, 'SIGKILL');
    return pids;
  }, 30_000, 'deliveries in flight to a running function');
  await creating;

  await awaitConvergence('crash', 200, (ic) => ic.status?.startTimes === 1, 60_000);
  assert.deepEqual(crashes.map((crash) => crash.pid).filter((pid) => killed.includes(pid)).sort(), [...killed].sort(), `the activator reported every killed process as crashed: ${JSON.stringify(crashes)}`);
  // The activator answers 502 for requests the crash cut off (before it sees the exit), so the
  // broker's retries are where they show.
  assert.ok(plane.broker.stats()[immortalContainer.name].retried > retriedBefore, 'the broker retried the events the crash cut off');
});
