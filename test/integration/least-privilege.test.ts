// Least privilege, probed at the API server: for every function of the project, its
// ServiceAccount (bound to exactly the RBAC objects eventing/manifests/rbac.ts generates) may do what its
// declaration grants and nothing else, in any namespace and at cluster scope. The API server
// answers the questions (SelfSubjectAccessReview, asked as the ServiceAccount), and real requests
// confirm the ones that matter most: Secrets, nodes, namespaces, RBAC objects, escalate, bind,
// impersonate. The test fails when a generated role grants more than the declaration, or less.
//
// "The declaration" is the function's `rbac` plus the rules the runtime needs on its behalf,
// restated here as the specification they must keep to (functions/runtime/rbac.ts derives them):
// get, list on the reconciled kind, and watch when it is read from a watch during bursts
// (watchDuringBursts); get on each owned kind; create, patch on core Events; update
// on `<reconciled>/finalizers` when children are owned by reference (blockOwnerDeletion, which the
// OwnerReferencesPermissionEnforcement admission plugin checks); update, patch on the reconciled
// kind when the function declares a finalizer. Nothing else.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, fetch } from 'undici';
import { parse } from 'yaml';
import { rbacObjects } from '../../eventing/manifests/index.ts';
import { loadAllFunctions } from '../../functions/index.ts';
import type { FunctionDeclaration } from '../../functions/runtime/index.ts';
import { startTestCluster, type TestCluster } from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

interface Rule {
  apiGroups?: string[];
  resources?: string[];
  verbs: string[];
  resourceNames?: string[];
}
interface Probe {
  verb: string;
  group: string;
  resource: string;
  subresource?: string;
  namespace: string;
}

const VERBS = ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete', 'deletecollection'];
/** [group, resource, subresource?, namespaced] */
const RESOURCES: [string, string, string | undefined, boolean][] = [
  ['', 'pods', undefined, true],
  ['', 'pods', 'status', true],
  ['', 'pods', 'exec', true],
  ['', 'pods', 'eviction', true],
  ['', 'secrets', undefined, true],
  ['', 'configmaps', undefined, true],
  ['', 'serviceaccounts', undefined, true],
  ['', 'serviceaccounts', 'token', true],
  ['', 'events', undefined, true],
  ['events.k8s.io', 'events', undefined, true],
  ['', 'services', undefined, true],
  ['apps', 'deployments', undefined, true],
  ['rbac.authorization.k8s.io', 'roles', undefined, true],
  ['rbac.authorization.k8s.io', 'rolebindings', undefined, true],
  ['', 'nodes', undefined, false],
  ['', 'namespaces', undefined, false],
  ['', 'persistentvolumes', undefined, false],
  ['rbac.authorization.k8s.io', 'clusterroles', undefined, false],
  ['rbac.authorization.k8s.io', 'clusterrolebindings', undefined, false],
  ['apiextensions.k8s.io', 'customresourcedefinitions', undefined, false],
  ['admissionregistration.k8s.io', 'validatingwebhookconfigurations', undefined, false],
  ['certificates.k8s.io', 'certificatesigningrequests', 'approval', false],
];
/** Namespaces probed for namespaced resources: the function's own, another existing one, and one that does not exist yet. */
const NAMESPACES = ['default', 'kube-system', 'someone-elses'];

/** The rules the declaration implies (see the top of the file). */
function impliedRules(declaration: FunctionDeclaration): Rule[] {
  const { group, plural } = declaration.reconciles;
  const owns = declaration.owns as { kind: { group: string; plural: string }; ownerLabels?: unknown }[];
  const implied: Rule[] = [
    { apiGroups: [group], resources: [plural], verbs: declaration.watchDuringBursts ? ['get', 'list', 'watch'] : ['get', 'list'] },
    { apiGroups: [''], resources: ['events'], verbs: ['create', 'patch'] },
    ...owns.map((owned) => ({ apiGroups: [owned.kind.group], resources: [owned.kind.plural], verbs: ['get'] })),
  ];
  if (owns.some((owned) => !owned.ownerLabels))
    implied.push({ apiGroups: [group], resources: [`${plural}/finalizers`], verbs: ['update'] });
  if ((declaration as { finalizer?: unknown }).finalizer)
    implied.push({ apiGroups: [group], resources: [plural], verbs: ['update', 'patch'] });
  return implied;
}

