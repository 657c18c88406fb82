// Reference-mode events of the reconciled kind against a real API server: a repeated one costs
// one read and no write, and an announcement taken by another reconcile of the same key (a pod's
// delete) never loses the work either event asked for (functions/runtime/host/reference-reads.ts).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind, type ImmortalContainer, type PodObject } from '../../functions/immortal-container/desired.ts';
import { type FunctionEvent, Pod } from '../../functions/runtime/index.ts';
import { deliver, serveFunction, startTestCluster, type RunningFunction, type TestCluster } from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

let cluster: TestCluster;
let fn: RunningFunction;

before(async () => {
  cluster = await startTestCluster();
  fn = await serveFunction(immortalContainer, await kubeconfigWithDeclaredRbac(cluster.cp, immortalContainer));
});
after(async () => {
  await fn?.close();
  await cluster?.stop();
});

const create = (name: string) =>
  cluster.kube.create<ImmortalContainer>(ImmortalContainerKind, {
    apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
    kind: 'ImmortalContainer',
    metadata: { name, namespace: 'default' },
    spec: { image: 'nginx' },
  });
const requests = async () =>
  Object.fromEntries(
    (await fn.metrics.apiRequests.get()).values.filter((v) => v.value > 0).map((v) => [`${v.labels.verb} ${v.labels.resource}`, v.value]),
  );
const difference = (before: Record<string, number>, after: Record<string, number>) =>
  Object.fromEntries(
    Object.entries(after)
      .map(([key, value]) => [key, value - (before[key] ?? 0)])
      .filter(([, value]) => value !== 0),
  );
const reference = (ic: ImmortalContainer, action: 'add' | 'update'): FunctionEvent => ({
  type: 'change',
  action,
  mode: 'ref',
  ref: { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', namespace: 'default', name: ic.metadata.name! },
  id: `${ic.metadata.name}-${action}`,
});

describe('Reference-mode events of the reconciled kind', () => {
  test('the first is reconciled with one read of the object; a repeated one costs that read and nothing else', async () => {
    const ic = await create('ref-repeat');
    const added = apiServerSourceEvent({
      server: cluster.cp.server,
      kind: ImmortalContainerKind,
      object: ic,
      action: 'add',
      mode: 'Reference',
    });
    let before = await requests();
    assert.equal((await deliver(fn.url, added)).status, 200);
    await fn.host.flushEvents();
    assert.deepEqual(
      difference(before, await requests()),
      { 'get immortalcontainers': 1, 'post pods': 1, 'post events': 1, 'put immortalcontainers/status': 1 },
      "the object is read once: the reconcile's own read is its eventObject",
    );
    for (const action of ['add', 'update'] as const) {
      before = await requests();
      assert.equal(
        (
          await deliver(
            fn.url,
            apiServerSourceEvent({ server: cluster.cp.server, kind: ImmortalContainerKind, object: ic, action, mode: 'Reference' }),
          )
        ).status,
        200,
      );
      await fn.host.flushEvents();
      assert.deepEqual(difference(before, await requests()), { 'get immortalcontainers': 1 }, `a repeated ${action}: one read, no write`);
    }
    const status = (await cluster.kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'default', name: 'ref-repeat' }))!
      .status!;
    assert.equal(status.startTimes, 1);
  });

  test('a pod deleted meanwhile is recreated whichever reconcile takes the announcement', async () => {
    const ic = await create('ref-race');
    assert.equal((await fn.host.handle(reference(ic, 'add'))).status, 200);
    const podKey = { namespace: 'default', name: 'ref-race-immortalpod' };
    const pod = (await cluster.kube.get<PodObject>(Pod, podKey))!;
    assert.ok(pod, 'the first reconcile created the pod');
    await cluster.kube.delete(Pod, podKey);
    // The pod's delete arrives first and the ImmortalContainer's Reference-mode update right
    // after, in the same tick: the delete's reconcile (no body to learn from) takes the
    // announcement and sees a settled object; the update's own reconcile finds none and runs in full.
    const deleted: FunctionEvent = {
      type: 'change',
      action: 'delete',
      mode: 'resource',
      ref: { apiVersion: 'v1', kind: 'Pod', namespace: 'default', name: podKey.name },
      object: pod,
      id: 'pod-delete',
    };
    const answers = await Promise.all([fn.host.handle(deleted), fn.host.handle(reference(ic, 'update'))]);
    assert.deepEqual(
      answers.map((answer) => answer.status),
      [200, 200],
    );
    assert.ok(await cluster.kube.get(Pod, podKey), 'the pod was recreated');
    const status = (await cluster.kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'default', name: 'ref-race' }))!.status!;
    assert.equal(status.startTimes, 2, 'counted once more');
  });

  test('a resync is never answered from the memory of an event: it reads everything', async () => {
    const ic = await create('ref-resync');
    assert.equal((await fn.host.handle(reference(ic, 'add'))).status, 200);
    const podKey = { namespace: 'default', name: 'ref-resync-immortalpod' };
    await cluster.kube.delete(Pod, podKey);
    // The pod's delete event is lost (the source was down); only the resync can repair it.
    assert.equal((await fn.host.handle({ type: 'resync', id: 'resync' })).status, 200);
    assert.ok(await cluster.kube.get(Pod, podKey), 'the resync recreated the pod');
  });
});
