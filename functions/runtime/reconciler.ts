// Reconcile helpers for function authors: idempotent child creation (createIfAbsent, and
// applyChild after controllerutil.CreateOrUpdate and its OperationResult words), status writes with
// optimistic concurrency, standard conditions, and finalizers (controllerutil.AddFinalizer /
// RemoveFinalizer; Metacontroller's finalizer Manager). Kubernetes Events are in recorder.ts.
import { StatusConflictError } from './errors.ts';
import { apiVersionOf, keyOf, keyString, rfc3339, type KubeObject, type ObjectKey, type OwnerReference, type ResourceKind } from './kinds.ts';
import { isAlreadyExists, isConflict, isNotFound } from './kube/errors.ts';
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
 * Returns the conditions with `next` set. lastTransitionTime only moves when the status flips,
 * as kubectl wait and every controller-runtime controller expect. The message is bounded: it
 * may quote an answer from outside, and an oversized one would fail the whole status write.
 */
export function setCondition(conditions: Condition[] | undefined, next: ConditionInput, now: Date = new Date()): Condition[] {
  const current = conditions ?? [];
  const previous = current.find((condition) => condition.type === next.type);
  const lastTransitionTime = previous && previous.status === next.status ? previous.lastTransitionTime : rfc3339(now);
  return [...current.filter((condition) => condition.type !== next.type), { ...next, message: boundedMessage(next.message), lastTransitionTime }];
}

/** Deep equality of JSON values: decides whether a status write is needed at all. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const keysA = Object.keys(a).filter((key) => (a as Record<string, unknown>)[key] !== undefined);
  const keysB = Object.keys(b).filter((key) => (b as Record<string, unknown>)[key] !== undefined);
  return keysA.length === keysB.length && keysA.every((key) => jsonEqual((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key]));
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
 * Creates the object unless it exists. Children have deterministic names, so "already exists"
 * is success: another replica, or an earlier delivery of the same event, got there first.
 */
export async function createIfAbsent<T extends KubeObject>(kube: KubeClient, kind: ResourceKind, object: T): Promise<{ created: boolean; object: T }> {
  try {
    return { created: true, object: await kube.create(kind, object) };
  } catch (error) {
    if (!isAlreadyExists(error)) throw error;
    // From the watch cache: whatever the caller does with it next is guarded (uid or
    // resourceVersion precondition), so slightly stale is safe and cheaper.
    const existing = await kube.get<T>(kind, { namespace: object.metadata.namespace ?? '', name: object.metadata.name! }, { cached: true });
    // Deleted again between our create and read: the delete event will bring us back.
    return { created: false, object: existing ?? object };
  }
}

/**
 * The object at the version an event announced (the resourceVersion of a Resource-mode body) or
 * newer: from the API server's watch cache (resourceVersion=0) when the cache holds that version
 * or a later one, else from etcd: when the cache lags behind the announcement, or nothing was
 * announced. A read from the cache costs kube-apiserver less CPU than one from etcd, and etcd
 * nothing.
 * Either way the object comes from the API server, never from the body: a forged announcement
 * can only cost the second read. It is as fresh as the event that asked for the reconcile, as
 * an informer-fed controller's reads are; a newer change brings its own event, and writes guarded
 * by resourceVersion (the status) refuse a version that has moved on.
 */
export async function getAnnounced<T extends KubeObject>(kube: KubeClient, kind: ResourceKind, key: ObjectKey, announced: string | undefined): Promise<T | undefined> {
  if (announced) {
    const cached = await kube.get<T>(kind, key, { cached: true });
    const order = cached ? compareResourceVersions(cached.metadata.resourceVersion, announced) : undefined;
    if (cached && order !== undefined && order >= 0) return cached;
  }
  return kube.get<T>(kind, key);
}

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

const STATUS_CONFLICT_RETRIES = 8;

