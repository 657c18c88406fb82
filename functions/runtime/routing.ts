// Which objects of the reconciled kind an event concerns. Events for the kind itself name their
// object; events for owned objects map to the controller owner (or the owner-name label); events
// for watched objects go through the function's mapper. A forged event can at most cause a
// reconcile of an object that really exists, because reconcile re-reads everything.
import type { Logger } from 'pino';
import type { FunctionDeclaration } from './declaration.ts';
import type { FunctionEvent } from './events.ts';
import { sameKind, type KubeObject, type ObjectKey } from './kinds.ts';
import type { KubeClient } from './kube.ts';

export async function keysForEvent(
  declaration: FunctionDeclaration,
  event: Extract<FunctionEvent, { type: 'change' }>,
  kube: KubeClient,
  log: Logger,
): Promise<ObjectKey[]> {
  const { ref } = event;
  const reconciled = declaration.reconciles;
  if (sameKind(reconciled, ref.apiVersion, ref.kind)) {
    return [{ namespace: reconciled.namespaced ? ref.namespace : '', name: ref.name }];
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
    if (controller) return [{ namespace: reconciled.namespaced ? ref.namespace : '', name: controller.name }];
    const labelled = owned.ownerNameLabel && object.metadata.labels?.[owned.ownerNameLabel];
    return labelled ? [{ namespace: reconciled.namespaced ? ref.namespace : '', name: labelled }] : [];
  }

  const watched = declaration.watches.find((candidate) => sameKind(candidate.kind, ref.apiVersion, ref.kind));
  if (watched) {
    return watched.keysFor({ key: { namespace: ref.namespace, name: ref.name }, object: event.object, deleted: event.action === 'delete' }, { kube, log });
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
