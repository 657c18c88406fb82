// The seed's Metacontroller ImmortalContainer served by the `composite` function against a real
// API server: the CompositeController manifest and the ImmortalContainer from crds/examples/
// applied unchanged, the seed-equivalent sync hook (examples/immortal-container-hook/hook.ts)
// served on loopback by serve-hook.ts, the function running as its own ServiceAccount with its
// generated RBAC. Events are delivered to the function host directly, as the broker would.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import { applyCrds } from '../../eventing/crds.ts';
import { sync } from '../../examples/immortal-container-hook/hook.ts';
import { serveHooks, type HookServer } from '../../functions/composite/metacontroller/serve-hook.ts';
import { LAST_APPLIED_ANNOTATION } from '../../functions/composite/metacontroller/apply.ts';
import { MAX_RESPONSE_BYTES } from '../../functions/composite/metacontroller/hook-client.ts';
import { MAX_CHILDREN } from '../../functions/composite/metacontroller/hook-response.ts';
import composite from '../../functions/composite/index.ts';
import { ImmortalContainerKind } from '../../functions/immortal-container/desired.ts';
import { CompositeControllerKind } from '../../functions/composite/kinds.ts';
import { ConfigMap, CoreEvent, Namespace, Pod, type KubeObject, type ResourceKind, KubeClient } from '../../functions/runtime/index.ts';
import { OUTCOME_HEADER } from '../../functions/runtime/host/index.ts';
import { CloudEvent, HTTP } from 'cloudevents';
import {
  burstWatchReads,
  deliver,
  eventually,
  serveFunction,
  startTestCluster,
  type RunningFunction,
  type TestCluster,
} from '../support/cluster.ts';
import { createAdmittedBeforeRules } from '../support/crd-rules.ts';
import { crdFor, MetaImmortalContainer, metacontrollerExample, SEED_HOOK_URL } from '../support/examples.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

/** The other ImmortalContainer CRD (crds/immortalcontainer.yaml): parents for the controllers below, told apart by label. */
const PlainImmortalContainer = ImmortalContainerKind;
const COMPOSITE_CRD = `${CompositeControllerKind.plural}.${CompositeControllerKind.group}`;
const SCRIPTED_HOOK_URL = 'http://scripted.hooks.test/';

/** A hook server whose answer each test scripts: (path, request) → [status, body, headers, delay ms]. */
type Script = (path: string, request: any) => { status: number; body: string; headers?: Record<string, string>; delayMs?: number };
let script: Script = () => ({ status: 500, body: 'no script' });
const scriptedCalls: { path: string; request: any }[] = [];
let scripted: Server;

/** A cluster-scoped kind of the test's own, applied while the function runs. */
const Widget: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: false };
let scriptedUrl: string;

let cluster: TestCluster;
let kube: KubeClient;
let hooks: HookServer;
let fn: RunningFunction;
/** The function's identity: its ServiceAccount with the generated RBAC. */
let functionKubeconfig: string;
/** The function's configuration: the manifests' hook URLs mapped to the hook servers on loopback, no per-controller sources. */
let functionConfig: Record<string, string>;

/** What the plane delivers when a CompositeController changes (or a resync names it). */
const nudge = async (name = 'immortalcontainer-controller') => {
  const answer = await deliver(
    fn.url,
    apiServerSourceEvent({
      server: cluster.cp.server,
      kind: CompositeControllerKind,
      object: { metadata: { name } },
      action: 'update',
      mode: 'Reference',
    }),
  );
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
  scripted = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      scriptedCalls.push({ path: request.url ?? '', request: body });
      const answer = script(request.url ?? '', body);
      setTimeout(
        () => response.writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers }).end(answer.body),
        answer.delayMs ?? 0,
      );
    });
  });
  await new Promise<void>((resolve) => scripted.listen(0, '127.0.0.1', resolve));
  scriptedUrl = `http://127.0.0.1:${(scripted.address() as AddressInfo).port}/`;
  functionKubeconfig = await kubeconfigWithDeclaredRbac(cluster.cp, composite);
  functionConfig = {
    COMPOSITE_HOOK_URLS: `${SEED_HOOK_URL}=${hooks.url}/,${SCRIPTED_HOOK_URL}=${scriptedUrl}`,
    COMPOSITE_EVENT_SOURCES: 'plane',
  };
  // Events are delivered here directly: nobody runs per-controller sources (see test/e2e/composite-plane.test.ts for those).
  fn = await serveFunction(composite, functionKubeconfig, { config: functionConfig });
  await kube.create(CompositeControllerKind, metacontrollerExample('CompositeController'));
  await kube.create(MetaImmortalContainer, metacontrollerExample('ImmortalContainer'), 'default');
});

