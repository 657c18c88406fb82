// Client-side "kubectl apply" for children: a 3-way merge of what the hook asked for last time
// (the last-applied annotation), what it asks for now, and what the object looks like now, so
// fields set by others (defaults, other controllers, people) survive and fields the hook stopped
// setting go away.
//
// Upstream: metacontroller pkg/dynamic/apply/apply.go (Merge, mergeObject, mergeArray,
// mergeListMap, detectListMapKey with knownMergeKeys, SetLastApplied/GetLastApplied) and
// pkg/controller/common/manage_children.go (ApplyUpdate: the hook's object never carries the
// annotation itself, read-only ObjectMeta system fields and .status are reverted to the
// observed ones so they never cause a diff, then the annotation records the new desired object;
// the create path records the annotation before the ownerReference is added).
import { type KubeObject, jsonEqual } from '../../runtime/index.ts';

export const LAST_APPLIED_ANNOTATION = 'metacontroller.k8s.io/last-applied-configuration';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

/** Read-only, system-populated ObjectMeta fields (objectMetaSystemFields upstream). */
const SYSTEM_FIELDS = [
  'selfLink',
  'uid',
  'resourceVersion',
  'generation',
  'creationTimestamp',
  'deletionTimestamp',
  'deletionGracePeriodSeconds',
  'managedFields',
];

/** Field names guessed as list-map keys, highest precedence first. */
const KNOWN_MERGE_KEYS = ['containerPort', 'port', 'mountPath', 'name', 'uid', 'ip', 'path'];

/** applyUpdate's answer: the object to PUT and whether it differs from the observed one, or why none can be made. */
export type MergedUpdate = { ok: true; object: KubeObject; changed: boolean } | { ok: false; reason: string };

/**
 * The object to PUT for an existing child (ApplyUpdate upstream) and whether it differs from the
 * observed one at all; `changed: false` means no write and, for Recreate, no recreate.
 */
export function applyUpdate(observed: KubeObject, desired: KubeObject): MergedUpdate {
  const lastApplied = lastAppliedOf(observed);
  if (!lastApplied.ok) return lastApplied;
  const update = withoutLastApplied(desired);
  const merged = merge(structuredClone(observed) as unknown as Json, lastApplied.value, update as unknown as Json) as JsonObject;
  for (const field of SYSTEM_FIELDS) revert(merged, observed as unknown as JsonObject, ['metadata', field]);
  revert(merged, observed as unknown as JsonObject, ['status']);
  const object = withLastApplied(merged as unknown as KubeObject, update);
  return { ok: true, object, changed: !jsonEqual(comparable(object), comparable(observed)) };
}

/**
 * The object with its last-applied annotation parsed, for the "changed?" question. Upstream
 * compares the annotation's text, which its one writer (Go's json.Marshal) makes canonical; an
 * annotation written by another writer (another client, a hand edit) that
 * says the same must not make every child look changed, which under Recreate deletes it.
 */
function comparable(object: KubeObject): KubeObject {
  const text = object.metadata.annotations?.[LAST_APPLIED_ANNOTATION];
  if (!text) return object;
  try {
    return {
      ...object,
      metadata: { ...object.metadata, annotations: { ...object.metadata.annotations, [LAST_APPLIED_ANNOTATION]: JSON.parse(text) } },
    };
  } catch {
    return object;
  }
}

/** The object to POST for a missing child: the annotation records the hook's object as given. */
export function forCreate(desired: KubeObject): KubeObject {
  return withLastApplied(structuredClone(desired), desired);
}

/** Merge(observed, lastApplied, desired) upstream: a copy of observed with the desired changes. */
export function threeWayMerge(observed: JsonObject, lastApplied: JsonObject | null, desired: JsonObject): JsonObject {
  return merge(structuredClone(observed), lastApplied, desired) as JsonObject;
}

export function lastAppliedOf(object: KubeObject): { ok: true; value: JsonObject | null } | { ok: false; reason: string } {
  const text = object.metadata.annotations?.[LAST_APPLIED_ANNOTATION];
  if (!text) return { ok: true, value: null };
  try {
    const value = JSON.parse(text) as Json;
    if (value !== null && (typeof value !== 'object' || Array.isArray(value))) throw new Error('not a JSON object');
    return { ok: true, value: value as JsonObject | null };
  } catch (error) {
    return { ok: false, reason: `can't unmarshal "${LAST_APPLIED_ANNOTATION}" annotation: ${(error as Error).message}` };
  }
}

function withLastApplied(object: KubeObject, applied: KubeObject): KubeObject {
  const annotations = { ...(object.metadata?.annotations ?? {}), [LAST_APPLIED_ANNOTATION]: goJsonMarshal(applied as unknown as Json) };
  return { ...object, metadata: { ...object.metadata, annotations } };
}

/**
 * The annotation's text as Metacontroller writes it (Go's json.Marshal of decoded JSON): object
 * keys sorted by their UTF-8 bytes, `<`, `>`, `&`, U+2028 and U+2029 escaped. Children it made
 * then read as unchanged here, and children made here as unchanged by Metacontroller, whatever
 * order the hook's keys come in.
 */
export function goJsonMarshal(value: Json | undefined): string {
  if (Array.isArray(value)) return `[${value.map((item) => (item === undefined ? 'null' : goJsonMarshal(item))).join(',')}]`;
  if (isObject(value)) {
    const keys = Object.keys(value)
      .filter((key) => value[key] !== undefined)
      .sort(byUtf8);
    return `{${keys.map((key) => `${goString(key)}:${goJsonMarshal(value[key])}`).join(',')}}`;
  }
  return typeof value === 'string' ? goString(value) : JSON.stringify(value ?? null);
}

