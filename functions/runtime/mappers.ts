// Ready-made mappers from a watched object's change to the keys to reconcile, named like
// controller-runtime's handlers (pkg/handler: EnqueueRequestsFromMapFunc and friends).
// ApiServerSource delivers only the new object (controller-runtime maps old and new), so a
// mapper must not depend on a label still being there: a ConfigMap that lost its label must
// still wake the rule that copied it. Lists are paginated inside KubeClient, and in an install
// limited to one namespace they list a namespaced kind there (all its Role allows).
import type { MapperContext, WatchedChange } from './declaration.ts';
import { keyOf, type KubeObject, type ObjectKey, type ResourceKind } from './kinds.ts';

export type Mapper = (change: WatchedChange, ctx: MapperContext) => Promise<ObjectKey[]>;

type ListScope = { namespace?: string; labelSelector?: string };
const scoped = (kind: ResourceKind, options: ListScope, ctx: MapperContext): ListScope => ({
  ...options,
  namespace: options.namespace ?? (kind.namespaced ? ctx.installNamespace : undefined),
});

/** Every object of `kind` (e.g. a new Namespace → every CopyratorRule). */
export function allOf(kind: ResourceKind, options: ListScope = {}): Mapper {
  return async (_change, ctx) => {
    const keys: ObjectKey[] = [];
    for await (const page of ctx.kube.pages(kind, scoped(kind, options, ctx))) keys.push(...page.items.map(keyOf));
    return keys;
  };
}

/** The objects of `kind` that `predicate` accepts for this change (e.g. rules whose source namespace it is). */
export function matching<T extends KubeObject = KubeObject>(
  kind: ResourceKind,
  predicate: (candidate: T, change: WatchedChange) => boolean,
  options: ListScope = {},
): Mapper {
  return async (change, ctx) => {
    const keys: ObjectKey[] = [];
    for await (const page of ctx.kube.pages<T>(kind, scoped(kind, options, ctx)))
      keys.push(...page.items.filter((item) => predicate(item, change)).map(keyOf));
    return keys;
  };
}
