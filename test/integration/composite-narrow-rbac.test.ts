// `opfn manifests --composite crds/examples/immortalcontainer-metacontroller.yaml` against a real
// API server: the composite function's ServiceAccount, bound to exactly the generated narrow roles,
// asks the API server what it may do (allowed: what the seed's CompositeController needs; denied:
// Secrets, Deployments, other groups, other names, escalate and bind), then does the real work of
// ensureEventing under that identity (OwnerReferencesPermissionEnforcement on): the event sources
// of the seed's controller are created and a second call writes nothing; a controller that is not
// in the file is refused.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { applyCrds, readManifestFile } from '../../eventing/crds.ts';
import { knativeCrdDir, knativeCrds, standInCrds } from '../../eventing/knative/index.ts';
import { DEFAULT_OPTIONS, functionIdentity, readGivenFile, withInstallRights } from '../../eventing/manifests/index.ts';
import { ensureEventing } from '../../functions/composite/ensure-event-sources.ts';
import composite from '../../functions/composite/index.ts';
import { CompositeControllerKind } from '../../functions/composite/kinds.ts';
import { CoreEvent, Pod, type KubeObject, type ResourceKind, KubeClient } from '../../functions/runtime/index.ts';
import { deliver, eventually, serveFunction, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import { NOT_PERMITTED_REASON } from '../../functions/composite/reconcile.ts';
import { canI, createObjects, type AccessQuestion } from '../support/rbac.ts';

const SEED = new URL('../../crds/examples/immortalcontainer-metacontroller.yaml', import.meta.url).pathname;
const ImmortalContainer: ResourceKind = {
  group: 'immortalcontainers.flugel.it',
  version: 'v1alpha1',
  kind: 'ImmortalContainer',
  plural: 'immortalcontainers',
  namespaced: true,
};
const options = DEFAULT_OPTIONS;
const NS = options.namespace;
const OTHER = 'elsewhere';

let cluster: TestCluster;
let kube: KubeClient;
let writes: string[] = [];

before(async () => {
  cluster = await startTestCluster({ controllerManager: true });
  const dir = await knativeCrdDir();
  await applyCrds(
    cluster.kube,
    (dir ? knativeCrds(dir) : standInCrds()).filter((crd) => (crd.spec as { names: { kind: string } }).names.kind === 'ApiServerSource'),
  );
  await createObjects(
    cluster.cp,
    [NS, OTHER].map((name) => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name } })),
  );
  const narrowed = withInstallRights(composite, options, { given: readGivenFile(SEED, '--composite') });
  await createObjects(cluster.cp, [...functionIdentity(narrowed.declaration, options), ...narrowed.objects]);
  kube = KubeClient.fromFile(await cluster.cp.serviceAccountKubeconfig(NS, 'opfn-composite'), (verb, resource, code) => {
    if (['post', 'put', 'patch', 'delete'].includes(verb)) writes.push(`${verb} ${resource} ${code}`);
  });
});
after(async () => cluster?.stop());

const q = (verb: string, resource: string, namespace: string, extra: Partial<AccessQuestion> = {}): AccessQuestion => {
  const [group, plural, subresource] = resource.split('/') as [string, string, string | undefined];
  return { verb, group, resource: plural, subresource, namespace, ...extra };
};
const line = (question: AccessQuestion) =>
  `${question.verb} ${question.group || 'core'}/${question.resource}${question.subresource ? `/${question.subresource}` : ''}${question.name ? ` "${question.name}"` : ''} ${question.namespace ? `in ${question.namespace}` : '(cluster)'}`;