after(async () => {
  await fn?.close();
  await hooks?.close();
  scripted?.closeAllConnections();
  scripted?.close();
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
    assert.deepEqual(
      [owner?.kind, owner?.name, owner?.uid, owner?.controller, owner?.blockOwnerDeletion],
      ['ImmortalContainer', key.name, parent.metadata.uid, true, true],
    );
    assert.ok(pod.metadata.annotations?.[LAST_APPLIED_ANNOTATION], 'the last-applied annotation is set for the 3-way merge');
    // The sync asked the hook again with the pod it created observed (what the pod's add event
    // would bring): status is that answer plus observedGeneration, through /status.
    assert.deepEqual(parent.status, { currentPod: podKey.name, observedGeneration: 1 });
  });

  test('the status names the pod; a sync with nothing new writes nothing', async () => {
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
    // The answer asks for the parent again soon, alone (a reply event the broker holds), so the
    // pod comes back without waiting for the next resync or syncing the controller's other parents.
    assert.deepEqual(
      answer.body.keys,
      ['immortalcontainers.flugel.it/ImmortalContainer:default/example-immortalcontainer'],
      JSON.stringify(answer.body),
    );
    assert.deepEqual((await getParent())!.status, { currentPod: '', observedGeneration: 1 });
    assert.equal((await nudge()).status, 200);
    const replaced = await getPod();
    assert.ok(replaced && replaced.metadata.uid !== pod.metadata.uid, 'a new pod runs');
  });

  test("Recreate (the manifest's strategy): a label added by someone else survives without a recreate; an image change recreates the pod", async () => {
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

describe('events of parent and child kinds, routed by the function (runtimeKinds)', () => {
  const second = { namespace: 'default', name: 'second' };
  const secondPod = { namespace: 'default', name: 'second-immortalpod' };
  const event = (kind: ResourceKind, object: KubeObject, action: 'add' | 'update' | 'delete', mode: 'Reference' | 'Resource') =>
    deliver(fn.url, apiServerSourceEvent({ server: cluster.cp.server, kind, object, action, mode }));

  test("a parent's add event syncs that parent alone: its pod is created", async () => {
    const created = await kube.create<KubeObject>(
      MetaImmortalContainer,
      { ...metacontrollerExample('ImmortalContainer'), metadata: { name: second.name } },
      'default',
    );
    const answer = await event(MetaImmortalContainer, created, 'add', 'Reference');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const pod = await kube.get<PodObject>(Pod, secondPod);
    assert.ok(pod, 'the pod exists');
    assert.equal(pod.metadata.ownerReferences?.[0]?.uid, created.metadata.uid);
  });

  test("a child's delete event (Resource mode, the last body with its controller reference) wakes its parent: the pod is back", async () => {
    const pod = (await kube.get<PodObject>(Pod, secondPod))!;
    await kube.delete(Pod, secondPod);
    const answer = await event(Pod, { ...pod, apiVersion: 'v1', kind: 'Pod' }, 'delete', 'Resource');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const recreated = await kube.get<PodObject>(Pod, secondPod);
    assert.ok(recreated && recreated.metadata.uid !== pod.metadata.uid, 'a new pod exists');
  });

  test("a child's event in Reference mode is routed by reading the child; a reconcile event may name the parent's kind", async () => {
    // Changed by someone else, so the child read is not at a version the function wrote itself.
    const pod = (await kube.get<PodObject>(Pod, secondPod))!;
    await kube.replace(Pod, { ...pod, metadata: { ...pod.metadata, labels: { ...pod.metadata.labels, touched: 'yes' } } });
    const answer = await event(Pod, { metadata: { ...secondPod } }, 'update', 'Reference');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(answer.body.reconciled, 1, JSON.stringify(answer.body));
    assert.equal((await kube.get<Parent>(MetaImmortalContainer, second))!.status?.currentPod, secondPod.name);
    const reconcile = new CloudEvent({
      specversion: '1.0',
      id: 'r-parent',
      source: '/opfn/functions/composite',
      type: 'dev.opfn.reconcile',
      datacontenttype: 'application/json',
      data: { keys: ['immortalcontainers.flugel.it/ImmortalContainer:default/second'] },
    });
    const replayed = await deliver(fn.url, reconcile);
    assert.equal(replayed.status, 200, JSON.stringify(replayed.body));
    const unknownKind = new CloudEvent({
      specversion: '1.0',
      id: 'r-unknown',
      source: '/opfn/functions/composite',
      type: 'dev.opfn.reconcile',
      datacontenttype: 'application/json',
      data: { keys: ['example.org/Nothing:default/x'] },
    });
    assert.equal((await deliver(fn.url, unknownKind)).status, 400);
  });

  test('an event of a kind no CompositeController names concerns nothing, and costs no write', async () => {
    const answer = await event(ConfigMap, { metadata: { namespace: 'default', name: 'unrelated' }, data: {} }, 'add', 'Resource');
    assert.equal(answer.status, 200);
    assert.match(JSON.stringify(answer.body), /concerns nothing composite reconciles/);
  });

  test("the echoes of the function's own writes (its status write, its pod's create) are not synced; a real change of the same parent is", async () => {
    const third = { namespace: 'default', name: 'third' };
    const thirdPod = { namespace: 'default', name: 'third-immortalpod' };
    const created = await kube.create<KubeObject>(
      MetaImmortalContainer,
      { ...metacontrollerExample('ImmortalContainer'), metadata: { name: third.name } },
      'default',
    );
    const added = await event(MetaImmortalContainer, created, 'add', 'Resource');
    assert.equal(added.body.reconciled, 1, JSON.stringify(added.body));
    const parent = (await kube.get<Parent>(MetaImmortalContainer, third))!;
    const pod = (await kube.get<PodObject>(Pod, thirdPod))!;
    // One sync did it all: the hook was asked again with the pod it created.
    assert.deepEqual(parent.status, { currentPod: thirdPod.name, observedGeneration: 1 });

    // What the sources send next: the parent at the function's status write, the pod at its create.
    // The second parent body is forged (another spec at the same version): it can only skip itself.
    const echoes: [ResourceKind, KubeObject, 'add' | 'update'][] = [
      [MetaImmortalContainer, parent, 'update'],
      [Pod, { ...pod, apiVersion: 'v1', kind: 'Pod' }, 'add'],
      [MetaImmortalContainer, { ...parent, spec: { image: 'forged:1' } }, 'update'],
    ];
    for (const [kind, object, action] of echoes) {
      const echo = await event(kind, object, action, 'Resource');
      assert.equal(echo.status, 200, JSON.stringify(echo.body));
      assert.equal(echo.body.reconciled, undefined, JSON.stringify(echo.body));
      assert.match(String(echo.body.ignored), /is at the version this function wrote/, JSON.stringify(echo.body));
    }
    assert.equal((await kube.get<PodObject>(Pod, thirdPod))!.metadata.resourceVersion, pod.metadata.resourceVersion, 'no pod write');
    assert.equal((await kube.get<Parent>(MetaImmortalContainer, third))!.metadata.resourceVersion, parent.metadata.resourceVersion);

    // A real change of the same parent is a new version: synced (Recreate deletes the outdated pod).
    const changed = await kube.replace<KubeObject>(MetaImmortalContainer, { ...parent, spec: { image: 'nginx:1.25' } });
    const answer = await event(MetaImmortalContainer, changed, 'update', 'Resource');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(await kube.get(Pod, thirdPod), undefined, 'the outdated pod was deleted');
    // Its answer asks for the parent again soon (a reply naming it), to create the new pod.
    assert.deepEqual(answer.body.keys, ['immortalcontainers.flugel.it/ImmortalContainer:default/third'], JSON.stringify(answer.body));
    // The sync the answer asked for soon creates the new pod; a change of it by someone else wakes the parent.
    const again = await event(MetaImmortalContainer, changed, 'update', 'Resource');
    assert.equal(again.body.reconciled, 1, JSON.stringify(again.body));
    const recreated = (await kube.get<PodObject>(Pod, thirdPod))!;
    await kube.replace(Pod, {
      ...recreated,
      metadata: { ...recreated.metadata, labels: { ...recreated.metadata.labels, touched: 'yes' } },
    });
    const touched = (await kube.get<PodObject>(Pod, thirdPod))!;
    const podEvent = await event(Pod, { ...touched, apiVersion: 'v1', kind: 'Pod' }, 'update', 'Resource');
    assert.equal(podEvent.body.reconciled, 1, JSON.stringify(podEvent.body));
  });
});

describe('parents of one namespace synced at the same time', () => {
  test('share their child lists (fewer lists of pods than parents), and each sees only its own pod', async () => {
    const namespace = 'batched';
    await kube.create(Namespace, { metadata: { name: namespace } });
    const count = 8;
    const parents = await Promise.all(
      Array.from({ length: count }, (_, i) =>
        kube.create<KubeObject>(
          MetaImmortalContainer,
          { ...metacontrollerExample('ImmortalContainer'), metadata: { name: `batched-${i}`, namespace } },
          namespace,
        ),
      ),
    );
    const podLists = async () =>
      (await fn.metrics.apiRequests.get()).values
        .filter(({ labels }) => labels.verb === 'get' && labels.resource === 'pods')
        .reduce((sum, { value }) => sum + value, 0);
    const before = await podLists();
    const answers = await Promise.all(
      parents.map((parent) =>
        deliver(
          fn.url,
          apiServerSourceEvent({ server: cluster.cp.server, kind: MetaImmortalContainer, object: parent, action: 'add', mode: 'Resource' }),
        ),
      ),
    );
    for (const answer of answers) assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const lists = (await podLists()) - before;
    assert.ok(lists >= 1 && lists < count, `${lists} lists of pods for ${count} parents`);
    for (const parent of parents) {
      const podName = `${parent.metadata.name}-immortalpod`;
      const pod = await kube.get<PodObject>(Pod, { namespace, name: podName });
      assert.equal(pod?.metadata.ownerReferences?.[0]?.uid, parent.metadata.uid, `${podName} is controlled by its parent`);
      const synced = await kube.get<Parent>(MetaImmortalContainer, { namespace, name: parent.metadata.name! });
      assert.deepEqual(synced?.status, { currentPod: podName, observedGeneration: 1 }, `${parent.metadata.name} names its own pod`);
    }
  });
});

describe('kinds known only at run time', () => {
  test('a parent kind not served yet is retried (503), not treated as gone; once its CRD is applied the controller serves it: a cluster-scoped parent with children in two namespaces (v1 keys ns/name)', async () => {
    await kube.create(CompositeControllerKind, {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: 'widgets' },
      spec: {
        parentResource: { apiVersion: 'example.com/v1', resource: 'widgets' },
        childResources: [{ apiVersion: 'v1', resource: 'configmaps' }],
        generateSelector: true,
        hooks: { sync: { webhook: { url: `${SCRIPTED_HOOK_URL}widget-sync` } } },
      },
    });
    const answer = await nudge('widgets');
    assert.equal(answer.status, 503, JSON.stringify(answer.body));
    assert.match(JSON.stringify(answer.body), /does not serve widgets in example\.com\/v1/);

    await applyCrds(kube, [crdFor(Widget)]);
    for (const name of ['ns-a', 'ns-b']) await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name } });
    await kube.create(Widget, {
      apiVersion: 'example.com/v1',
      kind: 'Widget',
      metadata: { name: 'w1' },
      spec: { namespaces: ['ns-a', 'ns-b'] },
    });
    script = (_path, request) => ({
      status: 200,
      body: JSON.stringify({
        status: { seen: Object.keys(request.children['ConfigMap.v1'] ?? {}) },
        children: request.parent.spec.namespaces.map((namespace: string) => ({
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: { name: request.parent.metadata.name, namespace },
          data: { from: 'widget' },
        })),
      }),
    });
    // Discovery reads the group-version again on a miss (at most once a second): the broker's
    // retries, played here, succeed once it is served.
    await eventually(
      async () => {
        const answer = await nudgeWithHeaders('widgets');
        return answer.status === 200 && JSON.parse(answer.headers[OUTCOME_HEADER] ?? '{}').failed === 0;
      },
      30_000,
      'the widgets controller to sync its parent once its CRD is served',
    );
    const widget = (await kube.get(Widget, { namespace: '', name: 'w1' }))!;
    for (const namespace of ['ns-a', 'ns-b']) {
      const child = await kube.get(ConfigMap, { namespace, name: 'w1' });
      assert.ok(child, `ConfigMap ${namespace}/w1 exists`);
      assert.equal(child.metadata.ownerReferences?.[0]?.uid, widget.metadata.uid);
    }
    assert.equal((await nudge('widgets')).status, 200);
    assert.deepEqual(
      scriptedCalls.at(-1)?.request.children['ConfigMap.v1'] && Object.keys(scriptedCalls.at(-1)!.request.children['ConfigMap.v1']),
      ['ns-a/w1', 'ns-b/w1'],
    );
    assert.deepEqual((await kube.get<KubeObject & { status?: unknown }>(Widget, { namespace: '', name: 'w1' }))!.status, {
      seen: ['ns-a/w1', 'ns-b/w1'],
      observedGeneration: 1,
    });
  });

  // The CRD's rules refuse both controllers below (crds.test.ts); one stored before them is still refused by the function.
  test('an apiVersion that names no group-version is refused for good (Warning Event), not retried', async () => {
    await createAdmittedBeforeRules(kube, COMPOSITE_CRD, CompositeControllerKind, {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: 'bad-version' },
      spec: {
        parentResource: { apiVersion: 'example.com/v1/extra', resource: 'widgets' },
        hooks: { sync: { webhook: { url: 'http://127.0.0.1:9/sync' } } },
      },
    });
    const answer = await nudge('bad-version');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    await fn.host.flushEvents();
    const events = await kube.list(CoreEvent, { namespace: 'default', fieldSelector: 'involvedObject.name=bad-version' });
    assert.ok(
      events.items.some((event) => event.reason === 'InvalidApiVersion'),
      JSON.stringify(events.items.map((event) => event.message)),
    );
  });

  test('a CompositeController without a sync hook is refused for good: a Warning Event, not retried', async () => {
    await createAdmittedBeforeRules(kube, COMPOSITE_CRD, CompositeControllerKind, {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: 'no-hooks' },
      spec: { parentResource: { apiVersion: 'immortalcontainers.flugel.it/v1alpha1', resource: 'immortalcontainers' } },
    });
    const answer = await nudge('no-hooks');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    await fn.host.flushEvents();
    const events = await kube.list(CoreEvent, { namespace: 'default', fieldSelector: 'involvedObject.name=no-hooks' });
    assert.ok(
      events.items.some((event) => event.reason === 'InvalidController' && /no hooks defined/.test(String(event.message))),
      JSON.stringify(events.items.map((event) => event.message)),
    );
  });

  test("upstream's hook credentials apply unchanged and are kept, and the controller is refused for them: never called without", async () => {
    const authorization = { credentials: { secretRef: { name: 'hook-token', namespace: 'default', key: 'token' } } };
    await kube.create(CompositeControllerKind, {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: 'with-credentials' },
      spec: {
        parentResource: { apiVersion: 'immortalcontainers.flugel.it/v1alpha1', resource: 'immortalcontainers', ignoreStatusChanges: true },
        endpointConfigs: [],
        hooks: { sync: { webhook: { url: 'https://127.0.0.1:9/sync', timeout: '.5s', authorization } } },
      },
    });
    const stored = (await kube.get(CompositeControllerKind, { namespace: '', name: 'with-credentials' })) as unknown as {
      spec: { hooks: { sync: { webhook: Record<string, unknown> } }; parentResource: Record<string, unknown> };
    };
    assert.deepEqual(stored.spec.hooks.sync.webhook.authorization, authorization, 'not pruned by the schema');
    assert.equal(stored.spec.parentResource.ignoreStatusChanges, true);
    const answer = await nudge('with-credentials');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    await fn.host.flushEvents();
    const events = await kube.list(CoreEvent, { namespace: 'default', fieldSelector: 'involvedObject.name=with-credentials' });
    assert.ok(
      events.items.some(
        (event) => event.reason === 'InvalidController' && /webhook.authorization is not supported/.test(String(event.message)),
      ),
      JSON.stringify(events.items.map((event) => event.message)),
    );
  });
});

