// CompositeControllers applied while the local plane runs with its Knative objects in memory (as
// against a configured cluster): the plane runs each controller's ApiServerSources itself
// (eventing/knative/derived-sources.ts, from the declaration's derivedSources) and the composite function writes none, so the events
// of the parent and child kinds flow source → broker → function with nobody delivering by hand.
// The seed's Metacontroller ImmortalContainer (CRD group, CompositeController manifest unchanged,
// the seed-equivalent sync hook served on loopback); a second controller whose parent kind (a
// cluster-scoped Widget) is served only after the controller was applied, then deleted; an
// invalid controller; and, at the end, no Knative object or identity written to the cluster.
// (test/e2e/composite-plane.test.ts is the other mode: the plane's own control plane, where the
// function writes the sources and the plane runs what it finds.)
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { applyCrds } from '../../eventing/crds.ts';
import { FunctionDerivedSources, installKnativeCrds } from '../../eventing/knative/index.ts';
import { DEFAULT_OPTIONS } from '../../eventing/manifests/index.ts';
import { EventPlane, FUNCTION_EXTENSION } from '../../eventing/plane.ts';
import { sync } from '../../examples/immortal-container-hook/hook.ts';
import { serveHooks, type HookServer } from '../../functions/composite/metacontroller/serve-hook.ts';
import { CONTROLLER_EXTENSION, eventingObjectsFor, sourceName } from '../../functions/composite/event-sources.ts';
import composite from '../../functions/composite/index.ts';
import { CompositeControllerKind } from '../../functions/composite/kinds.ts';
import { ConfigMap, CoreEvent, Pod, type KubeObject, type ResourceKind, type KubeClient } from '../../functions/runtime/index.ts';
import { eventually, quietLog, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { crdFor, MetaImmortalContainer, metacontrollerExample, SEED_HOOK_URL } from '../support/examples.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

const NS = DEFAULT_OPTIONS.namespace;
const SEED = 'immortalcontainer-controller';
const SCRIPTED_HOOK_URL = 'http://scripted.hooks.test/';
const Widget: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: false };
const Gadget: ResourceKind = { ...Widget, kind: 'Gadget', plural: 'gadgets' };

/** A controller of `parent` with ConfigMap children, synced by the widgets' hook (below). */
const configMapController = (name: string, parent: ResourceKind): KubeObject => ({
  apiVersion: 'metacontroller.k8s.io/v1alpha1',
  kind: 'CompositeController',
  metadata: { name },
  spec: {
    parentResource: { apiVersion: `${parent.group}/${parent.version}`, resource: parent.plural },
    childResources: [{ apiVersion: 'v1', resource: 'configmaps' }],
    generateSelector: true,
    hooks: { sync: { webhook: { url: `${SCRIPTED_HOOK_URL}widget-sync` } } },
  },
});

/** The widgets' hook: one ConfigMap per namespace listed in the parent's spec; status = the children it saw. */
const widgetSync = (request: any) => ({
  status: { seen: Object.keys(request.children['ConfigMap.v1'] ?? {}) },
  children: (request.parent.spec?.namespaces ?? []).map((namespace: string) => ({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: request.parent.metadata.name, namespace },
    data: { from: 'widget' },
  })),
});

type PodObject = KubeObject & { spec?: { containers?: { image: string }[] } };
type Parent = KubeObject & { status?: Record<string, unknown> };
/** An event the broker delivered to the composite function's Trigger (a second subscriber with the same filter sees the same). */
interface Seen {
  type: string;
  kind: string;
  name: string;
  controller: string;
  labels: Record<string, string>;
}

let cluster: TestCluster;
let kube: KubeClient;
let plane: EventPlane;
let hooks: HookServer;
let recorder: Server;
const seen: Seen[] = [];
const stateDir = mkdtempSync(join(tmpdir(), 'opfn-composite-plane-'));

const applied = () => plane.knative!.derived!.applied();
const sourceReady = (controller: string, role: 'parents' | 'children') =>
  plane.status!.ready(`ApiServerSource ${NS}/${sourceName(controller, role)}`)?.status === 'True';
const diagnose = async () => JSON.stringify({ applied: applied(), problems: plane.status!.problems(), stats: plane.stats().source });

const listen = async (server: Server) => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
};