const byUtf8 = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));
const goString = (text: string): string =>
  JSON.stringify(text).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

/** nullifyLastAppliedAnnotation: the hook cannot smuggle in its own idea of the last applied object. */
function withoutLastApplied(object: KubeObject): KubeObject {
  const annotations = object.metadata?.annotations;
  if (!annotations || !Object.hasOwn(annotations, LAST_APPLIED_ANNOTATION)) return object;
  const { [LAST_APPLIED_ANNOTATION]: _dropped, ...rest } = annotations;
  return { ...object, metadata: { ...object.metadata, annotations: rest } };
}

const isObject = (value: unknown): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * The diff from lastApplied to desired, applied to destination; returns the new destination value.
 *
 * A lastApplied or desired value whose type differs from the destination's counts as null, as
 * upstream: its type check (`desVal, ok := desired.(map[string]interface{}); if !ok && desVal !=
 * nil`) can never fire, because a failed assertion yields a nil map. So a scalar asked for where the
 * object holds a map removes the keys we had set there and leaves the rest, and a map asked for
 * where the object holds an ordinary list sets the field to null.
 */
function merge(destination: Json | undefined, lastApplied: Json | undefined, desired: Json | undefined): Json | undefined {
  if (isObject(destination)) {
    return mergeObject(destination, isObject(lastApplied) ? lastApplied : null, isObject(desired) ? desired : null);
  }
  if (Array.isArray(destination)) {
    return mergeArray(destination, Array.isArray(lastApplied) ? lastApplied : null, Array.isArray(desired) ? desired : null);
  }
  // A scalar, null or missing destination simply takes the desired value.
  return structuredClone(desired);
}

function mergeObject(destination: JsonObject, lastApplied: JsonObject | null, desired: JsonObject | null): JsonObject {
  // Fields we set last time and no longer set are removed; fields nobody asked us for stay.
  for (const key of Object.keys(lastApplied ?? {})) {
    if (!desired || !Object.hasOwn(desired, key)) delete destination[key];
  }
  for (const [key, value] of Object.entries(desired ?? {})) {
    const merged = merge(destination[key], lastApplied?.[key], value);
    destination[key] = merged === undefined ? null : merged;
  }
  return destination;
}

function mergeArray(destination: Json[], lastApplied: Json[] | null, desired: Json[] | null): Json {
  const mergeKey = detectListMapKey(destination, lastApplied ?? [], desired ?? []);
  // An ordinary list is replaced as a whole; so is one where no known key is unique.
  if (!mergeKey) return structuredClone(desired);
  const destMap = listMap(mergeKey, destination);
  mergeObject(destMap, listMap(mergeKey, lastApplied ?? []), listMap(mergeKey, desired ?? []));
  // Keep the existing order, then append what is new in desired's order.
  const result: Json[] = [];
  const added = new Set<string>();
  for (const item of [...destination, ...(desired ?? [])]) {
    const key = mergeKeyString((item as JsonObject)[mergeKey]);
    if (added.has(key) || !Object.hasOwn(destMap, key)) continue;
    result.push(destMap[key]!);
    added.add(key);
  }
  return result;
}

function listMap(mergeKey: string, list: Json[]): JsonObject {
  const map: JsonObject = {};
  for (const item of list) map[mergeKeyString((item as JsonObject)[mergeKey])] = item;
  return map;
}

/** Go's fmt %v of a merge key value: strings as they are, other scalars printed. */
const mergeKeyString = (value: Json | undefined): string =>
  typeof value === 'string' ? value : value === null || value === undefined ? '<nil>' : String(value);

/**
 * A list of objects sharing one of the known merge keys is treated as a map keyed by it: the
 * first known key every item has and no two items of one list share. Upstream takes the first
 * key every item has, unique or not, and then merges two items of one key into one entry
 * written twice (a Service's `port: 53` over UDP and over TCP), which the API server refuses on
 * every sync; a unique key (there, `name`) merges them as they are, and a list with none is
 * replaced as a whole, as the hook gave it.
 */
function detectListMapKey(...lists: Json[][]): string {
  let common: Set<string> | undefined;
  for (const list of lists) {
    for (const item of list) {
      if (!isObject(item)) return '';
      if (!common) {
        common = new Set(Object.keys(item));
        continue;
      }
      for (const key of common) if (!Object.hasOwn(item, key)) common.delete(key);
    }
  }
  const unique = (key: string) =>
    lists.every((list) => new Set(list.map((item) => mergeKeyString((item as JsonObject)[key]))).size === list.length);
  return KNOWN_MERGE_KEYS.find((key) => common?.has(key) && unique(key)) ?? '';
}

/** revertField: the field as observed, or absent if it was absent. */
function revert(target: JsonObject, original: JsonObject, path: string[]): void {
  let source: Json | undefined = original;
  for (const key of path) source = isObject(source) ? source[key] : undefined;
  const parentPath = path.slice(0, -1);
  const leaf = path[path.length - 1]!;
  if (source !== undefined) {
    let cursor = target;
    for (const key of parentPath) {
      if (!isObject(cursor[key])) cursor[key] = {};
      cursor = cursor[key] as JsonObject;
    }
    cursor[leaf] = structuredClone(source);
    return;
  }
  let cursor: Json | undefined = target;
  for (const key of parentPath) cursor = isObject(cursor) ? cursor[key] : undefined;
  if (isObject(cursor)) delete cursor[leaf];
}
