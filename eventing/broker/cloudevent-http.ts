// The CloudEvents HTTP binding as the broker speaks it (cloudevents spec http-protocol-binding,
// what sdk-go's binding.ToMessage/ToEvent do inside Knative's ingress and filter):
// - binary mode (ce-* headers) in and out; structured mode (application/cloudevents+json) in;
// - binary-mode data passes through byte for byte: a JSON body is checked (400 when broken) but
//   the bytes are kept as received (as data_base64), because Knative's broker forwards the
//   message, it does not re-encode it (`"hello"` stays `"hello"`, never becomes `hello`);
// - bodies are read under a limit; a larger one is drained and answered 413 with the reason, so
//   the client reads an answer instead of a connection reset.
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { CloudEvent, HTTP, type CloudEventV1 } from 'cloudevents';
import { quote } from '../../functions/runtime/index.ts';

/** Thrown by readBody when a body exceeds its limit (the caller answers 413). */
export class BodyTooLarge extends Error {
  readonly limit: number;
  constructor(limit: number) {
    super(`body too large (more than ${limit} bytes)`);
    this.limit = limit;
  }
}

/**
 * The body, at most `limit` bytes. A larger body is read on to its end and discarded (up to
 * `drainLimit` bytes, then the stream is destroyed) so that the sender gets the 413 answer.
 */
export async function readBody(
  stream: AsyncIterable<unknown> & { destroy?: (err?: Error) => void },
  limit: number,
  drainLimit = limit,
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  let tooLarge = false;
  for await (const chunk of stream) {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string);
    size += buf.length;
    if (size > limit) {
      tooLarge = true;
      chunks.length = 0;
      if (size > drainLimit) {
        stream.destroy?.();
        break;
      }
      continue;
    }
    chunks.push(buf);
  }
  if (tooLarge) throw new BodyTooLarge(limit);
  return Buffer.concat(chunks);
}

export function reply(res: ServerResponse, status: number, text: string, headers: Record<string, string> = {}): void {
  if (res.headersSent) return;
  res.statusCode = status;
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  if (text) {
    res.setHeader('Content-Type', 'text/plain; charset=utf-8');
    res.end(`${text}\n`);
  } else {
    res.end();
  }
}

export function flattenHeaders(headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    out[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  return out;
}

/** Knative (sdk-go ReadEncoding): binary when ce-specversion is present, structured for application/cloudevents+json. */
export function looksLikeCloudEvent(headers: Record<string, string>): boolean {
  if (headers['ce-specversion'] !== undefined) return true;
  return (headers['content-type'] ?? '').trim().toLowerCase().startsWith('application/cloudevents+json');
}

const JSON_TYPE = /^application\/(json|[a-z0-9.+-]*\+json)\s*(;|$)/i;
const TEXTUAL =
  /^(text\/|application\/(json|cloudevents\+json|[a-z0-9.+-]*\+json|xml|[a-z0-9.+-]*\+xml|x-www-form-urlencoded|javascript))/i;
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/**
 * What an HTTP header value may hold, as Node checks it before sending (tab, printable ASCII and
 * the bytes 0x80-0xFF): no CR, LF or other control character, nothing beyond Latin-1.
 */
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** Why `value` cannot travel as an HTTP header value, if it cannot. */
export function headerValueProblem(value: string): string | undefined {
  return HEADER_VALUE.test(value) ? undefined : 'has a control character or a character beyond Latin-1, which an HTTP header cannot carry';
}

/**
 * Light structural check for publish(); the HTTP ingress runs the SDK's full validation too.
 * Every attribute is delivered as a header (binary mode, as Knative's broker delivers), so one
 * that no header can carry is refused here, at the door: accepted, it could only fail every
 * delivery attempt and end in the dead-letter file.
 */
export function eventProblem(event: unknown): string | undefined {
  if (event === null || typeof event !== 'object' || Array.isArray(event)) return 'expected an object';
  const record = event as Record<string, unknown>;
  for (const attr of ['id', 'source', 'type', 'specversion']) {
    if (typeof record[attr] !== 'string' || record[attr] === '') return `attribute ${attr} must be a non-empty string`;
  }
  for (const [key, value] of Object.entries(record)) {
    if (key === 'data' || key === 'data_base64') continue;
    if (!/^[a-z0-9]+$/.test(key)) return `attribute name ${quote(key)} is not lowercase letters and digits`;
    const problem = value === undefined ? undefined : headerValueProblem(headerValue(value));
    if (problem) return `attribute ${key} ${problem}`;
  }
  return undefined;
}

/** Own enumerable attributes without undefined values; binary data kept once (as data_base64 when present). */
export function plainEvent(event: CloudEventV1<unknown>): CloudEventV1<unknown> {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(event)) {
    const value = (event as Record<string, unknown>)[key];
    if (value !== undefined) out[key] = value;
  }
  if (typeof out.data_base64 === 'string') delete out.data;
  return out as unknown as CloudEventV1<unknown>;
}