before(async () => {
  cluster = await startTestCluster();
  kube = cluster.kube;
  // The Knative kinds are served and the install namespace exists, so a function that wrote its
  // sources would succeed (see the last test).
  await installKnativeCrds(kube);
  await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name: NS } });
  hooks = await serveHooks({ hooks: { '/sync': sync, '/widget-sync': widgetSync } });
  recorder = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const header = (name: string) => String(request.headers[`ce-${name}`] ?? '');
      let labels: Record<string, string> = {};
      try {
        labels = JSON.parse(Buffer.concat(chunks).toString('utf8'))?.metadata?.labels ?? {};
      } catch {
        /* Reference mode: no body to read */
      }
      seen.push({ type: header('type'), kind: header('kind'), name: header('name'), controller: header(CONTROLLER_EXTENSION), labels });
      response.writeHead(200).end();
    });
  });
  const recorderUrl = await listen(recorder);
  plane = new EventPlane({
    functions: [composite],
    kube,
    // The function runs as its own ServiceAccount with its generated role.
    kubeconfigPath: await kubeconfigWithDeclaredRbac(cluster.cp, composite),
    log: quietLog,
    stateDir,
    idleTimeoutMs: 60_000,
    resyncIntervalMs: 0,
    delivery: { retry: 12, backoffPolicy: 'exponential', backoffDelay: 'PT0.2S' },
    env: { LOG_LEVEL: 'warn', COMPOSITE_HOOK_URLS: `${SEED_HOOK_URL}=${hooks.url}/,${SCRIPTED_HOOK_URL}=${hooks.url}/` },
    triggers: [{ name: 'recorder', filter: { attributes: { [FUNCTION_EXTENSION]: composite.name } }, subscriber: recorderUrl }],
  });
  await plane.start();
});