/** A CompositeController over the plain ImmortalContainer kind, for parents labelled `strategy=<name>`. */
function controllerFor(name: string, method: string, hooks: Record<string, unknown>): KubeObject {
  return {
    apiVersion: 'metacontroller.k8s.io/v1alpha1',
    kind: 'CompositeController',
    metadata: { name },
    spec: {
      parentResource: {
        apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
        resource: 'immortalcontainers',
        labelSelector: { matchLabels: { strategy: name } },
      },
      childResources: [{ apiVersion: 'v1', resource: 'pods', updateStrategy: { method } }],
      generateSelector: true,
      hooks,
    },
  };
}
const seedSync = { sync: { webhook: { url: `${SEED_HOOK_URL}sync` } } };

async function parentFor(name: string, strategy: string | undefined, image = 'nginx:1') {
  return kube.create(
    PlainImmortalContainer,
    {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name, namespace: 'default', labels: strategy ? { strategy } : {} },
      spec: { image },
    },
    'default',
  );
}
const podOf = (name: string) => kube.get<PodObject>(Pod, { namespace: 'default', name: `${name}-immortalpod` });
const imageOf = (pod: PodObject | undefined) => pod?.spec?.containers?.[0]?.image;
async function setImage(name: string, image: string) {
  const parent = (await kube.get(PlainImmortalContainer, { namespace: 'default', name }))!;
  await kube.replace(PlainImmortalContainer, { ...parent, spec: { image } });
}
async function warnings(name: string) {
  await fn.host.flushEvents();
  return (await kube.list(CoreEvent, { namespace: 'default', fieldSelector: `involvedObject.name=${name}` })).items.filter(
    (event) => event.type === 'Warning',
  );
}

