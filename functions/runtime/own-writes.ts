// The resourceVersions this process itself wrote last, per object. An event whose object is at
// one of them is the echo of our own write (the pod we created, the status we wrote): the
// reconcile that wrote it already knew everything in it, so it needs no reconcile (skips.ts).
// A forged event can only make the function skip; the resync repairs that.
//
// Kept by group and kind (kinds.ts groupKind), the identity an event names too: an event of a
// kind known only at run time is recognised without resolving its kind.
import { groupKind, keyString, parseApiVersion, type KubeObject, type ResourceKind } from './kinds.ts';
import { setRecent } from './lru-map.ts';

/** A kind as an event names it: apiVersion and kind (the version does not matter). */
export interface KindRef {
  apiVersion: string;
  kind: string;
}

const idOf = (kindOfObject: string, object: KubeObject): string =>
  `${kindOfObject}:${keyString({ namespace: object.metadata.namespace ?? '', name: object.metadata.name ?? '' })}`;

const groupKindOf = ({ apiVersion, kind }: KindRef): string => {
  const { group } = parseApiVersion(apiVersion);
  return group ? `${group}/${kind}` : kind;
};

/** Bounded; the oldest entries are forgotten. */
export class OwnWrites {
  readonly #versions = new Map<string, string>();
  readonly #limit: number;

  constructor(limit = 10_000) {
    this.#limit = limit;
  }

  record(kind: ResourceKind, object: KubeObject | undefined): void {
    const version = object?.metadata?.resourceVersion;
    if (!version || !object.metadata.name) return;
    setRecent(this.#versions, idOf(groupKind(kind), object), version, this.#limit);
  }

  /** True when `object` is exactly the version this process wrote last. */
  isOwn(kind: ResourceKind, object: KubeObject): boolean {
    return this.#isOwn(groupKind(kind), object);
  }

  /** isOwn for a kind named as an event names it. */
  isOwnOf(ref: KindRef, object: KubeObject): boolean {
    return this.#isOwn(groupKindOf(ref), object);
  }

  #isOwn(kindOfObject: string, object: KubeObject): boolean {
    const version = object.metadata.resourceVersion;
    if (!version || !object.metadata.name) return false;
    return this.#versions.get(idOf(kindOfObject, object)) === version;
  }
}
