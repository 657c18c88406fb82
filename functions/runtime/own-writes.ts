// The resourceVersions this process itself wrote last, per object. An event whose object is at
// one of them is the echo of our own write (the pod we created, the status we wrote): the
// reconcile that wrote it already knew everything in it, so it needs no reconcile (skips.ts).
// A forged event can only make the function skip; the resync repairs that.
import { kindKeyString, type KubeObject, type ResourceKind } from './kinds.ts';
import { setRecent } from './lru-map.ts';

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
    const id = kindKeyString({ kind, namespace: object.metadata.namespace ?? '', name: object.metadata.name });
    setRecent(this.#versions, id, version, this.#limit);
  }

  /** True when `object` is exactly the version this process wrote last. */
  isOwn(kind: ResourceKind, object: KubeObject): boolean {
    const version = object.metadata.resourceVersion;
    if (!version || !object.metadata.name) return false;
    return this.#versions.get(kindKeyString({ kind, namespace: object.metadata.namespace ?? '', name: object.metadata.name })) === version;
  }
}