describe('update strategies and the parent labelSelector', () => {
  before(async () => {
    await kube.create(CompositeControllerKind, controllerFor('in-place', 'InPlace', seedSync));
    await kube.create(CompositeControllerKind, controllerFor('on-delete', 'OnDelete', seedSync));
    await parentFor('ip', 'in-place');
    await parentFor('od', 'on-delete');
    await parentFor('excluded', undefined);
    for (const name of ['in-place', 'on-delete']) assert.equal((await nudge(name)).status, 200);
  });

  test('a parent outside every labelSelector gets nothing', async () => {
    assert.ok(await podOf('ip'));
    assert.ok(await podOf('od'));
    assert.equal(await podOf('excluded'), undefined);
    const excluded = (await kube.get<Parent>(PlainImmortalContainer, { namespace: 'default', name: 'excluded' }))!;
    assert.equal(excluded.status?.observedGeneration, undefined, 'no status written');
  });

  test('InPlace: an image change updates the same pod, and a label added by someone else survives', async () => {
    const pod = (await podOf('ip'))!;
    await kube.replace(Pod, { ...pod, metadata: { ...pod.metadata, labels: { ...pod.metadata.labels, 'added-by': 'someone' } } });
    await setImage('ip', 'nginx:2');
    assert.equal((await nudge('in-place')).status, 200);
    const updated = (await podOf('ip'))!;
    assert.equal(updated.metadata.uid, pod.metadata.uid, 'the same pod');
    assert.equal(imageOf(updated), 'nginx:2');
    assert.equal(updated.metadata.labels?.['added-by'], 'someone');
  });

  test('OnDelete: an image change leaves the pod alone until it is deleted; then it is created from the new spec', async () => {
    const pod = (await podOf('od'))!;
    await setImage('od', 'nginx:2');
    assert.equal((await nudge('on-delete')).status, 200);
    assert.equal(imageOf(await podOf('od')), 'nginx:1');
    assert.equal((await podOf('od'))!.metadata.uid, pod.metadata.uid);
    await kube.delete(Pod, keyOfPod('od'));
    assert.equal((await nudge('on-delete')).status, 200);
    assert.equal(imageOf(await podOf('od')), 'nginx:2');
  });

  test('a matching orphan is adopted, not replaced; a child whose label stops matching is released', async () => {
    const parent = await parentFor('adopter', undefined);
    const orphan = await kube.create<KubeObject>(Pod, {
      metadata: { name: 'adopter-immortalpod', namespace: 'default', labels: { 'controller-uid': parent.metadata.uid! } },
      spec: { restartPolicy: 'OnFailure', containers: [{ name: 'acontainer', image: 'nginx:1' }] },
    });
    const labelled = (await kube.get(PlainImmortalContainer, { namespace: 'default', name: 'adopter' }))!;
    await kube.replace(PlainImmortalContainer, { ...labelled, metadata: { ...labelled.metadata, labels: { strategy: 'in-place' } } });
    assert.equal((await nudge('in-place')).status, 200);
    const adopted = (await podOf('adopter'))!;
    assert.equal(adopted.metadata.uid, orphan.metadata.uid, 'the same pod');
    assert.deepEqual(
      adopted.metadata.ownerReferences?.map((reference) => [reference.uid, reference.controller]),
      [[parent.metadata.uid, true]],
    );

    await kube.replace(Pod, { ...adopted, metadata: { ...adopted.metadata, labels: { 'controller-uid': 'someone-else' } } });
    assert.equal((await nudge('in-place')).status, 200);
    const released = (await podOf('adopter'))!;
    assert.equal(released.metadata.uid, orphan.metadata.uid);
    assert.deepEqual(released.metadata.ownerReferences ?? [], [], 'no ownerReference left');
  });

  test('a CompositeController deleted while running stops being served', async () => {
    await kube.delete(CompositeControllerKind, { namespace: '', name: 'on-delete' });
    await kube.delete(Pod, keyOfPod('od'));
    assert.equal((await nudge('on-delete')).status, 200);
    assert.equal(await podOf('od'), undefined, 'nobody recreates the pod');
  });
});
const keyOfPod = (name: string) => ({ namespace: 'default', name: `${name}-immortalpod` });

/** POSTs a CloudEvent and keeps the answer's headers (Retry-After). */
async function nudgeWithHeaders(name: string, url = fn.url) {
  const { headers, body } = HTTP.binary(
    apiServerSourceEvent({
      server: cluster.cp.server,
      kind: CompositeControllerKind,
      object: { metadata: { name } },
      action: 'update',
      mode: 'Reference',
    }) as CloudEvent<unknown>,
  ) as { headers: Record<string, string>; body: string };
  return post(headers, body, url);
}

async function post(headers: Record<string, string>, body: string, url = fn.url) {
  const response = await fetch(url, { method: 'POST', headers, body });
  return {
    status: response.status,
    headers: Object.fromEntries(response.headers),
    retryAfter: response.headers.get('retry-after'),
    notBefore: response.headers.get('ce-opfnnotbefore'),
    text: await response.text(),
  };
}

/** Delivers a reply as the broker routes it back: its CloudEvent headers and body, untouched. */
const deliverReply = (answer: Awaited<ReturnType<typeof post>>, url = fn.url) =>
  post(
    Object.fromEntries(Object.entries(answer.headers).filter(([name]) => name.startsWith('ce-') || name === 'content-type')),
    answer.text,
    url,
  );

