// Which instance takes a request: knative/serving pkg/activator/net/lb_policy.go keeps the
// choice a plain function. Here: the least-loaded ready instance with room, ties to the oldest
// (so surplus instances fall idle and scale down when load drops). containerConcurrency > 0 is a
// hard limit per instance (queue-proxy's breaker); with 0 the target is a soft limit, held only
// while more capacity is on its way (an instance takes more than `target` only when no other
// instance is starting).
//
// Per-key affinity: an event with a partition key (the CloudEvents Partitioning extension
// `partitionkey`, set by the source to the reconciled object's namespace/name) goes to the ready
// instance that key hashes to, so one object's events meet in one process, where the runtime's
// workqueue coalesces them; spread over instances they race (409 on the pod create and the
// status write). Rendezvous hashing (highest random weight): adding or removing an instance moves
// only the keys that hash to it. When that instance has no room the least-loaded one takes the
// event: affinity is an optimisation, never a reason to wait.
export interface Candidate {
  state: string;
  inFlight: number;
  /** Stable identity for hashing (the instance number); the position in the list when absent. */
  n?: number;
}

/** The event's partition key as a header or attribute value; undefined when absent or not a string. */
export function partitionKeyOf(value: unknown): string | undefined {
  const key = Array.isArray(value) ? value[0] : value;
  return typeof key === 'string' && key !== '' ? key : undefined;
}

export function pick<T extends Candidate>(
  instances: readonly T[],
  containerConcurrency: number,
  target: number,
  partitionKey?: string,
): T | undefined {
  const starting = instances.some((i) => i.state === 'starting');
  const hasRoom = (inst: T) => (containerConcurrency > 0 ? inst.inFlight < containerConcurrency : !starting || inst.inFlight < target);
  if (partitionKey !== undefined) {
    const home = owner(instances, partitionKey);
    if (home && hasRoom(home)) return home;
  }
  let best: T | undefined;
  for (const inst of instances) {
    if (inst.state !== 'ready') continue;
    if (hasRoom(inst) && (!best || inst.inFlight < best.inFlight)) best = inst;
  }
  return best;
}

/** The ready instance with the highest hash of (key, instance): the key's home while the set of ready instances holds. */
function owner<T extends Candidate>(instances: readonly T[], key: string): T | undefined {
  const base = fnv1a(key, 0x811c9dc5);
  let best: T | undefined;
  let bestWeight = -1;
  for (let i = 0; i < instances.length; i++) {
    const inst = instances[i];
    if (inst.state !== 'ready') continue;
    const weight = mix(base ^ Math.imul((inst.n ?? i) + 1, 0x9e3779b1));
    if (weight > bestWeight) {
      best = inst;
      bestWeight = weight;
    }
  }
  return best;
}

/** 32-bit FNV-1a over the UTF-16 code units of `text`. */
function fnv1a(text: string, seed: number): number {
  let h = seed;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** murmur3's finalizer: spreads the combined bits so every instance wins about as often. */
function mix(value: number): number {
  let h = value >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
