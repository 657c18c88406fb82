// The resourceVersions this process itself wrote last, per object. An event whose object is at
// one of them is the echo of our own write (the pod we created, the status we wrote): the
// reconcile that wrote it already knew everything in it, so it needs no reconcile (skips.ts).
// Not only the last one: a reconcile often writes an object twice (its finalizer, then its
// status), and the first write's echo arrives after the second; each version is one state this
// process wrote and knew, and anyone else's write is another version with an event of its own.
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

/** Versions remembered per object: a reconcile's writes of one object (finalizer, status) and a few more. */
const VERSIONS_PER_OBJECT = 4;

/** Bounded; the oldest entries are forgotten. */
export class OwnWrites {
  readonly #versions = new Map<string, string[]>();
  readonly #limit: number;

  constructor(limit = 10_000) {
    this.#limit = limit;
  }

  record(kind: ResourceKind, object: KubeObject | undefined): void {
    const version = object?.metadata?.resourceVersion;
    if (!version || !object.metadata.name) return;
    const id = idOf(groupKind(kind), object);
    const versions = [...(this.#versions.get(id) ?? []), version].slice(-VERSIONS_PER_OBJECT);
    setRecent(this.#versions, id, versions, this.#limit);
  }

  /** True when `object` is exactly a version this process wrote (one of its last few writes of it). */
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
    return this.#versions.get(idOf(kindOfObject, object))?.includes(version) ?? false;
  }
}
