// Events that need no reconcile, decided from the event alone without an API call. An event
// body may make a function do LESS, never write: a forged body can at most make it skip a
// reconcile, which the resync repairs.
//
//   echo         the object is exactly the version this process itself just wrote (its own pod
//                create, its own status write): the reconcile that wrote it knew all of it.
//   status only  an update of the reconciled kind that is settled (isUnchangedSinceReconcile): its generation
//                equals status.observedGeneration, not being deleted, with the declared
//                finalizer in place; for a function that reads the object's labels or
//                annotations (`readsMetadata`, the default) also with the metadata this process
//                last reconciled: only the status changed. A poll reconciles only the objects
//                of its listing that are not settled.
//   unwanted     a change of an owned or watched kind the declaration leaves out (`changes`):
//                its Trigger does not deliver it, and one that comes anyway is not reconciled.
// Deletes are never skipped as echoes: a re-list's synthesized delete may carry the last version we wrote.
//
// A Reference-mode add or update of the reconciled kind carries nothing to decide from; it is
// announced instead (reference-reads.ts), so that its reconcile can stop after one read.
import { unwantedChanges, type FunctionDeclaration } from '../declaration.ts';
import type { FunctionEvent } from '../events.ts';
import { keyProblem, kindKey, kindKeyString, sameKind, type KindKey, type KubeObject, type ResourceKind } from '../kinds.ts';
import type { OwnWrites } from '../own-writes.ts';
import { ReferenceEvents } from './reference-reads.ts';
import { setRecent } from '../lru-map.ts';

/** What of an object's metadata a reconcile may have acted on, besides its spec. */
export function metadataFingerprint(object: KubeObject): string {
  const { labels, annotations, finalizers, ownerReferences, deletionTimestamp, uid } = object.metadata;
  return JSON.stringify([uid, deletionTimestamp, labels, annotations, finalizers, ownerReferences]);
}

/**
 * Fingerprints of the objects this process reconciled last, per key; bounded, oldest forgotten.
 * Also the Reference-mode events of the reconciled kind announced and not yet reconciled.
 */
export class SeenObjects {
  readonly #fingerprints = new Map<string, string>();
  readonly #limit: number;
  readonly references: ReferenceEvents;

  constructor(limit = 10_000) {
    this.#limit = limit;
    this.references = new ReferenceEvents(limit);
  }

  remember(key: KindKey, object: KubeObject): void {
    const id = kindKeyString(key);
    setRecent(this.#fingerprints, id, metadataFingerprint(object), this.#limit);
  }

  same(key: KindKey, object: KubeObject): boolean {
    return this.#fingerprints.get(kindKeyString(key)) === metadataFingerprint(object);
  }
}

/** The kind of the event's object among those the function handles. */
function kindOf(declaration: FunctionDeclaration, ref: { apiVersion: string; kind: string }): ResourceKind | undefined {
  const kinds = [
    declaration.reconciles,
    ...declaration.owns.map((owned) => owned.kind),
    ...declaration.watches.map((watched) => watched.kind),
  ];
  return kinds.find((kind) => sameKind(kind, ref.apiVersion, ref.kind));
}

/** Why the event needs no reconcile, or undefined when it does (a Reference-mode change of the reconciled kind is announced in `seen`). */
export function skipReason(
  declaration: FunctionDeclaration,
  event: Extract<FunctionEvent, { type: 'change' }>,
  ownWrites: OwnWrites,
  seen: SeenObjects,
): string | undefined {
  const unwanted = unwantedChanges(declaration).find(({ kind }) => sameKind(kind, event.ref.apiVersion, event.ref.kind));
  if (unwanted?.actions.includes(event.action))
    return `${declaration.name} does not ask for ${event.action} events of ${event.ref.kind} (its declaration's changes)`;
  const object = event.object;
  if (
    !object &&
    event.mode === 'ref' &&
    event.action !== 'delete' &&
    sameKind(declaration.reconciles, event.ref.apiVersion, event.ref.kind)
  ) {
    const key = kindKey(declaration.reconciles, event.ref);
    if (!keyProblem(key.kind, key)) seen.references.announce(key);
  }
  if (!object || event.action === 'delete') return undefined;
  const kind = kindOf(declaration, event.ref);
  if (!kind) return undefined;
  const what = `${event.ref.kind} ${event.ref.namespace ? `${event.ref.namespace}/` : ''}${event.ref.name}`;
  if (ownWrites.isOwn(kind, object))
    return `${what} is at the version this function wrote (resourceVersion ${object.metadata.resourceVersion})`;
  if (kind !== declaration.reconciles || event.action !== 'update') return undefined;
  const key = { kind, namespace: kind.namespaced ? event.ref.namespace : '', name: event.ref.name };
  if (!isUnchangedSinceReconcile(declaration, key, object, seen)) return undefined;
  return `${what}: only its status changed (generation ${object.metadata.generation} observed)`;
}

/**
 * True when an object of the reconciled kind shows that its last reconcile saw all of it: its
 * generation equals status.observedGeneration, it is not being deleted, the declared finalizer is
 * in place, and for a function that reads labels or annotations (`readsMetadata`) this process
 * last reconciled the same metadata.
 */
export function isUnchangedSinceReconcile(declaration: FunctionDeclaration, key: KindKey, object: KubeObject, seen: SeenObjects): boolean {
  const generation = object.metadata.generation;
  const observed = (object.status as { observedGeneration?: unknown } | undefined)?.observedGeneration;
  if (generation === undefined || generation !== observed || object.metadata.deletionTimestamp) return false;
  const finalizer = declaration.finalizer?.name;
  if (finalizer && !object.metadata.finalizers?.includes(finalizer)) return false;
  return !declaration.readsMetadata || seen.same(key, object);
}
