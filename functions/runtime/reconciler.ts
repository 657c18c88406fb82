// Reconcile helpers every function uses: idempotent child creation, status writes with
// optimistic concurrency, standard conditions, and Kubernetes Events on the reconciled object.
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { apiVersionOf, CoreEvent, keyString, type KubeObject, type ObjectKey, type ResourceKind } from './kinds.ts';
import { isAlreadyExists, isConflict, type KubeClient } from './kube.ts';

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
 * as kubectl wait and every controller-runtime controller expect.
 */
export function setCondition(conditions: Condition[] | undefined, next: ConditionInput, now: Date = new Date()): Condition[] {
  const current = conditions ?? [];
  const previous = current.find((condition) => condition.type === next.type);
  const lastTransitionTime = previous && previous.status === next.status ? previous.lastTransitionTime : now.toISOString().replace(/\.\d+Z$/, 'Z');
  return [...current.filter((condition) => condition.type !== next.type), { ...next, lastTransitionTime }];
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
    const existing = await kube.get<T>(kind, { namespace: object.metadata.namespace ?? '', name: object.metadata.name! });
    // Deleted again between our create and read: the delete event will bring us back.
    return { created: false, object: existing ?? object };
  }
}

const STATUS_CONFLICT_RETRIES = 8;

export class StatusConflictError extends Error {}

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

/** Records Kubernetes Events (kubectl describe shows them) on reconciled objects. */
export interface EventRecorder {
  normal(object: KubeObject, kind: ResourceKind, reason: string, message: string): Promise<void>;
  warning(object: KubeObject, kind: ResourceKind, reason: string, message: string): Promise<void>;
}

/** Events are best effort: failing to record one never fails the reconcile it describes. */
export function eventRecorder(kube: KubeClient, component: string, log: Logger): EventRecorder {
  const record = async (object: KubeObject, kind: ResourceKind, type: 'Normal' | 'Warning', reason: string, message: string) => {
    const namespace = object.metadata.namespace || 'default';
    const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    try {
      await kube.create(CoreEvent, {
        metadata: { name: `${object.metadata.name}.${randomBytes(8).toString('hex')}`, namespace },
        involvedObject: {
          apiVersion: apiVersionOf(kind),
          kind: kind.kind,
          name: object.metadata.name,
          namespace: object.metadata.namespace,
          uid: object.metadata.uid,
          resourceVersion: object.metadata.resourceVersion,
        },
        type,
        reason,
        message,
        source: { component },
        reportingComponent: component,
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
      });
    } catch (error) {
      log.warn({ err: (error as Error).message, reason }, 'could not record Kubernetes Event');
    }
  };
  return {
    normal: (object, kind, reason, message) => record(object, kind, 'Normal', reason, message),
    warning: (object, kind, reason, message) => record(object, kind, 'Warning', reason, message),
  };
}
