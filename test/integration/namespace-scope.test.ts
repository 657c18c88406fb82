// An install limited to one namespace (`opfn manifests --namespace team-a`), against a real API
// server: each function runs as its ServiceAccount bound to exactly the generated Role in team-a,
// told its scope by the environment its generated Service sets. Its resync and its mappers list
// there (a list across the cluster is refused by that Role), and an event or key naming another
// namespace, which only a forged event can, is ignored without an API call.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import { applyCrds } from '../../eventing/crds.ts';
import { DEFAULT_OPTIONS, functionIdentity, knativeService, type ManifestOptions } from '../../eventing/manifests/index.ts';
import { resyncEvent } from '../../eventing/plane.ts';
import composite from '../../functions/composite/index.ts';
import { EVENT_SOURCES_CONFIG } from '../../functions/composite/event-sources.ts';
import { CompositeControllerKind } from '../../functions/composite/kinds.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind } from '../../functions/immortal-container/desired.ts';
import {
  defineFunction,
  type FunctionDeclaration,
  installNamespaceFrom,
  kindKeyString,
  Namespace,
  Pod,
  type KubeObject,
  type ResourceKind,
  allOf,
} from '../../functions/runtime/index.ts';
import { reconcileReply } from '../../functions/runtime/host/index.ts';
import { deliver, serveFunction, startTestCluster, type RunningFunction, type TestCluster } from '../support/cluster.ts';
import { crdFor, exampleImmortalContainer } from '../support/examples.ts';
import { createObjects } from '../support/rbac.ts';

const INSTALL = 'team-a';
const OTHER = 'team-b';
const options: ManifestOptions = { ...DEFAULT_OPTIONS, namespace: INSTALL, scope: 'namespace' };

let cluster: TestCluster;

/** Serves `declaration` as its namespace-scoped install would run it: its generated identity, and the install namespace its generated Service's environment gives. */
async function serveInstalled(declaration: FunctionDeclaration): Promise<RunningFunction> {
  await createObjects(cluster.cp, functionIdentity(declaration, options));
  const container = (knativeService(declaration, options).spec as any).template.spec.containers[0];
  const env = Object.fromEntries((container.env as Array<{ name: string; value?: string }>).map((e) => [e.name, e.value]));
  const installNamespace = installNamespaceFrom(env);
  assert.equal(installNamespace, INSTALL, 'the generated Service tells the function its install namespace');
  const kubeconfig = await cluster.cp.serviceAccountKubeconfig(INSTALL, `opfn-${declaration.name}`);
  return serveFunction(declaration, kubeconfig, { installNamespace });
}

async function post(url: string, reply: { headers: Record<string, string>; body: string }) {
  const response = await fetch(url, { method: 'POST', headers: reply.headers, body: reply.body });
  return { status: response.status, outcome: JSON.parse(response.headers.get('x-opfn-outcome') ?? (await response.text())) };
}

before(async () => {
  cluster = await startTestCluster();
  for (const name of [INSTALL, OTHER]) await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name } });
});
after(() => cluster?.stop());

