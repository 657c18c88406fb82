// The identities of a deployment: per function a ServiceAccount bound to exactly the rules its
// declaration implies, and per ApiServerSource a ServiceAccount that may only get, list and watch
// the kinds that source sends (Knative's adapter runs as `spec.serviceAccountName` and needs
// those three verbs; knative/eventing docs/eventing/sources/apiserversource).
//
// In 'cluster' scope the rules go into a ClusterRole and ClusterRoleBinding. In 'namespace' scope
// they go into a Role and RoleBinding in that namespace; rules about cluster-scoped resources
// (Namespaces, say) cannot live in a Role (a Role only grants inside its namespace), so those
// alone go into a ClusterRole with its binding.
import type { FunctionDeclaration, PolicyRule } from '../../functions/runtime/declaration.ts';
import type { KubeObject, ResourceKind } from '../../functions/runtime/kinds.ts';
import { mergeRules, rulesFor } from '../../functions/runtime/rbac.ts';
import type { SourceSpec } from '../source.ts';
import { labels, RBAC_API, type ManifestOptions } from './options.ts';

export const serviceAccountName = (declaration: FunctionDeclaration): string => `opfn-${declaration.name}`;

/** The rules a function's identity holds: declared plus implied (`<parent>/finalizers`, Events…). */
export const functionRules = (declaration: FunctionDeclaration): PolicyRule[] => rulesFor(declaration);

/**
 * get/list/watch on exactly the kinds one source sends. Narrower than sourceRulesFor (every kind
 * of the function): each source has its own ServiceAccount.
 */
export function sourceRules(source: SourceSpec): PolicyRule[] {
  return mergeRules(source.resources.map(({ kind }) => ({ apiGroups: [kind.group], resources: [kind.plural], verbs: ['get', 'list', 'watch'] })));
}

// Built-in cluster-scoped resources a rule may name; kinds a declaration names say so themselves.
const CLUSTER_SCOPED_BUILT_INS = ['/namespaces', '/nodes', '/persistentvolumes', 'rbac.authorization.k8s.io/clusterroles', 'rbac.authorization.k8s.io/clusterrolebindings', 'apiextensions.k8s.io/customresourcedefinitions', 'storage.k8s.io/storageclasses'];

/** `group/plural` of every cluster-scoped resource the declaration knows of. */
export function clusterScopedResources(declaration: FunctionDeclaration): Set<string> {
  const kinds: ResourceKind[] = [declaration.reconciles, ...declaration.owns.map((o) => o.kind), ...declaration.watches.map((w) => w.kind)];
  return new Set([...CLUSTER_SCOPED_BUILT_INS, ...kinds.filter((kind) => !kind.namespaced).map((kind) => `${kind.group}/${kind.plural}`)]);
}

/** Splits rules into those a Role can hold and those about cluster-scoped resources. */
export function splitByScope(rules: PolicyRule[], clusterScoped: Set<string>): { namespaced: PolicyRule[]; cluster: PolicyRule[] } {
  const namespaced: PolicyRule[] = [];
  const cluster: PolicyRule[] = [];
  for (const rule of rules) {
    for (const group of rule.apiGroups) {
      const isCluster = (resource: string) => clusterScoped.has(`${group}/${resource.split('/')[0]}`);
      const inNamespace = rule.resources.filter((resource) => !isCluster(resource));
      const atCluster = rule.resources.filter(isCluster);
      if (inNamespace.length) namespaced.push({ ...rule, apiGroups: [group], resources: inNamespace });
      if (atCluster.length) cluster.push({ ...rule, apiGroups: [group], resources: atCluster });
    }
  }
  return { namespaced, cluster };
}

/** A ServiceAccount and the role(s) and binding(s) granting it `rules`. */
export function identity(name: string, rules: PolicyRule[], clusterScoped: Set<string>, options: Pick<ManifestOptions, 'scope' | 'namespace'>, objectLabels: Record<string, string>): KubeObject[] {
  const { namespace } = options;
  const subjects = [{ kind: 'ServiceAccount', name, namespace }];
  // Cluster-level names are shared by the whole cluster: a namespaced install qualifies them with
  // its namespace, so installs in two namespaces (or one cluster-wide) never take each other's.
  const clusterName = options.scope === 'cluster' ? name : `${namespace}:${name}`;
  const clusterWide = (clusterRules: PolicyRule[]): KubeObject[] => [
    { apiVersion: RBAC_API, kind: 'ClusterRole', metadata: { name: clusterName, labels: objectLabels }, rules: clusterRules },
    { apiVersion: RBAC_API, kind: 'ClusterRoleBinding', metadata: { name: clusterName, labels: objectLabels }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: clusterName }, subjects },
  ];
  const objects: KubeObject[] = [{ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name, namespace, labels: objectLabels } }];
  if (options.scope === 'cluster') return [...objects, ...clusterWide(rules)];
  const split = splitByScope(rules, clusterScoped);
  if (split.namespaced.length) {
    objects.push(
      { apiVersion: RBAC_API, kind: 'Role', metadata: { name, namespace, labels: objectLabels }, rules: split.namespaced },
      { apiVersion: RBAC_API, kind: 'RoleBinding', metadata: { name, namespace, labels: objectLabels }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name }, subjects },
    );
  }
  if (split.cluster.length) objects.push(...clusterWide(split.cluster));
  return objects;
}

/** The function's own identity: what its Knative Service runs as. */
export function functionIdentity(declaration: FunctionDeclaration, options: ManifestOptions): KubeObject[] {
  return identity(serviceAccountName(declaration), functionRules(declaration), clusterScopedResources(declaration), options, labels('function', declaration));
}

/**
 * The RBAC objects of a function in `namespace`, cluster-wide (as the local plane and the tests
 * run it).
 */
export function rbacObjects(declaration: FunctionDeclaration, namespace: string): KubeObject[] {
  return identity(serviceAccountName(declaration), functionRules(declaration), clusterScopedResources(declaration), { scope: 'cluster', namespace }, labels('function', declaration));
}
