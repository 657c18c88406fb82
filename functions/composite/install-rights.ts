// The composite function's rights in an install (`opfn manifests`, through the declaration's
// `narrowRights`), narrow unless chosen broad.
//
//   default                 exactly what the CompositeControllers of `--composite <file>` need
//                           (none given: nothing beyond reading CompositeControllers and writing
//                           Events, so a controller applied later is refused, 403, until the
//                           install is regenerated with it)
//   --composite-broad       the declaration's `*` (Metacontroller's chart binds a ClusterRole over
//                           `*`): any controller is served as soon as it appears. The function
//                           still refuses privileged children a controller does not allow
//                           (metacontroller/privileged.ts)
//
// Why narrow by default: whoever controls a hook's plain-HTTP endpoint decides what the function
// writes, so the function's rights are theirs too. The parent and child kinds are only known when
// a CompositeController appears, and the per-controller ClusterRoles it makes for the event
// sources (event-sources.ts) can only be created by someone who holds
// what they grant, or `escalate` and `bind`. With the controllers given, the function's `*` rule
// is replaced by exactly:
//
//   per controller   policyRulesFor (metacontroller/controller-spec.ts): the parent (get, list,
//                    watch, update, patch) with its /status and /finalizers, the children fully,
//                    the related kinds (get, list, watch) listed in the annotation
//                    `operator-functions.dev/related-resources` ("<apiVersion>/<resource>, …";
//                    a customize hook names them only at run time), Events
//   event sources    create on ServiceAccounts, ClusterRoles + ClusterRoleBindings (or Roles +
//                    RoleBindings) and ApiServerSources; get, update, delete only on the names
//                    ensureEventing gives that controller's objects (managedObjectKeys)
//   runtime          what functions/runtime/rbac.ts derives (compositecontrollers get, list; Events)
//
// The namespaced event-source objects live in the install's namespace: in 'cluster' scope their
// rules go into a Role `opfn-composite-eventing` there (not into the ClusterRole, which would
// reach every namespace). The per-controller roles only grant get, list, watch on kinds the
// function itself holds, so neither `escalate` nor `bind` is needed. A controller not in the file
// is refused by the API server (403), which is the promise of the narrow mode.
import {
  type PolicyRule,
  parseApiVersion,
  type KubeObject,
  clusterScopedOf,
  RBAC_API,
  mergeRules,
  type InstallContext,
  type InstallPlacement,
  type NarrowedRights,
} from '../runtime/index.ts';
import { managedObjectKeys } from './event-sources.ts';
import { checkController, policyRulesFor, type CompositeController, type ResolvedResource } from './metacontroller/index.ts';

export const RELATED_ANNOTATION = 'operator-functions.dev/related-resources';
/** The Role holding the namespaced event-source rules in 'cluster' scope. */
export const EVENTING_ROLE = 'opfn-composite-eventing';

/** A controller of the file, its kinds resolved as far as an install can (`kind` is '' for a built-in: the rules need only group and resource). */
export interface KnownController {
  name: string;
  parent: ResolvedResource;
  children: ResolvedResource[];
  related: ResolvedResource[];
}

interface CrdSpec {
  group: string;
  scope: string;
  names: { plural: string; kind: string };
}

/** Every CompositeController among `objects` (other kinds ignored), checked, with its kinds resolved from `crds`, the file's own CRDs and the built-ins; `source` names the file in errors. */
export function compositeControllersIn(objects: KubeObject[], source: string, crds: KubeObject[]): KnownController[] {
  const known = [...crds, ...objects.filter((object) => object.kind === 'CustomResourceDefinition')].map((crd) => crd.spec as CrdSpec);
  const builtInClusterScoped = clusterScopedOf([]);
  const resolve = (apiVersion: string, resource: string): ResolvedResource => {
    const { group } = parseApiVersion(apiVersion);
    const crd = known.find((spec) => spec.group === group && spec.names?.plural === resource);
    return {
      apiVersion,
      resource,
      kind: crd?.names.kind ?? '',
      namespaced: crd ? crd.scope !== 'Cluster' : !builtInClusterScoped.has(`${group}/${resource}`),
    };
  };
  const controllers: KnownController[] = [];
  for (const object of objects.filter(
    (o) => o.kind === 'CompositeController' && String(o.apiVersion).startsWith('metacontroller.k8s.io/'),
  )) {
    const checked = checkController(object);
    if (!checked.ok) throw new Error(`${source}: ${checked.reason}`);
    const cc: CompositeController = checked.value;
    const name = cc.metadata.name!;
    if (controllers.some((other) => other.name === name)) throw new Error(`${source}: CompositeController ${name} is there twice`);
    controllers.push({
      name,
      parent: resolve(cc.spec.parentResource.apiVersion, cc.spec.parentResource.resource),
      children: (cc.spec.childResources ?? []).map((child) => resolve(child.apiVersion, child.resource)),
      related: relatedOf(cc, source).map(([apiVersion, resource]) => resolve(apiVersion, resource)),
    });
  }
  if (!controllers.length) throw new Error(`${source}: no CompositeController (apiVersion metacontroller.k8s.io/…) in it`);
  return controllers;
}

