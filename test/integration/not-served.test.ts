// A kind the API server does not serve is not an object that is gone. A real kube-apiserver
// answers "404 page not found" for every custom resource for a moment after it starts (before
// its CRD informer has synced), exactly as it does when the CRD is missing; a function that read
// that as "deleted" would drop the event for good. This file runs a control plane whose CRDs are
// installed only halfway through.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import { applyCrds } from '../../eventing/crds.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind, type ImmortalContainer } from '../../functions/immortal-container/desired.ts';
import { Discovery, Pod, ApiError, isNotFound, KubeClient, NOT_SERVED } from '../../functions/runtime/index.ts';
import { startControlPlane, type ControlPlane } from '../../cluster/index.ts';
import { deliver, kubeFor, serveFunction, type RunningFunction } from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

let cp: ControlPlane;
let kube: KubeClient;
let fn: RunningFunction;

const key = { namespace: 'default', name: 'early' };
const ic: ImmortalContainer = {
  apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
  kind: 'ImmortalContainer',
  metadata: { ...key },
  spec: { image: 'nginx:latest' },
};

before(async () => {
  cp = await startControlPlane();
  kube = kubeFor(cp.kubeconfigPath);
  fn = await serveFunction(immortalContainer, await kubeconfigWithDeclaredRbac(cp, immortalContainer));
});

after(async () => {
  await fn?.close();
  await cp?.stop();
});

/** The error `promise` rejects with, which must be an ApiError. */
async function apiErrorOf(promise: Promise<unknown>): Promise<ApiError> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  assert.ok(error instanceof ApiError, `expected an ApiError, got ${String(error)}`);
  return error;
}

test('a missing object is undefined; a kind that is not served is a transient NotServed error', async () => {
  assert.equal(await kube.get(Pod, { namespace: 'default', name: 'no-such-pod' }), undefined);
  const missingPod = await apiErrorOf(kube.request('GET', '/api/v1/namespaces/default/pods/no-such-pod'));
  assert.ok(isNotFound(missingPod) && !missingPod.transient, 'an absent pod is NotFound, and final');

  for (const attempt of [
    () => kube.get(ImmortalContainerKind, key),
    () => kube.list(ImmortalContainerKind, { namespace: 'default' }),
    () => kube.watch(ImmortalContainerKind, { namespace: 'default' }).next(),
  ]) {
    const error = await apiErrorOf(attempt());
    assert.equal(error.code, 404);
    assert.equal(error.reason, NOT_SERVED);
    assert.ok(error.transient, 'retried, as the server may be starting');
    assert.ok(!isNotFound(error), 'never read as "the object is gone"');
    assert.match(error.message, /does not serve this resource \(is its CustomResourceDefinition installed/);
  }
});

test('the function answers 503 while its kind is not served, and reconciles once it is', async () => {
  const event = apiServerSourceEvent({ server: cp.server, kind: ImmortalContainerKind, object: ic, action: 'add', mode: 'Reference' });
  const early = await deliver(fn.url, event);
  assert.equal(early.status, 503, `the broker must retry the event, not consume it: ${JSON.stringify(early.body)}`);
  assert.match(JSON.stringify(early.body), /does not serve this resource/);

  await applyCrds(kube);
  await kube.create(ImmortalContainerKind, ic);
  const redelivered = await deliver(fn.url, event);
  assert.equal(redelivered.status, 200, JSON.stringify(redelivered.body));
  assert.ok(await kube.get(Pod, { namespace: 'default', name: 'early-immortalpod' }), 'the retried event created the pod');
});

test('discovery remembers a bounded number of group-versions, forgetting the least recently used (a hook naming ever new groups cannot grow the process)', async () => {
  const observed: string[] = [];
  const counting = KubeClient.fromFile(cp.kubeconfigPath, (_verb, resource) => observed.push(resource));
  // A limit of 3 (MAX_GROUP_VERSIONS in production) over group-versions every API server serves.
  const discovery = new Discovery(counting, 3);
  const served = ['apps/v1', 'batch/v1', 'rbac.authorization.k8s.io/v1', 'policy/v1', 'coordination.k8s.io/v1'];
  assert.equal((await discovery.resolve('v1', 'pods')).kind, 'Pod');
  for (const apiVersion of served) {
    await discovery.resolve(
      apiVersion,
      apiVersion === 'apps/v1'
        ? 'deployments'
        : apiVersion === 'batch/v1'
          ? 'jobs'
          : apiVersion.startsWith('rbac')
            ? 'roles'
            : apiVersion.startsWith('policy')
              ? 'poddisruptionbudgets'
              : 'leases',
    );
    await discovery.resolve('v1', 'pods'); // used all along: the most recent, never forgotten
    assert.ok(discovery.size <= 3, `${discovery.size} group-versions remembered`);
  }
  const reads = observed.length;
  await discovery.resolve('v1', 'configmaps');
  assert.equal(observed.length, reads, 'the core group was kept: no read');
  await discovery.resolve('apps/v1', 'deployments');
  assert.equal(observed.length, reads + 1, 'apps/v1 was forgotten: read again');
});
