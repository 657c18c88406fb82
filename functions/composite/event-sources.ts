// The event sources of one CompositeController on Knative, as objects this function manages:
// what makes changes of the controller's parent and child kinds (known only at run time) reach
// the `composite` function. Per controller:
//
//   ServiceAccount + ClusterRole + ClusterRoleBinding   get, list, watch on exactly the parent and
//                                                      child resources (Knative's adapter runs as
//                                                      `spec.serviceAccountName` and needs those
//                                                      three verbs); in 'namespace' scope a Role +
//                                                      RoleBinding, and a ClusterRole only for
//                                                      cluster-scoped kinds (identity(), shared
//                                                      with `opfn manifests`)
//   ApiServerSource `…-parents`                        the parent kind, Resource mode (the runtime
//                                                      can skip a status-only update by its body)
//   ApiServerSource `…-children`                       the child kinds; Reference mode when one of
//                                                      them is Secrets (Secret contents never travel
//                                                      through the event plane), else Resource
//
// Both sources tag every event with `opfnfunction: composite` (as the generated sources of the
// static functions do, eventing/manifests/wiring.ts), so the function's one generated Trigger
// (filter on that extension) delivers them: no Trigger per controller. They also carry
// `opfncontroller: <name>`, a hint the routing may use, never trust.
//
// Every object carries a controller ownerReference to the CompositeController (a cluster-scoped
// owner may own namespaced objects), so deleting the controller deletes them through the garbage
// collector; no blockOwnerDeletion (nothing has to wait for them, and setting it would need
// `update` on compositecontrollers/finalizers). A label names the controller.
//
// How they are kept in place on the cluster: ensure-event-sources.ts.
import { createHash } from 'node:crypto';
import {
  FUNCTION_EXTENSION,
  apiVersionOf,
  isValidNamespace,
  type KubeObject,
  type OwnerReference,
  type ResourceKind,
  apiServerSourceObject,
  clusterRoleName,
  clusterScopedOf,
  identity,
  INSTALL_CONFIG,
  objectLabels,
  RBAC_API,
  SOURCES_API,
  sourceResource,
  type Placement,
  watchableBySource,
  ownerLabelValue,
  mergeRules,
} from '../runtime/index.ts';
import { CompositeControllerKind } from './kinds.ts';
export const COMPOSITE_FUNCTION = 'composite';
/** Label naming the CompositeController an object serves (the name, or its hash form past 63 characters). */
export const CONTROLLER_LABEL = 'operator-functions.dev/composite-controller';
/** CloudEvent extension naming the CompositeController whose source sent the event. */
export const CONTROLLER_EXTENSION = 'opfncontroller';

/**
 * Who runs each controller's sources: "managed", this function writes them (Knative, or the local
 * plane's own control plane, whose controllers run what is written); "plane", the local plane
 * derives the same objects itself (held in memory, never written to a configured cluster).
 */
export const EVENT_SOURCES_CONFIG = 'COMPOSITE_EVENT_SOURCES';

export interface ControllerKinds {
  parent: ResourceKind;
  children: ResourceKind[];
}

export interface EventingOptions extends Placement {
  brokerName: string;
}

/** Where the sources go, from the function's configuration (INSTALL_CONFIG); the reason when it is unusable. */
export function eventingOptionsFrom(config: Readonly<Record<string, string>>): EventingOptions | string {
  const namespace = config[INSTALL_CONFIG.namespace] ?? '';
  const brokerName = config[INSTALL_CONFIG.brokerName] ?? '';
  const scope = config[INSTALL_CONFIG.scope] ?? '';
  if (!isValidNamespace(namespace)) return `${INSTALL_CONFIG.namespace} "${namespace}" is not a namespace name`;
  if (!isValidNamespace(brokerName)) return `${INSTALL_CONFIG.brokerName} "${brokerName}" is not a Broker name`;
  if (scope !== 'cluster' && scope !== 'namespace') return `${INSTALL_CONFIG.scope} "${scope}" is neither "cluster" nor "namespace"`;
  return { namespace, brokerName, scope };
}

const HASH_CHARS = 10;

/**
 * `<prefix><name><suffix>` when it is at most `max` characters (and, for a DNS-1123 label, has no
 * dot); otherwise the name cut short (dots turned into '-' for a label) and followed by a hash of
 * the whole name, so two controllers never share an object.
 */
export function boundedName(prefix: string, name: string, suffix: string, max: number, label: boolean): string {
  const plain = `${prefix}${name}${suffix}`;
  if (plain.length <= max && !(label && name.includes('.'))) return plain;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, HASH_CHARS);
  const room = max - prefix.length - suffix.length - HASH_CHARS - 1;
  const head = (label ? name.replaceAll('.', '-') : name).slice(0, room).replace(/[-.]+$/, '');
  return `${prefix}${head}-${hash}${suffix}`;
}

const SOURCE_NAME_MAX = 63;
// A ServiceAccount name is a DNS subdomain (253); in 'namespace' scope its ClusterRole is called
// `<namespace>:<name>`, so leave room for a namespace (63) and the colon.
const IDENTITY_NAME_MAX = 253 - 64;

/** How the name of every object made per CompositeController begins. */
export const MANAGED_NAME_PREFIX = 'opfn-cc-';
export const identityName = (controllerName: string): string =>
  boundedName(MANAGED_NAME_PREFIX, controllerName, '', IDENTITY_NAME_MAX, false);