after(async () => {
  await plane?.stop({ drainTimeoutMs: 1000 });
  await hooks?.close();
  recorder?.closeAllConnections();
  recorder?.close();
  await cluster?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

describe('CompositeControllers applied while the plane runs (objects in memory)', () => {
  const key = { namespace: 'default', name: 'example-immortalcontainer' };
  const podKey = { namespace: 'default', name: 'example-immortalcontainer-immortalpod' };

  test('no CompositeController yet: the plane runs no sources for one', () => {
    assert.deepEqual(applied(), {});
  });

  test("the seed's CompositeController, applied now: its sources run; an ImmortalContainer created after gets its pod and the hook's status through source → broker → function", async () => {
    await kube.create(CompositeControllerKind, metacontrollerExample('CompositeController'));
    await eventually(
      async () => sourceReady(SEED, 'parents') && sourceReady(SEED, 'children'),
      60_000,
      "the seed controller's sources Ready",
      diagnose,
    );
    assert.deepEqual(applied()[SEED], [sourceName(SEED, 'parents'), sourceName(SEED, 'children')]);

    await kube.create(MetaImmortalContainer, metacontrollerExample('ImmortalContainer'), 'default');
    const parent = await eventually(
      async () => {
        const current = await kube.get<Parent>(MetaImmortalContainer, key);
        return current?.status?.currentPod === podKey.name ? current : undefined;
      },
      60_000,
      'status.currentPod set by the hook',
      diagnose,
    );
    assert.deepEqual(parent.status, { currentPod: podKey.name, observedGeneration: 1 });
    const pod = (await kube.get<PodObject>(Pod, podKey))!;
    assert.equal(pod.spec?.containers?.[0]?.image, 'nginx:latest');
    assert.equal(pod.metadata.labels?.['controller-uid'], parent.metadata.uid);
    assert.equal(pod.metadata.ownerReferences?.[0]?.uid, parent.metadata.uid);
    // Both sources delivered, tagged with their controller.
    assert.ok(
      seen.some((event) => event.kind === 'ImmortalContainer' && event.name === key.name && event.controller === SEED),
      JSON.stringify(seen),
    );
    assert.ok(
      seen.some((event) => event.kind === 'Pod' && event.name === podKey.name && event.controller === SEED),
      JSON.stringify(seen),
    );
  });

  test('its pod deleted: the delete event wakes the parent, the pod comes back', async () => {
    const pod = (await kube.get<PodObject>(Pod, podKey))!;
    await kube.delete(Pod, podKey);
    await eventually(
      async () => {
        const current = await kube.get<PodObject>(Pod, podKey);
        return current && current.metadata.uid !== pod.metadata.uid;
      },
      60_000,
      'a new pod',
      diagnose,
    );
    assert.ok(
      seen.some((event) => event.kind === 'Pod' && event.type.endsWith('.delete') && event.name === podKey.name),
      JSON.stringify(seen.filter((event) => event.kind === 'Pod')),
    );
  });

  test('a second controller applied before its parent kind is served gets no sources; once the CRD is applied it is retried and served (cluster-scoped parent, ConfigMap children in two namespaces)', async () => {
    await kube.create(CompositeControllerKind, configMapController('widgets', Widget));
    // The function reads the controller too (its own source): it cannot serve it either yet.
    await eventually(
      async () => seen.some((event) => event.kind === 'CompositeController' && event.name === 'widgets'),
      60_000,
      "the controller's event reached the function",
    );
    assert.equal(applied().widgets, undefined, 'no sources while widgets are not served');

    // Nothing about the controller changes from here on: its sources come from the retry.
    await applyCrds(kube, [crdFor(Widget)]);
    await eventually(
      async () => sourceReady('widgets', 'parents') && sourceReady('widgets', 'children'),
      90_000,
      "the widgets controller's sources Ready after its CRD",
      diagnose,
    );

    for (const name of ['ns-a', 'ns-b']) await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name } });
    await kube.create(Widget, {
      apiVersion: 'example.com/v1',
      kind: 'Widget',
      metadata: { name: 'w1' },
      spec: { namespaces: ['ns-a', 'ns-b'] },
    });
    const widget = await eventually(
      async () => {
        const current = await kube.get<Parent>(Widget, { namespace: '', name: 'w1' });
        return (current?.status?.seen as string[] | undefined)?.length === 2 ? current : undefined;
      },
      60_000,
      "the widget's status lists both ConfigMaps",
      diagnose,
    );
    assert.deepEqual(widget.status, { seen: ['ns-a/w1', 'ns-b/w1'], observedGeneration: 1 });
    for (const namespace of ['ns-a', 'ns-b']) {
      const child = await kube.get(ConfigMap, { namespace, name: 'w1' });
      assert.equal(child?.metadata.ownerReferences?.[0]?.uid, widget.metadata.uid, `ConfigMap ${namespace}/w1 controlled by the widget`);
    }
    assert.ok(
      seen.some((event) => event.kind === 'Widget' && event.name === 'w1' && event.controller === 'widgets'),
      "the widget's events reached the function",
    );
  });

  test("the second controller deleted: its sources stop, its parents' changes no longer reach the function; the first one is unaffected", async () => {
    await kube.delete(CompositeControllerKind, { namespace: '', name: 'widgets' });
    await eventually(async () => applied().widgets === undefined, 60_000, "the widgets controller's sources removed", diagnose);
    assert.deepEqual(Object.keys(applied()), [SEED]);

    const w1 = (await kube.get<Parent>(Widget, { namespace: '', name: 'w1' }))!;
    await kube.replace(Widget, { ...w1, metadata: { ...w1.metadata, labels: { phase: 'after-delete' } } });
    await kube.create(Widget, {
      apiVersion: 'example.com/v1',
      kind: 'Widget',
      metadata: { name: 'w2', labels: { phase: 'after-delete' } },
      spec: { namespaces: ['ns-a'] },
    });
    // A barrier through the plane: an ImmortalContainer created after those changes gets its pod
    // (its events went source → broker → function), so the widgets' would have arrived too.
    await kube.create(
      MetaImmortalContainer,
      { ...metacontrollerExample('ImmortalContainer'), metadata: { name: 'after-widgets' } },
      'default',
    );
    await eventually(
      () => kube.get(Pod, { namespace: 'default', name: 'after-widgets-immortalpod' }),
      60_000,
      'the pod of after-widgets',
      diagnose,
    );
    await eventually(
      async () => seen.some((event) => event.kind === 'Pod' && event.name === 'after-widgets-immortalpod'),
      60_000,
      "the pod's event reached the function",
    );
    const late = seen.filter((event) => event.kind === 'Widget' && (event.name === 'w2' || event.labels.phase === 'after-delete'));
    assert.deepEqual(late, [], 'no widget change after the controller went reached the function');
    assert.equal(await kube.get(ConfigMap, { namespace: 'ns-a', name: 'w2' }), undefined, 'w2 got no child');
  });

  test('an invalid controller gets no sources (the function reports it); made valid it gets them; made invalid again it loses them', async () => {
    const name = 'sometimes-valid';
    // A hook with a credential: the CRD admits it (upstream's field), the function refuses it.
    const withCredential = {
      sync: {
        webhook: {
          url: `${SCRIPTED_HOOK_URL}widget-sync`,
          authorization: { credentials: { secretRef: { name: 'hook-token', namespace: 'default', key: 'token' } } },
        },
      },
    };
    await kube.create(CompositeControllerKind, {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name },
      spec: {
        parentResource: { apiVersion: 'example.com/v1', resource: 'widgets' },
        childResources: [{ apiVersion: 'v1', resource: 'configmaps' }],
        hooks: withCredential,
      },
    });
    await eventually(
      async () => {
        const events = await kube.list(CoreEvent, { namespace: 'default', fieldSelector: `involvedObject.name=${name}` });
        return events.items.some(
          (event) => event.reason === 'InvalidController' && /authorization is not supported/.test(String(event.message)),
        );
      },
      60_000,
      "the function's Warning Event InvalidController",
    );
    assert.equal(applied()[name], undefined);

    await kube.mergePatch(
      CompositeControllerKind,
      { namespace: '', name },
      { spec: { generateSelector: true, hooks: { sync: { webhook: { authorization: null } } } } },
    );
    await eventually(async () => applied()[name]?.length === 2, 60_000, 'sources once valid', diagnose);
    await kube.mergePatch(CompositeControllerKind, { namespace: '', name }, { spec: { hooks: withCredential } });
    await eventually(async () => applied()[name] === undefined, 60_000, 'no sources once invalid again', diagnose);
  });

  test('a controller whose parent is a new kind of a group-version the plane already watches (a second CRD of example.com/v1) is served too', async () => {
    await applyCrds(kube, [crdFor(Gadget)]);
    await kube.create(CompositeControllerKind, configMapController('gadgets', Gadget));
    await eventually(
      async () => sourceReady('gadgets', 'parents') && sourceReady('gadgets', 'children'),
      60_000,
      "the gadgets controller's sources Ready",
      diagnose,
    );
    await kube.create(Gadget, { apiVersion: 'example.com/v1', kind: 'Gadget', metadata: { name: 'g1' }, spec: { namespaces: ['ns-b'] } });
    await eventually(() => kube.get(ConfigMap, { namespace: 'ns-b', name: 'g1' }), 60_000, "the gadget's ConfigMap", diagnose);
    await kube.delete(CompositeControllerKind, { namespace: '', name: 'gadgets' });
    await eventually(async () => applied().gadgets === undefined, 60_000, "the gadgets controller's sources removed", diagnose);
  });

  test('controllers that exist when a plane starts have their sources before the start resolves: exactly the ApiServerSources the function writes', async () => {
    const got: KubeObject[] = [];
    const derived = new FunctionDerivedSources({
      declaration: composite,
      kube,
      sources: { apply: async (object) => void got.push(object), remove: async () => {} },
      log: quietLog,
      placement: DEFAULT_OPTIONS,
    });
    await derived.start();
    try {
      const seed = (await kube.get<KubeObject>(CompositeControllerKind, { namespace: '', name: SEED }))!;
      const written = eventingObjectsFor(seed, { parent: MetaImmortalContainer, children: [Pod] }, DEFAULT_OPTIONS).filter(
        (object) => object.kind === 'ApiServerSource',
      );
      assert.deepEqual(got, written);
      assert.deepEqual(
        derived.applied(),
        { [SEED]: [sourceName(SEED, 'parents'), sourceName(SEED, 'children')] },
        'the invalid controller has none',
      );
    } finally {
      await derived.stop();
    }
  });

  test('nothing was written to the cluster: no ApiServerSource, ServiceAccount, ClusterRole or binding of any controller', async () => {
    const names = async (path: string) =>
      (await kube.request<{ items: KubeObject[] }>('GET', path)).items.map(
        (object) => `${object.metadata.namespace ?? ''}/${object.metadata.name}`,
      );
    assert.deepEqual(await names('/apis/sources.knative.dev/v1/apiserversources'), []);
    for (const path of [
      '/api/v1/serviceaccounts',
      '/apis/rbac.authorization.k8s.io/v1/clusterroles',
      '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings',
      '/apis/rbac.authorization.k8s.io/v1/roles',
      '/apis/rbac.authorization.k8s.io/v1/rolebindings',
    ]) {
      assert.deepEqual(
        (await names(path)).filter((name) => name.includes('opfn-cc-')),
        [],
        path,
      );
    }
  });
});
