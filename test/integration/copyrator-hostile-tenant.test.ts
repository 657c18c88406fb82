// Issue 35's attacks on the copyrator, by a tenant ServiceAccount holding exactly what a
// CopyratorRule user would (copyrators create/get/list/watch, ConfigMaps and Secrets in its own
// namespace `attacker`), against a real API server; the function runs under its generated
// identity. Each attack twice: without the ValidatingAdmissionPolicy (the rule is stored, the
// function's own defence must hold) and with it (the rule is refused, naming the missing right).
// Whatever the outcome, nothing in another namespace is read into the tenant's reach or written
// (every ConfigMap and Secret outside `attacker` compared before and after), and the tenant's
// can-i answers are the same before and after. Attack 3 comes through another controller: a
// tenant who may create ExchangeRates in `default` has a ConfigMap written there for her, which
// the seed's sample rule must not copy (an object another controller manages is never a source).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import { CRD_DIR, readManifests } from '../../eventing/crds.ts';
import { admissionObjects, admissionPolicyName, DEFAULT_OPTIONS } from '../../eventing/manifests/index.ts';
import { resyncEvent } from '../../eventing/plane.ts';
import copyrator from '../../functions/copyrator/index.ts';
import {
  ANY_SOURCE_LABEL,
  CONTROLLED_REASON,
  controlledNote,
  controlledWarning,
  CopyratorRuleKind,
  DISTRIBUTE_LABEL,
  RULE_ANNOTATION,
  RULE_NAME_LABEL,
  RULE_NAMESPACE_LABEL,
  SOURCE_ANNOTATION,
  type CopyableObject,
  type CopyratorRule,
} from '../../functions/copyrator/desired.ts';
import { ExchangeRateKind } from '../../functions/exchange-rate/desired.ts';
import {
  type PolicyRule,
  ConfigMap,
  CoreEvent,
  Namespace,
  Secret,
  type KubeObject,
  type ObjectKey,
  type ResourceKind,
  controllerReference,
  ApiError,
  type KubeClient,
} from '../../functions/runtime/index.ts';
import {
  deliver,
  eventually,
  kubeFor,
  serveFunction,
  startTestCluster,
  type RunningFunction,
  type TestCluster,
} from '../support/cluster.ts';
import { canI, createObjects, kubeconfigWithDeclaredRbac, type AccessQuestion } from '../support/rbac.ts';
import { tempDir } from '../support/temp.ts';
import { createTenant, objectChanges, objectsSnapshot } from '../support/tenant.ts';

let cluster: TestCluster;
let kube: KubeClient;
let fn: RunningFunction;
/** The tenant: ServiceAccount attacker/eve. */
let eve: KubeClient;
const EVE = 'system:serviceaccount:attacker:eve';

const VICTIM_SECRET = 'victim-db-password-value';

const tenantDir = tempDir('opfn-copyrator-tenants-');
/** The ServiceAccount `namespace/name` holding `rules` in its own namespace (a Role and RoleBinding), as a client. */
const tenant = async (namespace: string, name: string, rules: PolicyRule[]): Promise<KubeClient> =>
  (await createTenant(kube, cluster.cp.kubeconfigPath, tenantDir, { namespace, name, grants: [{ namespace, rules }] })).kube;

const rule = (
  namespace: string,
  name: string,
  source: string,
  selector: Record<string, string>,
  ruleType: 'configmap' | 'secret',
): CopyratorRule => ({
  apiVersion: 'flant.com/v1',
  kind: 'CopyratorRule',
  metadata: { name, namespace },
  ruleType,
  selector,
  namespace: source,
});

/** Delivers the rule's event as its ApiServerSource would (Reference mode), then a resync; both must be answered 200. */
async function reconcile(key: ObjectKey) {
  const object = { apiVersion: 'flant.com/v1', kind: 'CopyratorRule', metadata: { namespace: key.namespace, name: key.name } };
  for (const event of [
    apiServerSourceEvent({ server: cluster.cp.server, kind: CopyratorRuleKind, object, action: 'update', mode: 'Reference' }),
    resyncEvent(copyrator),
  ]) {
    const answer = await deliver(fn.url, event);
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
  }
}

