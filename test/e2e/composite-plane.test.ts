// CompositeControllers served through the whole local plane, as `npm start` runs it on its own
// control plane: the generated objects applied to the API server (under Knative's own CRDs,
// eventing/knative/crds.ts), the EventPlane running them (`knativeObjects`), the composite
// function as its own ServiceAccount. Nothing is delivered by hand: a CompositeController applied
// while the plane runs makes the function write that controller's ApiServerSources (and their
// identity), the plane's controllers run them, and the parents' and children's events flow
// source → broker → Trigger → function.
// Deleting the controller deletes its sources (owned by it; the garbage collector of
// kube-controller-manager), and its kinds stop reaching the function.
//
// The seed's Metacontroller ImmortalContainer: its CompositeController manifest unchanged, its
// sync hook (the TypeScript rewrite, examples/immortal-container-hook/hook.ts) served on
// loopback, the manifest's in-cluster hook URL mapped there by COMPOSITE_HOOK_URLS.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { serviceAccountClients } from '../../bin/dev.ts';
import { ApiServerSource, applyGeneratedObjects } from '../../eventing/knative/index.ts';
import { DEFAULT_OPTIONS, serviceAccountName } from '../../eventing/manifests/index.ts';
import { EventPlane } from '../../eventing/plane.ts';
import { sync } from '../../examples/immortal-container-hook/hook.ts';
import { serveHooks, type HookServer } from '../../functions/composite/metacontroller/serve-hook.ts';
import { sourceName } from '../../functions/composite/event-sources.ts';
import composite from '../../functions/composite/index.ts';
import { ImmortalContainerKind } from '../../functions/immortal-container/desired.ts';
import { CompositeControllerKind } from '../../functions/composite/kinds.ts';
import { ConfigMap, CoreEvent, Pod, type KubeObject, type ResourceKind } from '../../functions/runtime/index.ts';
import { eventually, quietLog, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { MetaImmortalContainer, metacontrollerExample, SEED_HOOK_URL } from '../support/examples.ts';

const NS = DEFAULT_OPTIONS.namespace;
/** The other ImmortalContainer CRD in crds/: parents of a second controller, made while the plane runs. */
const PlainImmortalContainer = ImmortalContainerKind;
const SEED = 'immortalcontainer-controller';
const SECOND = 'configmap-per-container';
const say = (line: string) => console.log(`# ${line}`);

let cluster: TestCluster;
let plane: EventPlane;
let hooks: HookServer;
const stateDir = mkdtempSync(join(tmpdir(), 'opfn-composite-plane-'));

/** A second controller, written here: one ConfigMap per (plain) ImmortalContainer, carrying its image. */
const secondController: KubeObject = {
  apiVersion: 'metacontroller.k8s.io/v1alpha1',
  kind: 'CompositeController',
  metadata: { name: SECOND },
  spec: {
    generateSelector: true,
    parentResource: { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', resource: 'immortalcontainers' },
    childResources: [{ apiVersion: 'v1', resource: 'configmaps', updateStrategy: { method: 'InPlace' } }],
    hooks: {
      sync: { webhook: { url: 'http://second.hooks.test/configmap' } },
      finalize: { webhook: { url: 'http://second.hooks.test/finalize' } },
    },
  },
};
/** Parents whose sync hook fails (500) for now; parents whose finalize answers finalized: true. */
const failing = new Set<string>();
const finalizable = new Set<string>();
const configMapHook = (request: any) => {
  if (failing.has(request.parent.metadata.name)) throw new Error(`scripted failure for ${request.parent.metadata.name}`);
  return {
    status: { image: request.parent.spec.image },
    children: [
      {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: `${request.parent.metadata.name}-image` },
        data: { image: request.parent.spec.image },
      },
    ],
  };
};
// Not finalized yet: asks to be called again in a second (Metacontroller's resyncAfterSeconds),
// as a finalize hook waiting on something outside must.
/** Calls of the periodic controller's sync hook per parent; it fails for 'stubborn' while that is in `failing`. */
const periodicCalls = new Map<string, number>();
const periodicHook = (request: any) => {
  const name = request.parent.metadata.name;
  periodicCalls.set(name, (periodicCalls.get(name) ?? 0) + 1);
  if (failing.has(name)) throw new Error(`scripted failure for ${name}`);
  // A field the CRD's status schema keeps (an unknown one would be pruned).
  return { status: { currentPod: 'synced' }, children: [] };
};
const finalizeHook = (request: any) =>
  finalizable.has(request.parent.metadata.name)
    ? { children: [], finalized: true }
    : { children: [], finalized: false, resyncAfterSeconds: 1 };

const readyOf = async (name: string) => {
  const source = await cluster.kube.get<KubeObject & { status?: { conditions?: { type: string; status: string; reason?: string }[] } }>(
    ApiServerSource,
    { namespace: NS, name },
  );
  const ready = source?.status?.conditions?.find((condition) => condition.type === 'Ready');
  return source ? `${ready?.status ?? '?'} ${ready?.reason ?? ''}`.trim() : 'absent';
};

const createParent = (kind: ResourceKind, name: string, image: string) =>
  cluster.kube.create(kind, {
    apiVersion: `${kind.group}/${kind.version}`,
    kind: kind.kind,
    metadata: { name, namespace: 'default' },
    spec: { image },
  });

before(async () => {
  // The generated objects (Knative's CRDs among them) before the garbage collector starts: it
  // collects a deleted controller's sources at once.
  let applied = 0;
  cluster = await startTestCluster({
    install: async (kube) => (applied = (await applyGeneratedObjects(kube, [composite])).objects.length),
  });
  hooks = await serveHooks({ hooks: { '/sync': sync, '/configmap': configMapHook, '/finalize': finalizeHook, '/periodic': periodicHook } });
  say(`${applied} generated objects of the composite function applied`);
  plane = new EventPlane({
    functions: [composite],
    kube: cluster.kube,
    // The function runs as its generated ServiceAccount (Metacontroller-like rights).
    kubeconfigPath: await cluster.cp.serviceAccountKubeconfig(NS, serviceAccountName(composite)),
    log: quietLog,
    stateDir,
    idleTimeoutMs: 60_000,
    env: { LOG_LEVEL: 'warn', COMPOSITE_HOOK_URLS: `${SEED_HOOK_URL}=${hooks.url}/,http://second.hooks.test/=${hooks.url}/` },
    knativeObjects: { clientFor: serviceAccountClients(cluster.cp) },
  });
  await plane.start();
});

after(async () => {
  await plane?.stop({ drainTimeoutMs: 1000 });
  await hooks?.close();
  await cluster?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

describe('a CompositeController applied while the plane runs is served through it', () => {
  test('its sources are written by the function and run by the plane (Ready), owned by the controller', async () => {
    const controller = await cluster.kube.create(CompositeControllerKind, metacontrollerExample('CompositeController'));
    for (const role of ['parents', 'children'] as const) {
      const name = sourceName(SEED, role);
      await eventually(
        async () => (await readyOf(name)) === 'True Ready',
        60_000,
        `ApiServerSource ${name} Ready`,
        () => readyOf(name),
      );
      const source = (await cluster.kube.get(ApiServerSource, { namespace: NS, name }))!;
      assert.equal(source.metadata.ownerReferences?.[0]?.uid, controller.metadata.uid);
      say(`ApiServerSource ${name}: Ready, owned by CompositeController ${SEED}`);
    }
  });

  test('a parent created now gets its pod and the status its hook answers, with no event delivered by hand', async () => {
    const parent = await createParent(MetaImmortalContainer, 'through-plane', 'nginx:latest');
    const pod = await eventually(
      () => cluster.kube.get(Pod, { namespace: 'default', name: 'through-plane-immortalpod' }),
      60_000,
      'the pod of through-plane',
    );
    assert.equal(pod.metadata.ownerReferences?.[0]?.uid, (parent as KubeObject).metadata.uid);
    // The pod's own add event wakes the parent again: the hook now reports the pod.
    await eventually(
      async () =>
        (
          (await cluster.kube.get(MetaImmortalContainer, { namespace: 'default', name: 'through-plane' }))?.status as
            { currentPod?: string } | undefined
        )?.currentPod === 'through-plane-immortalpod',
      60_000,
      'status.currentPod',
    );
    say('kubectl create ImmortalContainer through-plane → pod through-plane-immortalpod, status.currentPod set');
  });

  test('a deleted pod comes back through its delete event', async () => {
    const key = { namespace: 'default', name: 'through-plane-immortalpod' };
    const pod = (await cluster.kube.get(Pod, key))!;
    await cluster.kube.delete(Pod, key);
    await eventually(
      async () => {
        const again = await cluster.kube.get(Pod, key);
        return again && again.metadata.uid !== pod.metadata.uid;
      },
      60_000,
      'a new pod',
    );
  });

  test("Recreate (the seed manifest's strategy): an image change recreates the pod, through events alone", async () => {
    const key = { namespace: 'default', name: 'through-plane-immortalpod' };
    const pod = (await cluster.kube.get(Pod, key))!;
    const parent = (await cluster.kube.get(MetaImmortalContainer, { namespace: 'default', name: 'through-plane' }))!;
    await cluster.kube.replace(MetaImmortalContainer, { ...parent, spec: { image: 'nginx:1.27' } });
    const recreated = await eventually(
      async () => {
        const again = await cluster.kube.get<KubeObject & { spec?: { containers?: { image?: string }[] } }>(Pod, key);
        return again && again.metadata.uid !== pod.metadata.uid ? again : undefined;
      },
      60_000,
      'the pod recreated',
    );
    assert.equal(recreated.spec?.containers?.[0]?.image, 'nginx:1.27');
  });

  test('a second controller added while running is served too; deleted, its sources go and its parents are no longer synced', async () => {
    await cluster.kube.create(CompositeControllerKind, secondController);
    await eventually(
      async () => (await readyOf(sourceName(SECOND, 'parents'))) === 'True Ready',
      60_000,
      "the second controller's parent source Ready",
      () => readyOf(sourceName(SECOND, 'parents')),
    );
    await createParent(PlainImmortalContainer, 'second-1', 'busybox:1');
    const configMap = await eventually(
      () => cluster.kube.get<KubeObject & { data?: Record<string, string> }>(ConfigMap, { namespace: 'default', name: 'second-1-image' }),
      60_000,
      'the ConfigMap of second-1',
    );
    assert.equal(configMap.data?.image, 'busybox:1');

    // A failing hook: a SyncError Event on the parent, and the broker's retries (backoff) bring
    // the sync again until the hook answers.
    failing.add('flaky');
    await createParent(PlainImmortalContainer, 'flaky', 'busybox:3');
    const syncError = await eventually(
      async () =>
        (await cluster.kube.list(CoreEvent, { namespace: 'default' })).items.find(
          (event) =>
            (event as { reason?: string; involvedObject?: { name?: string } }).reason === 'SyncError' &&
            (event as { involvedObject?: { name?: string } }).involvedObject?.name === 'flaky',
        ),
      60_000,
      'a SyncError Event on flaky',
    );
    assert.match(String((syncError as { message?: string }).message), /Sync error: .*500/);
    failing.delete('flaky');
    await eventually(
      () => cluster.kube.get(ConfigMap, { namespace: 'default', name: 'flaky-image' }),
      90_000,
      'the ConfigMap of flaky once its hook answers',
    );
    say('a sync hook answering 500: Warning SyncError on the parent, retried by the broker until it answers');

    // Finalize: the parent carries the controller's finalizer; its deletion waits for finalized: true.
    const finalizer = `metacontroller.io/compositecontroller-${SECOND}`;
    await eventually(
      async () =>
        (await cluster.kube.get(PlainImmortalContainer, { namespace: 'default', name: 'second-1' }))?.metadata.finalizers?.includes(
          finalizer,
        ),
      60_000,
      'the finalizer on second-1',
    );
    await cluster.kube.delete(PlainImmortalContainer, { namespace: 'default', name: 'second-1' });
    const deleting = await cluster.kube.get(PlainImmortalContainer, { namespace: 'default', name: 'second-1' });
    assert.ok(deleting?.metadata.deletionTimestamp, 'deletion waits for the finalize hook');
    finalizable.add('second-1');
    // The next sync is the requeue the hook asked for (or a later event of the parent).
    await eventually(
      async () => (await cluster.kube.get(PlainImmortalContainer, { namespace: 'default', name: 'second-1' })) === undefined,
      90_000,
      'second-1 gone once finalized',
    );
    say(`kubectl delete second-1 → held by ${finalizer} until the finalize hook answered finalized: true`);

    await cluster.kube.delete(CompositeControllerKind, { namespace: '', name: SECOND });
    for (const role of ['parents', 'children'] as const) {
      await eventually(
        async () => (await readyOf(sourceName(SECOND, role))) === 'absent',
        60_000,
        `ApiServerSource ${sourceName(SECOND, role)} garbage-collected`,
      );
    }
    say(`kubectl delete compositecontroller ${SECOND} → its ApiServerSources garbage-collected`);
    // The seed controller is unaffected: a new parent of its kind still gets a pod.
    await createParent(MetaImmortalContainer, 'after-second', 'nginx:latest');
    await eventually(
      () => cluster.kube.get(Pod, { namespace: 'default', name: 'after-second-immortalpod' }),
      60_000,
      'the pod of after-second',
    );
    // A new parent of the deleted controller's kind gets nothing: by the time the seed's parent
    // above converged, an event of this one would have been delivered long ago.
    await createParent(PlainImmortalContainer, 'second-2', 'busybox:2');
    await createParent(MetaImmortalContainer, 'after-second-2', 'nginx:latest');
    await eventually(
      () => cluster.kube.get(Pod, { namespace: 'default', name: 'after-second-2-immortalpod' }),
      60_000,
      'the pod of after-second-2',
    );
    assert.equal(
      await cluster.kube.get(ConfigMap, { namespace: 'default', name: 'second-2-image' }),
      undefined,
      'no ConfigMap for a parent of the deleted controller',
    );
  });

  test("resyncPeriodSeconds keeps sweeping while one parent fails, through the broker's held requeues; the failing parent is retried by each sweep and, alone, by its own events", async () => {
    const PERIODIC = 'periodic';
    await cluster.kube.create(CompositeControllerKind, {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: PERIODIC },
      spec: {
        generateSelector: true,
        resyncPeriodSeconds: 3,
        parentResource: { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', resource: 'immortalcontainers' },
        childResources: [{ apiVersion: 'v1', resource: 'configmaps', updateStrategy: { method: 'InPlace' } }],
        hooks: { sync: { webhook: { url: 'http://second.hooks.test/periodic' } } },
      },
    });
    await eventually(
      async () => (await readyOf(sourceName(PERIODIC, 'parents'))) === 'True Ready',
      60_000,
      "the periodic controller's parent source Ready",
      () => readyOf(sourceName(PERIODIC, 'parents')),
    );
    failing.add('stubborn');
    await createParent(PlainImmortalContainer, 'calm', 'busybox:1');
    await createParent(PlainImmortalContainer, 'stubborn', 'busybox:1');
    const synced = async (name: string) =>
      (await cluster.kube.get<KubeObject & { status?: { currentPod?: string } }>(PlainImmortalContainer, { namespace: 'default', name }))
        ?.status?.currentPod === 'synced';
    await eventually(() => synced('calm'), 60_000, 'calm synced');
    await eventually(async () => (periodicCalls.get('stubborn') ?? 0) > 0, 60_000, 'a sync of stubborn');
    // From here on calm changes nothing: only sweeps call its hook, one per period.
    const calmBefore = periodicCalls.get('calm') ?? 0;
    await eventually(
      async () => (periodicCalls.get('calm') ?? 0) >= calmBefore + 3,
      60_000,
      'three more sweeps while stubborn fails',
      async () => JSON.stringify(Object.fromEntries(periodicCalls)),
    );
    assert.ok(
      (periodicCalls.get('stubborn') ?? 0) > (periodicCalls.get('calm') ?? 0),
      `stubborn is retried between sweeps too: ${JSON.stringify(Object.fromEntries(periodicCalls))}`,
    );
    say(`resyncPeriodSeconds 3 with one parent failing: hook calls ${JSON.stringify(Object.fromEntries(periodicCalls))}`);
    failing.delete('stubborn');
    await eventually(() => synced('stubborn'), 60_000, 'stubborn synced once its hook answers');
    await cluster.kube.delete(CompositeControllerKind, { namespace: '', name: PERIODIC });
  });
});
