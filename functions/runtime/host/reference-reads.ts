// Reference-mode events of the reconciled kind (ApiServerSource's default: `{kind, namespace,
// name, apiVersion}` and nothing else) cost one read when there is nothing to do. The intake
// announces each such add or update for its key (skips.ts); the reconcile of that key takes the
// announcement, and its own first read of the object becomes its `eventObject` as soon as it returns:
// the event was about the object itself, and a fresh read is a body neither stale nor forged, so
// the function may decide from it that nothing is to be done, as it does for a Resource-mode
// event. (A function reads `ctx.eventObject` after that read to benefit.)
//
// Why a misattributed announcement is harmless: announcements are counted per key, and the next
// reconcile of the key that has no event object takes one. Another call may take it first (a resync, or
// an owned object's delete mapped to the key), and be handed the object as its event object. But every
// announcement precedes its own call, so the announcing calls still to come then outnumber the
// announcements left, and one of them finds none and runs in full; it starts after the call that
// took the announcement, so whatever that call was for is carried out. Coalesced follow-up runs
// use no event object at all.
import { kindKeyString, type KindKey, type KubeObject, type ObjectKey, type ResourceKind } from '../kinds.ts';
import type { KubeClient } from '../kube/client.ts';
import { setRecent } from '../lru-map.ts';

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
    // A forgotten announcement only makes its reconcile run in full.
    setRecent(this.#pending, id, count, this.#limit);
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
 * A client for one reconcile that answers as `kube` does and, when the reconcile's first read of
 * `key` returns the object (a read from the API server itself, not its watch cache), also sets
 * it as `ctx.eventObject`: the reconcile is not delayed by a read of its own, makes no request it would
 * not make anyway, and sees the event object from the moment its own read returns.
 */
export function eventObjectFromFirstRead(ctx: { kube: KubeClient; eventObject?: KubeObject }, key: KindKey): KubeClient {
  const kube = ctx.kube;
  const id = kindKeyString(key);
  let first = true;
  const get = async <T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    objectKey: ObjectKey,
    options?: { cached?: boolean },
  ): Promise<T | undefined> => {
    const object = await kube.get<T>(kind, objectKey, options);
    if (first && kindKeyString({ kind, namespace: kind.namespaced ? objectKey.namespace : '', name: objectKey.name }) === id) {
      first = false;
      if (object && !options?.cached) ctx.eventObject = structuredClone(object);
    }
    return object;
  };
  return new Proxy(kube, {
    get(target, property) {
      if (property === 'get') return get;
      const value: unknown = Reflect.get(target, property, target);
      // Methods run on the client itself: its private fields are not the proxy's.
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
