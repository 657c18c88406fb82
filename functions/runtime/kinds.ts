// What the runtime needs to know about a Kubernetes resource type to address it without
// a discovery round trip: every function declares its kinds fully, so no API call is
// ever spent finding out a plural or whether a kind is namespaced.
import { quote } from './bounded-messages.ts';

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

/**
 * What the runtime queues, coalesces, replies about and reports: a key that names its kind, so
 * one function can reconcile more than one kind without collisions. String form
 * `<group>/<Kind>:<namespace>/<name>` (`<Kind>:…` for the core group, `…:<name>` when cluster-scoped).
 */
export interface KindKey extends ObjectKey {
  kind: ResourceKind;
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

/** metav1.LabelSelector: every requirement must hold (matchLabels are `key In (value)`). */
export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: LabelSelectorRequirement[];
}

export interface LabelSelectorRequirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  values?: string[];
}

/** Any Kubernetes object; functions narrow `spec`/`status` with their own types. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

export const apiVersionOf = (kind: ResourceKind): string => (kind.group ? `${kind.group}/${kind.version}` : kind.version);

export const keyString = (key: ObjectKey): string => (key.namespace ? `${key.namespace}/${key.name}` : key.name);

/** `<group>/<Kind>` (`<Kind>` for the core group): a kind's identity across versions. */
export const groupKind = (kind: ResourceKind): string => (kind.group ? `${kind.group}/${kind.kind}` : kind.kind);

export const kindKeyString = (key: KindKey): string => `${groupKind(key.kind)}:${keyString(key)}`;

export const kindKey = (kind: ResourceKind, key: ObjectKey): KindKey => ({
  kind,
  namespace: kind.namespaced ? key.namespace : '',
  name: key.name,
});

/**
 * The key a string names, when its kind is one of `kinds` and its namespace and name are valid;
 * otherwise the reason it is not.
 */
export function parseKindKey(text: string, kinds: ResourceKind[]): KindKey | string {
  const parts = splitKindKey(text);
  if (typeof parts === 'string') return parts;
  const kind = kinds.find((candidate) => groupKind(candidate) === parts.groupKind);
  if (!kind) return `${quote(parts.groupKind)} is not a kind this function reconciles`;
  return keyProblem(kind, parts.key) ?? kindKey(kind, parts.key);
}

/** The `<group>/<Kind>` and the namespace and name of a key's string form, unchecked; or why it is not one. */
export function splitKindKey(text: string): { groupKind: string; key: ObjectKey } | string {
  // The first colon: `<group>/<Kind>` has none, a name may (system:controller:foo).
  const colon = text.indexOf(':');
  if (colon <= 0) return `${quote(text)} is not a key (<group>/<Kind>:<namespace>/<name>)`;
  const rest = text.slice(colon + 1);
  const slash = rest.indexOf('/');
  return {
    groupKind: text.slice(0, colon),
    key: slash < 0 ? { namespace: '', name: rest } : { namespace: rest.slice(0, slash), name: rest.slice(slash + 1) },
  };
}

// DNS-1123 subdomain, what Kubernetes allows in object names: dot-separated labels, so "a..b",
// "." and ".." are not names (and `new URL` would collapse the last two as path segments).
const NAME = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
// Namespaces are DNS-1123 labels: at most 63 characters and no dots.
const NAMESPACE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

export const isValidName = (name: unknown): name is string => typeof name === 'string' && NAME.test(name);

/**
 * Built-in kinds whose names the API server checks only as path segments, not as DNS subdomains
 * (k8s.io/kubernetes v1.35 pkg/apis/…/validation): RBAC roles and bindings (ValidateRBACName =
 * path.IsValidPathSegmentName, so `system:controller:foo`), CertificateSigningRequests (no rule of
 * their own), ClusterTrustBundles (`<signer>:<suffix>`), IPAddresses (an IPv6 address has `:`),
 * LeaseCandidates (a ConfigMap key: `_` and upper case) and StorageVersions. Every other kind,
 * custom resources included (apiextensions checks NameIsDNSSubdomain), is held to the subdomain
 * rule. Keyed `<group>/<Kind>`.
 */
