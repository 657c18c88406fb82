// What an incoming CloudEvent means for a function, decided without touching the API:
// an ApiServerSource change (Reference or Resource mode), a PingSource resync, or bad input.
// The event is a doorbell: it names an object, and the function re-reads that object.
import { HTTP, ValidationError, type CloudEvent, type CloudEventV1 } from 'cloudevents';
import type { KubeObject } from './kinds.ts';

export const APISERVER_TYPE_PREFIX = 'dev.knative.apiserver.';
export const PING_TYPE = 'dev.knative.sources.ping';

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

export type FunctionEvent =
  | { type: 'change'; action: 'add' | 'update' | 'delete'; mode: 'ref' | 'resource'; ref: ObjectReference; object?: KubeObject; id: string }
  | { type: 'resync'; id: string };

const APISERVER_TYPE = /^dev\.knative\.apiserver\.(ref|resource)\.(add|update|delete)$/;
// DNS-1123 subdomain: what Kubernetes allows in object names and namespaces.
const NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;

/** Decodes an HTTP request into a CloudEvent (binary or structured mode) and validates it. */
export function decodeCloudEvent(headers: Record<string, string | string[] | undefined>, body: Buffer | string): CloudEventV1<unknown> {
  const flatHeaders: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) if (value !== undefined) flatHeaders[name.toLowerCase()] = Array.isArray(value) ? value.join(',') : value;
  const contentType = flatHeaders['content-type'] ?? '';
  if (!flatHeaders['ce-specversion'] && !contentType.startsWith('application/cloudevents')) {
    throw new BadEventError('not a CloudEvent: no ce-specversion header (binary mode) and content type is not application/cloudevents+json (structured mode)');
  }
  if (contentType.startsWith('application/cloudevents-batch')) throw new BadEventError('batched CloudEvents are not accepted; send one event per request');
  let decoded: CloudEvent<unknown> | CloudEvent<unknown>[];
  try {
    // Typed as the plain interface, but the SDK builds CloudEvent instances (with validate()).
    decoded = HTTP.toEvent({ headers: flatHeaders, body: typeof body === 'string' ? body : body.toString('utf8') }) as CloudEvent<unknown> | CloudEvent<unknown>[];
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
  if (event.specversion !== '1.0') throw new BadEventError(`unsupported specversion "${event.specversion}": only 1.0 is accepted`);
  return event;
}

function describe(error: unknown): string {
  if (error instanceof ValidationError && Array.isArray(error.errors) && error.errors.length) {
    return `${error.message}: ${error.errors.map((e) => (typeof e === 'string' ? e : JSON.stringify(e))).join('; ')}`;
  }
  return (error as Error).message ?? String(error);
}

/** What a validated CloudEvent asks of a function; throws BadEventError when it cannot mean anything. */
export function interpretEvent(event: CloudEventV1<unknown>): FunctionEvent {
  if (event.type === PING_TYPE) return { type: 'resync', id: event.id };
  const match = APISERVER_TYPE.exec(event.type);
  if (!match) throw new BadEventError(`unknown event type "${event.type}": expected ${APISERVER_TYPE_PREFIX}{ref,resource}.{add,update,delete} or ${PING_TYPE}`);
  const mode = match[1] as 'ref' | 'resource';
  const action = match[2] as 'add' | 'update' | 'delete';
  let data: unknown = event.data;
  if (typeof data === 'string' || data instanceof Uint8Array) {
    try {
      data = JSON.parse(typeof data === 'string' ? data : Buffer.from(data).toString('utf8'));
    } catch {
      throw new BadEventError(`${event.type} event data is not JSON`);
    }
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) throw new BadEventError(`${event.type} event data must be a JSON object`);
  const body = data as Record<string, any>;
  // Extensions are what Triggers filter on; the data is the fallback (older adapters).
  const ref: ObjectReference = mode === 'ref'
    ? { apiVersion: str(event.apiversion ?? body.apiVersion), kind: str(event.kind ?? body.kind), namespace: str(event.namespace ?? body.namespace), name: str(event.name ?? body.name) }
    : { apiVersion: str(body.apiVersion ?? event.apiversion), kind: str(body.kind ?? event.kind), namespace: str(body.metadata?.namespace ?? event.namespace), name: str(body.metadata?.name ?? event.name) };
  if (!ref.apiVersion || !ref.kind) throw new BadEventError(`${event.type} event names no apiVersion/kind (extensions apiversion and kind, or the data)`);
  if (!NAME.test(ref.name)) throw new BadEventError(`${event.type} event names no valid object name (got "${ref.name}")`);
  if (ref.namespace && !NAME.test(ref.namespace)) throw new BadEventError(`${event.type} event has an invalid namespace "${ref.namespace}"`);
  if (mode === 'resource' && (typeof body.metadata !== 'object' || body.metadata === null)) throw new BadEventError(`${event.type} event data is not a Kubernetes object (no metadata)`);
  return { type: 'change', action, mode, ref, object: mode === 'resource' ? (body as KubeObject) : undefined, id: event.id };
}

const str = (value: unknown): string => (typeof value === 'string' ? value : '');