describe('hook failures: a Warning Event SyncError on the parent, the parent retried alone; other controllers unaffected', () => {
  before(async () => {
    await kube.create(
      CompositeControllerKind,
      controllerFor('failing', 'InPlace', { sync: { webhook: { url: `${SCRIPTED_HOOK_URL}sync`, timeout: '1s' } } }),
    );
    await parentFor('flaky', 'failing');
  });

  const cases: [string, Script, RegExp][] = [
    ['500', () => ({ status: 500, body: 'boom' }), /Sync error: unsupported status code: 500 body: boom/],
    ['a timeout', () => ({ status: 200, body: '{}', delayMs: 2500 }), /Sync error: .*timed out after 1000 ms/],
    ['malformed JSON', () => ({ status: 200, body: '{"children": [' }), /Sync error: /],
    // The function's memory is bounded: an answer of more children, or more bytes, is refused whole.
    [
      'more children than MAX_CHILDREN',
      () => ({
        status: 200,
        body: JSON.stringify({
          children: Array.from({ length: MAX_CHILDREN + 1 }, (_, i) => ({
            apiVersion: 'v1',
            kind: 'Pod',
            metadata: { name: `flaky-${i}` },
          })),
        }),
      }),
      new RegExp(`Sync error: the hook answered ${MAX_CHILDREN + 1} children, more than the ${MAX_CHILDREN} one parent may have here`),
    ],
    [
      'an answer over MAX_RESPONSE_BYTES',
      () => ({ status: 200, body: JSON.stringify({ status: { pad: 'x'.repeat(MAX_RESPONSE_BYTES) } }) }),
      new RegExp(`Sync error: hook answer from .* is larger than ${MAX_RESPONSE_BYTES} bytes`),
    ],
  ];
  for (const [what, behaviour, message] of cases) {
    test(`${what}: the sweep answers a reply naming the parent, which alone is answered 503 (retried with backoff); SyncError Event, no child`, async () => {
      script = behaviour;
      const answer = await nudgeWithHeaders('failing');
      assert.equal(answer.status, 200, answer.text);
      assert.deepEqual(JSON.parse(answer.text), { keys: ['immortalcontainer.flugel.it/ImmortalContainer:default/flaky'] });
      const retried = await deliverReply(answer);
      assert.equal(retried.status, 503, retried.text);
      const events = await warnings('flaky');
      assert.ok(
        events.some((event) => event.reason === 'SyncError' && message.test(String(event.message))),
        JSON.stringify(events.map((event) => event.message)),
      );
      assert.equal(await podOf('flaky'), undefined);
      // The seed's controller, served by the same function, still syncs.
      assert.equal((await nudge()).status, 200);
    });
  }

  test('429 with Retry-After: retried after that long, without a SyncError Event', async () => {
    script = () => ({ status: 429, body: '', headers: { 'retry-after': '7' } });
    const before = (await warnings('flaky')).reduce((sum, event) => sum + Number(event.count ?? 1), 0);
    const answer = await deliverReply(await nudgeWithHeaders('failing'));
    assert.equal(answer.status, 503, answer.text);
    assert.equal(answer.retryAfter, '7');
    const after = (await warnings('flaky')).reduce((sum, event) => sum + Number(event.count ?? 1), 0);
    assert.equal(after, before, 'no new Warning Event');
  });

  test('once the hook answers, the retry succeeds', async () => {
    script = (_path, request) => ({ status: 200, body: JSON.stringify(sync(request)) });
    assert.equal((await nudgeWithHeaders('failing')).status, 200);
    assert.ok(await podOf('flaky'));
  });
});

describe('resyncPeriodSeconds survives a failing parent', () => {
  const periodic = { ...controllerFor('periodic', 'InPlace', { sync: { webhook: { url: `${SCRIPTED_HOOK_URL}periodic` } } }) };
  periodic.spec = { ...(periodic.spec as object), resyncPeriodSeconds: 30 };
  before(async () => {
    await kube.create(CompositeControllerKind, periodic);
    await parentFor('steady', 'periodic');
    await parentFor('broken', 'periodic');
    script = (_path, request) =>
      request.parent.metadata.name === 'broken'
        ? { status: 500, body: 'broken on purpose' }
        : { status: 200, body: JSON.stringify(sync(request)) };
  });
  after(() => kube.delete(CompositeControllerKind, { namespace: '', name: 'periodic' }));

  test('the sweep still asks to come back after the period; the healthy parent is synced, the failing one gets its SyncError', async () => {
    const started = Date.now();
    const answer = await nudgeWithHeaders('periodic');
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(JSON.parse(answer.text).keys, ['metacontroller.k8s.io/CompositeController:periodic']);
    const due = Date.parse(answer.notBefore ?? '');
    assert.ok(due >= started + 29_000, `due after the 30 s period, not at once (${answer.notBefore})`);
    assert.ok(await podOf('steady'), 'the healthy parent got its pod');
    assert.equal(await podOf('broken'), undefined);
    const events = await warnings('broken');
    assert.ok(
      events.some((event) => event.reason === 'SyncError' && /broken on purpose/.test(String(event.message))),
      JSON.stringify(events.map((event) => event.message)),
    );
  });

  test("the failing parent alone, as a parent key, is still answered 503 (retried with the broker's backoff)", async () => {
    const reconcile = new CloudEvent({
      specversion: '1.0',
      id: 'r-broken',
      source: '/opfn/functions/composite',
      type: 'dev.opfn.reconcile',
      datacontenttype: 'application/json',
      data: { keys: ['immortalcontainer.flugel.it/ImmortalContainer:default/broken'] },
    });
    const answer = await deliver(fn.url, reconcile);
    assert.equal(answer.status, 503, JSON.stringify(answer.body));
  });
});

describe("a hook's resyncAfterSeconds in a sweep", () => {
  const paced = { ...controllerFor('paced', 'InPlace', { sync: { webhook: { url: `${SCRIPTED_HOOK_URL}paced` } } }) };
  paced.spec = { ...(paced.spec as object), resyncPeriodSeconds: 300 };
  const resyncAfter = new Map([
    ['quick', 20],
    ['slow', 600],
  ]);
  before(async () => {
    await kube.create(CompositeControllerKind, paced);
    for (const name of [...resyncAfter.keys(), 'unpaced']) await parentFor(name, 'paced');
    script = (_path, request) => ({
      status: 200,
      body: JSON.stringify({ ...sync(request), resyncAfterSeconds: resyncAfter.get(request.parent.metadata.name) }),
    });
  });
  after(() => kube.delete(CompositeControllerKind, { namespace: '', name: 'paced' }));

  test('requeues each parent that asked alone, at its own time, and the sweep after its period (not every parent at the soonest)', async () => {
    const started = Date.now();
    const answer = await nudgeWithHeaders('paced');
    assert.equal(answer.status, 200, answer.text);
    const reply = JSON.parse(answer.text) as { keys: string[]; notBefore?: Record<string, string> };
    const parentKey = (name: string) => `immortalcontainer.flugel.it/ImmortalContainer:default/${name}`;
    assert.deepEqual(
      reply.keys,
      [parentKey('quick'), 'metacontroller.k8s.io/CompositeController:paced', parentKey('slow')],
      'soonest first; the parent without resyncAfterSeconds is not requeued',
    );
    const dueIn = (time: string | null | undefined) => (Date.parse(time ?? '') - started) / 1000;
    assert.ok(dueIn(answer.notBefore) >= 19 && dueIn(answer.notBefore) <= 25, `quick in about 20 s (${answer.notBefore})`);
    assert.ok(dueIn(reply.notBefore?.['metacontroller.k8s.io/CompositeController:paced']) >= 299, 'the sweep after its 300 s period');
    assert.ok(dueIn(reply.notBefore?.[parentKey('slow')]) >= 599, 'slow in about 600 s');
  });
});