const matches = (rule: Rule, probe: Probe): boolean => {
  const resource = probe.subresource ? `${probe.resource}/${probe.subresource}` : probe.resource;
  return (
    !rule.resourceNames?.length &&
    (rule.apiGroups ?? []).some((group) => group === '*' || group === probe.group) &&
    (rule.resources ?? []).some(
      (candidate) =>
        candidate === '*' || candidate === resource || (candidate === `${probe.resource}/*` && probe.subresource !== undefined),
    ) &&
    rule.verbs.some((verb) => verb === '*' || verb === probe.verb)
  );
};

/** Every (verb, resource, namespace) of the probe space, plus the declared resources themselves. */
function probesFor(declaration: FunctionDeclaration): Probe[] {
  const resources = [...RESOURCES];
  for (const rule of [...(declaration.rbac as Rule[]), ...impliedRules(declaration)]) {
    for (const group of rule.apiGroups ?? []) {
      for (const full of rule.resources ?? []) {
        const [resource, subresource] = full.split('/');
        const namespaced = !RESOURCES.some(([g, r, , scoped]) => g === group && r === resource && !scoped);
        if (!resources.some(([g, r, s]) => g === group && r === resource && s === subresource))
          resources.push([group, resource, subresource, namespaced]);
      }
    }
  }
  return resources.flatMap(([group, resource, subresource, namespaced]) =>
    (namespaced ? NAMESPACES : ['']).flatMap((namespace) => VERBS.map((verb) => ({ verb, group, resource, subresource, namespace }))),
  );
}

let cluster: TestCluster;
const functions = await loadAllFunctions();
const kubeconfigs = new Map<string, string>();

before(async () => {
  cluster = await startTestCluster();
  for (const declaration of functions) kubeconfigs.set(declaration.name, await kubeconfigWithDeclaredRbac(cluster.cp, declaration));
});

after(async () => {
  await cluster?.stop();
});

