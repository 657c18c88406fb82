// Reconcile helpers for function authors: reads at an announced version, status writes with
// optimistic concurrency, standard conditions, and finalizers (controllerutil.AddFinalizer /
// RemoveFinalizer; Metacontroller's finalizer Manager). Children are written by child-applier.ts,
// Kubernetes Events by recorder.ts.
import { StatusConflictError } from './errors.ts';
import {
  apiVersionOf,
  isNoOlderThan,
  keyOf,
  keyString,
  rfc3339,
  sameKind,
  type KubeObject,
  type ObjectKey,
  type OwnerReference,
  type ResourceKind,
} from './kinds.ts';
import { isConflict, isNotFound } from './kube/errors.ts';
import type { KubeClient } from './kube/client.ts';
import { boundedMessage } from './bounded-messages.ts';

export { StatusConflictError } from './errors.ts';
export type { EventRecorder } from './recorder.ts';

/** metav1.Condition */
export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

export type ConditionInput = Omit<Condition, 'lastTransitionTime'>;

/**
 * Returns the conditions with `next` set in its place (a new type goes last), as apimachinery's
 * meta.SetStatusCondition does: setting the same conditions again gives the same list, so an
 * unchanged status is not written. lastTransitionTime only moves when the status flips, as
 * kubectl wait and every controller-runtime controller expect. The message is bounded: it may
 * quote an answer from outside, and an oversized one would fail the whole status write.
 */
export function setCondition(conditions: Condition[] | undefined, next: ConditionInput, now: Date = new Date()): Condition[] {
  const current = conditions ?? [];
  const previous = current.find((condition) => condition.type === next.type);
  const lastTransitionTime = previous && previous.status === next.status ? previous.lastTransitionTime : rfc3339(now);
  const set: Condition = { ...next, message: boundedMessage(next.message), lastTransitionTime };
  return previous ? current.map((condition) => (condition === previous ? set : condition)) : [...current, set];
}