export const sourceName = (controllerName: string, role: 'parents' | 'children'): string =>
  boundedName(MANAGED_NAME_PREFIX, controllerName, `-${role}`, SOURCE_NAME_MAX, true);

const isSecret = (kind: ResourceKind) => kind.group === '' && kind.kind === 'Secret';
const sameKind = (a: ResourceKind, b: ResourceKind) => a.group === b.group && a.version === b.version && a.kind === b.kind;

/** The controller reference every managed object carries. */
export function controllerReference(controller: KubeObject): OwnerReference {
  const { name, uid } = controller.metadata;
  if (!name || !uid) throw new Error('a CompositeController without metadata.name or metadata.uid cannot own objects');
  return { apiVersion: apiVersionOf(CompositeControllerKind), kind: CompositeControllerKind.kind, name, uid, controller: true };
}

/** The objects that make the changes of `kinds` reach the composite function, in apply order. */
export function eventingObjectsFor(controller: KubeObject, kinds: ControllerKinds, options: EventingOptions): KubeObject[] {
  const owner = controllerReference(controller);
  const labels = { ...objectLabels('source', COMPOSITE_FUNCTION), [CONTROLLER_LABEL]: ownerLabelValue(owner.name) };
  const children = kinds.children.filter((kind, index) => kinds.children.findIndex((other) => sameKind(kind, other)) === index);
  const all = [kinds.parent, ...children];
  const rules = mergeRules(all.map((kind) => ({ apiGroups: [kind.group], resources: [kind.plural], verbs: ['get', 'list', 'watch'] })));
  const account = identityName(owner.name);
  const extensions = { [FUNCTION_EXTENSION]: COMPOSITE_FUNCTION, [CONTROLLER_EXTENSION]: ownerLabelValue(owner.name) };
  const source = (role: 'parents' | 'children', sent: ResourceKind[]) =>
    apiServerSourceObject(
      {
        name: sourceName(owner.name, role),
        labels,
        mode: sent.some(isSecret) ? 'Reference' : 'Resource',
        resources: sent.map(sourceResource),
        serviceAccountName: account,
        extensions,
      },
      options,
    );
  // A kind no ApiServerSource can watch would keep its source from ever becoming Ready: left
  // out (the function reports it; its parents are synced by the resync).
  const watchedChildren = children.filter(watchableBySource);
  const objects = [
    ...identity(account, rules, clusterScopedOf(all), options, labels),
    ...(watchableBySource(kinds.parent) ? [source('parents', [kinds.parent])] : []),
    ...(watchedChildren.length ? [source('children', watchedChildren)] : []),
  ];
  return objects.map((object) => ({ ...object, metadata: { ...object.metadata, ownerReferences: [owner] } }));
}

const kind = (group: string, name: string, plural: string, namespaced: boolean): ResourceKind => ({
  group,
  version: 'v1',
  kind: name,
  plural,
  namespaced,
});
const RBAC_GROUP = RBAC_API.split('/')[0]!;
const ServiceAccountKind = kind('', 'ServiceAccount', 'serviceaccounts', true);
const ClusterRoleKind = kind(RBAC_GROUP, 'ClusterRole', 'clusterroles', false);
const ClusterRoleBindingKind = kind(RBAC_GROUP, 'ClusterRoleBinding', 'clusterrolebindings', false);
const RoleKind = kind(RBAC_GROUP, 'Role', 'roles', true);
const RoleBindingKind = kind(RBAC_GROUP, 'RoleBinding', 'rolebindings', true);
const ApiServerSourceKind = kind(SOURCES_API.split('/')[0]!, 'ApiServerSource', 'apiserversources', true);
const MANAGED_KINDS = [ServiceAccountKind, ClusterRoleKind, ClusterRoleBindingKind, RoleKind, RoleBindingKind, ApiServerSourceKind];

export const managedKindOf = (object: KubeObject): ResourceKind => {
  const found = MANAGED_KINDS.find((candidate) => apiVersionOf(candidate) === object.apiVersion && candidate.kind === object.kind);
  if (!found) throw new Error(`${object.apiVersion} ${object.kind} is not a kind ensureEventing manages`);
  return found;
};

/**
 * Every object a controller may have under these options, whether or not it needs it now: what
 * ensureEventing may read, write and delete for it (`opfn manifests --composite` grants exactly these names).
 */
export function managedObjectKeys(
  controllerName: string,
  options: EventingOptions,
): { kind: ResourceKind; namespace: string; name: string }[] {
  const account = identityName(controllerName);
  const clusterName = clusterRoleName(account, options);
  const { namespace } = options;
  return [
    { kind: ServiceAccountKind, namespace, name: account },
    { kind: ClusterRoleKind, namespace: '', name: clusterName },
    { kind: ClusterRoleBindingKind, namespace: '', name: clusterName },
    ...(options.scope === 'namespace'
      ? [
          { kind: RoleKind, namespace, name: account },
          { kind: RoleBindingKind, namespace, name: account },
        ]
      : []),
    { kind: ApiServerSourceKind, namespace, name: sourceName(controllerName, 'parents') },
    { kind: ApiServerSourceKind, namespace, name: sourceName(controllerName, 'children') },
  ];
}
