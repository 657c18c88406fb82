// What an incoming CloudEvent means for a function, decided without touching the API:
// an ApiServerSource change (Reference or Resource mode), a PingSource resync or poll, or bad input.
// The event is a doorbell: it names an object, and the function re-reads that object.
import { HTTP, type CloudEvent, type CloudEventV1 } from 'cloudevents';
import { isValidGroupVersion, isValidKindName, isValidNameOf, isValidNamespace, parseApiVersion, type KubeObject } from './kinds.ts';
import { quote } from './bounded-messages.ts';

export const APISERVER_TYPE_PREFIX = 'dev.knative.apiserver.';
/** The type of an ApiServerSource event: what the source sends and a Trigger filter must match. */
export const apiServerEventType = (mode: 'ref' | 'resource', action: ChangeAction): string => `${APISERVER_TYPE_PREFIX}${mode}.${action}`;
export const PING_TYPE = 'dev.knative.sources.ping';
/**
 * The data of a poll ping (a second PingSource, for a reconciled kind no ApiServerSource can
 * watch): reconcile only the objects whose status has not caught up with them. Any other ping is
 * a full resync; a forged poll only does less.
 */
export const POLL_DATA = { poll: true } as const;
/**
 * A function's request to itself, carried in a reply CloudEvent that the broker routes back to
 * it: reconcile these keys (the failed keys of a fan-out, or a requeue), not before
 * `opfnnotbefore`. Data: `{"keys": ["<group>/<Kind>:<namespace>/<name>", …]}`, and for keys due
 * later than the event, `"notBefore": {"<key>": "<RFC 3339>", …}`.
 */
export const RECONCILE_TYPE = 'dev.opfn.reconcile';
/** Extension naming the function an event is for (the Trigger filters on it). */
export const FUNCTION_EXTENSION = 'opfnfunction';
/** Extension holding the RFC 3339 time before which a reconcile event is not due. */
export const NOT_BEFORE_EXTENSION = 'opfnnotbefore';
/** Keys one reconcile event may carry: bounds the reply (about 300 bytes a key at most). */
export const MAX_KEYS_PER_EVENT = 1000;

/** Input that can never succeed: answered 400 and never retried (dead-lettered by the broker). */
export class BadEventError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'BadEventError';
  }
}

export interface ObjectReference {
  apiVersion: string;
  kind: string;
  namespace: string;
  name: string;
}

/** What happened to an object, as ApiServerSource names it in the event type. */
export type ChangeAction = 'add' | 'update' | 'delete';
export const CHANGE_ACTIONS: readonly ChangeAction[] = ['add', 'update', 'delete'];

export type FunctionEvent =
  | { type: 'change'; action: ChangeAction; mode: 'ref' | 'resource'; ref: ObjectReference; object?: KubeObject; id: string }
  | { type: 'resync'; id: string }
  | { type: 'poll'; id: string }
  /**
   * Keys as sent (parsed against the function's kinds by the host); notBefore from opfnnotbefore;
   * keyNotBefore: the keys due later than that, with their own times (the data's `notBefore`).
   */
  | { type: 'reconcile'; keys: string[]; notBefore?: Date; keyNotBefore?: Map<string, Date>; id: string };

/** An ApiServerSource change: which object, what happened, and its body in Resource mode. */
export type ChangeEvent = Extract<FunctionEvent, { type: 'change' }>;

const APISERVER_TYPE = /^dev\.knative\.apiserver\.(ref|resource)\.(add|update|delete)$/;
const JSON_MEDIA_TYPE = /^application\/(?:[\w.-]+\+)?json\s*(?:;|$)/i;
const STRUCTURED_JSON = /^application\/cloudevents\+json\s*(?:;|$)/;