describe('a sweep longer than its delivery budget', () => {
  // Each hook call takes 1.5 s and the function starts work for 1 s per delivery: the sweep syncs
  // the parents it started (8 at once) and hands the others back, each to be synced alone.
  const hasty = { ...controllerFor('hasty', 'InPlace', { sync: { webhook: { url: `${SCRIPTED_HOOK_URL}hasty` } } }) };
  hasty.spec = { ...(hasty.spec as object), resyncPeriodSeconds: 300 };
  const names = Array.from({ length: 12 }, (_, index) => `hasty-${index}`);
  const parentKey = (name: string) => `immortalcontainer.flugel.it/ImmortalContainer:default/${name}`;
  let budgeted: RunningFunction;
  before(async () => {
    budgeted = await serveFunction(composite, await kubeconfigWithDeclaredRbac(cluster.cp, composite), {
      config: { COMPOSITE_HOOK_URLS: `${SCRIPTED_HOOK_URL}=${scriptedUrl}`, COMPOSITE_EVENT_SOURCES: 'plane' },
      deliveryBudgetMs: 1000,
    });
    await kube.create(CompositeControllerKind, hasty);
    for (const name of names) await parentFor(name, 'hasty');
    script = (_path, request) => ({ status: 200, body: JSON.stringify(sync(request)), delayMs: 1500 });
  });
  after(async () => {
    await budgeted?.close();
    await kube.delete(CompositeControllerKind, { namespace: '', name: 'hasty' });
  });

  test("the parents not started by the deadline come back in the reply, beside the period; the reply's round syncs them", async () => {
    const started = Date.now();
    const answer = await nudgeWithHeaders('hasty', budgeted.url);
    assert.equal(answer.status, 200, answer.text);
    const reply = JSON.parse(answer.text) as { keys: string[]; notBefore?: Record<string, string> };
    const withPod = new Set<string>();
    for (const name of names) if (await podOf(name)) withPod.add(name);
    const deferred = names.filter((name) => !withPod.has(name));
    assert.ok(withPod.size >= 1 && deferred.length >= 4, `some parents synced, the rest deferred (${withPod.size} synced)`);
    const controllerKey = 'metacontroller.k8s.io/CompositeController:hasty';
    assert.deepEqual([...reply.keys.slice(0, -1)].sort(), deferred.map(parentKey).sort(), 'every parent left, due now');
    assert.equal(reply.keys.at(-1), controllerKey, 'then the sweep, after its period');
    assert.equal(answer.notBefore, null, 'the reply is due at once');
    assert.ok((Date.parse(reply.notBefore?.[controllerKey] ?? '') - started) / 1000 >= 299, 'the sweep after its 300 s period');
    assert.equal(JSON.parse(answer.headers[OUTCOME_HEADER]!).deferred, deferred.length);
    // The broker routes the reply back; each round syncs what it starts within its budget.
    let round = await deliverReply(answer, budgeted.url);
    for (
      let rounds = 1;
      rounds < names.length && JSON.parse(round.text || '{}').keys?.some((key: string) => key !== controllerKey);
      rounds++
    ) {
      assert.equal(round.status, 200, round.text);
      round = await deliverReply(round, budgeted.url);
    }
    assert.equal(round.status, 200, round.text);
    for (const name of names) assert.ok(await podOf(name), `${name} has its pod`);
  });
});

describe('a sweep with a failing parent and a parent that asked for resyncAfterSeconds (no resyncPeriodSeconds)', () => {
  before(async () => {
    await kube.create(
      CompositeControllerKind,
      controllerFor('siblings', 'InPlace', { sync: { webhook: { url: `${SCRIPTED_HOOK_URL}siblings` } } }),
    );
    await parentFor('sib-broken', 'siblings');
    await parentFor('sib-paced', 'siblings');
  });
  after(() => kube.delete(CompositeControllerKind, { namespace: '', name: 'siblings' }));

  test("the reply retries the failed parent at once and keeps the other's requeue at its own time", async () => {
    script = (_path, request) =>
      request.parent.metadata.name === 'sib-broken'
        ? { status: 500, body: 'broken on purpose' }
        : { status: 200, body: JSON.stringify({ ...sync(request), resyncAfterSeconds: 20 }) };
    const started = Date.now();
    const answer = await nudgeWithHeaders('siblings');
    assert.equal(answer.status, 200, answer.text);
    const parentKey = (name: string) => `immortalcontainer.flugel.it/ImmortalContainer:default/${name}`;
    const reply = JSON.parse(answer.text) as { keys: string[]; notBefore?: Record<string, string> };
    assert.deepEqual(reply.keys, [parentKey('sib-broken'), parentKey('sib-paced')]);
    assert.equal(answer.notBefore, null, 'due at once, for the failed parent');
    const dueIn = (Date.parse(reply.notBefore?.[parentKey('sib-paced')] ?? '') - started) / 1000;
    assert.ok(dueIn >= 19 && dueIn <= 25, `the healthy parent in about 20 s (${reply.notBefore?.[parentKey('sib-paced')]})`);
  });
});

describe('a parent outside the labelSelector that still carries the finalizer of a controller without a finalize hook', () => {
  before(async () => {
    await kube.create(
      CompositeControllerKind,
      controllerFor('unfinalized', 'InPlace', { sync: { webhook: { url: `${SCRIPTED_HOOK_URL}unfinalized` } } }),
    );
    await kube.create(
      PlainImmortalContainer,
      {
        apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
        kind: 'ImmortalContainer',
        metadata: {
          name: 'left-behind',
          namespace: 'default',
          labels: { strategy: 'elsewhere' },
          finalizers: ['metacontroller.io/compositecontroller-unfinalized'],
        },
        spec: { image: 'nginx:1' },
      },
      'default',
    );
  });
  after(() => kube.delete(CompositeControllerKind, { namespace: '', name: 'unfinalized' }));

  test('its stale finalizer is removed, and nothing else happens: no hook call, no child, no status (upstream checks again after SyncObject)', async () => {
    script = (_path, request) => ({ status: 200, body: JSON.stringify(sync(request)) });
    scriptedCalls.length = 0;
    assert.equal((await nudge('unfinalized')).status, 200);
    const parent = (await kube.get<Parent>(PlainImmortalContainer, { namespace: 'default', name: 'left-behind' }))!;
    assert.deepEqual(parent.metadata.finalizers ?? [], [], 'the finalizer is gone');
    assert.deepEqual(
      scriptedCalls.map((call) => call.path),
      [],
      'no hook called',
    );
    assert.equal(await podOf('left-behind'), undefined, 'no child');
    assert.equal(parent.status, undefined, 'no status');
  });
});

describe('a sync whose many child writes fail', () => {
  before(async () => {
    await kube.create(
      CompositeControllerKind,
      controllerFor('crowded', 'InPlace', { sync: { webhook: { url: `${SCRIPTED_HOOK_URL}crowded` } } }),
    );
    await parentFor('crowded-parent', 'crowded');
  });
  after(() => kube.delete(CompositeControllerKind, { namespace: '', name: 'crowded' }));

  test("one bounded SyncError (the first errors, then how many more), and the sweep's answer stays readable (its header under 16 KiB)", async () => {
    // 80 pods the API server refuses (no containers), with long names that every error repeats.
    const children = Array.from({ length: 80 }, (_, i) => ({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: `crowded-${i}-${'x'.repeat(200)}` },
      spec: { containers: [] },
    }));
    script = () => ({ status: 200, body: JSON.stringify({ status: {}, children }) });
    const answer = await nudgeWithHeaders('crowded');
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(JSON.parse(answer.text), { keys: ['immortalcontainer.flugel.it/ImmortalContainer:default/crowded-parent'] });
    assert.ok(answer.headers[OUTCOME_HEADER]!.length < 10 * 1024, `outcome header ${answer.headers[OUTCOME_HEADER]!.length} bytes`);
    const events = await warnings('crowded-parent');
    assert.ok(
      events.some((event) => event.reason === 'SyncError' && /; and 77 more child errors$/.test(String(event.message))),
      JSON.stringify(events.map((event) => event.message)),
    );
  });
});

