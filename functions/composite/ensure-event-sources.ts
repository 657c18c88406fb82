// Keeps the event sources of one CompositeController (event-sources.ts) in place on the cluster.
//
// ensureEventing converges like Knative's own reconcilers (`equality.Semantic.DeepDerivative`
// of desired against existing, knative.dev/pkg): fields we never set (defaults, additions of
// others) are left alone; what we set (labels, our controller reference, spec, rules, roleRef,
// subjects) is restored when it drifted. It reads first (the API server's watch cache), so a
// controller whose objects are in place costs reads only, never a write.
import {
  ApiError,
  isAlreadyExists,
  isConflict,
  type KubeClient,
  TransientError,
  keyOf,
  type KubeObject,
  controllerOf,
} from '../runtime/index.ts';
import { eventingObjectsFor, managedKindOf, managedObjectKeys, type ControllerKinds, type EventingOptions } from './event-sources.ts';

/** The top-level fields we own besides metadata. */
const OWNED_FIELDS = ['spec', 'rules', 'roleRef', 'subjects'] as const;

/**
 * DeepDerivative: `actual` carries everything `desired` sets. Unset fields of `desired` are
 * ignored; an empty object matches an absent one (Knative 1.0's ApiServerSource schema prunes
 * `namespaceSelector: {}`); arrays must have the same length.
 */
export function deepDerivative(desired: unknown, actual: unknown): boolean {
  if (desired === undefined) return true;
  if (Array.isArray(desired))
    return Array.isArray(actual) && actual.length === desired.length && desired.every((item, index) => deepDerivative(item, actual[index]));
  if (desired !== null && typeof desired === 'object') {
    const entries = Object.entries(desired);
    if (entries.length === 0)
      return (
        actual === undefined ||
        (actual !== null && typeof actual === 'object' && !Array.isArray(actual) && Object.keys(actual).length === 0)
      );
    if (actual === null || typeof actual !== 'object' || Array.isArray(actual)) return false;
    return entries.every(([field, value]) => deepDerivative(value, (actual as Record<string, unknown>)[field]));
  }
  return desired === actual;
}

/** Whether `actual` holds what we set on `desired` (labels, our controller reference, owned fields). */
export function inPlace(desired: KubeObject, actual: KubeObject): boolean {
  const ours = desired.metadata.ownerReferences![0]!;
  return (
    controllerOf(actual)?.uid === ours.uid &&
    deepDerivative(desired.metadata.labels, actual.metadata.labels ?? {}) &&
    OWNED_FIELDS.every((field) => deepDerivative(desired[field], actual[field]))
  );
}

/** `actual` with what we own taken from `desired`; whatever else is on it stays. */
export function repaired(desired: KubeObject, actual: KubeObject): KubeObject {
  const ours = desired.metadata.ownerReferences![0]!;
  const others = (actual.metadata.ownerReferences ?? []).filter((reference) => !reference.controller && reference.uid !== ours.uid);
  const owned = Object.fromEntries(OWNED_FIELDS.filter((field) => desired[field] !== undefined).map((field) => [field, desired[field]]));
  return {
    ...actual,
    ...owned,
    metadata: { ...actual.metadata, labels: { ...actual.metadata.labels, ...desired.metadata.labels }, ownerReferences: [ours, ...others] },
  };
}

/** What was done to one object, in the words of controller-runtime's OperationResult. */
export type EventingOperation = 'unchanged' | 'created' | 'updated' | 'recreated' | 'deleted';

export interface EventingResult {
  kind: string;
  name: string;
  operation: EventingOperation;
}

/**
 * Creates or repairs the event sources of `controller` (eventingObjectsFor), and deletes the ones
 * it no longer needs (its child kinds went, or its kinds stopped needing a Role or a ClusterRole)
 * when they are its own. Writes nothing when everything is in place. A write that races another
 * replica's (409 Conflict) is a TransientError: the next attempt reads again.
 */
export async function ensureEventing(
  controller: KubeObject,
  kinds: ControllerKinds,
  ctx: { kube: KubeClient },
  options: EventingOptions,
): Promise<EventingResult[]> {
  const { kube } = ctx;
  const desired = eventingObjectsFor(controller, kinds, options);
  const results: EventingResult[] = [];
  try {
    for (const object of desired)
      results.push({ kind: object.kind!, name: object.metadata.name!, operation: await ensureObject(kube, object) });
    const wanted = new Set(desired.map((object) => `${object.kind}/${object.metadata.name}`));
    const uid = controller.metadata.uid;
    for (const candidate of managedObjectKeys(controller.metadata.name!, options)) {
      if (wanted.has(`${candidate.kind.kind}/${candidate.name}`)) continue;
      const existing = await readUnlessForbidden(kube.get(candidate.kind, candidate, { cached: true }));
      if (!existing || controllerOf(existing)?.uid !== uid) continue;
      if (await kube.delete(candidate.kind, candidate, { uid: existing.metadata.uid }))
        results.push({ kind: candidate.kind.kind, name: candidate.name, operation: 'deleted' });
    }
  } catch (error) {
    if (isConflict(error) || isAlreadyExists(error))
      throw new TransientError(`event sources of CompositeController ${controller.metadata.name}: ${(error as Error).message}`, {
        cause: error,
      });
    throw error;
  }
  return results;
}

/**
 * The object, or undefined when this identity may not read it: then it cannot have made it either
 * (a namespaced install holds no ClusterRole rights unless a kind of its controllers is cluster-scoped).
 */
async function readUnlessForbidden(read: Promise<KubeObject | undefined>): Promise<KubeObject | undefined> {
  try {
    return await read;
  } catch (error) {
    if (error instanceof ApiError && error.code === 403) return undefined;
    throw error;
  }
}

async function ensureObject(kube: KubeClient, object: KubeObject): Promise<EventingOperation> {
  const kind = managedKindOf(object);
  const key = keyOf(object);
  let existing = await kube.get(kind, key, { cached: true });
  if (!existing) {
    try {
      await kube.create(kind, object);
      return 'created';
    } catch (error) {
      if (!isAlreadyExists(error)) throw error;
      existing = await kube.get(kind, key);
      if (!existing) throw new TransientError(`${object.kind} ${key.name} was there and went while being created`, { cause: error });
    }
  }
  if (inPlace(object, existing)) return 'unchanged';
  // A binding's roleRef cannot change (the API server refuses the update): replace the binding.
  if (object.roleRef !== undefined && !deepDerivative(object.roleRef, existing.roleRef)) {
    await kube.delete(kind, key, { uid: existing.metadata.uid });
    await kube.create(kind, object);
    return 'recreated';
  }
  await kube.replace(kind, repaired(object, existing));
  return 'updated';
}
