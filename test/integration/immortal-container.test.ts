// ImmortalContainer against a real API server, the function running as its own ServiceAccount
// with exactly the RBAC its declaration generates.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CloudEvent, HTTP } from 'cloudevents';
import { apiServerSourceEvent, type ChangeAction, type SourceMode } from '../../eventing/apiserver-events.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind, type ImmortalContainer, type PodObject } from '../../functions/immortal-container/desired.ts';
import {
  ConfigMap,
  CoreEvent,
  Namespace,
  Pod,
  Secret,
  type KubeObject,
  type ObjectKey,
  type ResourceKind,
  ApiError,
  type KubeClient,
} from '../../functions/runtime/index.ts';
import {
  deliver,
  eventually,
  kubeFor,
  serveFunction,
  startTestCluster,
  type RunningFunction,
  type TestCluster,
} from '../support/cluster.ts';
import { OUTCOME_HEADER } from '../../functions/runtime/host/index.ts';
import { exampleImmortalContainer } from '../support/examples.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

let cluster: TestCluster;
let kube: KubeClient;
let functionKubeconfig: string;
let fn: RunningFunction;

const event = (kind: ResourceKind, object: KubeObject, action: ChangeAction, mode: SourceMode = 'Reference') =>
  apiServerSourceEvent({ server: cluster.cp.server, kind, object, action, mode });

const getIc = (key: ObjectKey) => kube.get<ImmortalContainer>(ImmortalContainerKind, key);
const podKeyOf = (key: ObjectKey) => ({ namespace: key.namespace, name: `${key.name}-immortalpod` });

/** POSTs a CloudEvent (or raw headers and body) and keeps the answer's headers. */
async function post(url: string, message: CloudEvent<unknown> | { headers: Record<string, string>; body: string }) {
  const { headers, body } =
    message instanceof CloudEvent ? (HTTP.binary(message) as { headers: Record<string, string>; body: string }) : message;
  const response = await fetch(url, { method: 'POST', headers, body });
  return { status: response.status, headers: response.headers, text: await response.text() };
}

async function createNamespace(name: string) {
  const created = await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name } });
  assert.ok(created.status === 201 || created.status === 409, `namespace ${name}: ${created.status}`);
}

before(async () => {
  cluster = await startTestCluster();
  kube = cluster.kube;
  functionKubeconfig = await kubeconfigWithDeclaredRbac(cluster.cp, immortalContainer);
  fn = await serveFunction(immortalContainer, functionKubeconfig);
});

after(async () => {
  await fn?.close();
  await cluster?.stop();
});

