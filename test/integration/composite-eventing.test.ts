// ensureEventing against a real control plane (with kube-controller-manager, so the garbage
// collector runs), as the composite function's own generated identity: the event sources of a
// CompositeController are created owned by it, a second call writes nothing, drift is repaired,
// sources no longer needed go, the sources' ServiceAccount may watch exactly its kinds, and
// deleting the controller deletes everything. The ApiServerSource CRD is Knative's own, of the
// release the manifests target (eventing/knative/crds.ts: cluster/provision-knative.sh, or
// KNATIVE_CRDS_DIR), when it can be provisioned, else the permissive stand-in (standInCrds); an
// older release's schema pruned `namespaceSelector: {}`, which must not count as drift.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import { applyCrds, readManifestFile } from '../../eventing/crds.ts';
import { ApiServerSource, knativeCrdDir, knativeCrds, standInCrds } from '../../eventing/knative/index.ts';
import { manifestOptions } from '../../bin/manifests.ts';
import { functionIdentity } from '../../eventing/manifests/index.ts';
import { ensureEventing, type EventingResult } from '../../functions/composite/ensure-event-sources.ts';
import { eventingObjectsFor, type EventingOptions } from '../../functions/composite/event-sources.ts';
import composite from '../../functions/composite/index.ts';
import { CompositeControllerKind } from '../../functions/composite/kinds.ts';
import {
  installConfigValues,
  ConfigMap,
  CoreEvent,
  Pod,
  type KubeObject,
  type ResourceKind,
  KubeClient,
} from '../../functions/runtime/index.ts';
import { deliver, eventually, serveFunction, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { crdFor } from '../support/examples.ts';
import { createObjects, kubeconfigWithDeclaredRbac } from '../support/rbac.ts';
import { ClusterRole, ClusterRoleBinding, Role, RoleBinding, ServiceAccount } from '../support/tenant.ts';

const ImmortalContainer: ResourceKind = {
  group: 'immortalcontainers.flugel.it',
  version: 'v1alpha1',
  kind: 'ImmortalContainer',
  plural: 'immortalcontainers',
  namespaced: true,
};
const KINDS: Record<string, ResourceKind> = { ServiceAccount, ClusterRole, ClusterRoleBinding, Role, RoleBinding, ApiServerSource };

const options: EventingOptions = { namespace: 'operator-functions', brokerName: 'operator-functions', scope: 'cluster' };
const kinds = { parent: ImmortalContainer, children: [Pod] };
const teamA: EventingOptions = { namespace: 'team-a', brokerName: 'operator-functions', scope: 'namespace' };
const realKnative = await knativeCrdDir();

let cluster: TestCluster;
let kube: KubeClient;
let writes: string[] = [];
let reads: string[] = [];
let controller: KubeObject;
let functionKubeconfig: string;

const operations = (results: EventingResult[]) => results.map((result) => `${result.operation} ${result.kind} ${result.name}`);
const get = (object: KubeObject) =>
  cluster.kube.get(KINDS[object.kind!]!, { namespace: object.metadata.namespace ?? '', name: object.metadata.name! });

before(async () => {
  // Installed before the garbage collector starts: it collects the controller's sources at once.
  cluster = await startTestCluster({
    controllerManager: true,
    install: (kube) =>
      applyCrds(
        kube,
        (realKnative ? knativeCrds(realKnative) : standInCrds()).filter(
          (crd) => (crd.spec as { names: { kind: string } }).names.kind === 'ApiServerSource',
        ),
      ),
  });
  console.log(
    `# ApiServerSource CRD: ${realKnative ? `Knative's from ${realKnative}` : "the stand-in (Knative's CRDs could not be provisioned)"}`,
  );
  await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name: options.namespace } });
  // The function's own identity, exactly as generated: proves its rules allow what ensureEventing does.
  functionKubeconfig = await kubeconfigWithDeclaredRbac(cluster.cp, composite, options.namespace);
  kube = KubeClient.fromFile(functionKubeconfig, (verb, resource, code) => {
    if (['post', 'put', 'patch', 'delete'].includes(verb)) writes.push(`${verb} ${resource} ${code}`);
    else reads.push(`${verb} ${resource} ${code}`);
  });
  const manifest = readManifestFile(new URL('../../crds/examples/immortalcontainer-metacontroller.yaml', import.meta.url).pathname).find(
    (object) => object.kind === 'CompositeController',
  )!;
  controller = await cluster.kube.create(CompositeControllerKind, manifest);
});
after(async () => cluster?.stop());

