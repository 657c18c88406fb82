// Which objects of the reconciled kind an event concerns (controller-runtime's handlers:
// EnqueueRequestForObject, EnqueueRequestForOwner with OnlyControllerOwner, and mapped
// requests). Events for the kind itself name their object; events for owned objects map to the
// controller owner (or the owner labels); events for watched objects go through the function's
// mapper; events of kinds known only at run time go to the function's own `runtimeKinds`. A forged event can at most cause a reconcile of an object that really exists, because
// reconcile re-reads everything.
//
// Every name that leaves here reaches a URL, so each is held to the API server's rules first:
// an ownerReference in an event body that names no valid object makes the event malformed
// (BadKeyError → 400); a label or a mapper result that does is dropped with a warning, since the
// event itself may still be good for other keys.
import type { Logger } from 'pino';
import type { FunctionDeclaration, MapperContext } from '../declaration.ts';
import { BadKeyError } from '../errors.ts';
import type { ChangeEvent } from '../events.ts';
import { kindKey, kindKeyString, keyProblem, sameKind, type KindKey, type KubeObject, type ObjectKey } from '../kinds.ts';
import type { KubeClient } from '../kube/client.ts';
import { ownerFromLabels } from '../owner-labels.ts';

export async function keysForEvent(
  declaration: FunctionDeclaration,
  event: ChangeEvent,
  kube: KubeClient,
  log: Logger,
  installNamespace?: string,
): Promise<KindKey[]> {
  const reconciled = declaration.reconciles;
  const ctx: MapperContext = { kube, log, installNamespace };
  const keys = await declaredKindKeys(declaration, event, ctx);
  if (keys) return keys.map((key) => kindKey(reconciled, key));
  if (!declaration.runtimeKinds) return [];
  // Kinds known only at run time: the function finds the keys, held to the same rules.
  const found = await declaration.runtimeKinds.keysFor(event, ctx);
  return found.filter((key) => {
    const problem = keyProblem(key.kind, key);
    if (problem) log.warn({ ref: event.ref, reason: problem }, `a key for ${event.ref.kind} names no ${key.kind.kind}; dropped`);
    return !problem;
  });
}

/** The keys of the reconciled kind, when the event's kind is one the declaration names (undefined otherwise). */
async function declaredKindKeys(
  declaration: FunctionDeclaration,
  event: ChangeEvent,
  ctx: MapperContext,
): Promise<ObjectKey[] | undefined> {
  const { ref } = event;
  const { kube, log } = ctx;
  const reconciled = declaration.reconciles;
  const scoped = (namespace: string) => (reconciled.namespaced ? namespace : '');
  if (sameKind(reconciled, ref.apiVersion, ref.kind)) {
    // A namespaced object's event without its namespace (a forged Reference event) would
    // otherwise reach reconcile with namespace '', which a list reads as "every namespace".
    const key = { namespace: scoped(ref.namespace), name: ref.name };
    const problem = keyProblem(reconciled, key);
    if (problem) throw new BadKeyError(`${ref.kind} ${ref.namespace}/${ref.name}: ${problem}`);
    return [key];
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
    const controller = object.metadata.ownerReferences?.find(
      (owner) => owner.controller && sameKind(reconciled, owner.apiVersion, owner.kind),
    );
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
    const keys = await watched.keysFor(
      { key: { namespace: ref.namespace, name: ref.name }, object: event.object, deleted: event.action === 'delete' },
      ctx,
    );
    return keys
      .map((key) => ({ namespace: scoped(key.namespace), name: key.name }))
      .filter((key) => {
        const problem = keyProblem(reconciled, key);
        if (problem)
          log.warn({ ref, reason: problem }, `mapper of ${watched.kind.kind} returned a key that names no ${reconciled.kind}; dropped`);
        return !problem;
      });
  }
  return undefined;
}

/** Unique keys, in first-seen order. */
export function uniqueKeys(keys: KindKey[]): KindKey[] {
  const seen = new Set<string>();
  return keys.filter((key) => {
    const id = kindKeyString(key);
    if (seen.has(id)) return false;
    seen.add(id);
    return true;
  });
}