const ready = async (key: ObjectKey) =>
  (await kube.get<CopyratorRule>(CopyratorRuleKind, key))?.status?.conditions?.find((c) => c.type === 'Ready');

/** Every ConfigMap and Secret outside `attacker`, with the version it is at: nothing may be written there (compare with objectChanges). */
async function outsideAttacker(): Promise<Map<string, string>> {
  const namespaces = (await kube.list(Namespace)).items.map((namespace) => namespace.metadata.name!).filter((name) => name !== 'attacker');
  return objectsSnapshot(kube, namespaces, [ConfigMap, Secret]);
}

/** The ConfigMaps and Secrets in `attacker`: the tenant's reach. */
const inAttacker = async (): Promise<string[]> => [...(await objectsSnapshot(kube, ['attacker'], [ConfigMap, Secret])).keys()].sort();

const EVE_QUESTIONS: AccessQuestion[] = [
  ...['victim', 'kube-system', 'platform'].flatMap((namespace) =>
    ['get', 'list'].map((verb) => ({ verb, group: '', resource: 'secrets', namespace })),
  ),
  ...['victim', 'kube-system', 'platform', ''].map((namespace) => ({ verb: 'create', group: '', resource: 'configmaps', namespace })),
  { verb: 'get', group: '', resource: 'configmaps', namespace: 'victim' },
  { verb: 'create', group: 'flant.com', resource: 'copyrators', namespace: 'victim' },
  { verb: 'update', group: 'flant.com', resource: 'copyrators', namespace: 'attacker' },
  { verb: 'patch', group: '', resource: 'namespaces', namespace: '', name: 'attacker' },
  // What she does hold, so that the matrix is not all "no".
  { verb: 'get', group: '', resource: 'secrets', namespace: 'attacker' },
  { verb: 'create', group: 'flant.com', resource: 'copyrators', namespace: 'attacker' },
];
const EVE_EXPECTED = [false, false, false, false, false, false, false, false, false, false, false, false, false, false, true, true];
const eveCanI = () => Promise.all(EVE_QUESTIONS.map((question) => canI(eve, question)));

async function refusedCreate(client: KubeClient, object: CopyratorRule): Promise<ApiError> {
  const error = await client.create(CopyratorRuleKind, object).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(error instanceof ApiError, `${object.metadata.namespace}/${object.metadata.name} was admitted`);
  return error;
}

