// Reference-mode events of the reconciled kind (ApiServerSource's default: `{kind, namespace,
// name, apiVersion}` and nothing else) cost one read when there is nothing to do. The intake
// announces each such add or update for its key (skips.ts); the reconcile of that key takes the
// announcement, reads the object once, and hands that fresh read to the reconcile twice: as its
// `hint` (the event was about the object itself, and a fresh read is a body neither stale nor
// forged, so the function may decide from it that nothing is to be done, as it does for a
// Resource-mode event) and as the answer to the reconcile's own first GET of that object, which
// is therefore not sent twice.
//
// Why a misattributed announcement is harmless: announcements are counted per key, and the next
// reconcile of the key that has no hint takes one. Another call may take it first (a resync, or
// an owned object's delete mapped to the key), and be handed the object as a hint. But every
// announcement precedes its own call, so the announcing calls still to come then outnumber the
// announcements left, and one of them finds none and runs in full; it starts after the call that
// took the announcement, so whatever that call was for is carried out. Coalesced follow-up runs
// use no hint at all. An object that is gone reads as absent, and that is served too.
import { kindKeyString, type KindKey, type KubeObject } from './kinds.ts';
import type { KubeClient } from './kube.ts';

/** Announced Reference-mode events per key, until a reconcile takes them; bounded, oldest forgotten. */
export class ReferenceEvents {
  readonly #pending = new Map<string, number>();
  readonly #limit: number;

  constructor(limit = 10_000) {
    this.#limit = limit;
  }

  announce(key: KindKey): void {
    const id = kindKeyString(key);
    const count = (this.#pending.get(id) ?? 0) + 1;
    this.#pending.delete(id);
    this.#pending.set(id, count);
    // A forgotten announcement only makes its reconcile run in full.
    if (this.#pending.size > this.#limit) this.#pending.delete(this.#pending.keys().next().value!);
  }

  /** Takes one announcement for `key`; false when there is none. */
  take(key: KindKey): boolean {
    const id = kindKeyString(key);
    const count = this.#pending.get(id);
    if (!count) return false;
    if (count === 1) this.#pending.delete(id);
    else this.#pending.set(id, count - 1);
    return true;
  }
}

/**
 * Reads `key` once and returns the read as `hint` (absent when the object is gone) with a client
 * that answers the first GET of that same object from it; every other request, and any later GET
 * (a re-read after a conflict), goes to the API server. When the read fails, nothing is read
 * ahead: the reconcile's own read meets the same failure and answers for it.
 */
export async function readOnce(kube: KubeClient, key: KindKey): Promise<{ hint?: KubeObject; kube: KubeClient }> {
  let object: KubeObject | undefined;
  try {
    object = await kube.get(key.kind, key);
  } catch {
    return { kube };
  }
  const id = kindKeyString(key);
  let served = false;
  const get: KubeClient['get'] = async (kind, objectKey, options) => {
    if (!served && kindKeyString({ kind, namespace: kind.namespaced ? objectKey.namespace : '', name: objectKey.name }) === id) {
      served = true;
      return object === undefined ? undefined : structuredClone(object) as never;
    }
    return kube.get(kind, objectKey, options);
  };
  const client = new Proxy(kube, {
    get(target, property) {
      if (property === 'get') return get;
      const value: unknown = Reflect.get(target, property, target);
      // Methods run on the client itself: its private fields are not the proxy's.
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { hint: object, kube: client };
}
