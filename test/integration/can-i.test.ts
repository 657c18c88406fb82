// RBAC proof: every ServiceAccount `opfn manifests` generates (each function's, each source's)
// is created with its roles in a real API server, a token for it is taken from the API server
// (from the TokenRequest API, as a projected token is), and
// that token asks SelfSubjectAccessReview about every verb on every resource the plane and the
// functions use, plus a sample of what they must never do (Secrets, nodes, RBAC objects,
// escalate / bind / impersonate, other namespaces). Each answer must equal what the declaration
// implies; the matrix is printed.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { parse } from 'yaml';
import { startControlPlane, type ControlPlane } from '../../cluster/index.ts';
import { manifestOptions } from '../../bin/manifests.ts';
import {
  clusterScopedResources,
  functionObjects,
  functionRules,
  type ManifestOptions,
  serviceAccountName,
  sourceRules,
  sourceServiceAccountName,
  splitByScope,
} from '../../eventing/manifests/index.ts';
import { sourcesFor } from '../../eventing/plane.ts';
import { loadAllFunctions } from '../../functions/index.ts';
import { type FunctionDeclaration, type PolicyRule, type KubeObject, KubeClient } from '../../functions/runtime/index.ts';
import { canI, createObjects, type AccessQuestion } from '../support/rbac.ts';

const functions = await loadAllFunctions();
const VERBS = ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'];
const OTHER_NAMESPACE = 'elsewhere';

type Cell = AccessQuestion;

/** `group/resource[/subresource]` the matrix asks about for a declaration: all it names, and a sample outside. */
function resourcesToProbe(declaration: FunctionDeclaration): string[] {
  const named = [declaration.reconciles, ...declaration.owns.map((o) => o.kind), ...declaration.watches.map((w) => w.kind)].map(
    (k) => `${k.group}/${k.plural}`,
  );
  const fromRules = functionRules(declaration).flatMap((rule) =>
    rule.apiGroups.flatMap((group) => rule.resources.map((resource) => `${group}/${resource}`)),
  );
  const outside = [
    '/secrets',
    '/configmaps',
    '/serviceaccounts',
    '/nodes',
    '/namespaces',
    'rbac.authorization.k8s.io/clusterroles',
    'rbac.authorization.k8s.io/rolebindings',
    'apps/deployments',
    'serving.knative.dev/services',
    'eventing.knative.dev/triggers',
  ];
  return [...new Set([...named, ...named.map((r) => `${r}/status`), ...fromRules, ...outside])].sort();
}

/** What `rules` allow, by RBAC's own matching (verb, group, resource incl. subresource; no resourceNames here). */
function allows(rules: PolicyRule[], cell: Cell): boolean {
  const resource = cell.subresource ? `${cell.resource}/${cell.subresource}` : cell.resource;
  return rules.some(
    (rule) =>
      !rule.resourceNames?.length &&
      (rule.apiGroups.includes('*') || rule.apiGroups.includes(cell.group)) &&
      (rule.resources.includes('*') || rule.resources.includes(resource)) &&
      (rule.verbs.includes('*') || rule.verbs.includes(cell.verb)),
  );
}

/**
 * What the declaration implies for one identity, in the layout's scope. In 'namespace' scope the
 * promise is "nothing outside the namespace": a Role grants only inside it, so a wildcard rule
 * (`*` resources, as the composite function's) covers the namespace's resources only; a
 * cluster-scoped resource is allowed only when a rule names it (splitByScope puts those rules
 * alone into a ClusterRole).
 */
function expected(rules: PolicyRule[], clusterScoped: Set<string>, options: ManifestOptions, cell: Cell): boolean {
  if (options.scope === 'cluster') return allows(rules, cell);
  const isCluster = cell.namespace === '';
  const split = splitByScope(rules, clusterScoped);
  return isCluster ? allows(split.cluster, cell) : cell.namespace === options.namespace && allows(split.namespaced, cell);
}

function cellsFor(resources: string[], namespaces: string[], clusterScoped: Set<string>): Cell[] {
  const cells: Cell[] = [];
  for (const entry of resources) {
    const [group, resource, subresource] = entry.split('/');
    const isCluster = clusterScoped.has(`${group}/${resource}`);
    for (const namespace of isCluster ? [''] : namespaces) {
      for (const verb of VERBS) cells.push({ verb, group, resource, subresource, namespace });
    }
  }
  // Privilege escalation paths, asked separately.
  for (const namespace of namespaces) {
    cells.push({ verb: 'escalate', group: 'rbac.authorization.k8s.io', resource: 'roles', namespace });
    cells.push({ verb: 'bind', group: 'rbac.authorization.k8s.io', resource: 'rolebindings', namespace });
    cells.push({ verb: 'impersonate', group: '', resource: 'serviceaccounts', namespace });
  }
  cells.push({ verb: 'escalate', group: 'rbac.authorization.k8s.io', resource: 'clusterroles', namespace: '' });
  cells.push({ verb: 'bind', group: 'rbac.authorization.k8s.io', resource: 'clusterroles', namespace: '' });
  cells.push({ verb: 'impersonate', group: '', resource: 'users', namespace: '' });
  return cells;
}