describe('the seed walkthrough', () => {
  const key = { namespace: 'default', name: 'example-immortalcontainer' };

  test('applying the example creates the pod and counts one start', async () => {
    const ic = await kube.create<ImmortalContainer>(ImmortalContainerKind, exampleImmortalContainer(), 'default');
    const answer = await deliver(fn.url, event(ImmortalContainerKind, ic, 'add'));
    assert.equal(answer.status, 200, JSON.stringify(answer.body));

    const pod = await kube.get<PodObject>(Pod, podKeyOf(key));
    assert.ok(pod, 'pod example-immortalcontainer-immortalpod exists');
    assert.equal(pod.spec?.containers?.[0].name, 'acontainer');
    assert.equal(pod.spec?.containers?.[0].image, 'nginx:latest');
    assert.equal(pod.metadata.labels?.controller, 'example-immortalcontainer');
    const owner = pod.metadata.ownerReferences?.[0];
    assert.deepEqual([owner?.kind, owner?.name, owner?.uid, owner?.controller], ['ImmortalContainer', key.name, ic.metadata.uid, true]);

    const status = (await getIc(key))!.status!;
    assert.equal(status.currentPod, 'example-immortalcontainer-immortalpod');
    assert.equal(status.startTimes, 1);
    assert.equal(status.observedGeneration, 1);
    const ready = status.conditions?.find((c) => c.type === 'Ready');
    assert.deepEqual([ready?.status, ready?.reason], ['False', 'PodPending']);

    const events = await kube.list(CoreEvent, { namespace: 'default', fieldSelector: `involvedObject.name=${key.name}` });
    assert.ok(
      events.items.some((e) => e.reason === 'PodCreated'),
      'a PodCreated Kubernetes Event was recorded',
    );
  });

  test('a redelivered event changes nothing', async () => {
    const before = await getIc(key);
    const pod = await kube.get(Pod, podKeyOf(key));
    assert.equal((await deliver(fn.url, event(ImmortalContainerKind, before!, 'update'))).status, 200);
    const afterIc = await getIc(key);
    assert.equal(afterIc!.metadata.resourceVersion, before!.metadata.resourceVersion, 'no status write for a no-op');
    assert.equal((await kube.get(Pod, podKeyOf(key)))!.metadata.uid, pod!.metadata.uid);
  });

  test('deleting the pod brings it back and counts two starts', async () => {
    const pod = (await kube.get<PodObject>(Pod, podKeyOf(key)))!;
    await kube.delete(Pod, podKeyOf(key));
    // Owned kinds are watched in Resource mode, so the delete event still names the owner.
    const answer = await deliver(fn.url, event(Pod, pod, 'delete', 'Resource'));
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const recreated = await kube.get<PodObject>(Pod, podKeyOf(key));
    assert.ok(recreated && recreated.metadata.uid !== pod.metadata.uid, 'a new pod exists');
    assert.equal((await getIc(key))!.status!.startTimes, 2);
  });

  test('a pod that finished (phase Failed) is started again after a back-off, through a requeue reply (delivered at once, as Knative does, it waits until due)', async () => {
    // A second instance of the function with a clock the test moves; its waits move it too.
    let clock = new Date();
    const timed = await serveFunction(immortalContainer, functionKubeconfig, {
      now: () => clock,
      sleep: async (ms) => void (clock = new Date(clock.getTime() + ms)),
    });
    try {
      const pod = (await kube.get<PodObject>(Pod, podKeyOf(key)))!;
      // Play the kubelet: report the container as failed.
      const failed = await kube.replace(Pod, { ...pod, status: { ...pod.status, phase: 'Failed' } }, 'status');
      const answer = await post(timed.url, event(Pod, failed, 'update', 'Resource'));
      assert.equal(answer.status, 200, answer.text);
      // The answer is a reply CloudEvent asking for this key again in 10 s.
      assert.equal(answer.headers.get('ce-type'), 'dev.opfn.reconcile');
      assert.equal(answer.headers.get('ce-opfnfunction'), 'immortal-container');
      const due = Date.parse(answer.headers.get('ce-opfnnotbefore')!);
      assert.ok(
        due - clock.getTime() >= 9_000 && due - clock.getTime() <= 11_000,
        `due in about 10 s: ${answer.headers.get('ce-opfnnotbefore')}`,
      );
      assert.deepEqual(JSON.parse(answer.text), {
        keys: ['immortalcontainer.flugel.it/ImmortalContainer:default/example-immortalcontainer'],
      });
      assert.deepEqual(JSON.parse(answer.headers.get('x-opfn-outcome')!), { reconciled: 1, failed: 0, requeued: 1 });
      assert.equal((await kube.get<PodObject>(Pod, podKeyOf(key)))!.metadata.uid, pod.metadata.uid, 'not replaced during the back-off');
      const waiting = (await getIc(key))!.status!;
      assert.equal(waiting.restartBackoff?.failedPod, pod.metadata.uid);
      assert.equal(waiting.conditions?.find((c) => c.type === 'Ready')?.reason, 'BackOff');

      // More events about the failed pod during the back-off: no new pod, no new Event.
      assert.equal((await post(timed.url, event(Pod, failed, 'update', 'Resource'))).status, 200);
      const reply = {
        headers: Object.fromEntries([...answer.headers].filter(([name]) => name.startsWith('ce-') || name === 'content-type')),
        body: answer.text,
      };
      // The same key asked for beyond the delivery's budget (30 s) is dropped, for the resync.
      const farOff = await post(timed.url, {
        ...reply,
        headers: { ...reply.headers, 'ce-opfnnotbefore': new Date(clock.getTime() + 60_000).toISOString() },
      });
      assert.equal(farOff.status, 200);
      assert.match(JSON.parse(farOff.headers.get('x-opfn-outcome')!).ignored, /not due until/);
      await timed.host.flushEvents();
      const backOffs = (
        await kube.list(CoreEvent, { namespace: 'default', fieldSelector: `involvedObject.name=${key.name}` })
      ).items.filter((e) => e.reason === 'BackOff');
      assert.equal(backOffs.length, 1, 'one BackOff Event');
      assert.equal(backOffs[0].count, 1, 'posted once, not once per reconcile');
      assert.equal((await getIc(key))!.status!.startTimes, 2);

      // The reply delivered back at once, as Knative's broker does: the delivery waits until the
      // key is due (10 s on the test's clock), then replaces the pod.
      const sent = clock.getTime();
      const again = await post(timed.url, reply);
      assert.equal(again.status, 200, again.text);
      assert.ok(clock.getTime() >= due && clock.getTime() - sent <= 11_000, `waited until due: ${clock.getTime() - sent} ms`);
      const replaced = await kube.get<PodObject>(Pod, podKeyOf(key));
      assert.ok(replaced && replaced.metadata.uid !== pod.metadata.uid, 'the failed pod was replaced');
      assert.notEqual(replaced.status?.phase, 'Failed');
      assert.equal((await getIc(key))!.status!.startTimes, 3);
    } finally {
      await timed.close();
    }
  });

  test('a Running pod makes the ImmortalContainer Ready', async () => {
    const pod = (await kube.get<PodObject>(Pod, podKeyOf(key)))!;
    // The source sends the pod as it is after the change.
    const running = await kube.replace(Pod, { ...pod, status: { ...pod.status, phase: 'Running' } }, 'status');
    assert.equal((await deliver(fn.url, event(Pod, running, 'update', 'Resource'))).status, 200);
    const ready = (await getIc(key))!.status!.conditions?.find((c) => c.type === 'Ready');
    assert.deepEqual([ready?.status, ready?.reason], ['True', 'PodRunning']);
  });

  test('changing the image replaces the pod', async () => {
    const pod = (await kube.get<PodObject>(Pod, podKeyOf(key)))!;
    const ic = await kube.mergePatch<ImmortalContainer>(ImmortalContainerKind, key, { spec: { image: 'nginx:1.27' } });
    const answer = await deliver(fn.url, event(ImmortalContainerKind, ic, 'update'));
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const replaced = await kube.get<PodObject>(Pod, podKeyOf(key));
    assert.equal(replaced?.spec?.containers?.[0].image, 'nginx:1.27');
    assert.notEqual(replaced?.metadata.uid, pod.metadata.uid);
    const status = (await getIc(key))!.status!;
    assert.equal(status.startTimes, 4);
    assert.equal(status.observedGeneration, 2);
  });

  test("changing the image of a pod in restart back-off replaces it at once; the new image's back-off starts from scratch", async () => {
    const icKey = { namespace: 'default', name: 'crashing' };
    const ic = await kube.create<ImmortalContainer>(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: icKey,
      spec: { image: 'busybox:1.36' },
    });
    assert.equal((await deliver(fn.url, event(ImmortalContainerKind, ic, 'add'))).status, 200);
    // Play the kubelet: the container fails at once.
    const failPod = async () => {
      const pod = (await kube.get<PodObject>(Pod, podKeyOf(icKey)))!;
      const failed = await kube.replace<PodObject>(Pod, { ...pod, status: { ...pod.status, phase: 'Failed' } }, 'status');
      assert.equal((await deliver(fn.url, event(Pod, failed, 'update', 'Resource'))).status, 200);
      return failed;
    };
    const readyReason = async () => (await getIc(icKey))!.status!.conditions?.find((c) => c.type === 'Ready')?.reason;
    try {
      const old = await failPod();
      assert.equal(await readyReason(), 'BackOff');

      const changed = await kube.mergePatch<ImmortalContainer>(ImmortalContainerKind, icKey, { spec: { image: 'busybox:1.37' } });
      assert.equal((await deliver(fn.url, event(ImmortalContainerKind, changed, 'update'))).status, 200);
      const replaced = await kube.get<PodObject>(Pod, podKeyOf(icKey));
      assert.equal(replaced?.spec?.containers?.[0].image, 'busybox:1.37', 'replaced at once, not after the back-off');
      assert.notEqual(replaced?.metadata.uid, old.metadata.uid);
      assert.deepEqual([await readyReason(), (await getIc(icKey))!.status!.restartBackoff?.quickFailures], ['PodPending', 0]);

      await failPod();
      const backoff = (await getIc(icKey))!.status!.restartBackoff!;
      assert.equal(backoff.quickFailures, 1, 'the first failure of the new image, not the second of the pod');
      assert.ok(Date.parse(backoff.notBefore) - Date.now() <= 10_000, `waits 10 s: ${backoff.notBefore}`);
    } finally {
      await kube.delete(ImmortalContainerKind, icKey);
    }
  });

  test('a pod of the same name that is not ours is left alone and reported', async () => {
    const icKey = { namespace: 'default', name: 'squatted' };
    await kube.create(Pod, {
      metadata: { name: 'squatted-immortalpod', namespace: 'default' },
      spec: { containers: [{ name: 'x', image: 'busybox' }] },
    });
    const ic = await kube.create<ImmortalContainer>(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name: 'squatted', namespace: 'default' },
      spec: { image: 'nginx' },
    });
    assert.equal((await deliver(fn.url, event(ImmortalContainerKind, ic, 'add'))).status, 200);
    assert.equal((await kube.get<PodObject>(Pod, podKeyOf(icKey)))?.spec?.containers?.[0].image, 'busybox');
    const ready = (await getIc(icKey))!.status!.conditions?.find((c) => c.type === 'Ready');
    assert.deepEqual([ready?.status, ready?.reason], ['False', 'PodNameTaken']);
  });

  test('an ImmortalContainer whose pod the API server refuses is reported once, not on every reconcile', async () => {
    // 70 characters: a valid name, but too long for the pod's controller label (63).
    const name = `invalid-${'p'.repeat(62)}`;
    const ic = await kube.create<ImmortalContainer>(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name, namespace: 'default' },
      spec: { image: 'nginx' },
    });
    for (let i = 0; i < 3; i++) assert.equal((await deliver(fn.url, event(ImmortalContainerKind, ic, 'add'))).status, 200);
    await fn.host.flushEvents();
    const ready = (await getIc({ namespace: 'default', name }))!.status!.conditions?.find((c) => c.type === 'Ready');
    assert.equal(ready?.reason, 'PodInvalid');
    const warnings = (await kube.list(CoreEvent, { namespace: 'default', fieldSelector: `involvedObject.name=${name}` })).items.filter(
      (e) => e.reason === 'PodInvalid',
    );
    assert.equal(warnings.length, 1);
    assert.equal(warnings[0].count, 1, 'posted once');
  });

  test('a pod refused by policy (403: a ResourceQuota) is reported once and tried again later; room in the quota lets it start', async () => {
    await createNamespace('quota');
    const quota = await cluster.cp.request('POST', '/api/v1/namespaces/quota/resourcequotas', {
      metadata: { name: 'no-pods' },
      spec: { hard: { pods: '0' } },
    });
    // No quota controller runs here: its status, which admission counts against, is written as it would write it.
    const counted = await cluster.cp.request('PUT', '/api/v1/namespaces/quota/resourcequotas/no-pods/status', {
      ...quota.body,
      status: { hard: { pods: '0' }, used: { pods: '0' } },
    });
    assert.equal(counted.status, 200);
    const icKey = { namespace: 'quota', name: 'quota-bound' };
    const ic = await kube.create<ImmortalContainer>(
      ImmortalContainerKind,
      { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: icKey, spec: { image: 'nginx' } },
      'quota',
    );
    for (let i = 0; i < 3; i++) {
      const answer = await post(fn.url, event(ImmortalContainerKind, ic, 'add'));
      assert.equal(answer.status, 200, answer.text);
      assert.equal(JSON.parse(answer.headers.get(OUTCOME_HEADER)!).requeued, 1, 'tried again later, not failed');
    }
    await fn.host.flushEvents();
    const ready = (await getIc(icKey))!.status!.conditions?.find((c) => c.type === 'Ready');
    assert.deepEqual([ready?.status, ready?.reason], ['False', 'FailedCreate']);
    assert.match(ready!.message!, /exceeded quota: no-pods/);
    const warnings = (await kube.list(CoreEvent, { namespace: 'quota', fieldSelector: `involvedObject.name=${icKey.name}` })).items.filter(
      (e) => e.reason === 'FailedCreate',
    );
    assert.deepEqual(
      warnings.map((e) => e.count),
      [1],
      'posted once',
    );

    assert.equal((await cluster.cp.request('DELETE', '/api/v1/namespaces/quota/resourcequotas/no-pods')).status, 200);
    assert.equal((await post(fn.url, event(ImmortalContainerKind, ic, 'add'))).status, 200);
    assert.ok(await kube.get(Pod, podKeyOf(icKey)), 'the pod is created once the quota allows it');
    assert.equal((await getIc(icKey))!.status!.conditions?.find((c) => c.type === 'Ready')?.reason === 'FailedCreate', false);
  });

  test('an ImmortalContainer being deleted gets no new pod', async () => {
    const icKey = { namespace: 'default', name: 'doomed' };
    const ic = await kube.create<ImmortalContainer>(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name: 'doomed', namespace: 'default', finalizers: ['test.operator-functions.dev/hold'] },
      spec: { image: 'nginx' },
    });
    await kube.delete(ImmortalContainerKind, icKey);
    assert.ok((await getIc(icKey))?.metadata.deletionTimestamp, 'held in deletion by the finalizer');
    assert.equal((await deliver(fn.url, event(ImmortalContainerKind, ic, 'update'))).status, 200);
    assert.equal(await kube.get(Pod, podKeyOf(icKey)), undefined);
    await kube.mergePatch(ImmortalContainerKind, icKey, { metadata: { finalizers: null } });
  });
});

