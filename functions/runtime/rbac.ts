// The RBAC rules a function needs, derived from its declaration instead of remembered by its
// author (as Pepr's createRBACMap derives verbs from bindings, src/lib/helpers.ts): the rules it
// declares for its own reconcile, plus what the runtime itself does on its behalf.
//
//   reconciled kind        get, list          the runtime lists it on resync, reads it for the
//                                            finalizer and for owner names in hash form
//   watchDuringBursts      watch on the       the burst watch (kube/burst-watch.ts)
//                          reconciled kind
//   owned kind             get                routing reads an owned object (Reference mode) to
//                                            find its controller owner
//   owned by reference     update on <reconciled plural>/finalizers
//                                            children carry blockOwnerDeletion: true, which the
//                                            OwnerReferencesPermissionEnforcement admission
//                                            plugin only allows with this (OpenShift and many
//                                            hardened clusters run it)
//   finalizer declared     update, patch on the reconciled kind (adding/removing the finalizer)
//   always                 create, patch on core events (the aggregating Event recorder)
//
// The event source's identity (ApiServerSource's ServiceAccount) needs get, list and watch on
// every kind it watches: sourceRulesFor.
import type { FunctionDeclaration, PolicyRule } from './declaration.ts';
import type { ResourceKind } from './kinds.ts';

/** kubectl's order, so generated roles read naturally and compare stably. */
const VERB_ORDER = ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete', 'deletecollection', '*'];
const verbRank = (verb: string) => (VERB_ORDER.includes(verb) ? VERB_ORDER.indexOf(verb) : VERB_ORDER.length);

const rule = (kind: ResourceKind, verbs: string[], subresource?: string): PolicyRule => ({
  apiGroups: [kind.group],
  resources: [subresource ? `${kind.plural}/${subresource}` : kind.plural],
  verbs,
});

/** Rules merged per API group, resource and resourceNames; verbs united; deterministic order. */
export function mergeRules(rules: PolicyRule[]): PolicyRule[] {
  const merged = new Map<string, { group: string; resource: string; names?: string[]; verbs: Set<string> }>();
  for (const input of rules) {
    const names = input.resourceNames?.length ? [...input.resourceNames].sort() : undefined;
    for (const group of input.apiGroups) {
      for (const resource of input.resources) {
        const id = JSON.stringify([group, resource, names ?? null]);
        const entry = merged.get(id) ?? { group, resource, names, verbs: new Set<string>() };
        for (const verb of input.verbs) entry.verbs.add(verb);
        merged.set(id, entry);
      }
    }
  }
  return [...merged.values()]
    .sort(
      (a, b) =>
        a.group.localeCompare(b.group) ||
        a.resource.localeCompare(b.resource) ||
        Number(Boolean(a.names)) - Number(Boolean(b.names)) ||
        JSON.stringify(a.names ?? []).localeCompare(JSON.stringify(b.names ?? [])),
    )
    .map(({ group, resource, names, verbs }) => ({
      apiGroups: [group],
      resources: [resource],
      verbs: [...verbs].sort((a, b) => verbRank(a) - verbRank(b) || a.localeCompare(b)),
      ...(names ? { resourceNames: names } : {}),
    }));
}

/** The rules the runtime needs beyond the declared ones (see the table above). */
export function impliedRules(declaration: FunctionDeclaration): PolicyRule[] {
  const reconciled = declaration.reconciles;
  const implied: PolicyRule[] = [
    rule(reconciled, declaration.watchDuringBursts ? ['get', 'list', 'watch'] : ['get', 'list']),
    { apiGroups: [''], resources: ['events'], verbs: ['create', 'patch'] },
  ];
  for (const owned of declaration.owns) implied.push(rule(owned.kind, ['get']));
  if (declaration.owns.some((owned) => !owned.ownerLabels)) implied.push(rule(reconciled, ['update'], 'finalizers'));
  if (declaration.finalizer) implied.push(rule(reconciled, ['update', 'patch']));
  return implied;
}

/** Everything the function's identity may do: declared plus implied, merged. */
export function rulesFor(declaration: FunctionDeclaration): PolicyRule[] {
  return mergeRules([...declaration.rbac, ...impliedRules(declaration)]);
}

/** What the function's event source must be allowed: get, list and watch on each kind it watches. */
export function sourceRulesFor(declaration: FunctionDeclaration): PolicyRule[] {
  const kinds = [
    declaration.reconciles,
    ...declaration.owns.map((owned) => owned.kind),
    ...declaration.watches.map((watched) => watched.kind),
  ];
  return mergeRules(kinds.map((kind) => rule(kind, ['get', 'list', 'watch'])));
}
