// The seed's Metacontroller ImmortalContainer served by the `composite` function against a real
// API server: the CompositeController manifest and the ImmortalContainer from crds/examples/
// applied unchanged, the seed-equivalent sync hook (functions/composite/immortal-container-hook.ts)
// served on loopback by serve-hook.ts, the function running as its own ServiceAccount with its
// generated RBAC. Events are delivered to the function host directly, as the broker would.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import { CRD_DIR, readManifests } from '../../eventing/crds.ts';
import { sync } from '../../functions/composite/immortal-container-hook.ts';
import { serveHooks, type HookServer } from '../../functions/composite/serve-hook.ts';
import { LAST_APPLIED_ANNOTATION } from '../../functions/composite/apply.ts';
import composite from '../../functions/composite-controller/index.ts';
import { CompositeControllerKind } from '../../functions/composite-controller/kinds.ts';
import { CoreEvent, Pod, type KubeObject, type ResourceKind } from '../../functions/runtime/kinds.ts';
import type { KubeClient } from '../../functions/runtime/kube.ts';
import { deliver, serveFunction, startTestCluster, type RunningFunction, type TestCluster } from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

const MetaImmortalContainer: ResourceKind = { group: 'immortalcontainers.flugel.it', version: 'v1alpha1', kind: 'ImmortalContainer', plural: 'immortalcontainers', namespaced: true };
const SEED_HOOK_URL = 'http://immortalcontainer-controller.metacontroller/';

let cluster: TestCluster;
let kube: KubeClient;
let hooks: HookServer;
let fn: RunningFunction;

const example = (kind: string): KubeObject => {
  const found = readManifests(join(CRD_DIR, 'examples')).find((object) => object.kind === kind && (kind === 'CompositeController' || object.apiVersion === 'immortalcontainers.flugel.it/v1alpha1'));
  assert.ok(found, `crds/examples has the Metacontroller ${kind}`);
  return found;
};

/** What the plane delivers when a CompositeController changes (or a resync names it). */
const nudge = async (name = 'immortalcontainer-controller') => {
  const answer = await deliver(fn.url, apiServerSourceEvent({ server: cluster.cp.server, kind: CompositeControllerKind, object: { metadata: { name } }, action: 'update', mode: 'Reference' }));
  return answer;
};

type PodObject = KubeObject & { spec?: { containers?: { name: string; image: string }[] }; status?: { phase?: string } };
type Parent = KubeObject & { status?: { currentPod?: string; observedGeneration?: number } };

const key = { namespace: 'default', name: 'example-immortalcontainer' };
const podKey = { namespace: 'default', name: 'example-immortalcontainer-immortalpod' };
const getParent = () => kube.get<Parent>(MetaImmortalContainer, key);
const getPod = () => kube.get<PodObject>(Pod, podKey);

before(async () => {
  cluster = await startTestCluster();
  kube = cluster.kube;
  hooks = await serveHooks({ hooks: { '/sync': sync } });
  const kubeconfig = await kubeconfigWithDeclaredRbac(cluster.cp, composite);
  fn = await serveFunction(composite, kubeconfig, { config: { COMPOSITE_HOOK_URLS: `${SEED_HOOK_URL}=${hooks.url}/` } });
  await kube.create(CompositeControllerKind, example('CompositeController'));
  await kube.create(MetaImmortalContainer, example('ImmortalContainer'), 'default');
});

after(async () => {
  await fn?.close();
  await hooks?.close();
  await cluster?.stop();
});