before(async () => {
  cluster = await startTestCluster();
  kube = cluster.kube;
  for (const name of ['attacker', 'victim', 'platform', 'team-a', 'ops']) await kube.create(Namespace, { metadata: { name } });
  await kube.create(Secret, { metadata: { name: 'db-password', namespace: 'victim' }, stringData: { password: VICTIM_SECRET } });
  await kube.create(ConfigMap, { metadata: { name: 'victim-settings', namespace: 'victim' }, data: { mode: 'private' } });
  await kube.create(Secret, {
    metadata: { name: 'cloud-credentials', namespace: 'kube-system' },
    stringData: { key: 'kube-system-secret' },
  });
  eve = await tenant('attacker', 'eve', [
    { apiGroups: ['flant.com'], resources: ['copyrators'], verbs: ['create', 'get', 'list', 'watch'] },
    { apiGroups: [''], resources: ['configmaps', 'secrets'], verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'] },
  ]);
  await eve.create(ConfigMap, {
    metadata: { name: 'new-ca', namespace: 'attacker', labels: { 'new-ca': 'true' } },
    data: { 'ca.crt': 'eve' },
  });
  fn = await serveFunction(copyrator, await kubeconfigWithDeclaredRbac(cluster.cp, copyrator));
});

after(async () => {
  await fn?.close();
  await cluster?.stop();
});

describe("without the admission policy: the function's own defence", () => {
  test('attack 1, Secret theft: a rule naming another namespace is Ready=False and copies nothing', async () => {
    const before = await outsideAttacker();
    const answersBefore = await eveCanI();
    assert.deepEqual(answersBefore, EVE_EXPECTED);
    for (const source of ['victim', 'kube-system']) {
      // Stored: nothing stops it without the policy.
      await eve.create(CopyratorRuleKind, rule('attacker', `steal-${source}`, source, {}, 'secret'));
      await reconcile({ namespace: 'attacker', name: `steal-${source}` });
      const condition = await ready({ namespace: 'attacker', name: `steal-${source}` });
      assert.equal(condition?.status, 'False');
      assert.equal(condition?.reason, 'SourceNotOwnNamespace');
      assert.equal(
        condition?.message,
        `a rule copies out of its own namespace (attacker), not ${source}, unless an administrator labels namespace attacker ${ANY_SOURCE_LABEL}=true`,
      );
      const status = (await kube.get<CopyratorRule>(CopyratorRuleKind, { namespace: 'attacker', name: `steal-${source}` }))!.status!;
      assert.deepEqual([status.matched, status.copies], [0, 0]);
    }
    assert.deepEqual(await inAttacker(), ['ConfigMap attacker/new-ca'], 'no Secret reached attacker');
    assert.deepEqual(objectChanges(before, await outsideAttacker()), [], 'nothing written outside attacker');
    assert.deepEqual(await eveCanI(), answersBefore);
    // Where the tenant can read: the rule's status and Events name objects, never data.
    const seen = JSON.stringify([
      (await eve.list(CopyratorRuleKind, { namespace: 'attacker' })).items,
      (await kube.list(CoreEvent, { namespace: 'attacker' })).items,
    ]);
    assert.ok(
      !seen.includes(VICTIM_SECRET) && !seen.includes(Buffer.from(VICTIM_SECRET).toString('base64')) && !seen.includes('db-password'),
    );
    // One Warning Event per rule with the reason, posted once: the resyncs that followed (each
    // reconcile() above ends with one, reconciling every rule) did not post it again.
    const warnings = (
      await kube.list<KubeObject & { reason?: string; type?: string; count?: number; involvedObject?: { name?: string } }>(CoreEvent, {
        namespace: 'attacker',
      })
    ).items.filter((e) => e.reason === 'SourceNotOwnNamespace');
    assert.deepEqual(warnings.map((e) => [e.involvedObject?.name, e.type, e.count]).sort(), [
      ['steal-kube-system', 'Warning', 1],
      ['steal-victim', 'Warning', 1],
    ]);
  });

  test('attack 2, name squatting: a rule of a namespace that does not distribute writes nowhere', async () => {
    const before = await outsideAttacker();
    const answersBefore = await eveCanI();
    await eve.create(CopyratorRuleKind, rule('attacker', 'squat', 'attacker', { 'new-ca': 'true' }, 'configmap'));
    await reconcile({ namespace: 'attacker', name: 'squat' });
    const condition = await ready({ namespace: 'attacker', name: 'squat' });
    assert.deepEqual(
      [condition?.status, condition?.reason, condition?.message],
      [
        'False',
        'SourceNotDistributing',
        `namespace attacker does not distribute: its ConfigMaps and Secrets are copied into other namespaces only once an administrator labels it ${DISTRIBUTE_LABEL}=true`,
      ],
    );
    assert.deepEqual(
      (await kube.list(ConfigMap, { fieldSelector: 'metadata.name=new-ca' })).items.map((cm) => cm.metadata.namespace),
      ['attacker'],
    );
    assert.deepEqual(objectChanges(before, await outsideAttacker()), []);
    assert.deepEqual(await eveCanI(), answersBefore);
    // The platform team's own name is still theirs.
    await kube.create(ConfigMap, { metadata: { name: 'new-ca', namespace: 'platform' }, data: { 'ca.crt': 'platform' } });
    await kube.delete(ConfigMap, { namespace: 'platform', name: 'new-ca' });
  });

  test('copies a rule made before the defence existed are removed by its next reconcile', async () => {
    // What the function used to write for steal-victim: the victim's Secret in attacker and team-a.
    const marks = (namespace: string) => ({
      name: 'db-password',
      namespace,
      labels: { [RULE_NAMESPACE_LABEL]: 'attacker', [RULE_NAME_LABEL]: 'steal-victim' },
      annotations: { [RULE_ANNOTATION]: 'attacker/steal-victim', [SOURCE_ANNOTATION]: 'victim/db-password' },
    });
    for (const namespace of ['attacker', 'team-a'])
      await kube.create(Secret, { metadata: marks(namespace), stringData: { password: VICTIM_SECRET } });
    await reconcile({ namespace: 'attacker', name: 'steal-victim' });
    for (const namespace of ['attacker', 'team-a'])
      assert.equal(await kube.get(Secret, { namespace, name: 'db-password' }), undefined, `the old copy in ${namespace} is gone`);
    assert.ok(await kube.get(Secret, { namespace: 'victim', name: 'db-password' }), "the victim's own Secret is untouched");
  });

  test('the tenant cannot set the labels that would allow more', async () => {
    for (const label of [DISTRIBUTE_LABEL, ANY_SOURCE_LABEL]) {
      const error = await eve
        .mergePatch(Namespace, { namespace: '', name: 'attacker' }, { metadata: { labels: { [label]: 'true' } } })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.equal((error as ApiError | undefined)?.code, 403, label);
    }
  });

  test("what an administrator's labels allow, and taking it back", async () => {
    await kube.create(ConfigMap, {
      metadata: { name: 'platform-ca', namespace: 'platform', labels: { share: 'ca' } },
      data: { 'ca.crt': 'platform' },
    });
    await kube.create(CopyratorRuleKind, rule('platform', 'ca', 'platform', { share: 'ca' }, 'configmap'));
    await kube.create(CopyratorRuleKind, rule('ops', 'ca-from-platform', 'platform', { share: 'ca' }, 'configmap'));
    await kube.create(CopyratorRuleKind, rule('ops', 'ghost', 'ghost', {}, 'configmap'));
    const own = { namespace: 'platform', name: 'ca' };
    const other = { namespace: 'ops', name: 'ca-from-platform' };
    const ghost = { namespace: 'ops', name: 'ghost' };
    await reconcile(own);
    assert.equal((await ready(own))?.reason, 'SourceNotDistributing');

    await kube.mergePatch(Namespace, { namespace: '', name: 'platform' }, { metadata: { labels: { [DISTRIBUTE_LABEL]: 'true' } } });
    await reconcile(own);
    assert.deepEqual([(await ready(own))?.status, (await ready(own))?.reason], ['True', 'CopiesInPlace']);
    assert.deepEqual((await kube.get<CopyableObject>(ConfigMap, { namespace: 'attacker', name: 'platform-ca' }))?.data, {
      'ca.crt': 'platform',
    });
    await reconcile(other);
    assert.equal((await ready(other))?.reason, 'SourceNotOwnNamespace');

    await kube.mergePatch(Namespace, { namespace: '', name: 'ops' }, { metadata: { labels: { [ANY_SOURCE_LABEL]: 'true' } } });
    await reconcile(other);
    await reconcile(ghost);
    assert.equal((await ready(other))?.reason, 'CopyConflicts', "allowed now; its copies meet the platform rule's");
    const ghostReady = await ready(ghost);
    assert.deepEqual(
      [ghostReady?.status, ghostReady?.reason, ghostReady?.message],
      ['False', 'SourceNamespaceNotFound', 'source namespace ghost does not exist'],
    );

    // Taken back: the copies go with it.
    await kube.mergePatch(Namespace, { namespace: '', name: 'platform' }, { metadata: { labels: { [DISTRIBUTE_LABEL]: null } } });
    await reconcile(own);
    assert.equal((await ready(own))?.reason, 'SourceNotDistributing');
    assert.deepEqual(
      (await kube.list(ConfigMap, { fieldSelector: 'metadata.name=platform-ca' })).items.map((cm) => cm.metadata.namespace),
      ['platform'],
    );
    for (const key of [own, other, ghost]) await kube.delete(CopyratorRuleKind, key);
    await kube.delete(ConfigMap, { namespace: 'platform', name: 'platform-ca' });
  });
});

describe('with the admission policy', () => {
  before(async () => {
    for (const key of [
      { namespace: 'attacker', name: 'steal-victim' },
      { namespace: 'attacker', name: 'steal-kube-system' },
      { namespace: 'attacker', name: 'squat' },
    ]) {
      await kube.delete(CopyratorRuleKind, key);
      await reconcile(key);
    }
    await eventually(
      async () => (await kube.list(CopyratorRuleKind, { namespace: 'attacker' })).items.length === 0,
      10_000,
      "the first part's rules to be gone",
    );
    await createObjects(cluster.cp, admissionObjects(copyrator, DEFAULT_OPTIONS));
    // The API server applies a new policy a moment after storing it: wait until a dry run is refused.
    await eventually(
      async () =>
        (
          await cluster.cp.request(
            'POST',
            '/apis/flant.com/v1/namespaces/default/copyrators?dryRun=All',
            rule('default', 'probe', 'default', {}, 'configmap'),
          )
        ).status === 201,
      5000,
      'the admin to be admitted',
    );
    const eveProbe = kubeFor(await cluster.cp.serviceAccountKubeconfig('attacker', 'eve'));
    await eventually(
      async () => {
        const error = await eveProbe
          .request('POST', '/apis/flant.com/v1/namespaces/attacker/copyrators', {
            query: { dryRun: 'All' },
            body: rule('attacker', 'probe', 'attacker', {}, 'configmap'),
          })
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        return error instanceof ApiError && error.code === 403;
      },
      10_000,
      'the policy to refuse the tenant',
    );
  });

  test('attack 1 is refused, naming the first right the tenant lacks and all that a rule needs', async () => {
    const before = await outsideAttacker();
    const answersBefore = await eveCanI();
    for (const source of ['victim', 'kube-system']) {
      const error = await refusedCreate(eve, rule('attacker', `steal-${source}`, source, {}, 'secret'));
      assert.equal(error.code, 403);
      assert.equal(
        error.status?.message,
        `copyrators.flant.com "steal-${source}" is forbidden: ValidatingAdmissionPolicy '${admissionPolicyName(copyrator)}' with binding '${admissionPolicyName(copyrator)}' denied request: ` +
          `CopyratorRule attacker/steal-${source}: ${EVE} may not get secrets in namespace ${source}, and a rule needs that: it has the copyrator get and list secrets in namespace ${source} and create, update and delete them in every namespace`,
      );
      assert.equal(await kube.get(CopyratorRuleKind, { namespace: 'attacker', name: `steal-${source}` }), undefined, 'not stored');
    }
    assert.deepEqual(await inAttacker(), ['ConfigMap attacker/new-ca']);
    assert.deepEqual(objectChanges(before, await outsideAttacker()), []);
    assert.deepEqual(await eveCanI(), answersBefore);
  });

  test('attack 2 is refused: the tenant may read her ConfigMap but not write it everywhere', async () => {
    const before = await outsideAttacker();
    const answersBefore = await eveCanI();
    const error = await refusedCreate(eve, rule('attacker', 'squat', 'attacker', { 'new-ca': 'true' }, 'configmap'));
    assert.equal(error.code, 403);
    assert.match(
      error.message,
      new RegExp(
        `: ${EVE} may not create configmaps in every namespace, and a rule needs that: it has the copyrator get and list configmaps in namespace attacker and create, update and delete them in every namespace$`,
      ),
    );
    assert.deepEqual(
      (await kube.list(ConfigMap, { fieldSelector: 'metadata.name=new-ca' })).items.map((cm) => cm.metadata.namespace),
      ['attacker'],
    );
    assert.deepEqual(objectChanges(before, await outsideAttacker()), []);
    assert.deepEqual(await eveCanI(), answersBefore);
  });

  test('each right is checked: cluster-wide create and update without delete is not enough', async () => {
    await createObjects(cluster.cp, [
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRole',
        metadata: { name: 'almost' },
        rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list', 'create', 'update'] }],
      },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name: 'almost' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'almost' },
        subjects: [{ kind: 'ServiceAccount', name: 'almost', namespace: 'ops' }],
      },
    ]);
    const almost = await tenant('ops', 'almost', [{ apiGroups: ['flant.com'], resources: ['copyrators'], verbs: ['create'] }]);
    const error = await refusedCreate(almost, rule('ops', 'almost', 'ops', {}, 'configmap'));
    assert.match(error.message, /: system:serviceaccount:ops:almost may not delete configmaps in every namespace, and a rule needs that/);
    // With delete too, admitted.
    await cluster.cp.request('PUT', '/apis/rbac.authorization.k8s.io/v1/clusterroles/almost', {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'almost' },
      rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list', 'create', 'update', 'delete'] }],
    });
    await eventually(
      () =>
        almost.create(CopyratorRuleKind, rule('ops', 'almost', 'ops', {}, 'configmap')).then(
          () => true,
          () => false,
        ),
      5000,
      'the rule admitted once delete is granted',
    );
    await kube.delete(CopyratorRuleKind, { namespace: 'ops', name: 'almost' });
  });

  test("the seed's sample, applied by an administrator, is admitted unchanged and converges", async () => {
    await kube.create(ConfigMap, {
      metadata: { name: 'shared-settings', namespace: 'default', labels: { copyrator: 'true' } },
      data: { color: 'blue' },
    });
    const example = readManifests(join(CRD_DIR, 'examples')).find((object) => object.kind === 'CopyratorRule') as CopyratorRule;
    await kube.create(CopyratorRuleKind, example, 'default');
    await reconcile({ namespace: 'default', name: 'main-rule' });
    const condition = await ready({ namespace: 'default', name: 'main-rule' });
    assert.deepEqual([condition?.status, condition?.reason], ['True', 'CopiesInPlace']);
    for (const namespace of ['attacker', 'victim', 'team-a', 'kube-system'])
      assert.deepEqual(
        (await kube.get<CopyableObject>(ConfigMap, { namespace, name: 'shared-settings' }))?.data,
        { color: 'blue' },
        namespace,
      );
    // The function added its finalizer (an update of metadata alone, not checked) and wrote status.
    assert.deepEqual((await kube.get(CopyratorRuleKind, { namespace: 'default', name: 'main-rule' }))?.metadata.finalizers, [
      'copyrator.flant.com/cleanup',
    ]);
  });

  test('a change of metadata alone is not checked; a change of what is copied is', async () => {
    const editor = await tenant('ops', 'editor', [
      { apiGroups: ['flant.com'], resources: ['copyrators'], verbs: ['get', 'update', 'patch'] },
    ]);
    await kube.create(CopyratorRuleKind, rule('ops', 'edited', 'ops', { a: 'b' }, 'configmap'));
    const key = { namespace: 'ops', name: 'edited' };
    await editor.mergePatch(CopyratorRuleKind, key, { metadata: { labels: { team: 'ops' } } });
    for (const patch of [{ namespace: 'victim' }, { selector: { a: 'c' } }, { ruleType: 'secret' }]) {
      const error = await editor.mergePatch(CopyratorRuleKind, key, patch).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(error instanceof ApiError && error.code === 403, JSON.stringify(patch));
      assert.match(
        error.message,
        /: system:serviceaccount:ops:editor may not get (configmaps|secrets) in namespace (ops|victim), and a rule needs that/,
      );
    }
    const stored = (await kube.get<CopyratorRule>(CopyratorRuleKind, key))!;
    assert.deepEqual(
      [stored.namespace, stored.selector, stored.ruleType, stored.metadata.labels],
      ['ops', { a: 'b' }, 'configmap', { team: 'ops' }],
    );
    // The administrator may change it.
    await kube.mergePatch(CopyratorRuleKind, key, { selector: { a: 'c' } });
  });
});

