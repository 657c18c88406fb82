// The one way functions write their children, after controller-runtime's
// controllerutil.CreateOrUpdate and its OperationResult words: create the child when it is not
// known to exist, else bring the existing one to the desired state, with optimistic concurrency
// and never touching an object of the same name that is not ours. What "as desired" means is the
// caller's merge: by default the desired fields replace the existing ones (mergeChild); copyrator
// passes its copy rules, the composite function the object Metacontroller's 3-way merge planned.
import { StatusConflictError } from './errors.ts';
import { keyOf, keyString, type KubeObject, type ResourceKind } from './kinds.ts';
import { isAlreadyExists, isConflict, isNotFound } from './kube/errors.ts';
import type { KubeClient } from './kube/client.ts';
import { jsonEqual } from './reconciler.ts';

/**
 * What applyChild did: "the child has been …". `conflict`: the name is held by an object that is
 * not ours, left alone. `superseded`: another writer got there first (AlreadyExists on create,
 * Conflict or NotFound on update) and the caller asked to leave it (`onRace: 'leave'`).
 */
export type ApplyResult = 'created' | 'updated' | 'unchanged' | 'conflict' | 'superseded';

export interface Applied<T> {
  result: ApplyResult;
  /** The child as written or as found (for `conflict`, the object holding the name); absent when superseded. */
  object?: T;
}

export interface ApplyOptions<T extends KubeObject> {
  /** Is an existing object of the child's name ours to change? One that is not is never written: `conflict`. */
  isManaged(existing: T): boolean;
  /** The object to PUT over `existing` (at its resourceVersion), or undefined when it already is as desired. Default: mergeChild. */
  merge?(existing: T, desired: T): T | undefined;
  /**
   * The child as the caller has already seen it (the event's object, a listed one, its own read):
   * then no create is tried first and no read is made before the update.
   */
  observed?: T;
  /**
   * After a lost race (AlreadyExists on create, Conflict or NotFound on update): 'retry' (the
   * default) reads the child again and judges it afresh; 'leave' stops there, for a caller whose
   * next event or sync sees the truth.
   */
  onRace?: 'retry' | 'leave';
  /**
   * Where the read after AlreadyExists is served: the API server's watch cache (the default;
   * the PUT's resourceVersion precondition guards a stale answer) or etcd. Any later read is
   * from etcd.
   */
  firstRead?: 'cached' | 'etcd';
}

/** Attempts at one child before the applier gives up for this delivery. */
const APPLY_ATTEMPTS = 8;

const SERVER_FIELDS = new Set(['apiVersion', 'kind', 'metadata', 'status']);
const isEmpty = (value: unknown) =>
  value === undefined || value === null || (typeof value === 'object' && Object.keys(value as object).length === 0);
const sameField = (a: unknown, b: unknown) => (isEmpty(a) && isEmpty(b)) || jsonEqual(a, b);
const subsetOf = (wanted: Record<string, string> | undefined, present: Record<string, string> | undefined) =>
  Object.entries(wanted ?? {}).every(([name, value]) => present?.[name] === value);

/**
 * True when `existing` already has everything `desired` says: each top-level field of desired
 * (besides metadata and status; an empty map equals an absent one) and desired's labels,
 * annotations and ownerReferences (others' labels and annotations may stay).
 */
export function childMatches(existing: KubeObject, desired: KubeObject): boolean {
  const fields = Object.keys(desired).filter((field) => !SERVER_FIELDS.has(field));
  return (
    fields.every((field) => sameField(existing[field], desired[field])) &&
    subsetOf(desired.metadata.labels, existing.metadata.labels) &&
    subsetOf(desired.metadata.annotations, existing.metadata.annotations) &&
    (desired.metadata.ownerReferences === undefined || jsonEqual(existing.metadata.ownerReferences, desired.metadata.ownerReferences))
  );
}

/**
 * The default merge: desired's fields replace the existing ones; labels and annotations are
 * merged (ours win), so what others added survives. Undefined when nothing would change.
 */
export function mergeChild<T extends KubeObject>(existing: T, desired: T): T | undefined {
  if (childMatches(existing, desired)) return undefined;
  const metadata = {
    ...existing.metadata,
    labels: { ...existing.metadata.labels, ...desired.metadata.labels },
    annotations: { ...existing.metadata.annotations, ...desired.metadata.annotations },
    ...(desired.metadata.ownerReferences ? { ownerReferences: desired.metadata.ownerReferences } : {}),
  };
  return { ...existing, ...desired, metadata };
}

/** A merge for children that are never updated in place (a pod): the existing object stays as it is. */
export const keepExisting = (): undefined => undefined;

/**
 * Makes the child look as desired. Unless `observed` is given, creates it first, and on
 * AlreadyExists reads it; an existing child that `isManaged` accepts is PUT as `merge` makes it,
 * with its read resourceVersion. Errors other than the races named in ApplyOptions.onRace are
 * thrown (a refused write among them: the caller reports it).
 */
export async function applyChild<T extends KubeObject>(
  kube: KubeClient,
  kind: ResourceKind,
  desired: T,
  options: ApplyOptions<T>,
): Promise<Applied<T>> {
  const { isManaged, merge = mergeChild, onRace = 'retry' } = options;
  const key = keyOf(desired);
  let existing = options.observed;
  let read: 'cached' | 'etcd' = options.firstRead ?? 'cached';
  for (let attempt = 0; attempt < APPLY_ATTEMPTS; attempt++) {
    if (!existing) {
      try {
        return { result: 'created', object: await kube.create(kind, desired) };
      } catch (error) {
        if (!isAlreadyExists(error)) throw error;
        if (onRace === 'leave') return { result: 'superseded' };
      }
      existing = await kube.get<T>(kind, key, { cached: read === 'cached' });
      read = 'etcd';
      // Deleted between our create and read: create again.
      if (!existing) continue;
    }
    if (!isManaged(existing)) return { result: 'conflict', object: existing };
    const updated = merge(existing, desired);
    if (!updated) return { result: 'unchanged', object: existing };
    try {
      return { result: 'updated', object: await kube.replace<T>(kind, updated) };
    } catch (error) {
      if (!isConflict(error) && !isNotFound(error)) throw error;
      if (onRace === 'leave') return { result: 'superseded' };
      // Changed since read: judge it again from a fresh read. Deleted: create it.
      existing = isConflict(error) ? await kube.get<T>(kind, key) : undefined;
      read = 'etcd';
    }
  }
  throw new StatusConflictError(`${kind.kind} ${keyString(key)} kept changing under us; will retry`);
}