describe('the composite function under the narrow role of --composite <seed manifest>', () => {
  test("may do what the seed's CompositeController needs", async () => {
    const allowed: AccessQuestion[] = [
      ...['get', 'list', 'watch', 'update', 'patch'].flatMap((verb) => [
        q(verb, 'immortalcontainers.flugel.it/immortalcontainers', 'default'),
        q(verb, 'immortalcontainers.flugel.it/immortalcontainers', OTHER),
      ]),
      q('update', 'immortalcontainers.flugel.it/immortalcontainers/status', 'default'),
      q('update', 'immortalcontainers.flugel.it/immortalcontainers/finalizers', OTHER),
      ...['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'].map((verb) => q(verb, '/pods', OTHER)),
      q('create', '/events', 'default'),
      q('get', 'metacontroller.k8s.io/compositecontrollers', ''),
      q('list', 'metacontroller.k8s.io/compositecontrollers', ''),
      q('create', '/serviceaccounts', NS),
      q('update', '/serviceaccounts', NS, { name: 'opfn-cc-immortalcontainer-controller' }),
      q('create', 'rbac.authorization.k8s.io/clusterroles', ''),
      q('delete', 'rbac.authorization.k8s.io/clusterrolebindings', '', { name: 'opfn-cc-immortalcontainer-controller' }),
      q('create', 'sources.knative.dev/apiserversources', NS),
      q('get', 'sources.knative.dev/apiserversources', NS, { name: 'opfn-cc-immortalcontainer-controller-parents' }),
    ];
    const refused = [];
    for (const question of allowed) if (!(await canI(kube, question))) refused.push(line(question));
    console.log(`# allowed, as expected: ${allowed.length - refused.length} of ${allowed.length}`);
    assert.deepEqual(refused, [], 'questions the narrow role should allow');
  });

  test('may not touch Secrets, Deployments, other groups, other names or namespaces, nor escalate or bind', async () => {
    const denied: AccessQuestion[] = [
      q('get', '/secrets', 'default'),
      q('list', '/secrets', NS),
      q('get', '/configmaps', 'default'),
      q('get', 'apps/deployments', 'default'),
      q('create', 'apps/deployments', NS),
      q('create', 'batch/jobs', 'default'),
      q('get', 'immortalcontainer.flugel.it/immortalcontainers', 'default'),
      q('get', 'example.com/widgets', 'default'),
      q('create', 'immortalcontainers.flugel.it/immortalcontainers', 'default'),
      q('delete', 'immortalcontainers.flugel.it/immortalcontainers', 'default'),
      q('update', 'metacontroller.k8s.io/compositecontrollers', ''),
      q('create', 'metacontroller.k8s.io/compositecontrollers', ''),
      q('create', '/serviceaccounts', OTHER),
      q('get', '/serviceaccounts', NS, { name: 'opfn-composite' }),
      q('update', '/serviceaccounts', NS),
      q('update', 'rbac.authorization.k8s.io/clusterroles', '', { name: 'cluster-admin' }),
      q('get', 'rbac.authorization.k8s.io/clusterroles', '', { name: 'opfn-composite' }),
      q('list', 'rbac.authorization.k8s.io/clusterroles', ''),
      q('create', 'rbac.authorization.k8s.io/roles', NS),
      q('create', 'rbac.authorization.k8s.io/rolebindings', OTHER),
      q('escalate', 'rbac.authorization.k8s.io/clusterroles', ''),
      q('bind', 'rbac.authorization.k8s.io/clusterroles', ''),
      q('escalate', 'rbac.authorization.k8s.io/roles', NS),
      q('delete', 'sources.knative.dev/apiserversources', NS, { name: 'composite-objects' }),
      q('create', 'sources.knative.dev/apiserversources', OTHER),
      q('create', 'eventing.knative.dev/triggers', NS),
      q('get', '/nodes', ''),
      q('delete', '/namespaces', ''),
    ];
    const allowed = [];
    for (const question of denied) if (await canI(kube, question)) allowed.push(line(question));
    console.log(`# denied, as expected: ${denied.length - allowed.length} of ${denied.length}`);
    assert.deepEqual(allowed, [], 'questions the narrow role should deny');
  });

  test("ensureEventing for the seed's controller succeeds under it, and a second call writes nothing", async () => {
    const manifest = readManifestFile(SEED).find((object) => object.kind === 'CompositeController')!;
    const controller = await cluster.kube.create(CompositeControllerKind, manifest);
    writes = [];
    const first = await ensureEventing(controller, { parent: ImmortalContainer, children: [Pod] }, { kube }, options);
    assert.deepEqual(
      first.map((result) => result.operation),
      ['created', 'created', 'created', 'created', 'created'],
    );
    assert.equal(writes.length, 5, writes.join(', '));
    writes = [];
    const second = await ensureEventing(controller, { parent: ImmortalContainer, children: [Pod] }, { kube }, options);
    assert.ok(second.every((result) => result.operation === 'unchanged'));
    assert.deepEqual(writes, []);
  });

  test('a CompositeController that is not in the file is refused (403)', async () => {
    const other: KubeObject = await cluster.kube.create(CompositeControllerKind, {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: 'not-in-the-file' },
      spec: {
        parentResource: { apiVersion: 'immortalcontainers.flugel.it/v1alpha1', resource: 'immortalcontainers' },
        hooks: { sync: { webhook: { url: 'http://x/sync' } } },
      },
    });
    await assert.rejects(ensureEventing(other, { parent: ImmortalContainer, children: [] }, { kube }, options), (error: Error) =>
      /forbidden/i.test(error.message),
    );
  });

  test('the function serving it reports NotPermitted on the controller (Warning Event, what to do) and answers 200: not retried, the resync tries again', async () => {
    const fn = await serveFunction(composite, await cluster.cp.serviceAccountKubeconfig(NS, 'opfn-composite'));
    try {
      const answer = await deliver(
        fn.url,
        apiServerSourceEvent({
          server: cluster.cp.server,
          kind: CompositeControllerKind,
          object: { metadata: { name: 'not-in-the-file' } },
          action: 'add',
          mode: 'Reference',
        }),
      );
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      const events = await eventually(
        async () => {
          const found = (
            await cluster.kube.list<KubeObject & { reason?: string; message?: string; type?: string }>(CoreEvent, {
              namespace: 'default',
              fieldSelector: 'involvedObject.name=not-in-the-file',
            })
          ).items.filter((event) => event.reason === NOT_PERMITTED_REASON);
          return found.length ? found : undefined;
        },
        15_000,
        'the NotPermitted Event',
      );
      assert.equal(events[0]!.type, 'Warning');
      assert.match(
        String(events[0]!.message),
        /^the composite function may not serve CompositeController not-in-the-file: .*forbidden.*regenerate it with this controller in `opfn manifests --composite <file>`, or choose `--composite-broad`$/is,
      );
    } finally {
      await fn.close();
    }
  });
});