/** Decodes an HTTP request into a CloudEvent (binary or structured mode) and validates it. */
export function decodeCloudEvent(headers: Record<string, string | string[] | undefined>, body: Buffer | string): CloudEventV1<unknown> {
  const flatHeaders: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers))
    if (value !== undefined) flatHeaders[name.toLowerCase()] = Array.isArray(value) ? value.join(',') : value;
  const contentType = flatHeaders['content-type'] ?? '';
  if (!flatHeaders['ce-specversion'] && !contentType.startsWith('application/cloudevents')) {
    throw new BadEventError(
      'not a CloudEvent: no ce-specversion header (binary mode) and content type is not application/cloudevents+json (structured mode)',
    );
  }
  if (contentType.startsWith('application/cloudevents-batch'))
    throw new BadEventError('batched CloudEvents are not accepted; send one event per request');
  const text = typeof body === 'string' ? body : body.toString('utf8');
  if (contentType.startsWith('application/cloudevents')) {
    checkStructured(contentType, text);
    return decodeWithSdk(flatHeaders, text);
  }
  const parsed = checkBinary(flatHeaders, contentType, text);
  const event = decodeBinary(flatHeaders, contentType, text, parsed);
  if (event) return event;
  const decoded = decodeWithSdk(flatHeaders, text);
  if (verifiedSources.size >= MAX_VERIFIED_SOURCES) verifiedSources.clear();
  verifiedSources.add(decoded.source);
  return decoded;
}

/** The cloudevents SDK's decoding and validation: the reference the binary fast path is held to (exported for its test). */
export function decodeWithSdk(headers: Record<string, string>, text: string): CloudEventV1<unknown> {
  let decoded: CloudEvent<unknown> | CloudEvent<unknown>[];
  try {
    // Typed as the plain interface, but the SDK builds CloudEvent instances (with validate()).
    decoded = HTTP.toEvent({ headers, body: text }) as CloudEvent<unknown> | CloudEvent<unknown>[];
  } catch (error) {
    throw new BadEventError(`malformed CloudEvent: ${describe(error)}`);
  }
  const event = Array.isArray(decoded) ? decoded[0] : decoded;
  if (!event || Array.isArray(decoded)) throw new BadEventError('batched CloudEvents are not accepted; send one event per request');
  try {
    event.validate();
  } catch (error) {
    throw new BadEventError(`invalid CloudEvent: ${describe(error)}`);
  }
  if (event.specversion !== '1.0') throw new BadEventError(`unsupported specversion ${quote(event.specversion)}: only 1.0 is accepted`);
  return event;
}

/**
 * Sources the SDK has validated (a URI reference), so the binary fast path may take them: a
 * function hears from a handful (its ApiServerSources, its PingSource, itself). Bounded, so
 * forged events with ever new sources cost the SDK's path, never memory.
 */
const verifiedSources = new Set<string>();
const MAX_VERIFIED_SOURCES = 64;
/** Data the SDK parses as JSON in binary mode: it looks the content type up as is. */
const SDK_JSON_CONTENT_TYPES = new Set(['application/json', 'application/json; charset=utf-8']);
/** ce-* names the SDK gives a meaning of their own (or refuses in 1.0); left to it. */
const SDK_SPECIAL_EXTENSIONS = new Set(['data', 'datacontenttype', 'datacontentencoding', 'dataschema', 'schemaurl']);
const CONTEXT_ATTRIBUTES = new Set(['id', 'source', 'type', 'specversion', 'time', 'subject']);
const ATTRIBUTE_NAME = /^[a-z0-9]+$/;
const NOT_PARSED = Symbol('not parsed');

/**
 * Binary mode as brokers send it (CloudEvents 1.0, a known source, plain extensions), decoded
 * without the SDK, which builds and schema-validates an event object per request: a sixth of
 * a function's CPU in a burst. Gives exactly what the SDK's path gives (the time attribute
 * aside, which the SDK rewrites and nothing reads); anything else is left to the SDK
 * (undefined), so every refusal keeps the SDK's reason.
 */