/**
 * What a ce-* header value may hold (http-protocol-binding 3.1.3.2): printable US-ASCII. Anything
 * else, UTF-8 above all, travels percent-encoded (`%C3%A9`); values pass on as received, not
 * decoded, as Knative's ingress (sdk-go's binding) passes them. Node reads header bytes as
 * Latin-1, so raw UTF-8 shows here as characters 0x80-0xFF.
 */
const CE_HEADER_VALUE = /^[\x20-\x7e]*$/;

/** The first ce-* header whose value the binding does not allow, with the reason; undefined when all are allowed. */
export function ceHeaderProblem(headers: Record<string, string>): string | undefined {
  for (const [name, value] of Object.entries(headers)) {
    if (!name.startsWith('ce-') || CE_HEADER_VALUE.test(value)) continue;
    return `header ${name} holds a character outside printable ASCII: the CloudEvents HTTP binding carries such characters percent-encoded (é as %C3%A9)`;
  }
  return undefined;
}

/** HTTP message → CloudEvent with the SDK (HTTP.toEvent + validate). Throws an Error with the reason. */
export function parseMessage(
  rawHeaders: IncomingHttpHeaders | Record<string, string | string[] | undefined>,
  body: Buffer,
): CloudEventV1<unknown> {
  const headers = flattenHeaders(rawHeaders);
  const contentType = (headers['content-type'] ?? '').trim();
  const structured = /^application\/cloudevents/i.test(contentType);
  // Binary mode only: a structured event's attributes are JSON strings, any Unicode allowed.
  const headerProblem = structured ? undefined : ceHeaderProblem(headers);
  if (headerProblem) throw new Error(headerProblem);
  if (structured && body.length === 0) throw new Error('structured-mode request without a body');
  if (!structured && body.length > 0 && JSON_TYPE.test(contentType)) {
    try {
      JSON.parse(body.toString('utf8'));
    } catch (err) {
      throw new Error(`data is not valid JSON as its content-type ${contentType} says: ${(err as Error).message}`);
    }
  }
  const textual = structured || contentType === '' || TEXTUAL.test(contentType);
  const payload: string | Buffer = textual ? body.toString('utf8') : body;
  let parsed: CloudEventV1<unknown> | CloudEventV1<unknown>[];
  try {
    // Binary mode: the SDK validates the attributes; the data bytes are kept below, unparsed.
    parsed = HTTP.toEvent({ headers, body: structured ? payload : undefined });
  } catch (err) {
    throw new Error(describeSdkError(err));
  }
  if (Array.isArray(parsed))
    throw new Error('batched CloudEvents (application/cloudevents-batch+json) are not accepted; send one event per request');
  const sdkEvent = parsed as CloudEvent<unknown>;
  try {
    const valid = sdkEvent.validate();
    if (!valid && sdkEvent.specversion !== '0.3') throw new Error(`unsupported specversion ${quote(sdkEvent.specversion)}`);
  } catch (err) {
    throw new Error(describeSdkError(err));
  }
  const event = plainEvent(sdkEvent) as Record<string, unknown>;
  const problem = eventProblem(event);
  if (problem) throw new Error(problem);
  if (!structured) {
    delete event.data;
    delete event.data_base64;
    if (body.length > 0) event.data_base64 = body.toString('base64');
    if (contentType !== '') event.datacontenttype = contentType;
  }
  // The SDK invents a time when the message has none and replaces an unparsable one with "now";
  // Knative passes the attribute through unchanged and rejects a malformed one.
  const time = originalTime(headers, payload, structured);
  if (time === undefined || time === null) {
    delete event.time;
  } else if (typeof time !== 'string' || !RFC3339.test(time.trim())) {
    throw new Error(`attribute time ${quote(time)} is not an RFC 3339 timestamp`);
  } else {
    event.time = time;
  }
  return event as unknown as CloudEventV1<unknown>;
}