/** One line per resource: the verbs allowed in each namespace ("·" none). */
function matrix(title: string, cells: (Cell & { allowed: boolean })[]): string {
  const rows = new Map<string, Map<string, string[]>>();
  for (const cell of cells) {
    const row = `${cell.group || 'core'}/${cell.resource}${cell.subresource ? `/${cell.subresource}` : ''}`;
    const byNamespace = rows.get(row) ?? new Map<string, string[]>();
    const list = byNamespace.get(cell.namespace || '(cluster)') ?? [];
    if (cell.allowed) list.push(cell.verb);
    byNamespace.set(cell.namespace || '(cluster)', list);
    rows.set(row, byNamespace);
  }
  const width = Math.max(...[...rows.keys()].map((row) => row.length));
  return [
    `# can-i ${title} (asked: ${VERBS.join(' ')} on each row; escalate on roles and clusterroles, bind on rolebindings and clusterroles, impersonate on serviceaccounts and users; listed: what is allowed, · nothing)`,
    ...[...rows].map(
      ([row, byNamespace]) =>
        `#   ${row.padEnd(width)}  ${[...byNamespace].map(([ns, verbs]) => `${ns}: ${verbs.length ? verbs.join(',') : '·'}`).join('   ')}`,
    ),
  ].join('\n');
}

let cp: ControlPlane;
before(async () => {
  cp = await startControlPlane();
});
after(async () => cp?.stop());

const apply = (objects: KubeObject[]) => createObjects(cp, objects);

async function clientFor(namespace: string, name: string): Promise<KubeClient> {
  const kubeconfig = await cp.serviceAccountKubeconfig(namespace, name);
  const token = parse(readFileSync(kubeconfig, 'utf8')).users[0].user.token as string;
  assert.ok(token.split('.').length === 3, 'a ServiceAccount JWT issued by the API server');
  return KubeClient.fromFile(kubeconfig);
}

const layouts: [string, Parameters<typeof manifestOptions>[0]][] = [
  ['cluster scope', { target: 'knative' }],
  ['--namespace team-a', { target: 'knative', namespace: 'team-a' }],
];

for (const [layout, command] of layouts) {
  describe(`every generated identity can do exactly what its declaration implies (${layout})`, () => {
    for (const declaration of functions) {
      const options = manifestOptions(command, functions);
      const clusterScoped = clusterScopedResources(declaration);
      const namespaces = [options.namespace, OTHER_NAMESPACE];
      const identities = [
        {
          who: `function ${declaration.name}`,
          account: serviceAccountName(declaration),
          rules: functionRules(declaration),
          resources: resourcesToProbe(declaration),
        },
        ...sourcesFor(declaration).map((source) => ({
          who: `source ${source.name}`,
          account: sourceServiceAccountName(source.name),
          rules: sourceRules(source),
          resources: resourcesToProbe(declaration),
        })),
      ];
      for (const identity of identities) {
        test(`${identity.who} (ServiceAccount ${options.namespace}/${identity.account})`, async () => {
          for (const namespace of namespaces) await apply([{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } }]);
          await apply(
            functionObjects(declaration, options).filter((o) =>
              ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding'].includes(o.kind!),
            ),
          );
          const kube = await clientFor(options.namespace, identity.account);
          const cells = cellsFor(identity.resources, namespaces, clusterScoped);
          const answered = [];
          for (const cell of cells) answered.push({ ...cell, allowed: await canI(kube, cell) });
          console.log(matrix(`${identity.who} as system:serviceaccount:${options.namespace}:${identity.account}`, answered));
          const wrong = answered.filter((cell) => cell.allowed !== expected(identity.rules, clusterScoped, options, cell));
          assert.deepEqual(
            wrong.map(
              (c) =>
                `${c.allowed ? 'ALLOWED' : 'denied'}: ${c.verb} ${c.group}/${c.resource}${c.subresource ? `/${c.subresource}` : ''} in ${c.namespace || '(cluster)'}`,
            ),
            [],
            'cells that differ from the declaration',
          );
          assert.ok(
            answered.some((c) => c.allowed),
            'the identity can do something (its bindings took effect)',
          );
          if (options.scope === 'namespace')
            assert.deepEqual(
              answered.filter((c) => c.allowed && c.namespace === OTHER_NAMESPACE).map((c) => `${c.verb} ${c.group}/${c.resource}`),
              [],
              'a namespaced install grants nothing in another namespace, wildcards included',
            );
        });
      }
    }
  });
}
