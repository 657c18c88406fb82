// One parent whose hook answers more children than one delivery writes: the composite function
// stops starting child writes at the delivery's deadline, hands the parent back in its reply, and
// the reply's delivery writes only what is still missing. Run against a real API server, the
// function as its own ServiceAccount with its generated RBAC, each reply delivered as the broker
// would, at once: the sync reads the children as of now, so it sees what the delivery before wrote.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { applyCrds } from '../../eventing/crds.ts';
import composite from '../../functions/composite/index.ts';
import { CHILD_CONCURRENCY } from '../../functions/composite/children.ts';
import { CompositeControllerKind } from '../../functions/composite/kinds.ts';
import { serveHooks, type HookServer } from '../../functions/composite/metacontroller/serve-hook.ts';
import { ConfigMap, type KubeObject, type ResourceKind, type KubeClient } from '../../functions/runtime/index.ts';
import { serveFunction, startTestCluster, type RunningFunction, type TestCluster } from '../support/cluster.ts';
import { crdFor } from '../support/examples.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

const Swarm: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Swarm', plural: 'swarms', namespaced: true };
const HOOK_URL = 'http://swarm.hooks.test/';
const PARENT_KEY = 'example.com/Swarm:default/hive';
/** Five deliveries' worth: with a budget of 1 ms, each delivery starts only its first round of writes. */
const CHILDREN = CHILD_CONCURRENCY * 5;

let cluster: TestCluster;
let kube: KubeClient;
let hooks: HookServer;
let fn: RunningFunction;
/** How many children each hook call was shown. */
const shown: number[] = [];
/** Children shown to the hook with metadata.managedFields. */
let withManagedFields = 0;

before(async () => {
  cluster = await startTestCluster({ controllerManager: false });
  kube = cluster.kube;
  await applyCrds(kube, [crdFor(Swarm)]);
  hooks = await serveHooks({
    hooks: {
      '/sync': (request: { parent: KubeObject; children: Record<string, Record<string, unknown>> }) => {
        const children = Object.values(request.children['ConfigMap.v1'] ?? {}) as KubeObject[];
        shown.push(children.length);
        withManagedFields += children.filter((child) => 'managedFields' in child.metadata).length;
        return {
          status: { seen: shown.at(-1) },
          children: Array.from({ length: CHILDREN }, (_, i) => ({
            apiVersion: 'v1',
            kind: 'ConfigMap',
            metadata: { name: `hive-${i}`, namespace: 'default' },
            data: { index: String(i) },
          })),
        };
      },
    },
  });
  fn = await serveFunction(composite, await kubeconfigWithDeclaredRbac(cluster.cp, composite), {
    config: { COMPOSITE_HOOK_URLS: `${HOOK_URL}=${hooks.url}/`, COMPOSITE_EVENT_SOURCES: 'plane' },
    // Past as soon as the sync starts: each delivery writes the first round its budget always allows.
    deliveryBudgetMs: 1,
  });
  await kube.create(CompositeControllerKind, {
    apiVersion: 'metacontroller.k8s.io/v1alpha1',
    kind: 'CompositeController',
    metadata: { name: 'swarms' },
    spec: {
      parentResource: { apiVersion: 'example.com/v1', resource: 'swarms' },
      childResources: [{ apiVersion: 'v1', resource: 'configmaps', updateStrategy: { method: 'InPlace' } }],
      generateSelector: true,
      hooks: { sync: { webhook: { url: `${HOOK_URL}sync` } } },
    },
  });
  await kube.create(Swarm, { apiVersion: 'example.com/v1', kind: 'Swarm', metadata: { name: 'hive', namespace: 'default' } });
});

after(async () => {
  await fn?.close();
  await hooks?.close();
  await cluster?.stop();
});

async function post(headers: Record<string, string>, body: string) {
  const response = await fetch(fn.url, { method: 'POST', headers, body });
  return { status: response.status, headers: Object.fromEntries(response.headers), text: await response.text() };
}

/** The children as they are now (from etcd), by name. */
async function children(): Promise<Map<string, KubeObject>> {
  const list = await kube.list(ConfigMap, { namespace: 'default' });
  return new Map(list.items.filter((item) => item.metadata.name!.startsWith('hive-')).map((item) => [item.metadata.name!, item]));
}

test('a parent with more children than a delivery writes converges over several deliveries, each writing new children and none again', async () => {
  const first = {
    headers: {
      'content-type': 'application/json',
      'ce-specversion': '1.0',
      'ce-id': 'many-children',
      'ce-source': '/test',
      'ce-type': 'dev.opfn.reconcile',
      'ce-opfnfunction': composite.name,
    },
    body: JSON.stringify({ keys: [PARENT_KEY] }),
  };
  let next: { headers: Record<string, string>; body: string } | undefined = first;
  const written: Map<string, KubeObject>[] = [];
  while (next) {
    assert.ok(written.length <= CHILDREN / CHILD_CONCURRENCY + 1, `converged within ${written.length} deliveries`);
    const answer = await post(next.headers, next.body);
    assert.equal(answer.status, 200, answer.text);
    written.push(await children());
    const reply = answer.headers['ce-type'] ? (JSON.parse(answer.text) as { keys: string[] }) : undefined;
    // A reply naming the parent is due at once (no opfnnotbefore): the broker delivers it now.
    if (reply) {
      assert.deepEqual(reply.keys, [PARENT_KEY], 'the parent is handed back, nothing else');
      assert.equal(answer.headers['ce-opfnnotbefore'], undefined, 'due at once');
    }
    next = reply
      ? {
          headers: Object.fromEntries(Object.entries(answer.headers).filter(([name]) => name.startsWith('ce-') || name === 'content-type')),
          body: answer.text,
        }
      : undefined;
  }

  assert.deepEqual(
    written.map((children) => children.size),
    [1, 2, 3, 4, 5].map((rounds) => rounds * CHILD_CONCURRENCY),
    'each delivery wrote one round of new children, the last one the last round, handing nothing back',
  );
  // What a child's event or the resync brings next: a sync that finds every child in place.
  const again = await post(first.headers, first.body);
  assert.equal(again.status, 200, again.text);
  assert.equal(again.headers['ce-type'], undefined, 'nothing handed back');
  written.push(await children());
  // The last delivery, its writes done, asks again with them observed, then with its status
  // written (sync-parent.ts SYNC_ROUNDS); the sync after it finds everything in place.
  assert.deepEqual(
    shown,
    [0, 1, 2, 3, 4, 5, 5, 5].map((rounds) => rounds * CHILD_CONCURRENCY),
    'each hook call saw what the deliveries before wrote',
  );
  assert.equal(withManagedFields, 0, 'children are kept, and shown to the hook, without managedFields');
  assert.ok(
    [...written.at(-1)!.values()].every((child) => 'managedFields' in child.metadata),
    'which they have (and keep)',
  );
  // None written again: every child is as the delivery that created it left it.
  const last = written.at(-1)!;
  assert.equal(last.size, CHILDREN);
  for (const [index, children] of written.entries())
    for (const [name, child] of children)
      assert.equal(
        last.get(name)?.metadata.resourceVersion,
        child.metadata.resourceVersion,
        `${name} untouched after delivery ${index + 1}`,
      );
  const parent = await kube.get<KubeObject & { status?: { seen?: number } }>(Swarm, { namespace: 'default', name: 'hive' });
  assert.equal(parent?.status?.seen, CHILDREN, "the last sync's status: every child seen");
});