describe("the seed's Metacontroller ImmortalContainer, manifests unchanged", () => {
  test('the first sync creates the pod, controlled by the parent and labelled controller-uid (no selector in the manifest)', async () => {
    const answer = await nudge();
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const parent = (await getParent())!;
    const pod = await getPod();
    assert.ok(pod, 'the pod exists');
    assert.equal(pod.spec?.containers?.[0]?.image, 'nginx:latest');
    assert.equal(pod.metadata.labels?.['controller-uid'], parent.metadata.uid);
    const owner = pod.metadata.ownerReferences?.[0];
    assert.deepEqual([owner?.kind, owner?.name, owner?.uid, owner?.controller, owner?.blockOwnerDeletion], ['ImmortalContainer', key.name, parent.metadata.uid, true, true]);
    assert.ok(pod.metadata.annotations?.[LAST_APPLIED_ANNOTATION], 'the last-applied annotation is set for the 3-way merge');
    // The hook saw no pod yet: status is its answer plus observedGeneration, through /status.
    assert.deepEqual(parent.status, { currentPod: '', observedGeneration: 1 });
  });

  test('the next sync reports the pod in status; a sync with nothing new writes nothing', async () => {
    assert.equal((await nudge()).status, 200);
    const parent = (await getParent())!;
    assert.deepEqual(parent.status, { currentPod: podKey.name, observedGeneration: 1 });
    const pod = (await getPod())!;
    assert.equal((await nudge()).status, 200);
    assert.equal((await getParent())!.metadata.resourceVersion, parent.metadata.resourceVersion, 'no status write');
    assert.equal((await getPod())!.metadata.resourceVersion, pod.metadata.resourceVersion, 'no pod write');
  });

  test('a deleted pod is created again', async () => {
    const pod = (await getPod())!;
    await kube.delete(Pod, podKey);
    assert.equal((await nudge()).status, 200);
    const recreated = await getPod();
    assert.ok(recreated && recreated.metadata.uid !== pod.metadata.uid, 'a new pod exists');
  });

  test('a pod that exited 0 (Succeeded) is deleted, then replaced (the seed never replaced it)', async () => {
    const pod = (await getPod())!;
    // Play the kubelet: the container exited 0.
    await kube.replace(Pod, { ...pod, status: { phase: 'Succeeded' } }, 'status');
    const answer = await nudge();
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(await getPod(), undefined, 'the finished pod was deleted');
    assert.deepEqual((await getParent())!.status, { currentPod: '', observedGeneration: 1 });
    assert.equal((await nudge()).status, 200);
    const replaced = await getPod();
    assert.ok(replaced && replaced.metadata.uid !== pod.metadata.uid, 'a new pod runs');
  });

  test('Recreate (the manifest\'s strategy): a label added by someone else survives without a recreate; an image change recreates the pod', async () => {
    const pod = (await getPod())!;
    await kube.replace(Pod, { ...pod, metadata: { ...pod.metadata, labels: { ...pod.metadata.labels, 'added-by': 'someone' } } });
    assert.equal((await nudge()).status, 200);
    const kept = (await getPod())!;
    assert.equal(kept.metadata.uid, pod.metadata.uid, 'not recreated');
    assert.equal(kept.metadata.labels?.['added-by'], 'someone');

    const parent = (await getParent())!;
    await kube.replace(MetaImmortalContainer, { ...parent, spec: { image: 'nginx:1.25' } });
    assert.equal((await nudge()).status, 200);
    assert.equal(await getPod(), undefined, 'Recreate deletes the outdated pod first');
    assert.equal((await nudge()).status, 200);
    const recreated = (await getPod())!;
    assert.notEqual(recreated.metadata.uid, pod.metadata.uid);
    assert.equal(recreated.spec?.containers?.[0]?.image, 'nginx:1.25');
    assert.equal((await getParent())!.status?.observedGeneration, 2);
  });
});

describe('kinds known only at run time', () => {
  test('a CompositeController whose parent kind is not served yet is retried (503), not treated as gone', async () => {
    await kube.create(CompositeControllerKind, {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: 'not-yet' },
      spec: { parentResource: { apiVersion: 'example.com/v1', resource: 'widgets' }, hooks: { sync: { webhook: { url: 'http://127.0.0.1:9/sync' } } } },
    });
    const answer = await nudge('not-yet');
    assert.equal(answer.status, 503, JSON.stringify(answer.body));
    assert.match(JSON.stringify(answer.body), /does not serve widgets in example\.com\/v1/);
  });

  test('a CompositeController without a sync hook is refused for good: a Warning Event, not retried', async () => {
    await kube.create(CompositeControllerKind, {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: 'no-hooks' },
      spec: { parentResource: { apiVersion: 'immortalcontainers.flugel.it/v1alpha1', resource: 'immortalcontainers' } },
    });
    const answer = await nudge('no-hooks');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    await fn.host.flushEvents();
    const events = await kube.list(CoreEvent, { namespace: 'default', fieldSelector: 'involvedObject.name=no-hooks' });
    assert.ok(events.items.some((event) => event.reason === 'InvalidController' && /no hooks defined/.test(String(event.message))), JSON.stringify(events.items.map((event) => event.message)));
  });
});