/** `<apiVersion>/<resource>` entries of the related-resources annotation, e.g. `v1/configmaps, apps/v1/deployments`. */
function relatedOf(cc: CompositeController, source: string): [apiVersion: string, resource: string][] {
  const value = cc.metadata.annotations?.[RELATED_ANNOTATION];
  if (!value) return [];
  return value
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean)
    .map((entry) => {
      const slash = entry.lastIndexOf('/');
      if (slash <= 0 || slash === entry.length - 1 || entry.split('/').length > 3)
        throw new Error(
          `${source}: CompositeController ${cc.metadata.name}: ${RELATED_ANNOTATION} entry "${entry}" is not <apiVersion>/<resource> (e.g. v1/configmaps, apps/v1/deployments)`,
        );
      return [entry.slice(0, slash), entry.slice(slash + 1)];
    });
}

/** The rules of the narrow mode: the function's own (its ClusterRole or Role) and those of the install namespace's Role (in 'cluster' scope). */
export function compositeRules(
  controllers: KnownController[],
  placement: InstallPlacement,
): { functionRules: PolicyRule[]; namespaceRules: PolicyRule[] } {
  const functionRules: PolicyRule[] = [];
  const namespaceRules: PolicyRule[] = [];
  const names = new Map<string, { group: string; plural: string; namespaced: boolean; names: Set<string> }>();
  for (const controller of controllers) {
    functionRules.push(...policyRulesFor(controller));
    const clusterScopedKind = [controller.parent, ...controller.children].some((resource) => !resource.namespaced);
    for (const key of managedObjectKeys(controller.name, placement)) {
      // A namespaced install makes ClusterRoles only for cluster-scoped kinds (identity()).
      if (!key.kind.namespaced && placement.scope === 'namespace' && !clusterScopedKind) continue;
      const id = `${key.kind.group}/${key.kind.plural}`;
      const entry = names.get(id) ?? {
        group: key.kind.group,
        plural: key.kind.plural,
        namespaced: key.kind.namespaced,
        names: new Set<string>(),
      };
      entry.names.add(key.name);
      names.set(id, entry);
    }
  }
  for (const { group, plural, namespaced, names: objectNames } of names.values()) {
    // create cannot be limited by name (the name is not known to the authorizer before the object exists).
    const rules = [
      { apiGroups: [group], resources: [plural], verbs: ['create'] },
      { apiGroups: [group], resources: [plural], verbs: ['get', 'update', 'delete'], resourceNames: [...objectNames] },
    ];
    (namespaced && placement.scope === 'cluster' ? namespaceRules : functionRules).push(...rules);
  }
  return { functionRules: mergeRules(functionRules), namespaceRules: mergeRules(namespaceRules) };
}

/**
 * The rights of an install not told to be broad: exactly those of the controllers in the given
 * file (none given: no controller is served), and the install namespace's Role and binding for
 * their event sources (none in 'namespace' scope).
 */
export function narrowCompositeRights(install: InstallContext): NarrowedRights {
  const { placement, given } = install;
  const controllers = given ? compositeControllersIn(given.objects, given.source, install.crds) : [];
  const { functionRules, namespaceRules } = compositeRules(controllers, placement);
  const objects: KubeObject[] = namespaceRules.length
    ? [
        {
          apiVersion: RBAC_API,
          kind: 'Role',
          metadata: { name: EVENTING_ROLE, namespace: placement.namespace, labels: install.labels },
          rules: namespaceRules,
        },
        {
          apiVersion: RBAC_API,
          kind: 'RoleBinding',
          metadata: { name: EVENTING_ROLE, namespace: placement.namespace, labels: install.labels },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: EVENTING_ROLE },
          subjects: [{ kind: 'ServiceAccount', name: install.serviceAccountName, namespace: placement.namespace }],
        },
      ]
    : [];
  return { rbac: functionRules, objects };
}