describe('forged and stale events', () => {
  test('an event naming an object that does not exist writes nothing', async () => {
    const ghost = {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name: 'ghost', namespace: 'default' },
      spec: { image: 'evil' },
    };
    const answer = await deliver(fn.url, event(ImmortalContainerKind, ghost, 'add', 'Resource'));
    assert.equal(answer.status, 200);
    assert.equal(await kube.get(Pod, { namespace: 'default', name: 'ghost-immortalpod' }), undefined);
  });

  test('a Resource-mode body with another image is not trusted', async () => {
    const ic = await kube.create<ImmortalContainer>(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name: 'honest', namespace: 'default' },
      spec: { image: 'nginx:stable' },
    });
    const forged = { ...ic, spec: { image: 'attacker/miner:latest' } };
    assert.equal((await deliver(fn.url, event(ImmortalContainerKind, forged, 'add', 'Resource'))).status, 200);
    const pod = await kube.get<PodObject>(Pod, { namespace: 'default', name: 'honest-immortalpod' });
    assert.equal(pod?.spec?.containers?.[0].image, 'nginx:stable');
  });

  test('a forged pod event pointing at another owner only reconciles that (real) owner', async () => {
    const honest = await getIc({ namespace: 'default', name: 'honest' });
    const before = honest!.metadata.resourceVersion;
    const forgedPod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'anything', namespace: 'default', labels: { controller: 'honest' } },
      spec: { containers: [{ name: 'acontainer', image: 'evil' }] },
    };
    assert.equal((await deliver(fn.url, event(Pod, forgedPod, 'delete', 'Resource'))).status, 200);
    assert.equal(
      (await getIc({ namespace: 'default', name: 'honest' }))!.metadata.resourceVersion,
      before,
      'nothing to change, nothing written',
    );
  });
});