const PATH_SEGMENT_NAMED: ReadonlySet<string> = new Set([
  'rbac.authorization.k8s.io/Role',
  'rbac.authorization.k8s.io/ClusterRole',
  'rbac.authorization.k8s.io/RoleBinding',
  'rbac.authorization.k8s.io/ClusterRoleBinding',
  'certificates.k8s.io/CertificateSigningRequest',
  'certificates.k8s.io/ClusterTrustBundle',
  'networking.k8s.io/IPAddress',
  'coordination.k8s.io/LeaseCandidate',
  'internal.apiserver.k8s.io/StorageVersion',
]);

/** Does the API server check names of this kind (`group` '' for the core group) only as path segments? */
const hasPathSegmentNames = (group: string, kind: string): boolean => PATH_SEGMENT_NAMED.has(`${group}/${kind}`);

/**
 * Why `value` cannot be one path segment of an object's URL, or undefined: apimachinery's
 * IsValidPathSegmentName (not '.' or '..', which `new URL` collapses, no '/' or '%', which change
 * the URL addressed), not empty, and at most 253 characters, the longest name the runtime
 * addresses (a forged one must not be megabytes long). Whatever else it holds is encoded.
 */
export function pathSegmentProblem(value: unknown): string | undefined {
  if (typeof value !== 'string' || value === '') return 'may not be empty';
  if (value === '.' || value === '..') return `may not be "${value}"`;
  if (/[/%]/.test(value)) return `may not contain '/' or '%'`;
  if (value.length > 253) return 'must be no more than 253 characters';
  return undefined;
}

/** A name the API server accepts for an object of this kind (`group` '' for the core group). */
export function isValidNameOf(group: string, kind: string, name: unknown): name is string {
  if (typeof name !== 'string') return false;
  return hasPathSegmentNames(group, kind) ? pathSegmentProblem(name) === undefined : NAME.test(name);
}
// A kind is a CamelCase identifier whose lower case is a DNS-1035 label (apiextensions'
// validation of a CRD's names.kind): at most 63 characters.
const KIND = /^[A-Za-z]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?$/;
export const isValidKindName = (kind: unknown): kind is string => typeof kind === 'string' && KIND.test(kind);
export const isValidNamespace = (namespace: unknown): namespace is string => typeof namespace === 'string' && NAMESPACE.test(namespace);

/** Why `key` cannot name an object of `kind`, as the API server would judge it; undefined when it can. */
export function keyProblem(kind: ResourceKind, key: ObjectKey): string | undefined {
  if (!isValidNameOf(kind.group, kind.kind, key.name)) {
    return hasPathSegmentNames(kind.group, kind.kind)
      ? `invalid object name ${quote(key.name)} (a ${kind.kind} name is a path segment: not empty, '.' or '..', no '/' or '%', at most 253)`
      : `invalid object name ${quote(key.name)} (a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', at most 253)`;
  }
  if (kind.namespaced && !isValidNamespace(key.namespace))
    return `invalid namespace ${quote(key.namespace)} (a DNS-1123 label: lower-case letters, digits and '-', at most 63)`;
  return undefined;
}

/**
 * A name or namespace that would change which URL is addressed: the API server's own rule for
 * path segments (apimachinery's IsValidPathSegmentName). The last line of defence under every
 * request; names from events, labels and mappers are held to the stricter rules above first.
 */
export class InvalidPathSegmentError extends Error {
  constructor(what: string, value: string) {
    super(
      `refusing to address ${what} ${quote(value)}: it is not a valid path segment ('.', '..', empty, contains '/' or '%', or longer than 253)`,
    );
    this.name = 'InvalidPathSegmentError';
  }
}

function checkSegment(what: string, value: string): string {
  if (pathSegmentProblem(value)) throw new InvalidPathSegmentError(what, value);
  return encodeURIComponent(value);
}

