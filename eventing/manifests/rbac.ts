// The identities of a deployment: per function a ServiceAccount bound to exactly the rules its
// declaration implies, and per ApiServerSource a ServiceAccount that may only get, list and watch
// the kinds that source sends (Knative's adapter runs as `spec.serviceAccountName` and needs
// those three verbs; knative/eventing docs/eventing/sources/apiserversource).
//
// The objects of one identity (ServiceAccount, Role/ClusterRole, bindings, and how 'cluster' and
// 'namespace' scope place the rules) are built by `identity` in functions/runtime/knative-objects.ts,
// which the composite function shares for the identities it manages per CompositeController.
import {
  type FunctionDeclaration,
  type PolicyRule,
  type KubeObject,
  clusterScopedOf,
  identity,
  mergeRules,
  rulesFor,
} from '../../functions/runtime/index.ts';
import type { SourceSpec } from '../source/index.ts';
import { labels, type ManifestOptions } from './options.ts';

export { identity, splitByScope } from '../../functions/runtime/index.ts';

export const serviceAccountName = (declaration: FunctionDeclaration): string => `opfn-${declaration.name}`;

/** The rules a function's identity holds: declared plus implied (`<parent>/finalizers`, Events…). */
export const functionRules = (declaration: FunctionDeclaration): PolicyRule[] => rulesFor(declaration);

/**
 * get/list/watch on exactly the kinds one source sends. Narrower than sourceRulesFor (every kind
 * of the function): each source has its own ServiceAccount.
 */
export function sourceRules(source: SourceSpec): PolicyRule[] {
  return mergeRules(
    source.resources.map(({ kind }) => ({ apiGroups: [kind.group], resources: [kind.plural], verbs: ['get', 'list', 'watch'] })),
  );
}

/** `group/plural` of every cluster-scoped resource the declaration knows of. */
export function clusterScopedResources(declaration: FunctionDeclaration): Set<string> {
  return clusterScopedOf([declaration.reconciles, ...declaration.owns.map((o) => o.kind), ...declaration.watches.map((w) => w.kind)]);
}

/** The function's own identity: what its Knative Service runs as. */
export function functionIdentity(declaration: FunctionDeclaration, options: ManifestOptions): KubeObject[] {
  return identity(
    serviceAccountName(declaration),
    functionRules(declaration),
    clusterScopedResources(declaration),
    options,
    labels('function', declaration),
  );
}

/**
 * The RBAC objects of a function in `namespace`, cluster-wide (as the local plane and the tests
 * run it).
 */
export function rbacObjects(declaration: FunctionDeclaration, namespace: string): KubeObject[] {
  return identity(
    serviceAccountName(declaration),
    functionRules(declaration),
    clusterScopedResources(declaration),
    { scope: 'cluster', namespace },
    labels('function', declaration),
  );
}
