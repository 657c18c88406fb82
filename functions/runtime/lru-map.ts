// Bounded per-process memories (Events seen, fingerprints, announcements, own writes) forget the
// entry set longest ago: a Map keeps insertion order, so deleting and setting an entry on every
// touch makes that order its recency, and the first key is the one to forget.

/** Sets `key` as the most recent entry of `map`, forgetting the oldest once there are more than `limit`. */
export function setRecent<K, V>(map: Map<K, V>, key: K, value: V, limit: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > limit) map.delete(map.keys().next().value!);
}
