// The few building blocks of generated Knative and RBAC objects that both `opfn manifests`
// (eventing/manifests/, at install time, from declarations) and a function managing such objects
// at run time (functions/composite/event-sources.ts, per CompositeController) need. They
// live here because functions/ never imports eventing/ (each function's bundle holds its own
// folder and the runtime only, build/build.ts); eventing/manifests/ re-exports them.
//
// Identities: a ServiceAccount bound to exactly its rules. In 'cluster' scope the rules go into a
// ClusterRole and ClusterRoleBinding. In 'namespace' scope they go into a Role and RoleBinding in
// that namespace; rules about cluster-scoped resources (Namespaces, say) cannot live in a Role (a
// Role only grants inside its namespace), so those alone go into a ClusterRole with its binding.
//
// ApiServerSource (sources.knative.dev/v1, knative/eventing pkg/apis/sources/v1
// apiserver_types.go): `resources[]` of {apiVersion, kind, selector}, `mode` Reference|Resource,
// `serviceAccountName` the adapter runs as, `ceOverrides.extensions` added to every event,
// `sink`. A source in namespace N watches namespaced kinds in N only, unless `namespaceSelector`
// (knative/eventing#6665) selects more: in 'cluster' scope it carries an empty one (every namespace).
import type { PolicyRule } from './declaration.ts';
import { apiVersionOf, isValidNamespace, type KubeObject, type LabelSelector, type ResourceKind } from './kinds.ts';

export const KNATIVE_SERVICE_API = 'serving.knative.dev/v1';
export const EVENTING_API = 'eventing.knative.dev/v1';
export const SOURCES_API = 'sources.knative.dev/v1';
export const RBAC_API = 'rbac.authorization.k8s.io/v1';

export const PART_OF = { 'app.kubernetes.io/part-of': 'operator-functions' };
export const FUNCTION_LABEL = 'operator-functions.dev/function';

/**
 * The resource an ApiServerSource watches for a kind. Knative never asks discovery: it guesses
 * with apimachinery's meta.UnsafeGuessKindToResource (lower case; `endpoints` kept; a final `s`
 * gets `es`, a final `y` becomes `ies`; else `s`), in its access check and its adapter alike
 * (knative/eventing pkg/reconciler/apiserversource), and watches only if discovery serves that name.
 */
export function guessedResource(kind: string): string {
  const singular = kind.toLowerCase();
  if (singular === '' || singular.endsWith('endpoints')) return singular;
  if (singular.endsWith('s')) return `${singular}es`;
  if (singular.endsWith('y')) return `${singular.slice(0, -1)}ies`;
  return `${singular}s`;
}

/**
 * The kind an ApiServerSource names to watch `kind`. Knative uses a source's kind for nothing but
 * that guess: its access check asks about the guessed resource, and its adapter takes the one
 * discovery serves under that name, whatever kind discovery gives it (knative/eventing
 * pkg/adapter/apiserver/adapter.go). So a kind whose plural the guess misses (CopyratorRule is
 * served as `copyrators`, the guess is `copyratorrules`) is watched by naming the kind the plural
 * is guessed from (`Copyrator`); its events still carry the object's own kind. Undefined when no
 * kind guesses the plural (one not ending in "s"): such a kind is polled instead.
 */
export function sourceKindName(kind: ResourceKind): string | undefined {
  if (guessedResource(kind.kind) === kind.plural) return kind.kind;
  const singular = [kind.plural.replace(/ies$/, 'y'), kind.plural.replace(/es$/, ''), kind.plural.replace(/s$/, '')].find(
    (candidate) => candidate !== kind.plural && candidate !== '' && guessedResource(candidate) === kind.plural,
  );
  return singular && `${singular[0]!.toUpperCase()}${singular.slice(1)}`;
}

/** How an ApiServerSource's `resources` names `kind` (sourceKindName); throws for a kind no source can watch. */
export function sourceResource(kind: ResourceKind): { apiVersion: string; kind: string } {
  const name = sourceKindName(kind);
  if (name === undefined) throw new Error(`no ApiServerSource can watch ${kind.kind}: no kind name guesses its resource "${kind.plural}"`);
  return { apiVersion: apiVersionOf(kind), kind: name };
}

/** Can an ApiServerSource watch this kind at all (sourceKindName)? */
export const watchableBySource = (kind: ResourceKind): boolean => sourceKindName(kind) !== undefined;

/** Labels of a generated object: part of operator-functions, its component, and the function it serves. */
export function objectLabels(component: string, functionName?: string): Record<string, string> {
  return { ...PART_OF, 'app.kubernetes.io/component': component, ...(functionName ? { [FUNCTION_LABEL]: functionName } : {}) };
}

/** Where the objects live and how far the functions reach (see ManifestOptions in eventing/manifests/options.ts). */
export interface Placement {
  namespace: string;
  scope: 'cluster' | 'namespace';
}

export const brokerRef = (brokerName: string) => ({ ref: { apiVersion: EVENTING_API, kind: 'Broker', name: brokerName } });

// Built-in cluster-scoped resources a rule may name; other kinds say so themselves (ResourceKind.namespaced).
const CLUSTER_SCOPED_BUILT_INS = [
  '/namespaces',
  '/nodes',
  '/persistentvolumes',
  'rbac.authorization.k8s.io/clusterroles',
  'rbac.authorization.k8s.io/clusterrolebindings',
  'apiextensions.k8s.io/customresourcedefinitions',
  'storage.k8s.io/storageclasses',
];