describe('a child event whose body no API server would send', () => {
  test('odd ownerReferences ({}, [null], "x") make the event malformed: 400, never 5xx', async () => {
    for (const ownerReferences of [{}, [null], 'x']) {
      const answer = await deliver(
        fn.url,
        apiServerSourceEvent({
          server: cluster.cp.server,
          kind: Pod,
          object: { metadata: { name: 'odd', namespace: 'default', ownerReferences } } as never,
          action: 'update',
          mode: 'Resource',
        }),
      );
      assert.equal(answer.status, 400, `${JSON.stringify(ownerReferences)}: ${JSON.stringify(answer.body)}`);
      assert.match(String(answer.body.error), /metadata\.ownerReferences/);
    }
  });
});

describe('finalize hook', () => {
  let finalized = false;
  before(async () => {
    await kube.create(
      CompositeControllerKind,
      controllerFor('finalizing', 'InPlace', { ...seedSync, finalize: { webhook: { url: `${SCRIPTED_HOOK_URL}finalize` } } }),
    );
    await parentFor('last', 'finalizing');
    script = (path, request) =>
      path === '/finalize'
        ? { status: 200, body: JSON.stringify({ status: { phase: 'finalizing' }, children: [], finalized }) }
        : { status: 404, body: '' };
  });

  test('the finalizer is added; deletion waits for finalized: true, then the finalizer goes and the parent with it', async () => {
    assert.equal((await nudge('finalizing')).status, 200);
    const key = { namespace: 'default', name: 'last' };
    assert.deepEqual((await kube.get(PlainImmortalContainer, key))!.metadata.finalizers, [
      'metacontroller.io/compositecontroller-finalizing',
    ]);
    assert.ok(await podOf('last'));
    await kube.delete(PlainImmortalContainer, key);
    scriptedCalls.length = 0;
    assert.equal((await nudge('finalizing')).status, 200);
    const waiting = (await kube.get(PlainImmortalContainer, key))!;
    assert.ok(waiting?.metadata.deletionTimestamp, 'still there, being deleted');
    assert.equal(scriptedCalls.at(-1)?.path, '/finalize');
    assert.equal(scriptedCalls.at(-1)?.request.finalizing, true);
    assert.equal(await podOf('last'), undefined, 'the finalize answer (no children) was applied');
    finalized = true;
    assert.equal((await nudge('finalizing')).status, 200);
    assert.equal(await kube.get(PlainImmortalContainer, key), undefined, 'finalizer removed, parent gone');
  });
});

describe('customize hook (v2)', () => {
  test('related objects from another namespace, chosen by name and by label, reach the sync hook keyed ns/name', async () => {
    await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name: 'shared-config' } });
    await kube.create(ConfigMap, { metadata: { name: 'by-name', namespace: 'shared-config' }, data: {} });
    await kube.create(ConfigMap, { metadata: { name: 'by-label', namespace: 'shared-config', labels: { share: 'yes' } }, data: {} });
    await kube.create(ConfigMap, { metadata: { name: 'unrelated', namespace: 'shared-config' }, data: {} });
    await kube.create(
      CompositeControllerKind,
      controllerFor('customized', 'InPlace', {
        sync: { version: 'v2', webhook: { url: `${SCRIPTED_HOOK_URL}customized-sync` } },
        customize: { version: 'v2', webhook: { url: `${SCRIPTED_HOOK_URL}customize` } },
      }),
    );
    await parentFor('with-related', 'customized');
    script = (path, request) => {
      if (path === '/customize') {
        return {
          status: 200,
          body: JSON.stringify({
            relatedResources: [
              { apiVersion: 'v1', resource: 'configmaps', namespace: 'shared-config', names: ['by-name'] },
              { apiVersion: 'v1', resource: 'configmaps', namespace: 'shared-config', labelSelector: { matchLabels: { share: 'yes' } } },
            ],
          }),
        };
      }
      // The status this CRD keeps is currentPod (a string): the hook reports what it was given there.
      return {
        status: 200,
        body: JSON.stringify({ status: { currentPod: Object.keys(request.related['ConfigMap.v1'] ?? {}).join(',') }, children: [] }),
      };
    };
    scriptedCalls.length = 0;
    assert.equal((await nudge('customized')).status, 200);
    // The sync hook is asked again with the status it answered written (what that write's event
    // would bring); the answer is the same, so the sync ends there.
    assert.deepEqual(
      scriptedCalls.map((call) => call.path),
      ['/customize', '/customized-sync', '/customized-sync'],
    );
    assert.equal(scriptedCalls[2]!.request.parent.status.currentPod, 'shared-config/by-label,shared-config/by-name');
    assert.equal(scriptedCalls[0]!.request.parent.metadata.name, 'with-related');
    assert.deepEqual(Object.keys(scriptedCalls[1]!.request.related['ConfigMap.v1']), ['shared-config/by-label', 'shared-config/by-name']);
    const parent = (await kube.get<Parent>(PlainImmortalContainer, { namespace: 'default', name: 'with-related' }))!;
    assert.deepEqual(parent.status, { currentPod: 'shared-config/by-label,shared-config/by-name', observedGeneration: 1 });
  });

  test('a related kind that is not served: SyncError Event on the parent, retried alone', async () => {
    script = (path, request) =>
      path === '/customize'
        ? { status: 200, body: JSON.stringify({ relatedResources: [{ apiVersion: 'example.com/v1', resource: 'gadgets' }] }) }
        : { status: 200, body: JSON.stringify({ status: {}, children: [] }) };
    const answer = await nudgeWithHeaders('customized');
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(JSON.parse(answer.text).keys, ['immortalcontainer.flugel.it/ImmortalContainer:default/with-related']);
    const retried = await deliverReply(answer);
    assert.equal(retried.status, 503, retried.text);
    const events = await warnings('with-related');
    assert.ok(
      events.some((event) => event.reason === 'SyncError' && /does not serve gadgets in example\.com\/v1/.test(String(event.message))),
      JSON.stringify(events.map((event) => event.message)),
    );
  });
});