describe('least privilege', () => {
  test('the function identity can do what it declared and nothing else', async () => {
    const asFunction = kubeFor(functionKubeconfig);
    await asFunction.list(ImmortalContainerKind);
    await asFunction.get(Pod, { namespace: 'default', name: 'honest-immortalpod' });
    for (const forbidden of [
      () => asFunction.list(Secret, { namespace: 'default' }),
      () => asFunction.get(Secret, { namespace: 'kube-system', name: 'anything' }),
      () => asFunction.list(Pod, { namespace: 'default' }),
      () => asFunction.list(Pod),
      () => asFunction.list(Namespace),
      () => asFunction.create(ConfigMap, { metadata: { name: 'x', namespace: 'default' } }),
      () => asFunction.delete(ImmortalContainerKind, { namespace: 'default', name: 'honest' }),
      () => asFunction.mergePatch(ImmortalContainerKind, { namespace: 'default', name: 'honest' }, { spec: { image: 'x' } }),
      () => asFunction.mergePatch(Pod, { namespace: 'default', name: 'honest-immortalpod' }, { metadata: { labels: { x: 'y' } } }),
    ]) {
      await assert.rejects(forbidden, (error: unknown) => error instanceof ApiError && error.code === 403);
    }
  });

  test('OwnerReferencesPermissionEnforcement is on: without the implied finalizers rule the pod is refused', async () => {
    // The same role minus `update` on immortalcontainers/finalizers, which rulesFor derives.
    const lacking = { ...immortalContainer, name: 'ic-lacking-finalizers', owns: [] };
    const kubeconfig = await kubeconfigWithDeclaredRbac(cluster.cp, {
      ...lacking,
      rbac: [
        ...immortalContainer.rbac,
        { apiGroups: [''], resources: ['pods'], verbs: ['get'] },
        { apiGroups: ['immortalcontainer.flugel.it'], resources: ['immortalcontainers'], verbs: ['get'] },
      ],
    });
    const ic = (await getIc({ namespace: 'default', name: 'honest' }))!;
    const asLacking = kubeFor(kubeconfig);
    const pod = {
      metadata: {
        name: 'blocked-owner-deletion',
        namespace: 'default',
        ownerReferences: [
          {
            apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
            kind: 'ImmortalContainer',
            name: 'honest',
            uid: ic.metadata.uid!,
            controller: true,
            blockOwnerDeletion: true,
          },
        ],
      },
      spec: { containers: [{ name: 'c', image: 'nginx' }] },
    };
    await assert.rejects(
      () => asLacking.create(Pod, pod),
      (error: unknown) => error instanceof ApiError && error.code === 403 && /blockOwnerDeletion|finalizers/.test(error.message),
    );
    // The generated role (with the implied rule) may.
    await kubeFor(functionKubeconfig).create(Pod, pod);
    await kube.delete(Pod, { namespace: 'default', name: 'blocked-owner-deletion' });
  });
});