export const keyOf = (object: KubeObject): ObjectKey => ({
  namespace: object.metadata.namespace ?? '',
  name: object.metadata.name ?? '',
});

/** Collection URL path, across all namespaces when `namespace` is omitted. */
export function collectionPath(kind: ResourceKind, namespace?: string): string {
  const root = kind.group ? `/apis/${kind.group}/${kind.version}` : `/api/${kind.version}`;
  const scope = kind.namespaced && namespace ? `/namespaces/${checkSegment('namespace', namespace)}` : '';
  return `${root}${scope}/${kind.plural}`;
}

/** Throws InvalidPathSegmentError for a name or namespace that is not one path segment. */
export function objectPath(kind: ResourceKind, key: ObjectKey, subresource?: string): string {
  if (kind.namespaced && !key.namespace) throw new InvalidPathSegmentError('namespace', '');
  const base = `${collectionPath(kind, key.namespace)}/${checkSegment('name', key.name)}`;
  return subresource ? `${base}/${subresource}` : base;
}

/** Splits an apiVersion as apimachinery's ParseGroupVersion does: no slash = the core group. */
export function parseApiVersion(apiVersion: string): { group: string; version: string } {
  const slash = apiVersion.indexOf('/');
  return slash < 0 ? { group: '', version: apiVersion } : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1) };
}

/** A group (a DNS subdomain, or '' for the core group) and version that can go into a discovery path (`/apis/<group>/<version>`) as they are. */
export const isValidGroupVersion = ({ group, version }: { group: string; version: string }): boolean =>
  /^[A-Za-z0-9]{1,63}$/.test(version) && (group === '' || isValidName(group));

/** Same group and kind (version-agnostic), the identity used when matching owners and events. */
export function sameKind(kind: ResourceKind, apiVersion: string | undefined, kindName: string | undefined): boolean {
  return kindName === kind.kind && apiVersion !== undefined && parseApiVersion(apiVersion).group === kind.group;
}

// Built-in kinds the functions create, own or watch.
export const Pod: ResourceKind = { group: '', version: 'v1', kind: 'Pod', plural: 'pods', namespaced: true };
export const ConfigMap: ResourceKind = { group: '', version: 'v1', kind: 'ConfigMap', plural: 'configmaps', namespaced: true };
export const Secret: ResourceKind = { group: '', version: 'v1', kind: 'Secret', plural: 'secrets', namespaced: true };
export const Namespace: ResourceKind = { group: '', version: 'v1', kind: 'Namespace', plural: 'namespaces', namespaced: false };
export const CoreEvent: ResourceKind = { group: '', version: 'v1', kind: 'Event', plural: 'events', namespaced: true };

/** A Kubernetes metav1.Time: RFC 3339 in UTC, whole seconds (the API server drops fractions). */
export const rfc3339 = (at: Date | number): string => new Date(at).toISOString().replace(/\.\d+Z$/, 'Z');

const INTEGER_VERSION = /^(0|[1-9][0-9]*)$/;

/**
 * -1, 0 or 1 as resourceVersion `a` is older than, the same as or newer than `b` (of one
 * object); undefined when they cannot be ordered. Kubernetes guarantees since 1.35 that
 * versions are integers that grow (KEP-5504; client-go's CompareResourceVersion), which every
 * etcd-backed server already did; versions that are not well-formed integers are only equal or
 * not.
 */
export function compareResourceVersions(a: string | undefined, b: string | undefined): -1 | 0 | 1 | undefined {
  if (a === undefined || b === undefined) return undefined;
  if (a === b) return 0;
  if (!INTEGER_VERSION.test(a) || !INTEGER_VERSION.test(b)) return undefined;
  // Of any length: longer is larger, then digit by digit.
  if (a.length !== b.length) return a.length < b.length ? -1 : 1;
  return a < b ? -1 : 1;
}

/** True when resourceVersion `version` is known to be `announced` or newer (compareResourceVersions). */
export const isNoOlderThan = (version: string | undefined, announced: string): boolean => {
  const order = compareResourceVersions(version, announced);
  return order !== undefined && order >= 0;
};