function decodeBinary(
  headers: Record<string, string>,
  contentType: string,
  text: string,
  parsed: unknown,
): CloudEventV1<unknown> | undefined {
  const source = headers['ce-source'];
  if (headers['ce-specversion'] !== '1.0' || !verifiedSources.has(source) || headers.datacontenttype !== undefined) return undefined;
  const event: Record<string, unknown> = {};
  for (const name in headers) {
    if (!name.startsWith('ce-')) continue;
    const attribute = name.slice(3);
    if (!ATTRIBUTE_NAME.test(attribute) || SDK_SPECIAL_EXTENSIONS.has(attribute)) return undefined;
    // An empty ce-subject or ce-time becomes an extension of that name in the SDK (refused, or
    // replaced by the present time): left to it.
    if (!headers[name] && CONTEXT_ATTRIBUTES.has(attribute)) return undefined;
    event[attribute] = headers[name];
  }
  if (contentType) event.datacontenttype = contentType;
  let data: unknown = text;
  if (text && SDK_JSON_CONTENT_TYPES.has(contentType)) {
    // The SDK quotes a body that does not open like JSON before parsing it: left to it.
    if (!/^[[{"]/.test(text)) return undefined;
    if (parsed !== NOT_PARSED) data = parsed;
    else {
      try {
        data = JSON.parse(text);
      } catch {
        return undefined;
      }
    }
  }
  event.data = data;
  return event as unknown as CloudEventV1<unknown>;
}

/**
 * Checks the SDK does not make: it reports a missing ce-id as "no cloud event detected", and it
 * turns a body that is not JSON into a JSON string, so the reason would blame the data's shape
 * instead of the body. Gives the parsed body when it parsed one (NOT_PARSED otherwise).
 */
function checkBinary(headers: Record<string, string>, contentType: string, text: string): unknown {
  for (const header of ['ce-id', 'ce-source', 'ce-type']) {
    if (!headers[header]) throw new BadEventError(`binary-mode CloudEvent has no ${header} header (required)`);
  }
  // Only apiserver events' data is read; a resync is not refused over a payload nobody uses
  // (the cloudevents SDK itself labels string data application/json).
  if (text && JSON_MEDIA_TYPE.test(contentType) && headers['ce-type'].startsWith(APISERVER_TYPE_PREFIX)) {
    try {
      return JSON.parse(text);
    } catch (error) {
      throw new BadEventError(`request body is not valid JSON although the content type is ${contentType}: ${(error as Error).message}`);
    }
  }
  return NOT_PARSED;
}

/**
 * The SDK makes up an id (a fresh UUID on every redelivery) and assumes specversion 1.0 when a
 * structured event lacks them, and reports an array or empty body as a missing "source".
 * Other structured formats are left to the SDK, which names the unsupported content type.
 */
function checkStructured(contentType: string, text: string): void {
  if (!STRUCTURED_JSON.test(contentType)) return;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new BadEventError(`structured CloudEvent is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new BadEventError('structured CloudEvent must be a JSON object (one event per request)');
  for (const attribute of ['specversion', 'id', 'source', 'type']) {
    const value = (parsed as Record<string, unknown>)[attribute];
    if (typeof value !== 'string' || value === '')
      throw new BadEventError(`structured CloudEvent has no "${attribute}" attribute (required)`);
  }
}

// The SDK's ValidationError message lists its errors on further lines; a reason is one line.
const describe = (error: unknown): string => String((error as Error)?.message ?? error).replace(/\s*\n\s*/g, '; ');

const isPoll = (data: unknown): boolean =>
  typeof data === 'object' && data !== null && (data as { poll?: unknown }).poll === POLL_DATA.poll;

/** What a validated CloudEvent asks of a function; throws BadEventError when it cannot mean anything. */
export function interpretEvent(event: CloudEventV1<unknown>): FunctionEvent {
  if (event.type === PING_TYPE) return { type: isPoll(event.data) ? 'poll' : 'resync', id: event.id };
  if (event.type === RECONCILE_TYPE) return interpretReconcile(event);
  const match = APISERVER_TYPE.exec(event.type);
  if (!match)
    throw new BadEventError(
      `unknown event type ${quote(event.type)}: expected ${APISERVER_TYPE_PREFIX}{ref,resource}.{add,update,delete} or ${PING_TYPE}`,
    );
  const mode = match[1] as 'ref' | 'resource';
  const action = match[2] as ChangeAction;
  let data: unknown = event.data;
  // Structured mode's data_base64 arrives as a typed array (the SDK makes it a Uint32Array with
  // one byte per element); Buffer.from copies element-wise.
  if (ArrayBuffer.isView(data)) data = Buffer.from(data as unknown as ArrayLike<number>).toString('utf8');
  if (data === undefined || data === '') throw new BadEventError(`${event.type} event has no data: expected a JSON object`);
  if (typeof data === 'string') {
    const text = data;
    try {
      data = JSON.parse(text);
    } catch {
      // A JSON string body (already parsed by the SDK) or non-JSON text: name what arrived.
      throw new BadEventError(`${event.type} event data must be a JSON object, got the string ${quote(text)}`);
    }
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data))
    throw new BadEventError(`${event.type} event data must be a JSON object`);
  const body = data as Record<string, any>;
  // Extensions are what Triggers filter on; the data is the fallback (older adapters).
  const ref: ObjectReference =
    mode === 'ref'
      ? {
          apiVersion: str(event.apiversion ?? body.apiVersion),
          kind: str(event.kind ?? body.kind),
          namespace: str(event.namespace ?? body.namespace),
          name: str(event.name ?? body.name),
        }
      : {
          apiVersion: str(body.apiVersion ?? event.apiversion),
          kind: str(body.kind ?? event.kind),
          namespace: str(body.metadata?.namespace ?? event.namespace),
          name: str(body.metadata?.name ?? event.name),
        };
  if (!ref.apiVersion || !ref.kind)
    throw new BadEventError(`${event.type} event names no apiVersion/kind (extensions apiversion and kind, or the data)`);
  // Both end up in answers, logs and keys: a forged one must not be megabytes long.
  if (!isValidKindName(ref.kind)) throw new BadEventError(`${event.type} event names an invalid kind ${quote(ref.kind)}`);
  const groupVersion = parseApiVersion(ref.apiVersion);
  if (!isValidGroupVersion(groupVersion))
    throw new BadEventError(`${event.type} event names an invalid apiVersion ${quote(ref.apiVersion)}`);
  // The kind's own rule: a ClusterRoleBinding may be named system:controller:foo (at most 253 characters).
  if (!isValidNameOf(groupVersion.group, ref.kind, ref.name))
    throw new BadEventError(`${event.type} event names no valid object name (got ${quote(ref.name)})`);
  if (ref.namespace && !isValidNamespace(ref.namespace))
    throw new BadEventError(`${event.type} event has an invalid namespace ${quote(ref.namespace)}`);
  if (mode === 'resource' && (typeof body.metadata !== 'object' || body.metadata === null))
    throw new BadEventError(`${event.type} event data is not a Kubernetes object (no metadata)`);
  const metadata = mode === 'resource' ? metadataProblem(body.metadata) : undefined;
  if (metadata) throw new BadEventError(`${event.type} event data is not a Kubernetes object: ${metadata}`);
  return { type: 'change', action, mode, ref, object: mode === 'resource' ? (body as KubeObject) : undefined, id: event.id };
}

/**
 * Why a Resource-mode body's metadata cannot be what an API server sends, in the fields mappers
 * and routing read from it (ownerReferences a list of objects with string apiVersion, kind, name
 * and uid; labels a map of strings), or undefined when it can. Such a body is a malformed event
 * (400), never a TypeError answered 500 and retried.
 */
export function metadataProblem(metadata: Record<string, unknown>): string | undefined {
  const { ownerReferences, labels } = metadata;
  if (ownerReferences !== undefined && ownerReferences !== null) {
    if (!Array.isArray(ownerReferences)) return `metadata.ownerReferences must be a list, got ${quote(ownerReferences)}`;
    for (const [index, reference] of ownerReferences.entries()) {
      if (typeof reference !== 'object' || reference === null || Array.isArray(reference))
        return `metadata.ownerReferences[${index}] must be an object, got ${quote(reference)}`;
      for (const field of ['apiVersion', 'kind', 'name', 'uid']) {
        if (typeof (reference as Record<string, unknown>)[field] !== 'string')
          return `metadata.ownerReferences[${index}].${field} must be a string`;
      }
      const { controller } = reference as { controller?: unknown };
      if (controller !== undefined && controller !== null && typeof controller !== 'boolean')
        return `metadata.ownerReferences[${index}].controller must be a boolean`;
    }
  }
  if (labels !== undefined && labels !== null) {
    if (typeof labels !== 'object' || Array.isArray(labels)) return `metadata.labels must be a map of strings, got ${quote(labels)}`;
    const bad = Object.entries(labels).find(([, value]) => typeof value !== 'string');
    if (bad) return `metadata.labels[${quote(bad[0])}] must be a string`;
  }
  return undefined;
}

function interpretReconcile(event: CloudEventV1<unknown>): FunctionEvent {
  let data: unknown = event.data;
  if (ArrayBuffer.isView(data)) data = Buffer.from(data as unknown as ArrayLike<number>).toString('utf8');
  if (typeof data === 'string') {
    try {
      data = JSON.parse(data);
    } catch {
      throw new BadEventError(`${RECONCILE_TYPE} event data must be a JSON object {"keys": [...]}`);
    }
  }
  const keys = (data as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(keys) || keys.length === 0 || !keys.every((key) => typeof key === 'string')) {
    throw new BadEventError(`${RECONCILE_TYPE} event data must be {"keys": [...]} with at least one key string`);
  }
  if (keys.length > MAX_KEYS_PER_EVENT)
    throw new BadEventError(`${RECONCILE_TYPE} event carries ${keys.length} keys; at most ${MAX_KEYS_PER_EVENT} are accepted`);
  const raw = event[NOT_BEFORE_EXTENSION];
  const notBefore = raw === undefined ? undefined : rfc3339Time(raw, NOT_BEFORE_EXTENSION);
  const perKey = (data as { notBefore?: unknown }).notBefore;
  if (perKey === undefined) return { type: 'reconcile', keys: keys as string[], notBefore, id: event.id };
  if (typeof perKey !== 'object' || perKey === null || Array.isArray(perKey))
    throw new BadEventError(`${RECONCILE_TYPE} event data's notBefore must be an object {"<key>": "<RFC 3339 time>"}`);
  const named = new Set(keys as string[]);
  const keyNotBefore = new Map<string, Date>();
  for (const [key, time] of Object.entries(perKey)) {
    if (!named.has(key))
      throw new BadEventError(`${RECONCILE_TYPE} event data's notBefore names ${quote(key, 100)}, which is not one of its keys`);
    keyNotBefore.set(key, rfc3339Time(time, `notBefore of ${quote(key, 100)}`));
  }
  return { type: 'reconcile', keys: keys as string[], notBefore, keyNotBefore, id: event.id };
}

/**
 * A due time (opfnnotbefore, a key's notBefore) in ms since the epoch, or undefined when it is not
 * an RFC 3339 time: the one rule on both ends of the wire, so the local broker holds exactly the
 * times a function accepts (eventing/broker/requeue-hold.ts).
 */
export function dueTimeMs(raw: unknown): number | undefined {
  const at = typeof raw === 'string' && /^\d{4}-\d{2}-\d{2}T/.test(raw) ? Date.parse(raw) : Number.NaN;
  return Number.isFinite(at) ? at : undefined;
}

function rfc3339Time(raw: unknown, what: string): Date {
  const at = dueTimeMs(raw);
  if (at === undefined) throw new BadEventError(`${what} ${quote(raw, 100)} is not an RFC 3339 time`);
  return new Date(at);
}

const str = (value: unknown): string => (typeof value === 'string' ? value : '');