/**
 * Writes `.status` through the status subresource with optimistic concurrency: read, compute,
 * PUT with the read resourceVersion, and on 409 start over from a fresh read. `compute` gets the
 * current object and returns the whole new status, or undefined when the object is gone or
 * nothing should change. No write happens when the status is already as computed.
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
      if (!isConflict(error)) throw error;
      current = await kube.get<T>(kind, key);
    }
  }
  throw new StatusConflictError(`status of ${kind.kind} ${keyString(key)} kept changing under us (${STATUS_CONFLICT_RETRIES} conflicts); will retry`);
}

/** What applyChild did: "the child has been …" (controllerutil.OperationResult). */
export type ApplyResult = 'created' | 'updated' | 'unchanged' | 'conflict';

const SERVER_FIELDS = new Set(['apiVersion', 'kind', 'metadata', 'status']);
const isEmpty = (value: unknown) => value === undefined || value === null || (typeof value === 'object' && Object.keys(value as object).length === 0);
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
  return fields.every((field) => sameField(existing[field], desired[field]))
    && subsetOf(desired.metadata.labels, existing.metadata.labels)
    && subsetOf(desired.metadata.annotations, existing.metadata.annotations)
    && (desired.metadata.ownerReferences === undefined || jsonEqual(existing.metadata.ownerReferences, desired.metadata.ownerReferences));
}

/**
 * Makes the child look as desired: create it; on AlreadyExists read it and, only if
 * `isManaged(existing)` says it is ours, update it when it differs (PUT with the read
 * resourceVersion; a conflict reads again). A foreign object of the same name is never touched:
 * 'conflict'. The desired object's fields replace the existing ones; labels and annotations are
 * merged (ours win), so what others added survives.
 */
export async function applyChild<T extends KubeObject>(kube: KubeClient, kind: ResourceKind, desired: T, options: { isManaged(existing: T): boolean }): Promise<ApplyResult> {
  try {
    await kube.create(kind, desired);
    return 'created';
  } catch (error) {
    if (!isAlreadyExists(error)) throw error;
  }
  const key = keyOf(desired);
  // The first read may be stale (watch cache): the PUT's resourceVersion precondition checks it.
  let existing = await kube.get<T>(kind, key, { cached: true });
  for (let attempt = 0; attempt <= STATUS_CONFLICT_RETRIES; attempt++) {
    // Deleted between our create and read: create again.
    if (!existing) return applyChild(kube, kind, desired, options);
    if (!options.isManaged(existing)) return 'conflict';
    if (childMatches(existing, desired)) return 'unchanged';
    const metadata = {
      ...existing.metadata,
      labels: { ...existing.metadata.labels, ...desired.metadata.labels },
      annotations: { ...existing.metadata.annotations, ...desired.metadata.annotations },
      ...(desired.metadata.ownerReferences ? { ownerReferences: desired.metadata.ownerReferences } : {}),
    };
    try {
      await kube.replace<T>(kind, { ...existing, ...desired, metadata });
      return 'updated';
    } catch (error) {
      if (!isConflict(error)) throw error;
      existing = await kube.get<T>(kind, key);
    }
  }
  throw new StatusConflictError(`${kind.kind} ${keyString(key)} kept changing under us; will retry`);
}

/**
 * Adds `finalizer` to the object (PUT with its resourceVersion; a conflict reads again) and
 * returns the object as written; no write when it is already there. Undefined when the object
 * is gone or being deleted (a finalizer cannot be added then).
 */
export async function ensureFinalizer<T extends KubeObject>(kube: KubeClient, kind: ResourceKind, object: T, finalizer: string): Promise<T | undefined> {
  return editFinalizers(kube, kind, object, (current) => (current.metadata.deletionTimestamp ? undefined : current.metadata.finalizers?.includes(finalizer) ? current.metadata.finalizers : [...(current.metadata.finalizers ?? []), finalizer]));
}

/** Removes `finalizer` from the object (PUT with its resourceVersion); undefined when the object is gone. */
export async function removeFinalizer<T extends KubeObject>(kube: KubeClient, kind: ResourceKind, object: T, finalizer: string): Promise<T | undefined> {
  return editFinalizers(kube, kind, object, (current) => current.metadata.finalizers?.filter((name) => name !== finalizer) ?? []);
}

async function editFinalizers<T extends KubeObject>(kube: KubeClient, kind: ResourceKind, object: T, next: (current: T) => string[] | undefined): Promise<T | undefined> {
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