describe('parentResource.ignoreStatusChanges', () => {
  test("with it, the hook is not asked again after the function's own status write (upstream skips a status-only update); without it, it is", async () => {
    const controller = controllerFor('quiet-status', 'InPlace', { sync: { webhook: { url: `${SCRIPTED_HOOK_URL}quiet-sync` } } });
    const spec = controller.spec as { parentResource: { ignoreStatusChanges?: boolean } };
    spec.parentResource.ignoreStatusChanges = true;
    await kube.create(CompositeControllerKind, controller);
    await parentFor('quiet-a', 'quiet-status');
    script = () => ({ status: 200, body: JSON.stringify({ status: { currentPod: 'quiet' }, children: [] }) });
    const callsPerParent = () =>
      Object.fromEntries(
        ['quiet-a', 'quiet-b'].map((name) => [name, scriptedCalls.filter((call) => call.request.parent.metadata.name === name).length]),
      );

    scriptedCalls.length = 0;
    assert.equal((await nudge('quiet-status')).status, 200);
    assert.deepEqual(callsPerParent(), { 'quiet-a': 1, 'quiet-b': 0 });
    const statusOf = async (name: string) => (await kube.get<Parent>(PlainImmortalContainer, { namespace: 'default', name }))!.status;
    assert.deepEqual(await statusOf('quiet-a'), { currentPod: 'quiet', observedGeneration: 1 });

    const stored = (await kube.get<KubeObject & { spec: typeof spec }>(CompositeControllerKind, { namespace: '', name: 'quiet-status' }))!;
    stored.spec.parentResource.ignoreStatusChanges = false;
    await kube.replace(CompositeControllerKind, stored);
    await parentFor('quiet-b', 'quiet-status');
    scriptedCalls.length = 0;
    assert.equal((await nudge('quiet-status')).status, 200);
    // quiet-a's status is already the answer: nothing is written, so nothing is asked again.
    assert.deepEqual(callsPerParent(), { 'quiet-a': 1, 'quiet-b': 2 });
    assert.deepEqual(await statusOf('quiet-b'), { currentPod: 'quiet', observedGeneration: 1 });
  });
});

describe('a parent CRD without the status subresource', () => {
  const Sprocket: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Sprocket', plural: 'sprockets', namespaced: true };

  test('the status is written by a plain update of the parent (upstream falls back to Update), without observedGeneration, and settles', async () => {
    const crd = crdFor(Sprocket) as KubeObject & { spec: { versions: Record<string, unknown>[] } };
    await applyCrds(kube, [
      { ...crd, spec: { ...crd.spec, versions: crd.spec.versions.map(({ subresources: _, ...version }) => version) } },
    ]);
    await kube.create(CompositeControllerKind, {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: 'sprockets' },
      spec: {
        parentResource: { apiVersion: 'example.com/v1', resource: 'sprockets' },
        generateSelector: true,
        hooks: { sync: { webhook: { url: `${SCRIPTED_HOOK_URL}sprocket-sync` } } },
      },
    });
    await eventually(
      async () =>
        kube.create(Sprocket, {
          apiVersion: 'example.com/v1',
          kind: 'Sprocket',
          metadata: { name: 's1', namespace: 'default' },
          spec: { teeth: 12 },
        }),
      30_000,
      'the sprockets CRD to be served',
    );
    script = (_path, request) => ({ status: 200, body: JSON.stringify({ status: { teeth: request.parent.spec.teeth }, children: [] }) });
    await eventually(
      async () => (await nudge('sprockets')).status === 200,
      30_000,
      'the sprockets controller to sync once its CRD is served',
    );
    const sprocket = (await kube.get<KubeObject & { status?: unknown }>(Sprocket, { namespace: 'default', name: 's1' }))!;
    assert.deepEqual(sprocket.status, { teeth: 12 });
    assert.deepEqual(sprocket.spec, { teeth: 12 }, 'the rest of the parent is unchanged');
    // The write counted as a new generation; the next sync (what its update event brings) writes nothing.
    assert.equal((await nudge('sprockets')).status, 200);
    assert.equal(
      (await kube.get(Sprocket, { namespace: 'default', name: 's1' }))!.metadata.resourceVersion,
      sprocket.metadata.resourceVersion,
      'no second write',
    );
    await kube.delete(CompositeControllerKind, { namespace: '', name: 'sprockets' });
  });
});

describe('a burst of parents', () => {
  /** Reads within a second that open a watch of the parent kind (kube/burst-watch.ts BURST_READS). */
  const BURST = 20;
  const NS = 'burst';

  test("parents are read from the function's watch of their kind, under its generated RBAC, and converge", async () => {
    await kube.create(Namespace, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    const functionKube = KubeClient.fromFile(functionKubeconfig);
    const burstFn = await serveFunction(composite, functionKubeconfig, { config: functionConfig, kube: functionKube });
    try {
      const create = (name: string) =>
        kube.create<Parent>(MetaImmortalContainer, {
          apiVersion: 'immortalcontainers.flugel.it/v1alpha1',
          kind: 'ImmortalContainer',
          metadata: { name, namespace: NS },
          spec: { image: 'nginx:1.28' },
        });
      const deliverAll = async (parents: Parent[]) => {
        const answers = await Promise.all(
          parents.map((object) =>
            deliver(
              burstFn.url,
              apiServerSourceEvent({ server: cluster.cp.server, kind: MetaImmortalContainer, object, action: 'add', mode: 'Resource' }),
            ),
          ),
        );
        assert.deepEqual(
          answers.map((answer) => answer.status),
          parents.map(() => 200),
        );
      };

      await deliverAll(await Promise.all(Array.from({ length: BURST }, (_, i) => create(`first-${i}`))));
      const watch = functionKube.burstWatch(MetaImmortalContainer);
      assert.equal(watch?.watching, true, `${BURST} parent syncs within a second open the watch`);

      const later = await Promise.all(Array.from({ length: 10 }, (_, i) => create(`later-${i}`)));
      for (const parent of later)
        await eventually(
          async () => watch!.read({ namespace: NS, name: parent.metadata.name! }, parent.metadata.resourceVersion!),
          5000,
          `the watch to see ${parent.metadata.name}`,
        );
      const before = await burstWatchReads(burstFn);
      await deliverAll(later);
      assert.deepEqual(
        await burstWatchReads(burstFn),
        { watch: before.watch + later.length, api: before.api },
        'each parent read from the watch, none from the API server',
      );
      for (const parent of later) {
        const name = parent.metadata.name!;
        const synced = await kube.get<Parent>(MetaImmortalContainer, { namespace: NS, name });
        assert.deepEqual(synced?.status, { currentPod: `${name}-immortalpod`, observedGeneration: 1 });
        const pod = await kube.get<PodObject>(Pod, { namespace: NS, name: `${name}-immortalpod` });
        assert.equal(pod?.metadata.labels?.['controller-uid'], parent.metadata.uid);
        assert.equal(pod?.spec?.containers?.[0]?.image, 'nginx:1.28');
      }
    } finally {
      await burstFn.close();
    }
  });
});

describe('resync', () => {
  test('a resync (PingSource) reaches every CompositeController: a deleted pod of the seed controller is back', async () => {
    const pod = (await getPod())!;
    await kube.delete(Pod, podKey);
    const ping = new CloudEvent<unknown>({
      specversion: '1.0',
      id: 'resync-1',
      type: 'dev.knative.sources.ping',
      source: '/apis/v1/namespaces/operator-functions/pingsources/composite-resync',
      data: {},
    });
    const answer = await deliver(fn.url, ping);
    // Other controllers' parents may fail (a reply names them); the seed's is synced.
    assert.ok(answer.status === 200, JSON.stringify(answer.body));
    const recreated = await getPod();
    assert.ok(recreated && recreated.metadata.uid !== pod.metadata.uid, 'a new pod exists');
  });
});
