// From observed and desired children to the writes that make them agree, as a list of values.
//
// Upstream: metacontroller pkg/controller/common/manage_children.go (ManageChildren: first delete
// observed children that are not desired, then create or update each desired one; deleteChildren
// skips children already pending deletion and deletes with a uid precondition and Background
// propagation; DynamicApply.Apply: an existing child is 3-way merged and left alone when nothing
// changed or when it is pending deletion, else OnDelete (default) never updates, Recreate deletes
// it now so the next sync creates it afresh, InPlace updates it; a missing child is created with
// the last-applied annotation and a controller ownerReference unless the hook already gave one
// with the parent's uid) and pkg/controller/composite/rolling_update.go (updateStrategyMap: the
// method is looked up by group and kind, version ignored; a missing or empty method is OnDelete).
//
// Children are matched by kind (`<Kind>.<group>/<version>`) and `namespace/name`.
// RollingRecreate and RollingInPlace act like Recreate and InPlace here: the one-child-at-a-time
// rollout upstream drives through ControllerRevisions is not implemented.
import { type KubeObject, type OwnerReference, cut, quote } from '../../runtime/index.ts';
import { applyUpdate, forCreate } from './apply.ts';
import { controllerRefFor } from './claim.ts';
import { groupKindKey, groupVersionKindKey, type ChildUpdateMethod, type ResolvedResource } from './types.ts';

/**
 * Completes "the child has been …" once the shell has carried it out. A create or an update holds
 * what its object is made of, not the object: a hook may answer tens of thousands of children,
 * and the shell makes each one (objectToWrite) only as its write starts.
 */
export type ChildOperation =
  /** `owner`: the controller reference to add; none when the hook's child already names the parent. */
  | { action: 'create'; desired: KubeObject; owner?: OwnerReference }
  | { action: 'update'; observed: KubeObject; desired: KubeObject }
  /** Delete now (uid precondition, Background propagation); the next sync creates it again. */
  | { action: 'recreate'; observed: KubeObject }
  | { action: 'delete'; observed: KubeObject }
  | { action: 'unchanged'; observed: KubeObject; reason: string }
  /** This child cannot be applied; the others still are, and the sync reports the reason. */
  | { action: 'error'; child: KubeObject; reason: string };

/** Update methods by group and kind; children of other kinds default to OnDelete. */
export type UpdateStrategies = Record<string, ChildUpdateMethod>;

export function updateStrategies(rules: ResolvedResource[], methods: (ChildUpdateMethod | undefined)[]): UpdateStrategies {
  const strategies: UpdateStrategies = {};
  rules.forEach((rule, index) => {
    const method = methods[index];
    if (method && method !== 'OnDelete') strategies[groupKindKey(rule.apiVersion, rule.kind)] = method;
  });
  return strategies;
}

export const methodFor = (strategies: UpdateStrategies, child: KubeObject): ChildUpdateMethod =>
  strategies[groupKindKey(child.apiVersion ?? '', child.kind ?? '')] ?? 'OnDelete';

export interface ManageChildrenInput {
  parent: KubeObject;
  /** The parent's apiVersion and kind, for the controller ownerReference of new children. */
  parentApiVersion: string;
  parentKind: string;
  /** Claimed children (claim.ts), including adopted ones. */
  observed: KubeObject[];
  /** The hook's children after desiredChildren (hook-response.ts). */
  desired: KubeObject[];
  strategies: UpdateStrategies;
}

export const childIdentity = (object: KubeObject): string =>
  `${groupVersionKindKey(object.apiVersion ?? '', object.kind ?? '')} ${object.metadata.namespace ? `${object.metadata.namespace}/` : ''}${object.metadata.name}`;

export function planChildren(input: ManageChildrenInput): ChildOperation[] {
  // One reference for every create: the parent's.
  const owner = controllerRefFor(input.parent, input.parentApiVersion, input.parentKind);
  const desired = new Map<string, KubeObject>();
  // The same child twice: the last one wins, as when upstream builds its map.
  for (const child of input.desired) desired.set(childIdentity(child), child);
  const observed = new Map<string, KubeObject>(input.observed.map((child) => [childIdentity(child), child]));

  const operations: ChildOperation[] = [];
  for (const [identity, child] of observed) {
    if (desired.has(identity) || child.metadata.deletionTimestamp) continue;
    operations.push({ action: 'delete', observed: child });
  }
  for (const [identity, child] of desired) {
    const existing = observed.get(identity);
    if (existing) operations.push(planUpdate(existing, child, methodFor(input.strategies, child)));
    else if ((child.metadata.ownerReferences ?? []).some((reference) => reference.uid === input.parent.metadata.uid))
      operations.push({ action: 'create', desired: child });
    else operations.push({ action: 'create', desired: child, owner });
  }
  return operations;
}

/**
 * The object a create POSTs (the last-applied annotation records the hook's child as given,
 * before the controller reference is added) or an update PUTs (the 3-way merge again: the same
 * inputs give the object planUpdate judged changed).
 */
export function objectToWrite(operation: Extract<ChildOperation, { action: 'create' | 'update' }>): KubeObject {
  if (operation.action === 'update') {
    const applied = applyUpdate(operation.observed, operation.desired);
    if (!applied.ok) throw new Error(applied.reason);
    return applied.object;
  }
  const object = forCreate(operation.desired);
  if (operation.owner)
    object.metadata = { ...object.metadata, ownerReferences: [...(object.metadata.ownerReferences ?? []), operation.owner] };
  return object;
}

function planUpdate(observed: KubeObject, desired: KubeObject, method: ChildUpdateMethod): ChildOperation {
  const applied = applyUpdate(observed, desired);
  if (!applied.ok) return { action: 'error', child: desired, reason: applied.reason };
  if (!applied.changed) return { action: 'unchanged', observed, reason: 'up to date' };
  if (observed.metadata.deletionTimestamp) return { action: 'unchanged', observed, reason: 'pending deletion of child object' };
  switch (method) {
    case 'OnDelete':
      return { action: 'unchanged', observed, reason: 'OnDelete update strategy selected' };
    case 'Recreate':
    case 'RollingRecreate':
      return { action: 'recreate', observed };
    case 'InPlace':
    case 'RollingInPlace':
      return { action: 'update', observed, desired };
    default:
      return {
        action: 'error',
        child: desired,
        reason: `invalid update strategy for ${desired.kind}: unknown method ${quote(String(method))}`,
      };
  }
}

/** Child errors named in a sync's error message, each cut to CHILD_ERROR_CHARS; the rest are counted. */
export const LISTED_CHILD_ERRORS = 3;
/** With three of them, the message still fits an Event's 1 KiB note whole, its count included. */
const CHILD_ERROR_CHARS = 250;

/**
 * The one message for a sync whose child writes failed (upstream aggregates every error): the
 * first few, each bounded, then how many more. It becomes a SyncError Event and, for a sweep, a
 * failed key's message in the function's answer, so it must not grow with the number of
 * children (80 children refused by a full quota made an answer header undici refuses).
 */
export function childErrorsMessage(errors: string[]): string {
  const listed = errors.slice(0, LISTED_CHILD_ERRORS).map((error) => cut(error, CHILD_ERROR_CHARS));
  const more = errors.length - listed.length;
  return `${listed.join('; ')}${more > 0 ? `; and ${more} more child error${more > 1 ? 's' : ''}` : ''}`;
}