/** `group/plural` of the built-in cluster-scoped resources and of every cluster-scoped kind in `kinds`. */
export function clusterScopedOf(kinds: ResourceKind[]): Set<string> {
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

/**
 * The name of a cluster-level RBAC object for the identity `name`: cluster-level names are shared
 * by the whole cluster, so a namespaced install qualifies them with its namespace, and installs in
 * two namespaces (or one cluster-wide) never take each other's.
 */
export const clusterRoleName = (name: string, placement: Placement): string =>
  placement.scope === 'cluster' ? name : `${placement.namespace}:${name}`;

/** A ServiceAccount and the role(s) and binding(s) granting it `rules`. */
export function identity(
  name: string,
  rules: PolicyRule[],
  clusterScoped: Set<string>,
  placement: Placement,
  labels: Record<string, string>,
): KubeObject[] {
  const { namespace } = placement;
  const subjects = [{ kind: 'ServiceAccount', name, namespace }];
  const clusterName = clusterRoleName(name, placement);
  const clusterWide = (clusterRules: PolicyRule[]): KubeObject[] => [
    { apiVersion: RBAC_API, kind: 'ClusterRole', metadata: { name: clusterName, labels }, rules: clusterRules },
    {
      apiVersion: RBAC_API,
      kind: 'ClusterRoleBinding',
      metadata: { name: clusterName, labels },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: clusterName },
      subjects,
    },
  ];
  const objects: KubeObject[] = [{ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name, namespace, labels } }];
  if (placement.scope === 'cluster') return [...objects, ...clusterWide(rules)];
  const split = splitByScope(rules, clusterScoped);
  if (split.namespaced.length) {
    objects.push(
      { apiVersion: RBAC_API, kind: 'Role', metadata: { name, namespace, labels }, rules: split.namespaced },
      {
        apiVersion: RBAC_API,
        kind: 'RoleBinding',
        metadata: { name, namespace, labels },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
        subjects,
      },
    );
  }
  if (split.cluster.length) objects.push(...clusterWide(split.cluster));
  return objects;
}

export interface SourceResource {
  apiVersion: string;
  kind: string;
  selector?: LabelSelector;
}

/** One ApiServerSource object sending to the broker `brokerName`. */
export function apiServerSourceObject(
  source: {
    name: string;
    labels: Record<string, string>;
    mode: 'Reference' | 'Resource';
    resources: SourceResource[];
    serviceAccountName: string;
    extensions?: Record<string, string>;
  },
  placement: Placement & { brokerName: string },
): KubeObject {
  return {
    apiVersion: SOURCES_API,
    kind: 'ApiServerSource',
    metadata: { name: source.name, namespace: placement.namespace, labels: source.labels },
    spec: {
      mode: source.mode,
      resources: source.resources,
      ...(placement.scope === 'cluster' ? { namespaceSelector: {} } : {}),
      serviceAccountName: source.serviceAccountName,
      ...(source.extensions ? { ceOverrides: { extensions: source.extensions } } : {}),
      sink: brokerRef(placement.brokerName),
    },
  };
}

/**
 * Configuration parameters that tell a function where it was installed: a function declaring one
 * of them gets the install's value in its generated Service (eventing/manifests/service.ts), so a
 * function that manages Knative objects itself (the composite function) puts them next to the
 * others, sends them to the same Broker and grants in the same scope.
 */
export const INSTALL_CONFIG = { namespace: 'OPFN_NAMESPACE', brokerName: 'OPFN_BROKER', scope: 'OPFN_SCOPE' } as const;

/** Where `opfn manifests` installs by default (and the local plane runs): the parameters' defaults. */
export const INSTALL_DEFAULTS: Placement & { brokerName: string } = {
  namespace: 'operator-functions',
  brokerName: 'operator-functions',
  scope: 'cluster',
};

/**
 * The namespace an install limited to one runs in (INSTALL_CONFIG.scope "namespace", which the
 * generated Service of every function sets), from a function's environment; undefined for a
 * cluster-wide install. Its Role grants only there, so the runtime lists and reconciles there only.
 */
export function installNamespaceFrom(env: Record<string, string | undefined>): string | undefined {
  const scope = env[INSTALL_CONFIG.scope] ?? 'cluster';
  if (scope === 'cluster') return undefined;
  const namespace = env[INSTALL_CONFIG.namespace];
  if (scope !== 'namespace') throw new Error(`${INSTALL_CONFIG.scope} "${scope}" is neither "cluster" nor "namespace"`);
  if (!isValidNamespace(namespace))
    throw new Error(
      `${INSTALL_CONFIG.scope} is "namespace", and ${INSTALL_CONFIG.namespace} ${namespace === undefined ? 'is not set' : `"${namespace}" is not a namespace name`}`,
    );
  return namespace;
}

/** The install's value of each INSTALL_CONFIG parameter. */
export function installConfigValues(install: Placement & { brokerName: string }): Record<string, string> {
  return {
    [INSTALL_CONFIG.namespace]: install.namespace,
    [INSTALL_CONFIG.brokerName]: install.brokerName,
    [INSTALL_CONFIG.scope]: install.scope,
  };
}