/**
 * Binary-mode message: every attribute as its ce-* header (datacontenttype as content-type), as
 * the SDK's HTTP.binary names them; the body: data_base64 as its bytes, a Buffer as is, anything
 * else as JSON when the content type is JSON (a JSON string stays quoted) or as text otherwise.
 */
export function toBinaryMessage(event: CloudEventV1<unknown>): { headers: Record<string, string>; body: string | Buffer } {
  const { time, data, data_base64: dataBase64, datacontenttype, ...rest } = event;
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(rest)) {
    if (value !== undefined) headers[`ce-${name}`] = headerValue(value);
  }
  if (time !== undefined && time !== null) {
    headers['ce-time'] = (time as unknown) instanceof Date ? (time as unknown as Date).toISOString() : String(time);
  }
  const contentType = datacontenttype ?? (data !== undefined ? 'application/json' : undefined);
  if (contentType !== undefined) headers['content-type'] = contentType;
  let body: string | Buffer;
  if (typeof dataBase64 === 'string') body = Buffer.from(dataBase64, 'base64');
  else if (data === undefined || data === null) body = data === null ? 'null' : '';
  else if (Buffer.isBuffer(data)) body = data;
  else if (ArrayBuffer.isView(data)) body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  else if (typeof data === 'string' && !JSON_TYPE.test(contentType ?? '')) body = data;
  else body = JSON.stringify(data);
  return { headers, body };
}

function headerValue(value: unknown): string {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return value.map(String).join(', ');
  if (value instanceof Date) return value.toISOString();
  if (ArrayBuffer.isView(value)) return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64');
  if (typeof value === 'object' && value !== null) return JSON.stringify(value);
  return String(value);
}

function originalTime(headers: Record<string, string>, payload: string | Buffer, structured: boolean): unknown {
  if (!structured) return headers['ce-time'];
  try {
    const json = JSON.parse(typeof payload === 'string' ? payload : payload.toString('utf8')) as unknown;
    return json !== null && typeof json === 'object' ? (json as Record<string, unknown>).time : undefined;
  } catch {
    return undefined;
  }
}

function describeSdkError(err: unknown): string {
  const error = err as Error & { errors?: unknown[] };
  const details =
    Array.isArray(error?.errors) && error.errors.length > 0
      ? error.errors
          .map((e) => {
            const item = e as { instancePath?: string; dataPath?: string; message?: string };
            const where = item?.instancePath || item?.dataPath || 'event';
            return item && typeof item === 'object' && item.message ? `${where} ${item.message}` : String(e);
          })
          .join('; ')
      : '';
  const head = (error?.message ?? String(err)).split('\n')[0] ?? 'invalid CloudEvent';
  return details ? `${head}: ${details}` : head;
}

export function describeNetworkError(error: Error & { code?: string; cause?: unknown }): string {
  const cause = error.cause as (Error & { code?: string }) | undefined;
  const code = error.code ?? cause?.code;
  const message = cause?.message && cause.message !== error.message ? `${error.message}: ${cause.message}` : error.message;
  return code ? `${message} (${code})` : message;
}
