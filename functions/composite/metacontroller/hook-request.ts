// The request a sync or finalize hook receives: {controller, parent, children, related, finalizing}.
//
// Upstream: metacontroller pkg/controller/composite/api/v1/hooks.go and api/v2/hooks.go
// (requestBuilder.Build), pkg/controller/common/api/v2/common.go (UniformObjectMap: always
// `ns/name` for namespaced objects; Convert → v1, which keeps, for a namespaced parent, only the
// objects in the parent's namespace) and api/v1/common.go (relativeName: `ns/name` only when the
// parent is cluster-scoped and the object namespaced, else `name`). claimChildren in
// composite/controller.go calls InitGroup for every child rule, so each rule has an entry even
// when it has no objects; customize/manager.go does the same for each related rule.
import { type KubeObject } from '../../runtime/index.ts';
import {
  groupVersionKindKey,
  type CompositeController,
  type CompositeHookRequest,
  type HookVersion,
  type ObjectMap,
  type ResolvedResource,
} from './types.ts';

export interface HookRequestInput {
  controller: CompositeController;
  parent: KubeObject;
  version: HookVersion;
  /** The resolved child rules, in the controller's order: each gets an entry even when empty. */
  childRules: ResolvedResource[];
  /** The children claimed for this parent (claim.ts). */
  children: KubeObject[];
  /** The resolved related rules from the customize hook, each with an entry even when empty. */
  relatedRules?: ResolvedResource[];
  related?: KubeObject[];
  finalizing: boolean;
}

export function buildHookRequest(input: HookRequestInput): CompositeHookRequest {
  return {
    controller: input.controller,
    parent: input.parent,
    children: objectMap(input.version, input.parent, input.childRules, input.children),
    related: objectMap(input.version, input.parent, input.relatedRules ?? [], input.related ?? []),
    finalizing: input.finalizing,
  };
}

/** The key of an object inside its kind's entry, for one hook version. */
export function objectKey(version: HookVersion, parent: KubeObject, object: KubeObject): string {
  const namespace = object.metadata.namespace ?? '';
  const name = object.metadata.name ?? '';
  if (version === 'v2') return namespace ? `${namespace}/${name}` : name;
  return !parent.metadata.namespace && namespace ? `${namespace}/${name}` : name;
}

function objectMap(version: HookVersion, parent: KubeObject, rules: ResolvedResource[], objects: KubeObject[]): ObjectMap {
  const parentNamespace = parent.metadata.namespace ?? '';
  const map: ObjectMap = {};
  for (const rule of rules) map[groupVersionKindKey(rule.apiVersion, rule.kind)] ??= {};
  for (const object of objects) {
    // v1 requests of a namespaced parent only ever show objects of the parent's own namespace.
    if (version === 'v1' && parentNamespace && (object.metadata.namespace ?? '') !== parentNamespace) continue;
    const group = (map[groupVersionKindKey(object.apiVersion ?? '', object.kind ?? '')] ??= {});
    group[objectKey(version, parent, object)] = object;
  }
  return sortedMap(map);
}

/** Keys in a stable order, as Go's encoding/json writes maps: requests are reproducible. */
function sortedMap(map: ObjectMap): ObjectMap {
  const sorted: ObjectMap = {};
  for (const kind of Object.keys(map).sort()) {
    const group: Record<string, KubeObject> = {};
    for (const key of Object.keys(map[kind]!).sort()) group[key] = map[kind]![key]!;
    sorted[kind] = group;
  }
  return sorted;
}
