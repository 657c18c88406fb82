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
  // The merge copies only what it changes: the rest is shared with `observed`, which neither it
  // nor anything after it writes into (a child kept by the sync may be frozen, children.ts).
  const merged = merge(observed as unknown as Json, lastApplied.value, update as unknown as Json) as JsonObject;
  const object = withLastApplied(revertSystemFields(merged, observed as unknown as JsonObject) as unknown as KubeObject, update);
  return { ok: true, object, changed: !sameChild(object, observed) };
}

/**
 * Equal as children, the last-applied annotations compared as what they say. Upstream compares
 * the annotation's text, which its one writer (Go's json.Marshal) makes canonical; an
 * annotation written by another writer (another client, a hand edit) that says the same must
 * not make every child look changed, which under Recreate deletes it. The same text needs no
 * parsing.
 */
function sameChild(object: KubeObject, observed: KubeObject): boolean {
  const annotation = (child: KubeObject) => child.metadata.annotations?.[LAST_APPLIED_ANNOTATION];
  if (annotation(object) === annotation(observed)) return jsonEqual(object, observed);
  return jsonEqual(comparable(object), comparable(observed));
}

/** The object with its last-applied annotation parsed. */
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
  const text = marshal(value);
  // These characters occur only inside strings, so escaping them in the whole text escapes them in each string.
  return HTML_UNSAFE.test(text) ? text.replace(HTML_UNSAFE_ALL, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`) : text;
}

const HTML_UNSAFE = /[<>&\u2028\u2029]/;
const HTML_UNSAFE_ALL = /[<>&\u2028\u2029]/g;

function marshal(value: Json | undefined): string {
  if (Array.isArray(value)) {
    let text = '[';
    for (let index = 0; index < value.length; index++) {
      const item = value[index];
      text += `${index > 0 ? ',' : ''}${item === undefined ? 'null' : marshal(item)}`;
    }
    return `${text}]`;
  }
  if (isObject(value)) {
    const keys = Object.keys(value).filter((key) => value[key] !== undefined);
    // Without surrogates, UTF-16 code units (sort's order) sort as UTF-8 bytes do.
    if (keys.some((key) => SURROGATE.test(key))) keys.sort(byUtf8);
    else keys.sort();
    let text = '{';
    for (let index = 0; index < keys.length; index++) {
      const key = keys[index]!;
      text += `${index > 0 ? ',' : ''}${JSON.stringify(key)}:${marshal(value[key])}`;
    }
    return `${text}}`;
  }
  return JSON.stringify(value ?? null);
}

const SURROGATE = /[\uD800-\uDFFF]/;
const byUtf8 = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));

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

/** Returns `destination` itself when nothing changes in it, else a copy with the changes. */
function mergeObject(destination: JsonObject, lastApplied: JsonObject | null, desired: JsonObject | null): JsonObject {
  let copy: JsonObject | undefined;
  // Fields we set last time and no longer set are removed; fields nobody asked us for stay.
  for (const key of Object.keys(lastApplied ?? {})) {
    if ((!desired || !Object.hasOwn(desired, key)) && Object.hasOwn(copy ?? destination, key)) delete (copy ??= { ...destination })[key];
  }
  for (const [key, value] of Object.entries(desired ?? {})) {
    const current = (copy ?? destination)[key];
    const merged = merge(current, lastApplied?.[key], value);
    const next = merged === undefined ? null : merged;
    if (next !== current || !Object.hasOwn(copy ?? destination, key)) (copy ??= { ...destination })[key] = next;
  }
  return copy ?? destination;
}

function mergeArray(destination: Json[], lastApplied: Json[] | null, desired: Json[] | null): Json {
  const mergeKey = detectListMapKey(destination, lastApplied ?? [], desired ?? []);
  // An ordinary list is replaced as a whole; so is one where no known key is unique.
  if (!mergeKey) return desired !== null && jsonEqual(destination, desired) ? destination : structuredClone(desired);
  const destMap = mergeObject(listMap(mergeKey, destination), listMap(mergeKey, lastApplied ?? []), listMap(mergeKey, desired ?? []));
  // Keep the existing order, then append what is new in desired's order.
  const result: Json[] = [];
  const added = new Set<string>();
  for (const item of [...destination, ...(desired ?? [])]) {
    const key = mergeKeyString((item as JsonObject)[mergeKey]);
    if (added.has(key) || !Object.hasOwn(destMap, key)) continue;
    result.push(destMap[key]!);
    added.add(key);
  }
  return result.length === destination.length && result.every((item, index) => item === destination[index]) ? destination : result;
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

/**
 * revertField of each read-only ObjectMeta system field and of `status`: as observed, or absent if
 * they were absent. `merged` is copied where it changes (it shares its parts with `observed`).
 */
function revertSystemFields(merged: JsonObject, observed: JsonObject): JsonObject {
  const observedMetadata = isObject(observed.metadata) ? observed.metadata : undefined;
  let metadata = isObject(merged.metadata) ? merged.metadata : undefined;
  let copied = false;
  const edit = (): JsonObject => {
    if (!copied) [metadata, copied] = [{ ...metadata }, true];
    return metadata!;
  };
  for (const field of SYSTEM_FIELDS) {
    const source = observedMetadata?.[field];
    if (source !== undefined) {
      if (metadata?.[field] !== source) edit()[field] = source;
    } else if (metadata && Object.hasOwn(metadata, field)) delete edit()[field];
  }
  let result = merged;
  if (copied) result = { ...result, metadata: metadata! };
  const status = observed.status;
  if (status !== undefined) {
    if (result.status !== status) result = { ...result, status };
  } else if (Object.hasOwn(result, 'status')) {
    const { status: _dropped, ...rest } = result;
    result = rest;
  }
  return result;
}