describe('an install limited to one namespace', () => {
  test('ImmortalContainer: its resync reconciles the install namespace only; events and keys of another namespace are ignored', async () => {
    const fn = await serveInstalled(immortalContainer);
    try {
      const web = { ...exampleImmortalContainer(), metadata: { name: 'web' } };
      const mine = await cluster.kube.create<KubeObject>(ImmortalContainerKind, web, INSTALL);
      const theirs = await cluster.kube.create<KubeObject>(ImmortalContainerKind, web, OTHER);

      const resync = await deliver(fn.url, resyncEvent(immortalContainer));
      assert.equal(resync.status, 200, JSON.stringify(resync.body));
      assert.equal(resync.body.reconciled, 1);
      assert.ok(await cluster.kube.get(Pod, { namespace: INSTALL, name: 'web-immortalpod' }), "the install namespace's object got its pod");

      const forged = await deliver(
        fn.url,
        apiServerSourceEvent({ server: cluster.cp.server, kind: ImmortalContainerKind, object: theirs, action: 'add', mode: 'Resource' }),
      );
      assert.equal(forged.status, 200);
      assert.match(forged.body.ignored, /outside the install's namespace team-a/);
      const keyed = await post(
        fn.url,
        reconcileReply(immortalContainer.name, [{ key: kindKeyString({ kind: ImmortalContainerKind, namespace: OTHER, name: 'web' }) }]),
      );
      assert.equal(keyed.status, 200);
      assert.match(keyed.outcome.ignored, /every key is outside the install's namespace team-a/);
      assert.equal(
        await cluster.kube.get(Pod, { namespace: OTHER, name: 'web-immortalpod' }),
        undefined,
        'nothing was made in the other namespace',
      );

      const update = await deliver(
        fn.url,
        apiServerSourceEvent({ server: cluster.cp.server, kind: ImmortalContainerKind, object: mine, action: 'update', mode: 'Reference' }),
      );
      assert.equal(update.status, 200, JSON.stringify(update.body));
    } finally {
      await fn.close();
    }
  });

  test('a mapper lists its namespaced kind in the install namespace (its Role allows nothing wider)', async () => {
    const reconciled: string[] = [];
    const watcher = defineFunction({
      name: 'ns-watcher',
      description: 'every ImmortalContainer, when a Namespace changes',
      reconciles: ImmortalContainerKind,
      watches: [{ kind: Namespace, keysFor: allOf(ImmortalContainerKind) }],
      rbac: [{ apiGroups: [''], resources: ['namespaces'], verbs: ['get'] }],
      reconcile: async (key) => void reconciled.push(`${key.namespace}/${key.name}`),
    });
    const fn = await serveInstalled(watcher);
    try {
      const namespace = await cluster.kube.get<KubeObject>(Namespace, { namespace: '', name: OTHER });
      const answer = await deliver(
        fn.url,
        apiServerSourceEvent({ server: cluster.cp.server, kind: Namespace, object: namespace!, action: 'update', mode: 'Reference' }),
      );
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      assert.deepEqual(reconciled, [`${INSTALL}/web`]);
    } finally {
      await fn.close();
    }
  });

  test("the composite function sweeps a CompositeController's parents in the install namespace only", async () => {
    const Flock: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Flock', plural: 'flocks', namespaced: true };
    await applyCrds(cluster.kube, [crdFor(Flock)]);
    const synced: string[] = [];
    const hook = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
      request.on('end', () => {
        const { parent } = JSON.parse(body);
        synced.push(`${parent.metadata.namespace}/${parent.metadata.name}`);
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ status: {}, children: [] }));
      });
    });
    await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
    // Admin credentials, so that a sweep across the cluster would succeed and show in the hook's calls.
    const fn = await serveFunction(composite, cluster.cp.kubeconfigPath, {
      installNamespace: INSTALL,
      config: {
        [EVENT_SOURCES_CONFIG]: 'plane',
        COMPOSITE_HOOK_URLS: `http://flock.hooks.test/=http://127.0.0.1:${(hook.address() as AddressInfo).port}/`,
      },
    });
    try {
      for (const namespace of [INSTALL, OTHER])
        await cluster.kube.create(Flock, { apiVersion: 'example.com/v1', kind: 'Flock', metadata: { name: 'wool', namespace } });
      const controller = await cluster.kube.create<KubeObject>(CompositeControllerKind, {
        apiVersion: 'metacontroller.k8s.io/v1alpha1',
        kind: 'CompositeController',
        metadata: { name: 'flock-controller' },
        spec: {
          parentResource: { apiVersion: 'example.com/v1', resource: 'flocks' },
          childResources: [],
          hooks: { sync: { webhook: { url: 'http://flock.hooks.test/sync' } } },
        },
      });
      const answer = await deliver(
        fn.url,
        apiServerSourceEvent({
          server: cluster.cp.server,
          kind: CompositeControllerKind,
          object: controller,
          action: 'add',
          mode: 'Reference',
        }),
      );
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      // A sync may ask the hook more than once (its status written, then seen): which parents is what counts.
      assert.deepEqual([...new Set(synced)], [`${INSTALL}/wool`]);
    } finally {
      await fn.close();
      hook.close();
    }
  });
});
