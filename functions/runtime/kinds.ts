// What the runtime needs to know about a Kubernetes resource type to address it without
// a discovery round trip: every function declares its kinds fully, so no API call is
// ever spent finding out a plural or whether a kind is namespaced.

export interface ResourceKind {
  /** API group; "" for the core group. */
  group: string;
  version: string;
  kind: string;
  /** Lower-case plural used in URLs, e.g. "pods". */
  plural: string;
  namespaced: boolean;
}

/** Namespace "" stands for a cluster-scoped object. */
export interface ObjectKey {
  namespace: string;
  name: string;
}

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
  finalizers?: string[];
}

/** Any Kubernetes object; functions narrow `spec`/`status` with their own types. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

export const apiVersionOf = (kind: ResourceKind): string =>
  kind.group ? `${kind.group}/${kind.version}` : kind.version;

export const keyString = (key: ObjectKey): string =>
  key.namespace ? `${key.namespace}/${key.name}` : key.name;

export const keyOf = (object: KubeObject): ObjectKey => ({
  namespace: object.metadata.namespace ?? '',
  name: object.metadata.name ?? '',
});

/** Collection URL path, across all namespaces when `namespace` is omitted. */
export function collectionPath(kind: ResourceKind, namespace?: string): string {
  const root = kind.group ? `/apis/${kind.group}/${kind.version}` : `/api/${kind.version}`;
  const scope = kind.namespaced && namespace ? `/namespaces/${encodeURIComponent(namespace)}` : '';
  return `${root}${scope}/${kind.plural}`;
}

export function objectPath(kind: ResourceKind, key: ObjectKey, subresource?: string): string {
  const base = `${collectionPath(kind, key.namespace)}/${encodeURIComponent(key.name)}`;
  return subresource ? `${base}/${subresource}` : base;
}

/** Same group and kind (version-agnostic), the identity used when matching owners and events. */
export function sameKind(kind: ResourceKind, apiVersion: string | undefined, kindName: string | undefined): boolean {
  if (kindName !== kind.kind || apiVersion === undefined) return false;
  const group = apiVersion.includes('/') ? apiVersion.slice(0, apiVersion.lastIndexOf('/')) : '';
  return group === kind.group;
}

// Built-in kinds the functions create, own or watch.
export const Pod: ResourceKind = { group: '', version: 'v1', kind: 'Pod', plural: 'pods', namespaced: true };
export const ConfigMap: ResourceKind = { group: '', version: 'v1', kind: 'ConfigMap', plural: 'configmaps', namespaced: true };
export const Secret: ResourceKind = { group: '', version: 'v1', kind: 'Secret', plural: 'secrets', namespaced: true };
export const Namespace: ResourceKind = { group: '', version: 'v1', kind: 'Namespace', plural: 'namespaces', namespaced: false };
export const CoreEvent: ResourceKind = { group: '', version: 'v1', kind: 'Event', plural: 'events', namespaced: true };
