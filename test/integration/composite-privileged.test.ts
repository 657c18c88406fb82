// The composite function under a hostile hook, on the real control plane, running as its own
// ServiceAccount with the broad rights (`*`, as the local plane and `--composite-broad` give it):
//
// - a hook answering a ClusterRoleBinding that binds the function's own ClusterRole to the tenant
//   eve is refused (Warning Event PrivilegedChildRefused on the parent, nothing created, eve's
//   can-i unchanged); the controller's allow annotation is what decides (the control: allowed, the
//   binding is made and eve gains the rights);
// - events of RBAC children named as the API server allows (`system:foo`, `adv:adv-colon`) are
//   handled, never answered 400: a hand-deleted `adv:adv-colon` is back at its delete event;
// - 20 concurrent forged resync pings cost about one resync (API requests and hook calls counted).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { CloudEvent } from 'cloudevents';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import { applyCrds } from '../../eventing/crds.ts';
import composite from '../../functions/composite/index.ts';
import { CompositeControllerKind } from '../../functions/composite/kinds.ts';
import { ALLOW_PRIVILEGED_ANNOTATION, PRIVILEGED_CHILD_REASON } from '../../functions/composite/metacontroller/privileged.ts';
import { ConfigMap, CoreEvent, type KubeObject, type ResourceKind, type KubeClient } from '../../functions/runtime/index.ts';
import { crdFor } from '../support/examples.ts';
import {
  deliver,
  eventually,
  kubeFor,
  serveFunction,
  startTestCluster,
  type RunningFunction,
  type TestCluster,
} from '../support/cluster.ts';
import { canI, kubeconfigWithDeclaredRbac } from '../support/rbac.ts';
import { ClusterRoleBinding } from '../support/tenant.ts';

const Gadget: ResourceKind = { group: 'hostile.example.com', version: 'v1', kind: 'Gadget', plural: 'gadgets', namespaced: false };
const Doohickey: ResourceKind = { group: 'counted.example.com', version: 'v1', kind: 'Doohickey', plural: 'doohickeys', namespaced: true };
const RBAC_API = 'rbac.authorization.k8s.io/v1';

let cluster: TestCluster;
let kube: KubeClient;
let fn: RunningFunction;
let hookServer: Server;
let hookUrl: string;
/** What the hook answers for a parent (the hostile endpoint's script), and every call it got. */
let answer: (request: any) => unknown = () => ({});
const hookCalls: any[] = [];
let eve: KubeClient;

const eveCanListSecretsEverywhere = () => canI(eve, { verb: 'list', group: '', resource: 'secrets', namespace: '' });
const parentEvent = (
  kind: ResourceKind,
  object: KubeObject,
  action: 'add' | 'update' | 'delete' = 'add',
  mode: 'Reference' | 'Resource' = 'Reference',
) => deliver(fn.url, apiServerSourceEvent({ server: cluster.cp.server, kind, object, action, mode }));
const warnings = async (name: string, reason: string) =>
  (
    await kube.list<KubeObject & { reason?: string; message?: string; type?: string }>(CoreEvent, {
      namespace: 'default',
      fieldSelector: `involvedObject.name=${name}`,
    })
  ).items.filter((event) => event.reason === reason);
const evesBinding = (name: string): KubeObject => ({
  apiVersion: RBAC_API,
  kind: 'ClusterRoleBinding',
  metadata: { name },
  roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'opfn-composite' },
  subjects: [{ kind: 'ServiceAccount', name: 'eve', namespace: 'tenant' }],
});
const controller = (
  name: string,
  parent: ResourceKind,
  children: { apiVersion: string; resource: string }[],
  annotations?: Record<string, string>,
): KubeObject => ({
  apiVersion: 'metacontroller.k8s.io/v1alpha1',
  kind: 'CompositeController',
  metadata: { name, ...(annotations ? { annotations } : {}) },
  spec: {
    parentResource: { apiVersion: `${parent.group}/${parent.version}`, resource: parent.plural },
    childResources: children,
    generateSelector: true,
    hooks: { sync: { webhook: { url: `${hookUrl}${name}` } } },
  },
});

