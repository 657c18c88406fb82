// The event sources ensureEventing makes for a CompositeController, run by the local plane as a
// cluster's Knative would run them: the plane runs the ApiServerSource objects it finds in its
// control plane (as their ServiceAccount), the generated `composite` Trigger (filter
// `opfnfunction: composite`) delivers their events, here to a recorder standing in for the
// function (`--replace composite=<url>`). Parent and child changes arrive tagged with the function
// and the controller; deleting the CompositeController stops them (garbage collector, then the
// plane stops the deleted sources).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { readManifestFile } from '../../eventing/crds.ts';
import { ApiServerSource } from '../../eventing/knative/kinds.ts';
import { applyGeneratedObjects } from '../../eventing/knative/local.ts';
import { DEFAULT_OPTIONS } from '../../eventing/manifests/options.ts';
import { EventPlane } from '../../eventing/plane.ts';
import { ensureEventing, eventingOptionsFrom, type EventingOptions } from '../../functions/composite-controller/eventing.ts';
import composite from '../../functions/composite-controller/index.ts';
import { CompositeControllerKind } from '../../functions/composite-controller/kinds.ts';
import { resolveConfig } from '../../functions/runtime/config.ts';
import { Pod, type KubeObject, type ResourceKind } from '../../functions/runtime/kinds.ts';
import { KubeClient } from '../../functions/runtime/kube.ts';
import { eventually, quietLog, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

const SEED = new URL('../../crds/examples/immortalcontainer-metacontroller.yaml', import.meta.url).pathname;
const ImmortalContainer: ResourceKind = { group: 'immortalcontainers.flugel.it', version: 'v1alpha1', kind: 'ImmortalContainer', plural: 'immortalcontainers', namespaced: true };
const NS = DEFAULT_OPTIONS.namespace;
const kinds = { parent: ImmortalContainer, children: [Pod] };

interface Received { kind: string; name: string; type: string; fn: string; controller: string }
let cluster: TestCluster;
let plane: EventPlane;
let recorder: { server: Server; url: string; events: Received[] };
let controller: KubeObject;
let options: EventingOptions;
const stateDir = mkdtempSync(join(tmpdir(), 'opfn-cc-eventing-'));

before(async () => {
  cluster = await startTestCluster({ controllerManager: true });
  const events: Received[] = [];
  const server = createServer((req, res) => {
    req.resume().on('end', () => {
      const header = (name: string) => String(req.headers[`ce-${name}`] ?? '');
      events.push({ kind: header('kind'), name: header('name'), type: header('type'), fn: header('opfnfunction'), controller: header('opfncontroller') });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  recorder = { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, events };
  await applyGeneratedObjects(cluster.kube, [composite], { [composite.name]: recorder.url });
  plane = new EventPlane({
    functions: [composite],
    kube: cluster.kube,
    kubeconfigPath: cluster.cp.kubeconfigPath,
    log: quietLog,
    stateDir,
    idleTimeoutMs: 60_000,
    env: { LOG_LEVEL: 'warn' },
    knativeObjects: { clientFor: async (namespace, account) => KubeClient.fromFile(await cluster.cp.serviceAccountKubeconfig(namespace, account)) },
  });
  await plane.start();
  // Where the function puts the sources: its declared defaults, as the local plane runs it.
  const configured = eventingOptionsFrom(resolveConfig(composite.name, composite.config, {}));
  assert.equal(typeof configured, 'object', String(configured));
  options = configured as EventingOptions;
  controller = await cluster.kube.create(CompositeControllerKind, readManifestFile(SEED).find((object) => object.kind === 'CompositeController')!);
});

after(async () => {
  await plane?.stop({ drainTimeoutMs: 1000 });
  recorder?.server.close();
  await cluster?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

const createParent = (name: string) => cluster.kube.create(ImmortalContainer, { apiVersion: 'immortalcontainers.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: { name, namespace: 'default' }, spec: { image: 'nginx' } });
const readyOf = async (name: string) => {
  const source = await cluster.kube.get<KubeObject & { status?: { conditions?: { type: string; status: string; reason?: string }[] } }>(ApiServerSource, { namespace: NS, name });
  const ready = source?.status?.conditions?.find((condition) => condition.type === 'Ready');
  return ready ? `${ready.status} ${ready.reason ?? ''}`.trim() : 'none';
};

describe('per-CompositeController event sources on the local plane', () => {
  test('made by the composite function\'s identity, they become Ready and deliver parent and child changes through the composite Trigger', async () => {
    const kube = KubeClient.fromFile(await kubeconfigWithDeclaredRbac(cluster.cp, composite, NS));
    await ensureEventing(controller, kinds, { kube }, options);
    for (const name of ['opfn-cc-immortalcontainer-controller-parents', 'opfn-cc-immortalcontainer-controller-children']) {
      await eventually(async () => (await readyOf(name)).startsWith('True'), 30_000, `${name} Ready`, () => readyOf(name));
    }
    await createParent('ic-1');
    await cluster.kube.create(Pod, { metadata: { name: 'child-1', namespace: 'default' }, spec: { containers: [{ name: 'c', image: 'nginx' }] } });
    const parentEvent = await eventually(async () => recorder.events.find((event) => event.kind === 'ImmortalContainer' && event.name === 'ic-1'), 30_000, 'the parent event');
    const childEvent = await eventually(async () => recorder.events.find((event) => event.kind === 'Pod' && event.name === 'child-1'), 30_000, 'the child event');
    for (const event of [parentEvent, childEvent]) {
      assert.equal(event.fn, 'composite');
      assert.equal(event.controller, 'immortalcontainer-controller');
      assert.match(event.type, /^dev\.knative\.apiserver\.resource\./);
    }
  });

  test('deleting the CompositeController stops them; a second controller added meanwhile is served', async () => {
    await cluster.kube.delete(CompositeControllerKind, { namespace: '', name: controller.metadata.name! });
    const gone = async () => !(await cluster.kube.get(ApiServerSource, { namespace: NS, name: 'opfn-cc-immortalcontainer-controller-parents' })) && !(await cluster.kube.get(ApiServerSource, { namespace: NS, name: 'opfn-cc-immortalcontainer-controller-children' }));
    await eventually(gone, 90_000, 'the garbage collector deleting the sources');
    // A second controller over the same parent kind. The plane handles ApiServerSource changes in
    // the order of their watch, so once its source is Ready the deleted ones were stopped; once its
    // event for a new parent arrived, the deleted ones would have sent theirs too.
    const second = await cluster.kube.create(CompositeControllerKind, { apiVersion: 'metacontroller.k8s.io/v1alpha1', kind: 'CompositeController', metadata: { name: 'second' }, spec: { parentResource: { apiVersion: 'immortalcontainers.flugel.it/v1alpha1', resource: 'immortalcontainers' }, hooks: { sync: { webhook: { url: 'http://hook/sync' } } } } });
    await ensureEventing(second, { parent: ImmortalContainer, children: [] }, { kube: cluster.kube }, options);
    await eventually(async () => (await readyOf('opfn-cc-second-parents')).startsWith('True'), 30_000, 'opfn-cc-second-parents Ready', () => readyOf('opfn-cc-second-parents'));
    await createParent('ic-after');
    await eventually(async () => recorder.events.find((event) => event.name === 'ic-after' && event.controller === 'second'), 30_000, 'the second controller\'s event for ic-after');
    assert.deepEqual(recorder.events.filter((event) => event.name === 'ic-after' && event.controller !== 'second'), [], 'no event from the deleted controller\'s sources');
  });
});