/** A raw HTTPS client authenticated as the kubeconfig's user, with any extra headers. */
function clientFor(kubeconfigPath: string) {
  const config = parse(readFileSync(kubeconfigPath, 'utf8'));
  const token = config.users[0].user.token as string;
  const ca = readFileSync(config.clusters[0].cluster['certificate-authority'] as string);
  const dispatcher = new Agent({ connect: { ca } });
  const call = async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const response = await fetch(cluster.cp.server + path, {
      method,
      dispatcher,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  };
  return { call, close: () => dispatcher.close() };
}

/** Probes the API server answers differently from the declaration, as "ALLOWED …" / "DENIED …" lines. */
async function differences(declaration: FunctionDeclaration, probes: Probe[]): Promise<string[]> {
  const as = clientFor(kubeconfigs.get(declaration.name)!);
  const wrong: string[] = [];
  try {
    for (let i = 0; i < probes.length; i += 16) {
      await Promise.all(
        probes.slice(i, i + 16).map(async (probe) => {
          const review = await as.call('POST', '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', {
            apiVersion: 'authorization.k8s.io/v1',
            kind: 'SelfSubjectAccessReview',
            spec: {
              resourceAttributes: {
                verb: probe.verb,
                group: probe.group,
                resource: probe.resource,
                subresource: probe.subresource,
                namespace: probe.namespace || undefined,
              },
            },
          });
          assert.equal(review.status, 201, `SelfSubjectAccessReview answered ${review.status}`);
          const allowed = review.body.status.allowed === true;
          // What the function declares or implies must be allowed; nothing else.
          const expected = [...(declaration.rbac as Rule[]), ...impliedRules(declaration)].some((rule) => matches(rule, probe));
          if (allowed !== expected)
            wrong.push(
              `${allowed ? 'ALLOWED' : 'DENIED'} ${probe.verb} ${probe.group || 'core'}/${probe.resource}${probe.subresource ? `/${probe.subresource}` : ''} ${probe.namespace ? `in ${probe.namespace}` : '(cluster scope)'}`,
            );
        }),
      );
    }
  } finally {
    await as.close();
  }
  return wrong.sort();
}

for (const declaration of functions) {
  describe(`${declaration.name}: its generated role`, () => {
    const declared = [...(declaration.rbac as Rule[]), ...impliedRules(declaration)];

    test('grants nothing beyond the declaration (the ClusterRole, rule by rule)', () => {
      const role = rbacObjects(declaration, 'default').find((object) => object.kind === 'ClusterRole') as unknown as { rules: Rule[] };
      for (const rule of role.rules) {
        for (const group of rule.apiGroups ?? [])
          for (const resource of rule.resources ?? [])
            for (const verb of rule.verbs) {
              const [name, subresource] = resource.split('/');
              assert.ok(
                declared.some((candidate) => matches(candidate, { verb, group, resource: name, subresource, namespace: '' })),
                `the role grants ${verb} ${group || 'core'}/${resource}, which ${declaration.name} does not declare`,
              );
            }
      }
      // No wildcard but one the declaration states itself, word for word (the composite function
      // declares Metacontroller's `*`, see functions/composite/README.md "RBAC: broad by default").
      const wildcards = role.rules.filter((rule) =>
        [...(rule.verbs ?? []), ...(rule.resources ?? []), ...(rule.apiGroups ?? [])].includes('*'),
      );
      for (const rule of wildcards)
        assert.ok(
          (declaration.rbac as Rule[]).some((stated) => JSON.stringify(stated) === JSON.stringify(rule)),
          `wildcard rule ${JSON.stringify(rule)} is not one ${declaration.name} states`,
        );
    });

    test('the API server allows exactly what is declared: every verb × resource × namespace and cluster scope', async () => {
      const probes = probesFor(declaration);
      assert.ok(probes.length >= 400, `probed ${probes.length} combinations`);
      // What the declaration grants must be allowed (everywhere: functions act across namespaces); nothing else may be.
      assert.deepEqual(
        await differences(declaration, probes),
        [],
        `${declaration.name}'s ServiceAccount differs from its declaration (${probes.length} probes)`,
      );
    });

    test('real requests: no Secrets, nodes, namespace writes or RBAC objects; no escalate, bind or impersonate', async () => {
      const as = clientFor(kubeconfigs.get(declaration.name)!);
      const saName = `opfn-${declaration.name}`;
      try {
        const declares = ({
          apiGroups: [group],
          resources: [resource],
          verbs: [verb],
        }: Rule & { apiGroups: [string]; resources: [string]; verbs: [string] }) =>
          declared.some((candidate) => matches(candidate, { verb, group, resource, namespace: '' }));
        const attempts: [
          string,
          Rule & { apiGroups: [string]; resources: [string]; verbs: [string] },
          () => Promise<{ status: number }>,
        ][] = [
          [
            'list Secrets in default',
            { apiGroups: [''], resources: ['secrets'], verbs: ['list'] },
            () => as.call('GET', '/api/v1/namespaces/default/secrets'),
          ],
          [
            'read a ServiceAccount token Secret in kube-system',
            { apiGroups: [''], resources: ['secrets'], verbs: ['list'] },
            () => as.call('GET', '/api/v1/namespaces/kube-system/secrets'),
          ],
          ['list nodes', { apiGroups: [''], resources: ['nodes'], verbs: ['list'] }, () => as.call('GET', '/api/v1/nodes')],
          [
            'create a namespace',
            { apiGroups: [''], resources: ['namespaces'], verbs: ['create'] },
            () => as.call('POST', '/api/v1/namespaces', { metadata: { name: 'made-by-a-function' } }),
          ],
          [
            'delete namespace kube-system',
            { apiGroups: [''], resources: ['namespaces'], verbs: ['delete'] },
            () => as.call('DELETE', '/api/v1/namespaces/kube-system'),
          ],
          [
            'list ClusterRoles',
            { apiGroups: ['rbac.authorization.k8s.io'], resources: ['clusterroles'], verbs: ['list'] },
            () => as.call('GET', '/apis/rbac.authorization.k8s.io/v1/clusterroles'),
          ],
          [
            'widen its own ClusterRole',
            { apiGroups: ['rbac.authorization.k8s.io'], resources: ['clusterroles'], verbs: ['update'] },
            () =>
              as.call('PUT', `/apis/rbac.authorization.k8s.io/v1/clusterroles/${saName}`, {
                metadata: { name: saName },
                rules: [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }],
              }),
          ],
          [
            'bind itself to cluster-admin',
            { apiGroups: ['rbac.authorization.k8s.io'], resources: ['clusterrolebindings'], verbs: ['create'] },
            () =>
              as.call('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
                metadata: { name: 'escalated' },
                roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'cluster-admin' },
                subjects: [{ kind: 'ServiceAccount', name: saName, namespace: 'default' }],
              }),
          ],
          [
            'create a Role granting Secrets',
            { apiGroups: ['rbac.authorization.k8s.io'], resources: ['roles'], verbs: ['create'] },
            () =>
              as.call('POST', '/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles', {
                metadata: { name: 'secrets' },
                rules: [{ apiGroups: [''], resources: ['secrets'], verbs: ['get'] }],
              }),
          ],
          [
            'impersonate the admin',
            { apiGroups: [''], resources: ['users'], verbs: ['impersonate'] },
            () => as.call('GET', '/api/v1/namespaces/default/pods', undefined, { 'impersonate-user': 'admin' }),
          ],
          [
            'impersonate system:masters',
            { apiGroups: [''], resources: ['groups'], verbs: ['impersonate'] },
            () =>
              as.call('GET', '/api/v1/namespaces/default/pods', undefined, {
                'impersonate-user': 'x',
                'impersonate-group': 'system:masters',
              }),
          ],
          [
            'impersonate another ServiceAccount',
            { apiGroups: [''], resources: ['serviceaccounts'], verbs: ['impersonate'] },
            () =>
              as.call('GET', '/api/v1/namespaces/default/pods', undefined, {
                'impersonate-user': 'system:serviceaccount:kube-system:default',
              }),
          ],
          [
            'create a CustomResourceDefinition',
            { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['create'] },
            () => as.call('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', { metadata: { name: 'x.example.com' } }),
          ],
        ];
        for (const [what, rule, attempt] of attempts) {
          if (declares(rule)) continue; // declared by this function: its probe above covers it
          const answer = await attempt();
          assert.equal(answer.status, 403, `${declaration.name} could ${what} (answered ${answer.status})`);
        }
        // escalate and bind are checked by the RBAC authorizer on role writes; ask for them directly too.
        for (const verb of ['escalate', 'bind']) {
          for (const resource of ['clusterroles', 'roles']) {
            const review = await as.call('POST', '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', {
              apiVersion: 'authorization.k8s.io/v1',
              kind: 'SelfSubjectAccessReview',
              spec: {
                resourceAttributes: {
                  verb,
                  group: 'rbac.authorization.k8s.io',
                  resource,
                  namespace: resource === 'roles' ? 'default' : undefined,
                },
              },
            });
            assert.equal(review.body.status.allowed, false, `${declaration.name} may ${verb} ${resource}`);
          }
        }
      } finally {
        await as.close();
      }
    });
  });
}

