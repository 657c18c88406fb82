// End to end through the whole local plane: real API server → ApiServerSource-compatible source
// → broker → scale-from-zero activator → function process → real API server.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Writable } from 'node:stream';
import { HTTP } from 'cloudevents';
import { pino } from 'pino';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import { readDeadLetterFile, refusedLettersFile } from '../../eventing/broker/index.ts';
import { EventPlane, FUNCTION_EXTENSION } from '../../eventing/plane.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind, type ImmortalContainer, type PodObject } from '../../functions/immortal-container/desired.ts';
import { Pod, type ObjectKey, type KubeClient } from '../../functions/runtime/index.ts';
import { eventually, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { exampleImmortalContainer } from '../support/examples.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';
import { serviceAccountName } from '../../eventing/manifests/index.ts';
import { tempDir } from '../support/temp.ts';

let cluster: TestCluster;
let kube: KubeClient;
let plane: EventPlane;
let brokerUrl: string;
const stateDir = tempDir('opfn-e2e-');
const scaleEvents: { from: number; to: number; reason: string }[] = [];

const newIc = (namespace: string, name: string, image = 'nginx:latest'): ImmortalContainer => ({
  apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
  kind: 'ImmortalContainer',
  metadata: { name, namespace },
  spec: { image },
});
const podKey = (key: ObjectKey) => ({ namespace: key.namespace, name: `${key.name}-immortalpod` });
const startTimes = async (key: ObjectKey) => (await kube.get<ImmortalContainer>(ImmortalContainerKind, key))?.status?.startTimes;

before(async () => {
  cluster = await startTestCluster();
  kube = cluster.kube;
  // Exists before the plane starts: Knative's ApiServerSource would never tell anyone about it.
  await kube.create(ImmortalContainerKind, newIc('default', 'before-start'));
  // The activator's scale decisions, read from its structured log lines.
  const log = pino(
    { level: 'info' },
    new Writable({
      write(chunk, _encoding, done) {
        for (const line of chunk.toString().split('\n').filter(Boolean)) {
          const entry = JSON.parse(line);
          if (entry.component !== 'activator') continue;
          if ('from' in entry && 'to' in entry) scaleEvents.push(entry);
        }
        done();
      },
    }),
  );
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
    assert.ok(
      scaleEvents.some((e) => e.from === 0 && e.to === 1),
      'the function was started from zero by the first event',
    );
  });

  test('apply the example → pod; delete the pod → it returns with startTimes 2', async () => {
    await kube.create(ImmortalContainerKind, exampleImmortalContainer(), key.namespace);
    const pod = await eventually(() => kube.get<PodObject>(Pod, podKey(key)), 30_000, 'pod');
    assert.equal(pod.spec?.containers?.[0].image, 'nginx:latest');
    await eventually(async () => (await startTimes(key)) === 1, 10_000, 'startTimes 1');

    await kube.delete(Pod, podKey(key));
    const recreated = await eventually(
      async () => {
        const current = await kube.get<PodObject>(Pod, podKey(key));
        return current && current.metadata.uid !== pod.metadata.uid ? current : undefined;
      },
      30_000,
      'recreated pod',
    );
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
  assert.ok(
    scaleEvents.some((e) => e.to === 0 && /idle/.test(e.reason)),
    'the scale to zero was logged with its reason',
  );
});

test('an event the function refuses (400) reaches the dead-letter sink with the error extensions', async () => {
  // A well-formed CloudEvent whose object name is not a valid Kubernetes name: the function answers 400.
  const bad = apiServerSourceEvent({
    server: cluster.cp.server,
    kind: ImmortalContainerKind,
    object: { metadata: { name: 'Not_A_Name', namespace: 'default' } },
    action: 'add',
    mode: 'Reference',
    extensions: { [FUNCTION_EXTENSION]: immortalContainer.name },
  });
  const message = HTTP.binary(bad);
  const accepted = await fetch(brokerUrl, {
    method: 'POST',
    headers: message.headers as Record<string, string>,
    body: message.body as string,
  });
  assert.equal(accepted.status, 202);
  const file = join(stateDir, 'dead-letters.jsonl');
  const entry = await eventually(
    async () => (await readDeadLetterFile(file)).find((found) => found.letter?.id === bad.id),
    20_000,
    'dead letter',
  );
  assert.equal(entry.file, refusedLettersFile(file), 'refused for good: kept apart from the letters of failed work');
  const letter = entry.letter as unknown as Record<string, unknown>;
  assert.equal(String(letter.knativeerrorcode), '400');
  assert.match(String(letter.knativeerrordest), /immortal-container/);
  assert.ok(letter.knativeerrordata, "the function's reason travels in knativeerrordata");
  assert.equal(letter.name, 'Not_A_Name', 'the original event is kept whole');
});

test('a function whose permissions are revoked answers 2xx (refused: neither retried as a 500 nor dead-lettered); once they are back, the next change converges', async () => {
  const bindingPath = `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${serviceAccountName(immortalContainer)}`;
  const binding = (await cluster.cp.request('GET', bindingPath)).body;
  assert.equal((await cluster.cp.request('DELETE', bindingPath)).status, 200);
  const before = { ...plane.broker.stats()[immortalContainer.name] };
  const key = { namespace: 'default', name: 'while-forbidden' };
  await kube.create(ImmortalContainerKind, newIc(key.namespace, key.name));
  await eventually(
    async () => plane.broker.stats()[immortalContainer.name].delivered > before.delivered,
    20_000,
    'the refused delivery answered 2xx',
  );
  const after = plane.broker.stats()[immortalContainer.name];
  assert.equal(after.retried, before.retried, 'a 403 is not retried as a failure');
  assert.equal(after.deadLettered, before.deadLettered, 'nor dead-lettered');
  assert.equal(await kube.get(Pod, podKey(key)), undefined, 'nothing was created without permission');

  const {
    metadata: { name },
    roleRef,
    subjects,
  } = binding;
  assert.equal(
    (await cluster.cp.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', { metadata: { name }, roleRef, subjects }))
      .status,
    201,
  );
  // The refused key comes back by itself after FORBIDDEN_RETRY_SECONDS; a change of the object does at once.
  await kube.mergePatch(ImmortalContainerKind, key, { spec: { image: 'nginx:1.27' } });
  await eventually(() => kube.get(Pod, podKey(key)), 30_000, 'pod once the function may act again');
  await eventually(async () => (await startTimes(key)) === 1, 10_000, 'startTimes 1');
});

// Faults at scale (API server restart, etcd frozen, watches reset, function killed) are in
// faults.test.ts, at 1000 objects with startTimes asserted exactly 1.