describe('ensureEventing', () => {
  test('creates the identity and both sources, each controlled by the CompositeController', async () => {
    writes = [];
    const results = await ensureEventing(controller, kinds, { kube }, options);
    assert.deepEqual(operations(results), [
      'created ServiceAccount opfn-cc-immortalcontainer-controller',
      'created ClusterRole opfn-cc-immortalcontainer-controller',
      'created ClusterRoleBinding opfn-cc-immortalcontainer-controller',
      'created ApiServerSource opfn-cc-immortalcontainer-controller-parents',
      'created ApiServerSource opfn-cc-immortalcontainer-controller-children',
    ]);
    assert.equal(writes.length, 5, writes.join(', '));
    for (const object of eventingObjectsFor(controller, kinds, options)) {
      const stored = await get(object);
      assert.ok(stored, `${object.kind} ${object.metadata.name} exists`);
      assert.deepEqual(stored.metadata.ownerReferences, [
        {
          apiVersion: 'metacontroller.k8s.io/v1alpha1',
          kind: 'CompositeController',
          name: 'immortalcontainer-controller',
          uid: controller.metadata.uid,
          controller: true,
        },
      ]);
    }
  });

  test('a second call writes nothing: one (watch-cache) read per object', async () => {
    writes = [];
    reads = [];
    const results = await ensureEventing(controller, kinds, { kube }, options);
    assert.deepEqual(
      results.map((result) => result.operation),
      ['unchanged', 'unchanged', 'unchanged', 'unchanged', 'unchanged'],
    );
    assert.deepEqual(writes, []);
    assert.deepEqual(reads.sort(), [
      'get apiserversources 200',
      'get apiserversources 200',
      'get clusterrolebindings 200',
      'get clusterroles 200',
      'get serviceaccounts 200',
    ]);
  });

  test("the sources' ServiceAccount may get, list and watch the parent and child kinds in every namespace, and nothing else", async () => {
    const sourceKube = KubeClient.fromFile(
      await cluster.cp.serviceAccountKubeconfig(options.namespace, 'opfn-cc-immortalcontainer-controller'),
    );
    await sourceKube.list(ImmortalContainer);
    await sourceKube.list(Pod);
    await sourceKube.request('GET', '/api/v1/pods', { query: { watch: 'true', timeoutSeconds: '1' } });
    await assert.rejects(sourceKube.list(ConfigMap), /forbidden/i);
    await assert.rejects(
      sourceKube.create(Pod, { metadata: { name: 'p', namespace: 'default' }, spec: { containers: [{ name: 'c', image: 'x' }] } }),
      /forbidden/i,
    );
  });

  test('drift is repaired: a narrowed role, a changed source, a removed label, a deleted ServiceAccount', async () => {
    const [account, role, , parents] = eventingObjectsFor(controller, kinds, options) as [KubeObject, KubeObject, KubeObject, KubeObject];
    const storedRole = (await get(role))!;
    await cluster.kube.replace(ClusterRole, { ...storedRole, rules: [{ apiGroups: [''], resources: ['pods'], verbs: ['get'] }] });
    const storedSource = (await get(parents))!;
    const labels = { ...storedSource.metadata.labels };
    delete labels['operator-functions.dev/composite-controller'];
    await cluster.kube.replace(ApiServerSource, {
      ...storedSource,
      metadata: { ...storedSource.metadata, labels },
      spec: { ...(storedSource.spec as object), mode: 'Reference' },
    });
    await cluster.kube.delete(ServiceAccount, { namespace: options.namespace, name: account.metadata.name! });
    writes = [];
    // The cached reads may lag a moment behind those writes: converge, then check.
    await eventually(
      async () => {
        const results = await ensureEventing(controller, kinds, { kube }, options);
        return results.every((result) => result.operation === 'unchanged');
      },
      30_000,
      'ensureEventing converging after drift',
    );
    assert.ok(
      writes.some((write) => write.startsWith('put clusterroles 200')),
      writes.join(', '),
    );
    assert.ok(
      writes.some((write) => write.startsWith('put apiserversources 200')),
      writes.join(', '),
    );
    assert.ok(
      writes.some((write) => write.startsWith('post serviceaccounts 201')),
      writes.join(', '),
    );
    assert.deepEqual((await get(role))!.rules, role.rules);
    const source = (await get(parents))!;
    assert.equal((source.spec as { mode: string }).mode, 'Resource');
    assert.equal(source.metadata.labels?.['operator-functions.dev/composite-controller'], 'immortalcontainer-controller');
    assert.ok(await get(account));
  });

  test('a source no longer needed (no child kinds left) is deleted; others are untouched', async () => {
    writes = [];
    const results = await ensureEventing(controller, { parent: ImmortalContainer, children: [] }, { kube }, options);
    assert.deepEqual(
      operations(results).filter((line) => !line.startsWith('unchanged')),
      ['updated ClusterRole opfn-cc-immortalcontainer-controller', 'deleted ApiServerSource opfn-cc-immortalcontainer-controller-children'],
    );
    assert.equal(
      await cluster.kube.get(ApiServerSource, { namespace: options.namespace, name: 'opfn-cc-immortalcontainer-controller-children' }),
      undefined,
    );
    // And back.
    const again = await ensureEventing(controller, kinds, { kube }, options);
    assert.ok(operations(again).includes('created ApiServerSource opfn-cc-immortalcontainer-controller-children'));
  });

  test('a namespaced install (--namespace team-a): Role and RoleBinding there, no ClusterRole rights needed, a second call writes nothing', async () => {
    await createObjects(cluster.cp, [{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: teamA.namespace } }]);
    // The composite function's own identity as `opfn manifests --namespace team-a` generates it: `*` in team-a only.
    await createObjects(
      cluster.cp,
      functionIdentity(composite, manifestOptions({ target: 'knative', namespace: teamA.namespace }, [composite])),
    );
    const namespaced = KubeClient.fromFile(
      await cluster.cp.serviceAccountKubeconfig(teamA.namespace, 'opfn-composite'),
      (verb, resource, code) => {
        if (['post', 'put', 'patch', 'delete'].includes(verb)) writes.push(`${verb} ${resource} ${code}`);
      },
    );
    assert.deepEqual(operations(await ensureEventing(controller, kinds, { kube: namespaced }, teamA)), [
      'created ServiceAccount opfn-cc-immortalcontainer-controller',
      'created Role opfn-cc-immortalcontainer-controller',
      'created RoleBinding opfn-cc-immortalcontainer-controller',
      'created ApiServerSource opfn-cc-immortalcontainer-controller-parents',
      'created ApiServerSource opfn-cc-immortalcontainer-controller-children',
    ]);
    writes = [];
    assert.ok((await ensureEventing(controller, kinds, { kube: namespaced }, teamA)).every((result) => result.operation === 'unchanged'));
    assert.deepEqual(writes, []);
    const source = (await cluster.kube.get(ApiServerSource, {
      namespace: teamA.namespace,
      name: 'opfn-cc-immortalcontainer-controller-parents',
    }))!;
    assert.equal('namespaceSelector' in (source.spec as object), false);
  });

  test('deleting the CompositeController deletes every object through the garbage collector', async () => {
    const objects = [...eventingObjectsFor(controller, kinds, options), ...eventingObjectsFor(controller, kinds, teamA)];
    assert.equal(objects.length, 10);
    await cluster.kube.delete(CompositeControllerKind, { namespace: '', name: controller.metadata.name! });
    await eventually(
      async () => {
        const left = await Promise.all(objects.map(get));
        return left.every((object) => object === undefined);
      },
      90_000,
      'the garbage collector deleting the event sources',
      async () => {
        const left = await Promise.all(
          objects.map(async (object) => ((await get(object)) ? `${object.kind} ${object.metadata.name}` : '')),
        );
        return `still there: ${left.filter(Boolean).join(', ')}`;
      },
    );
  });
});