before(async () => {
  cluster = await startTestCluster();
  kube = cluster.kube;
  await applyCrds(kube, [crdFor(Gadget), crdFor(Doohickey)]);
  hookServer = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request
      .on('data', (chunk: Buffer) => chunks.push(chunk))
      .on('end', () => {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        hookCalls.push(body);
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer(body)));
      });
  });
  await new Promise<void>((resolve) => hookServer.listen(0, '127.0.0.1', resolve));
  hookUrl = `http://127.0.0.1:${(hookServer.address() as AddressInfo).port}/`;
  // eve: a tenant's ServiceAccount, with a real token.
  await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name: 'tenant' } });
  await cluster.cp.request('POST', '/api/v1/namespaces/tenant/serviceaccounts', { metadata: { name: 'eve' } });
  eve = kubeFor(await cluster.cp.serviceAccountKubeconfig('tenant', 'eve'));
  fn = await serveFunction(composite, await kubeconfigWithDeclaredRbac(cluster.cp, composite), {
    config: { COMPOSITE_EVENT_SOURCES: 'plane' },
  });
});

after(async () => {
  await fn?.close();
  hookServer?.closeAllConnections();
  hookServer?.close();
  await cluster?.stop();
});

describe('a hook that answers a ClusterRoleBinding for eve', () => {
  const gadget: KubeObject = { apiVersion: 'hostile.example.com/v1', kind: 'Gadget', metadata: { name: 'g1' } };

  before(async () => {
    answer = () => ({ children: [evesBinding('eve-admin')] });
    await kube.create(CompositeControllerKind, controller('adv', Gadget, [{ apiVersion: RBAC_API, resource: 'clusterrolebindings' }]));
    await kube.create(Gadget, gadget);
  });

  test('refused: a Warning Event PrivilegedChildRefused on the parent, no binding, eve can do no more than before', async () => {
    assert.equal(await eveCanListSecretsEverywhere(), false, 'eve starts with nothing');
    const calls = hookCalls.length;
    const refused = await parentEvent(Gadget, gadget);
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.ok(hookCalls.length > calls, 'the hook was called: its answer is what was refused');
    const [event] = await eventually(
      async () => {
        const found = await warnings('g1', PRIVILEGED_CHILD_REASON);
        return found.length ? found : undefined;
      },
      15_000,
      'the PrivilegedChildRefused Event',
    );
    assert.equal(event!.type, 'Warning');
    assert.equal(
      event!.message,
      `Sync error: desired child ClusterRoleBinding eve-admin: ClusterRoleBinding grants API rights: refused unless CompositeController "adv" names "clusterrolebindings.rbac.authorization.k8s.io" in its annotation ${ALLOW_PRIVILEGED_ANNOTATION}`,
    );
    assert.equal(await kube.get(ClusterRoleBinding, { namespace: '', name: 'eve-admin' }), undefined, 'nothing created');
    assert.equal(await eveCanListSecretsEverywhere(), false, "eve's can-i unchanged");
  });

  test("the control: once the controller allows the kind by name, the same answer is applied and eve gains the function's rights", async () => {
    await kube.mergePatch(
      CompositeControllerKind,
      { namespace: '', name: 'adv' },
      { metadata: { annotations: { [ALLOW_PRIVILEGED_ANNOTATION]: 'clusterrolebindings.rbac.authorization.k8s.io' } } },
    );
    // The controller's update event (what its change brings) syncs every parent with it as it is now.
    const applied = await parentEvent(CompositeControllerKind, { metadata: { name: 'adv' } }, 'update');
    assert.equal(applied.status, 200, JSON.stringify(applied.body));
    assert.ok(await kube.get(ClusterRoleBinding, { namespace: '', name: 'eve-admin' }), 'the binding exists');
    assert.equal(await eventually(() => eveCanListSecretsEverywhere(), 10_000, "eve to hold the binding's rights"), true);
  });

  test('RBAC children named as the API server allows: system:* events are handled (200), and a hand-deleted adv:adv-colon is back at its delete event', async () => {
    // A binding nobody's controller owns, named as the controller manager names its own.
    const system = await kube.create<KubeObject>(ClusterRoleBinding, {
      apiVersion: RBAC_API,
      kind: 'ClusterRoleBinding',
      metadata: { name: 'system:opfn-test' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'view' },
      subjects: [],
    });
    for (const mode of ['Reference', 'Resource'] as const) {
      const handled = await parentEvent(ClusterRoleBinding, { ...system, apiVersion: RBAC_API, kind: 'ClusterRoleBinding' }, 'add', mode);
      assert.equal(handled.status, 200, `${mode}: ${JSON.stringify(handled.body)}`);
      assert.match(JSON.stringify(handled.body), /concerns nothing composite reconciles/);
    }
    // The hook now answers a binding with a colon (to a role granting nothing).
    answer = () => ({
      children: [
        {
          apiVersion: RBAC_API,
          kind: 'ClusterRoleBinding',
          metadata: { name: 'adv:adv-colon' },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:public-info-viewer' },
          subjects: [],
        },
      ],
    });
    assert.equal((await parentEvent(Gadget, gadget)).status, 200);
    const child = (await kube.get<KubeObject>(ClusterRoleBinding, { namespace: '', name: 'adv:adv-colon' }))!;
    assert.ok(child, 'created');
    assert.equal(
      await kube.get(ClusterRoleBinding, { namespace: '', name: 'eve-admin' }),
      undefined,
      'the binding the hook no longer answers is deleted',
    );
    await kube.delete(ClusterRoleBinding, { namespace: '', name: 'adv:adv-colon' });
    const deleted = await parentEvent(
      ClusterRoleBinding,
      { ...child, apiVersion: RBAC_API, kind: 'ClusterRoleBinding' },
      'delete',
      'Resource',
    );
    assert.equal(deleted.status, 200, JSON.stringify(deleted.body));
    assert.equal(deleted.body.reconciled, 1, JSON.stringify(deleted.body));
    const back = await kube.get<KubeObject>(ClusterRoleBinding, { namespace: '', name: 'adv:adv-colon' });
    assert.ok(back && back.metadata.uid !== child.metadata.uid, 'created again at its delete event');
  });

  after(async () => {
    await kube.delete(CompositeControllerKind, { namespace: '', name: 'adv' });
    await kube.delete(Gadget, { namespace: '', name: 'g1' });
    await kube.delete(ClusterRoleBinding, { namespace: '', name: 'eve-admin' });
  });
});

