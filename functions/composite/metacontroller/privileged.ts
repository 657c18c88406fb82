// Children that would hand out the function's rights: refused unless the CompositeController
// allows their kind by name.
//
// The composite function may hold broad rights (Metacontroller's `*`, `opfn manifests
// --composite-broad`, the local plane), and whoever controls a hook's plain-HTTP endpoint decides
// its children. A child that grants API rights, changes the API, sees every request or yields a
// ServiceAccount's token turns that into the function's own power for anyone the hook names (the
// API server's escalation check only stops grants beyond what the function holds). So such a
// child is written only when the controller's annotation ALLOW_PRIVILEGED_ANNOTATION names its
// resource; only someone allowed to write CompositeControllers (cluster-scoped: an administrator)
// can set it. Metacontroller has no such check.
//
//   rbac.authorization.k8s.io     roles, clusterroles, rolebindings, clusterrolebindings: grant rights
//   admissionregistration.k8s.io  every resource: webhooks and policies see or change every request
//   apiextensions.k8s.io          customresourcedefinitions: change the API (conversion webhooks too)
//   apiregistration.k8s.io        apiservices: route an API group to a server of their choosing
//   core secrets                  of type kubernetes.io/service-account-token: the token controller
//                                 fills in a ServiceAccount's token
//   pods and the kinds that make  outside the parent's namespace (a cluster-scoped parent's): a pod
//   them (deployments, jobs, …)   runs as any ServiceAccount of its namespace and mounts its Secrets
import { parseApiVersion, type KubeObject, quote } from '../../runtime/index.ts';
import type { CompositeController, ResolvedResource } from './types.ts';

/** `<resource>.<group>` (`<resource>` for the core group) of each privileged kind a controller allows, comma-separated; `*` allows every one. */
export const ALLOW_PRIVILEGED_ANNOTATION = 'operator-functions.dev/allow-privileged-children';
/** The reason of the Warning Event on a parent whose hook answered a privileged child that is not allowed. */
export const PRIVILEGED_CHILD_REASON = 'PrivilegedChildRefused';

const SERVICE_ACCOUNT_TOKEN = 'kubernetes.io/service-account-token';
const PRIVILEGED_GROUPS: ReadonlyMap<string, string> = new Map([['admissionregistration.k8s.io', 'sees or changes every API request']]);
const PRIVILEGED_RESOURCES: ReadonlyMap<string, string> = new Map([
  ['roles.rbac.authorization.k8s.io', 'grants API rights'],
  ['clusterroles.rbac.authorization.k8s.io', 'grants API rights'],
  ['rolebindings.rbac.authorization.k8s.io', 'grants API rights'],
  ['clusterrolebindings.rbac.authorization.k8s.io', 'grants API rights'],
  ['customresourcedefinitions.apiextensions.k8s.io', 'changes the API'],
  ['apiservices.apiregistration.k8s.io', 'routes an API group to a server of its choosing'],
]);
const POD_MAKERS: ReadonlySet<string> = new Set([
  'pods',
  'replicationcontrollers',
  'deployments.apps',
  'replicasets.apps',
  'statefulsets.apps',
  'daemonsets.apps',
  'jobs.batch',
  'cronjobs.batch',
]);

/** `<resource>.<group>`, or `<resource>` for the core group: how kubectl and the annotation name a resource. */
const resourceName = (rule: Pick<ResolvedResource, 'apiVersion' | 'resource'>): string => {
  const { group } = parseApiVersion(rule.apiVersion);
  return group ? `${rule.resource}.${group}` : rule.resource;
};

/** The resources the controller's annotation allows (`*`: all). */
export function allowedPrivileged(controller: CompositeController): ReadonlySet<string> {
  const value = controller.metadata.annotations?.[ALLOW_PRIVILEGED_ANNOTATION] ?? '';
  return new Set(
    value
      .split(',')
      .map((entry) => entry.trim())
      .filter(Boolean),
  );
}

/** What makes this desired child privileged, or undefined when it is not; `parentNamespace` '' for a cluster-scoped parent. */
export function privilegeOf(child: KubeObject, rule: ResolvedResource, parentNamespace: string): string | undefined {
  const resource = resourceName(rule);
  const { group } = parseApiVersion(rule.apiVersion);
  const why = PRIVILEGED_RESOURCES.get(resource) ?? PRIVILEGED_GROUPS.get(group);
  if (why) return why;
  if (resource === 'secrets' && (child as { type?: unknown }).type === SERVICE_ACCOUNT_TOKEN)
    return `is of type ${SERVICE_ACCOUNT_TOKEN}, which yields a ServiceAccount's token`;
  if (POD_MAKERS.has(resource) && child.metadata.namespace !== parentNamespace)
    return "runs pods outside the parent's namespace (as any ServiceAccount there, with its Secrets)";
  return undefined;
}

/** Why this child may not be written for this controller; undefined when it may. */
export function privilegedChildProblem(
  child: KubeObject,
  rule: ResolvedResource,
  parentNamespace: string,
  allowed: ReadonlySet<string>,
  controllerName: string,
): string | undefined {
  const why = privilegeOf(child, rule, parentNamespace);
  const resource = resourceName(rule);
  if (!why || allowed.has('*') || allowed.has(resource)) return undefined;
  return `${rule.kind} ${why}: refused unless CompositeController ${quote(controllerName)} names ${quote(resource)} in its annotation ${ALLOW_PRIVILEGED_ANNOTATION}`;
}