describe('a kind no ApiServerSource can watch', () => {
  // Plural "sheep": the source guesses a resource from a kind name (Sheep → "sheeps"), and no
  // kind name guesses "sheep", so no source can watch it (sourceKindName).
  const Sheep: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Sheep', plural: 'sheep', namespaced: true };
  const HOOK_URL = 'http://sheep-controller.hooks.test/';

  test('the composite function makes no parents source, warns on the CompositeController, and still syncs the parents it sweeps', async () => {
    await applyCrds(cluster.kube, [crdFor(Sheep)]);
    const hookCalls: string[] = [];
    const hook = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => {
        body += chunk.toString('utf8');
      });
      request.on('end', () => {
        hookCalls.push(JSON.parse(body).parent.metadata.name);
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ status: { seen: true }, children: [] }));
      });
    });
    await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
    // The function as it runs with its own sources (COMPOSITE_EVENT_SOURCES unset), under its generated identity.
    const fn = await serveFunction(composite, functionKubeconfig, {
      config: {
        ...installConfigValues(options),
        COMPOSITE_HOOK_URLS: `${HOOK_URL}=http://127.0.0.1:${(hook.address() as AddressInfo).port}/`,
      },
    });
    try {
      const sheepController = await cluster.kube.create(CompositeControllerKind, {
        apiVersion: 'metacontroller.k8s.io/v1alpha1',
        kind: 'CompositeController',
        metadata: { name: 'sheep-controller' },
        spec: {
          parentResource: { apiVersion: 'example.com/v1', resource: 'sheep' },
          childResources: [{ apiVersion: 'v1', resource: 'configmaps' }],
          hooks: { sync: { webhook: { url: `${HOOK_URL}sync` } } },
        },
      });
      await cluster.kube.create(Sheep, { apiVersion: 'example.com/v1', kind: 'Sheep', metadata: { name: 'dolly', namespace: 'default' } });
      const answer = await deliver(
        fn.url,
        apiServerSourceEvent({
          server: cluster.cp.server,
          kind: CompositeControllerKind,
          object: sheepController,
          action: 'add',
          mode: 'Reference',
        }),
      );
      assert.equal(answer.status, 200, JSON.stringify(answer.body));

      const sources = eventingObjectsFor(sheepController, { parent: Sheep, children: [ConfigMap] }, options).filter(
        (object) => object.kind === 'ApiServerSource',
      );
      assert.deepEqual(
        sources.map((object) => object.metadata.name),
        ['opfn-cc-sheep-controller-children'],
      );
      assert.ok(await get(sources[0]!), 'the children source exists');
      assert.equal(
        await cluster.kube.get(ApiServerSource, { namespace: options.namespace, name: 'opfn-cc-sheep-controller-parents' }),
        undefined,
      );
      // The sweep still reached the parent: its resync is what brings its changes now. (The hook
      // is asked twice: again with the status it answered written, as that write's event would.)
      assert.deepEqual(hookCalls, ['dolly', 'dolly']);
      assert.deepEqual(
        (await cluster.kube.get<KubeObject & { status?: unknown }>(Sheep, { namespace: 'default', name: 'dolly' }))!.status,
        { seen: true, observedGeneration: 1 },
      );
      const warning = await eventually(
        async () =>
          (
            await cluster.kube.list<KubeObject & { reason?: string; type?: string; message?: string; involvedObject?: { name?: string } }>(
              CoreEvent,
            )
          ).items.find((event) => event.reason === 'KindNotWatchable' && event.involvedObject?.name === 'sheep-controller'),
        15_000,
        'the KindNotWatchable Event',
      );
      assert.equal(warning.type, 'Warning');
      assert.match(warning.message!, /Sheep is served as "sheep".*guesses "sheeps".*only through its resync/);
    } finally {
      await fn.close();
      hook.close();
      await cluster.kube.delete(CompositeControllerKind, { namespace: '', name: 'sheep-controller' });
    }
  });
});
