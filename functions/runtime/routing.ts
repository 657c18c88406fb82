// Which objects of the reconciled kind an event concerns (controller-runtime's handlers:
// EnqueueRequestForObject, EnqueueRequestForOwner with OnlyControllerOwner, and mapped
// requests). Events for the kind itself name their object; events for owned objects map to the
// controller owner (or the owner labels); events for watched objects go through the function's
// mapper. A forged event can at most cause a reconcile of an object that really exists, because
// reconcile re-reads everything.
//
// Every name that leaves here reaches a URL, so each is held to the API server's rules first:
// an ownerReference in an event body that names no valid object makes the event malformed
// (BadKeyError → 400); a label or a mapper result that does is dropped with a warning, since the
// event itself may still be good for other keys.
import type { Logger } from 'pino';
import type { FunctionDeclaration } from './declaration.ts';
import { BadKeyError } from './errors.ts';
import type { FunctionEvent } from './events.ts';
import { keyProblem, sameKind, type KubeObject, type ObjectKey } from './kinds.ts';
import type { KubeClient } from './kube.ts';
import { ownerFromLabels } from './owner-labels.ts';

export async function keysForEvent(
  declaration: FunctionDeclaration,
  event: Extract<FunctionEvent, { type: 'change' }>,
  kube: KubeClient,
  log: Logger,
): Promise<ObjectKey[]> {
  const { ref } = event;
  const reconciled = declaration.reconciles;
  const scoped = (namespace: string) => (reconciled.namespaced ? namespace : '');
  if (sameKind(reconciled, ref.apiVersion, ref.kind)) {
    return [{ namespace: scoped(ref.namespace), name: ref.name }];
  }

  const owned = declaration.owns.find((candidate) => sameKind(candidate.kind, ref.apiVersion, ref.kind));
  if (owned) {
    const refKey = { namespace: ref.namespace, name: ref.name };
    // Reference mode carries no owner: read the object (gone → only a Resource-mode body helps).
    const object: KubeObject | undefined = event.object ?? (await kube.get(owned.kind, refKey));
    if (!object) {
      log.debug({ ref }, 'owned object is gone and the event carried no body; the resync will catch up');
      return [];
    }
    const controller = object.metadata.ownerReferences?.find((owner) => owner.controller && sameKind(reconciled, owner.apiVersion, owner.kind));
    if (controller) {
      const key = { namespace: scoped(ref.namespace), name: controller.name };
      const problem = keyProblem(reconciled, key);
      if (problem) throw new BadKeyError(`${ref.kind} ${ref.namespace}/${ref.name}: its controller ownerReference has an ${problem}`);
      return [key];
    }
    for (const labels of [owned.ownerLabels, owned.ownerNameLabel ? { name: owned.ownerNameLabel } : undefined]) {
      if (!labels || !object.metadata.labels?.[labels.name]) continue;
      const owner = await ownerFromLabels(object, labels, reconciled, kube);
      if (typeof owner !== 'string') return [owner];
      log.warn({ ref, reason: owner }, 'owner label names no valid owner; ignored');
    }
    return [];
  }

  const watched = declaration.watches.find((candidate) => sameKind(candidate.kind, ref.apiVersion, ref.kind));
  if (watched) {
    const keys = await watched.keysFor({ key: { namespace: ref.namespace, name: ref.name }, object: event.object, deleted: event.action === 'delete' }, { kube, log });
    return keys
      .map((key) => ({ namespace: scoped(key.namespace), name: key.name }))
      .filter((key) => {
        const problem = keyProblem(reconciled, key);
        if (problem) log.warn({ ref, reason: problem }, `mapper of ${watched.kind.kind} returned a key that names no ${reconciled.kind}; dropped`);
        return !problem;
      });
  }
  return [];
}

/** Unique keys, in first-seen order. */
export function uniqueKeys(keys: ObjectKey[]): ObjectKey[] {
  const seen = new Set<string>();
  return keys.filter((key) => {
    const id = `${key.namespace}/${key.name}`;
    if (seen.has(id)) return false;
    seen.add(id);
    return true;
  });
}