describe('duplicates and races', () => {
  test('200 ImmortalContainers, every event three times, shuffled, four instances at once', async () => {
    const namespace = 'race';
    await createNamespace(namespace);
    const count = 200;
    const objects = await Promise.all(
      Array.from({ length: count }, (_, i) =>
        kube.create<ImmortalContainer>(ImmortalContainerKind, {
          apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
          kind: 'ImmortalContainer',
          metadata: { name: `ic-${i}`, namespace },
          spec: { image: `nginx:1.${i % 7}` },
        }),
      ),
    );
    const instances = await Promise.all(Array.from({ length: 4 }, () => serveFunction(immortalContainer, functionKubeconfig)));
    try {
      // Each change as the source would see it (add, then the status update the reconcile causes),
      // and each delivered three times with the same id, as a retrying sender does.
      const events = objects.flatMap((ic) => [
        event(ImmortalContainerKind, ic, 'add'),
        event(ImmortalContainerKind, ic, 'update', 'Resource'),
      ]);
      const deliveries = events.flatMap((e) => [e, e, e]);
      for (let i = deliveries.length - 1; i > 0; i--) {
        const j = Math.floor(Math.random() * (i + 1));
        [deliveries[i], deliveries[j]] = [deliveries[j], deliveries[i]];
      }
      let next = 0;
      const statuses = new Map<number, number>();
      await Promise.all(
        Array.from({ length: 48 }, async () => {
          for (let i = next++; i < deliveries.length; i = next++) {
            const answer = await deliver(instances[i % instances.length].url, deliveries[i]);
            statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
          }
        }),
      );
      assert.deepEqual([...statuses.keys()], [200], `every delivery answered 200: ${JSON.stringify([...statuses])}`);

      const pods = await kube.list<PodObject>(Pod, { namespace });
      assert.equal(pods.items.length, count, 'exactly one pod per ImmortalContainer');
      const ics = await kube.list<ImmortalContainer>(ImmortalContainerKind, { namespace });
      const wrong = ics.items.filter((ic) => ic.status?.startTimes !== 1 || ic.status?.currentPod !== `${ic.metadata.name}-immortalpod`);
      assert.deepEqual(
        wrong.map((ic) => `${ic.metadata.name}: ${ic.status?.startTimes}`),
        [],
        'every startTimes is exactly 1',
      );
      for (const pod of pods.items) {
        const ic = ics.items.find((candidate) => candidate.metadata.uid === pod.metadata.ownerReferences?.[0]?.uid);
        assert.equal(pod.spec?.containers?.[0].image, ic?.spec.image);
      }
    } finally {
      await Promise.all(instances.map((instance) => instance.close()));
    }
  });

  test('concurrent deletes and redeliveries still count every creation exactly once', async () => {
    const namespace = 'race';
    const instances = await Promise.all(Array.from({ length: 4 }, () => serveFunction(immortalContainer, functionKubeconfig)));
    try {
      const victims = Array.from({ length: 50 }, (_, i) => ({ namespace, name: `ic-${i}` }));
      for (let round = 0; round < 2; round++) {
        await Promise.all(
          victims.map(async (key) => {
            const pod = (await kube.get<PodObject>(Pod, podKeyOf(key)))!;
            await kube.delete(Pod, podKeyOf(key));
            const deleted = event(Pod, pod, 'delete', 'Resource');
            await Promise.all(instances.map((instance) => deliver(instance.url, deleted)));
          }),
        );
      }
      for (const key of victims) {
        const ic = (await getIc(key))!;
        assert.equal(ic.status?.startTimes, 3, `${key.name}: created once, then recreated after each of two deletions`);
        assert.ok(await kube.get(Pod, podKeyOf(key)), `${key.name} has a pod`);
      }
    } finally {
      await Promise.all(instances.map((instance) => instance.close()));
    }
  });
});

test('resync (PingSource) reconciles every object', async () => {
  const key = { namespace: 'default', name: 'missed-event' };
  await kube.create(ImmortalContainerKind, {
    apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
    kind: 'ImmortalContainer',
    metadata: { name: key.name, namespace: key.namespace },
    spec: { image: 'nginx' },
  });
  const { CloudEvent } = await import('cloudevents');
  const ping = new CloudEvent({
    type: 'dev.knative.sources.ping',
    source: '/apis/v1/namespaces/default/pingsources/immortal-container-resync',
    data: {},
  });
  const answer = await deliver(fn.url, ping);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  assert.ok(answer.body.reconciled >= 200, 'every ImmortalContainer was reconciled');
  assert.equal(answer.body.failed, 0);
  await eventually(() => kube.get(Pod, podKeyOf(key)), 5000, 'pod of the object whose event was missed');
});