describe('attack 3: another controller writes a selected object into a distributing namespace for a tenant', () => {
  // The seed's sample rule (the test above) copies what is labelled copyrator=true in `default`.
  // An ExchangeRate user (rita: exchangerates in default, no ConfigMap rights anywhere) has the
  // exchange-rate function write a ConfigMap named after her ExchangeRate and labelled as it is;
  // written here by the administrator as that function writes it, with its controller
  // ownerReference to a real ExchangeRate (so the garbage collector keeps it).
  const mainRule = { namespace: 'default', name: 'main-rule' };
  const everywhere = ['attacker', 'victim', 'team-a', 'kube-system'];
  let rita: KubeClient;

  const resourceEvent = async (
    kind: ResourceKind,
    object: KubeObject,
    action: 'add' | 'update',
    mode: 'Resource' | 'Reference' = 'Resource',
  ) => {
    const answer = await deliver(fn.url, apiServerSourceEvent({ server: cluster.cp.server, kind, object, action, mode }));
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    return answer.body;
  };
  const holders = async (kind: ResourceKind, name: string) =>
    (await kube.list(kind, { fieldSelector: `metadata.name=${name}` })).items.map((object) => object.metadata.namespace).sort();
  const warnings = async (namespace: string, name: string) =>
    (
      await kube.list<
        KubeObject & { reason?: string; type?: string; count?: number; message?: string; involvedObject?: { name?: string } }
      >(CoreEvent, { namespace })
    ).items.filter((event) => event.involvedObject?.name === name && event.reason === CONTROLLED_REASON);
  const rateOf = (name: string) => ({
    apiVersion: 'operators.brennerm.github.io/v1',
    kind: 'ExchangeRate',
    metadata: { name, namespace: 'default', labels: { copyrator: 'true' } },
    spec: { currency: 'USD' },
  });
  const ownedBy = (owner: KubeObject) => [controllerReference(owner, ExchangeRateKind)];

  before(async () => {
    rita = await tenant('default', 'rita', [
      {
        apiGroups: ['operators.brennerm.github.io'],
        resources: ['exchangerates'],
        verbs: ['create', 'get', 'list', 'watch', 'update', 'patch', 'delete'],
      },
    ]);
    assert.ok(await kube.get(CopyratorRuleKind, mainRule), "the seed's sample rule is in place");
  });

  test('a labelled ConfigMap in default that an ExchangeRate controls is not copied nor matched, and is warned about once', async () => {
    assert.equal(
      await canI(rita, { verb: 'create', group: '', resource: 'configmaps', namespace: 'default' }),
      false,
      'rita may not write ConfigMaps in default',
    );
    const matchedBefore = (await kube.get<CopyratorRule>(CopyratorRuleKind, mainRule))!.status!.matched;
    const rate = await rita.create(ExchangeRateKind, rateOf('squatted-name'));
    const written = await kube.create(ConfigMap, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { ...rateOf('squatted-name').metadata, ownerReferences: ownedBy(rate) },
      data: { rate: '1.05' },
    });
    // Its add event wakes the rule that selects it (for the report); the rule copies nothing.
    assert.equal((await resourceEvent(ConfigMap, written, 'add')).reconciled, 1);
    assert.deepEqual(await holders(ConfigMap, 'squatted-name'), ['default']);
    const status = (await kube.get<CopyratorRule>(CopyratorRuleKind, mainRule))!.status!;
    assert.equal(status.matched, matchedBefore, 'not counted as matched');
    const condition = status.conditions!.find((c) => c.type === 'Ready')!;
    assert.deepEqual([condition.status, condition.reason], ['True', 'CopiesInPlace']);
    assert.ok(condition.message.endsWith(`; ${controlledNote(1)}`), condition.message);
    const [warning] = await eventually(
      async () => {
        const found = await warnings('default', 'main-rule');
        return found.length ? found : undefined;
      },
      10_000,
      `a ${CONTROLLED_REASON} Warning on main-rule`,
    );
    assert.equal(warning!.type, 'Warning');
    assert.equal(
      warning!.message,
      controlledWarning([{ namespace: 'default', name: 'squatted-name', controller: 'ExchangeRate/squatted-name' }]),
    );
    // Every namespace holds the rule's other copies still; a resync changes nothing and warns no more.
    await reconcile(mainRule);
    assert.deepEqual(await holders(ConfigMap, 'squatted-name'), ['default']);
    assert.ok(await kube.get(ConfigMap, { namespace: 'victim', name: 'shared-settings' }), 'the rule still copies its sources');
    assert.deepEqual(
      (await warnings('default', 'main-rule')).map((event) => event.count),
      [1],
      'warned once',
    );
  });

  test('a source that gets a controller loses its copies at its update event; one that loses it is copied again', async () => {
    const owner = await rita.create(ExchangeRateKind, rateOf('settings-owner'));
    for (const namespace of everywhere)
      assert.ok((await holders(ConfigMap, 'shared-settings')).includes(namespace), `copied into ${namespace} before`);
    const controlled = await kube.mergePatch<CopyableObject>(
      ConfigMap,
      { namespace: 'default', name: 'shared-settings' },
      { metadata: { ownerReferences: ownedBy(owner) } },
    );
    assert.equal((await resourceEvent(ConfigMap, controlled, 'update')).reconciled, 1);
    assert.deepEqual(await holders(ConfigMap, 'shared-settings'), ['default'], 'every copy removed');
    const status = (await kube.get<CopyratorRule>(CopyratorRuleKind, mainRule))!.status!;
    assert.deepEqual([status.matched, status.copies], [0, 0]);
    assert.ok(status.conditions!.find((c) => c.type === 'Ready')!.message.endsWith(`; ${controlledNote(2)}`));

    const released = await kube.mergePatch<CopyableObject>(
      ConfigMap,
      { namespace: 'default', name: 'shared-settings' },
      { metadata: { ownerReferences: null } },
    );
    assert.equal(released.metadata.ownerReferences, undefined);
    assert.equal((await resourceEvent(ConfigMap, released, 'update')).reconciled, 1);
    for (const namespace of everywhere)
      assert.deepEqual(
        (await kube.get<CopyableObject>(ConfigMap, { namespace, name: 'shared-settings' }))?.data,
        { color: 'blue' },
        namespace,
      );
    assert.equal((await kube.get<CopyratorRule>(CopyratorRuleKind, mainRule))!.status!.matched, 1);
  });

  test('an event body decides nothing: one without the controller copies nothing; one with it removes no copy', async () => {
    const squatted = (await kube.get<CopyableObject>(ConfigMap, { namespace: 'default', name: 'squatted-name' }))!;
    await resourceEvent(ConfigMap, { ...squatted, metadata: { ...squatted.metadata, ownerReferences: undefined } }, 'update');
    assert.deepEqual(await holders(ConfigMap, 'squatted-name'), ['default'], 'still not copied');
    const source = (await kube.get<CopyableObject>(ConfigMap, { namespace: 'default', name: 'shared-settings' }))!;
    const copy = (await kube.get<CopyableObject>(ConfigMap, { namespace: 'victim', name: 'shared-settings' }))!;
    const owner = (await kube.get(ExchangeRateKind, { namespace: 'default', name: 'settings-owner' }))!;
    await resourceEvent(ConfigMap, { ...source, metadata: { ...source.metadata, ownerReferences: ownedBy(owner) } }, 'update');
    const after = (await kube.get<CopyableObject>(ConfigMap, { namespace: 'victim', name: 'shared-settings' }))!;
    assert.deepEqual(
      [after.metadata.uid, after.metadata.resourceVersion],
      [copy.metadata.uid, copy.metadata.resourceVersion],
      'the copy untouched',
    );
  });

  test('Secrets too (Reference mode: the mapper reads them): a controlled one is not copied until it loses its controller', async () => {
    const key = { namespace: 'default', name: 'share-secrets' };
    await kube.create(CopyratorRuleKind, rule('default', 'share-secrets', 'default', { share: 'secret' }, 'secret'));
    await reconcile(key);
    const owner = await rita.create(ExchangeRateKind, rateOf('secret-owner'));
    const secret = await kube.create(Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'controlled-secret', namespace: 'default', labels: { share: 'secret' }, ownerReferences: ownedBy(owner) },
      stringData: { token: 'x' },
    });
    const reference = { apiVersion: 'v1', kind: 'Secret', metadata: { namespace: 'default', name: 'controlled-secret' } };
    assert.equal((await resourceEvent(Secret, reference, 'add', 'Reference')).reconciled, 1);
    assert.deepEqual(await holders(Secret, 'controlled-secret'), ['default']);
    assert.equal((await kube.get<CopyratorRule>(CopyratorRuleKind, key))!.status!.matched, 0);
    await kube.mergePatch(Secret, { namespace: 'default', name: secret.metadata.name! }, { metadata: { ownerReferences: null } });
    assert.equal((await resourceEvent(Secret, reference, 'update', 'Reference')).reconciled, 1);
    for (const namespace of everywhere) assert.ok(await kube.get(Secret, { namespace, name: 'controlled-secret' }), namespace);
    await kube.mergePatch(Secret, { namespace: 'default', name: 'controlled-secret' }, { metadata: { ownerReferences: ownedBy(owner) } });
    assert.equal((await resourceEvent(Secret, reference, 'update', 'Reference')).reconciled, 1);
    assert.deepEqual(await holders(Secret, 'controlled-secret'), ['default'], 'its copies removed again');
    await kube.delete(CopyratorRuleKind, key);
    await reconcile(key);
  });
});