test('the probe can fail: one extra grant (get Secrets, bound beside the generated role) is reported', async () => {
  const declaration = functions[0];
  const name = 'least-privilege-control';
  const rbac = '/apis/rbac.authorization.k8s.io/v1';
  assert.equal(
    (
      await cluster.cp.request('POST', `${rbac}/clusterroles`, {
        metadata: { name },
        rules: [{ apiGroups: [''], resources: ['secrets'], verbs: ['get'] }],
      })
    ).status,
    201,
  );
  assert.equal(
    (
      await cluster.cp.request('POST', `${rbac}/clusterrolebindings`, {
        metadata: { name },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
        subjects: [{ kind: 'ServiceAccount', name: `opfn-${declaration.name}`, namespace: 'default' }],
      })
    ).status,
    201,
  );
  try {
    const secrets = probesFor(declaration).filter((probe) => probe.resource === 'secrets' && probe.verb === 'get');
    // The authorizer's cache follows RBAC objects within moments.
    let found: string[] = [];
    for (let attempt = 0; attempt < 50 && found.length < NAMESPACES.length; attempt++) {
      found = await differences(declaration, secrets);
      if (found.length < NAMESPACES.length) await sleep(100);
    }
    assert.deepEqual(found, NAMESPACES.map((namespace) => `ALLOWED get core/secrets in ${namespace}`).sort());
  } finally {
    await cluster.cp.request('DELETE', `${rbac}/clusterrolebindings/${name}`);
    await cluster.cp.request('DELETE', `${rbac}/clusterroles/${name}`);
  }
});