describe('forged resync pings', () => {
  const count = 10;
  const ping = (id: string) =>
    new CloudEvent<unknown>({ id, type: 'dev.knative.sources.ping', source: '/forged', datacontenttype: 'application/json', data: {} });
  const apiRequests = async () => (await fn.metrics.apiRequests.get()).values.reduce((sum, value) => sum + value.value, 0);

  before(async () => {
    answer = (request) => ({
      children: [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: request.parent.metadata.name }, data: { from: 'doohickey' } }],
    });
    await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name: 'counted' } });
    await kube.create(CompositeControllerKind, controller('counted', Doohickey, [{ apiVersion: 'v1', resource: 'configmaps' }]));
    for (let i = 0; i < count; i++)
      await kube.create(Doohickey, {
        apiVersion: 'counted.example.com/v1',
        kind: 'Doohickey',
        metadata: { name: `d${i}`, namespace: 'counted' },
      });
    // Converged: every child exists, so each resync below does the same work.
    await eventually(
      async () =>
        (await deliver(fn.url, ping('converge'))).status === 200 &&
        (await kube.list(ConfigMap, { namespace: 'counted' })).items.length === count,
      30_000,
      'the children',
    );
    assert.equal((await deliver(fn.url, ping('settle'))).status, 200);
  });

  test('20 concurrent pings cost about one resync: at most two runs, in API requests and hook calls', async () => {
    const requestsBefore = await apiRequests();
    const callsBefore = hookCalls.length;
    assert.equal((await deliver(fn.url, ping('one'))).status, 200);
    const one = { requests: (await apiRequests()) - requestsBefore, calls: hookCalls.length - callsBefore };
    assert.equal(one.calls, count, 'one resync calls the hook once per parent');

    const requestsBeforeBurst = await apiRequests();
    const callsBeforeBurst = hookCalls.length;
    const started = performance.now();
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => deliver(fn.url, ping(`forged-${i}`))));
    const ms = Math.round(performance.now() - started);
    assert.deepEqual([...new Set(answers.map((a) => a.status))], [200]);
    const burst = { requests: (await apiRequests()) - requestsBeforeBurst, calls: hookCalls.length - callsBeforeBurst };
    console.log(
      `# one resync: ${one.requests} API requests, ${one.calls} hook calls; 20 concurrent pings: ${burst.requests} API requests, ${burst.calls} hook calls, ${ms} ms`,
    );
    assert.ok(burst.requests <= 2 * one.requests, `${burst.requests} API requests for 20 pings, ${one.requests} for one`);
    assert.ok(burst.calls <= 2 * one.calls, `${burst.calls} hook calls for 20 pings, ${one.calls} for one`);
    assert.equal(
      answers.filter((a) => /coalesced/.test(JSON.stringify(a.body))).length >= 18,
      true,
      "all but the runs' own deliveries say they shared one",
    );
  });
});