/** Deep equality of JSON values: decides whether a status write is needed at all. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const keysA = Object.keys(a).filter((key) => (a as Record<string, unknown>)[key] !== undefined);
  const keysB = Object.keys(b).filter((key) => (b as Record<string, unknown>)[key] !== undefined);
  return (
    keysA.length === keysB.length &&
    keysA.every((key) => jsonEqual((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key]))
  );
}

/** A controller ownerReference: the garbage collector deletes the child with its owner. */
export function controllerReference(owner: KubeObject, ownerKind: ResourceKind) {
  return {
    apiVersion: apiVersionOf(ownerKind),
    kind: ownerKind.kind,
    name: owner.metadata.name!,
    uid: owner.metadata.uid!,
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** The object's controller ownerReference (`controller: true`; any other is garbage collection only), if it has one. */
export const controllerOf = (object: KubeObject): OwnerReference | undefined =>
  object.metadata.ownerReferences?.find((reference) => reference.controller === true);

export const isControlledBy = (child: KubeObject, owner: KubeObject): boolean =>
  child.metadata.ownerReferences?.some((reference) => reference.controller && reference.uid === owner.metadata.uid) ?? false;

/**
 * The object at the version an event announced or newer: during a burst of events, from the
 * function's own watch of the kind when it has seen that version or a later one (the
 * declaration's watchDuringBursts; kube/burst-watch.ts); else from the API server's watch cache
 * (resourceVersion=0), which is cheaper for the API server and spares etcd, when the cache holds
 * that version or a later one, else from etcd: when the cache lags behind the announcement, or
 * nothing was announced. `announced` is a resourceVersion, or the event's object (ctx.eventObject), which
 * announces its own when it is an object of `kind` (a Resource-mode body).
 * Either way the object comes from the API server, never from the body: a forged announcement
 * can only cost the second read. It is as fresh as the event that asked for the reconcile, as
 * an informer-fed controller's reads are; a newer change brings its own event, and writes guarded
 * by resourceVersion (the status) refuse a version that has moved on.
 */
export async function getNoOlderThan<T extends KubeObject>(
  kube: KubeClient,
  kind: ResourceKind,
  key: ObjectKey,
  announced: string | KubeObject | undefined,
): Promise<T | undefined> {
  const version =
    typeof announced === 'object'
      ? sameKind(kind, announced.apiVersion, announced.kind)
        ? announced.metadata.resourceVersion
        : undefined
      : announced;
  if (version) {
    const watched = kube.burstWatch(kind)?.read<T>(key, version);
    if (watched) return watched.object;
    const cached = await kube.get<T>(kind, key, { cached: true });
    if (cached && isNoOlderThan(cached.metadata.resourceVersion, version)) return cached;
  }
  return kube.get<T>(kind, key);
}

const STATUS_CONFLICT_RETRIES = 8;

/**
 * Writes `.status` through the status subresource with optimistic concurrency: read, compute,
 * PUT with the read resourceVersion, and on 409 start over from a fresh read. `compute` gets the
 * current object and returns the whole new status, or undefined when the object is gone or
 * nothing should change. No write happens when the status is already as computed. Undefined
 * when the object is gone, also when it went between the read and the write.
 */
export async function updateStatus<T extends KubeObject & { status?: unknown }>(
  kube: KubeClient,
  kind: ResourceKind,
  key: ObjectKey,
  compute: (current: T) => T['status'] | undefined,
  initial?: T,
): Promise<T | undefined> {
  let current = initial ?? (await kube.get<T>(kind, key));
  for (let attempt = 0; attempt <= STATUS_CONFLICT_RETRIES; attempt++) {
    if (!current) return undefined;
    const status = compute(current);
    if (status === undefined || jsonEqual(status, current.status)) return current;
    try {
      return await kube.replace<T>(kind, { ...current, status }, 'status');
    } catch (error) {
      // Deleted since it was read (a kind without the subresource is another 404: NOT_SERVED).
      if (isNotFound(error)) return undefined;
      if (!isConflict(error)) throw error;
      current = await kube.get<T>(kind, key);
    }
  }
  throw new StatusConflictError(
    `status of ${kind.kind} ${keyString(key)} kept changing under us (${STATUS_CONFLICT_RETRIES} conflicts); will retry`,
  );
}

/**
 * Adds `finalizer` to the object (PUT with its resourceVersion; a conflict reads again) and
 * returns the object as written; no write when it is already there. Undefined when the object
 * is gone or being deleted (a finalizer cannot be added then).
 */
export async function ensureFinalizer<T extends KubeObject>(
  kube: KubeClient,
  kind: ResourceKind,
  object: T,
  finalizer: string,
): Promise<T | undefined> {
  return editFinalizers(kube, kind, object, (current) =>
    current.metadata.deletionTimestamp
      ? undefined
      : current.metadata.finalizers?.includes(finalizer)
        ? current.metadata.finalizers
        : [...(current.metadata.finalizers ?? []), finalizer],
  );
}

/** Removes `finalizer` from the object (PUT with its resourceVersion); undefined when the object is gone. */
export async function removeFinalizer<T extends KubeObject>(
  kube: KubeClient,
  kind: ResourceKind,
  object: T,
  finalizer: string,
): Promise<T | undefined> {
  return editFinalizers(kube, kind, object, (current) => current.metadata.finalizers?.filter((name) => name !== finalizer) ?? []);
}

async function editFinalizers<T extends KubeObject>(
  kube: KubeClient,
  kind: ResourceKind,
  object: T,
  next: (current: T) => string[] | undefined,
): Promise<T | undefined> {
  const key = keyOf(object);
  let current: T | undefined = object;
  for (let attempt = 0; attempt <= STATUS_CONFLICT_RETRIES; attempt++) {
    if (!current) return undefined;
    const finalizers = next(current);
    if (finalizers === undefined) return undefined;
    if (jsonEqual(finalizers, current.metadata.finalizers ?? [])) return current;
    try {
      return await kube.replace<T>(kind, { ...current, metadata: { ...current.metadata, finalizers } });
    } catch (error) {
      if (isNotFound(error)) return undefined;
      if (!isConflict(error)) throw error;
      current = await kube.get<T>(kind, key);
    }
  }
  throw new StatusConflictError(`finalizers of ${kind.kind} ${keyString(key)} kept changing under us; will retry`);
}
