// Calls a Metacontroller webhook: where it is, how long to wait, what counts as an answer.
//
// Upstream: metacontroller pkg/hooks/webhook.go (webhookURL: `url` overrides everything, else
// both `service` and `path`, giving `<protocol>://<name>.<namespace>:<port><path>` with port 80
// and protocol http by default; webhookTimeout: 10 s when absent or not positive;
// webhookExecutor.Call: POST with `Content-Type: application/json`, 429 → TooManyRequestError
// whose delay is the Retry-After header as an RFC 1123 date (seconds from now, rounded up) or
// else as an integer (0 when neither), anything but 200 → "unsupported status code"),
// pkg/hooks/webhook_plain.go (isStatusSupported: only 200) and pkg/hooks/errors.go. The parent
// controller re-queues a 429 after the delay without an Event; every other failure becomes a
// Warning Event `SyncError` on the parent and a rate-limited retry (controller.go sync).
//
// Not supported (yet): etag caching, caBundle / clientTLS, authorization and basicAuth.
import { StringDecoder } from 'node:string_decoder';
import { Agent, type Dispatcher } from 'undici';
import { MAX_TIMER_MS, quote } from '../../runtime/index.ts';
import { parseHookResponse } from './hook-response.ts';
import type { CompositeHookResponse, HookVersion, Webhook } from './types.ts';

export const DEFAULT_TIMEOUT_MS = 10_000;
/**
 * A hook answer larger than this is refused rather than buffered. The answer is held as text,
 * then as objects, then as the children desired and, once written, as they are listed: a few
 * times its size, within the function's heap under the Service's 256 Mi.
 */
export const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;

export interface HookTarget {
  url: string;
  timeoutMs: number;
}

/** Why a call produced no usable answer; `TooManyRequests` is a wait, everything else a SyncError. */
export type HookFailure =
  | { type: 'TooManyRequests'; retryAfterSeconds: number; reason: string }
  | { type: 'SyncError'; cause: 'config' | 'unreachable' | 'timeout' | 'status' | 'too-large' | 'malformed'; reason: string };

export type HookResult<T> = { ok: true; value: T } | { ok: false; failure: HookFailure };

const syncError = (cause: Extract<HookFailure, { type: 'SyncError' }>['cause'], reason: string): { ok: false; failure: HookFailure } => ({
  ok: false,
  failure: { type: 'SyncError', cause, reason },
});

/** Where a webhook lives and how long to wait for it. */
export function webhookTarget(webhook: Webhook | undefined): HookResult<HookTarget> {
  if (!webhook) return syncError('config', 'invalid webhook config: no webhook');
  const timeoutMs = webhookTimeoutMs(webhook.timeout);
  if (webhook.url) return { ok: true, value: { url: webhook.url, timeoutMs } };
  if (!webhook.service || webhook.path === undefined) {
    return syncError('config', "invalid webhook config: must specify either a full 'url', or both 'service' and 'path'");
  }
  const { name, namespace, port = 80, protocol = 'http' } = webhook.service;
  if (!name || !namespace) return syncError('config', "invalid webhook config: 'service' must specify both 'name' and 'namespace'");
  return { ok: true, value: { url: `${protocol}://${name}.${namespace}:${port}${webhook.path}`, timeoutMs } };
}

const DURATION_UNITS: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, μs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * A Go duration ("10s", "1m30s", "1.5s", ".5s", "+2m") in milliseconds; 10 s when absent,
 * invalid or not positive; at most MAX_TIMER_MS (an effectively unbounded wait, as upstream's would be; a
 * longer timer would fire after 1 ms and time out every call of a webhook with a `timeout` of
 * about 596.5 h or more).
 */
export function webhookTimeoutMs(timeout: string | undefined): number {
  // time.ParseDuration's grammar: each number has a digit on one side of its point at least.
  if (!timeout || !/^\+?((\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$/.test(timeout)) return DEFAULT_TIMEOUT_MS;
  let total = 0;
  for (const [, amount, unit] of timeout.matchAll(/(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)/g))
    total += Number(amount) * DURATION_UNITS[unit!]!;
  return total > 0 ? Math.min(total, MAX_TIMER_MS) : DEFAULT_TIMEOUT_MS;
}

/** Retry-After as upstream reads it: an RFC 1123 date (seconds from now, rounded up), else an integer, else 0. */
export function retryAfterSeconds(header: string | undefined, now: Date = new Date()): number {
  const value = header?.trim() ?? '';
  if (/^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} [A-Z]{1,5}$/.test(value)) {
    const at = Date.parse(value);
    if (!Number.isNaN(at)) return Math.ceil((at - now.getTime()) / 1000);
  }
  return /^[+-]?\d+$/.test(value) ? Number.parseInt(value, 10) : 0;
}

export interface CallOptions {
  /** Connection pooling; by default one keep-alive pool for the whole process (hookAgent). */
  dispatcher?: Dispatcher;
  now?: () => Date;
  /** Larger answers are refused (default MAX_RESPONSE_BYTES). */
  maxResponseBytes?: number;
  /**
   * The payload is made as one string rather than piece by piece (jsonPieces): for a payload of a
   * few objects, whose size is bounded by theirs, one JSON.stringify is the cheaper way.
   */
  whole?: boolean;
}

/**
 * Keep-alive connections to the hooks, through undici's dispatcher interface: a loopback call
 * costs about half the CPU of node:http's client. The webhook's timeout is the only deadline
 * (undici's own header and body timeouts, 300 s, are off: a `timeout` may be longer).
 */
const hookAgent = new Agent({ headersTimeout: 0, bodyTimeout: 0 });

/** Redirects followed at most, as Go's http.Client. */
const MAX_REDIRECTS = 10;

/**
 * POSTs the JSON payload and returns the body of a 200 answer, or why there is none. A 307 or 308
 * is followed with the same POST, up to 10 times, as upstream's Go client does (a Flask hook
 * mounted at `/sync/` answers `/sync` with a 308); the timeout covers the whole chain.
 */
export async function postJson(target: HookTarget, payload: unknown, options: CallOptions = {}): Promise<HookResult<string>> {
  const body = options.whole ? wholeBody(payload) : jsonBody(payload);
  const deadline = Date.now() + target.timeoutMs;
  let url = target.url;
  for (let redirects = 0; ; redirects++) {
    const outcome = await postOnce(url, body, deadline, target, options);
    if (!('location' in outcome)) return outcome;
    if (redirects === MAX_REDIRECTS) return syncError('status', `http error: POST ${target.url}: stopped after ${MAX_REDIRECTS} redirects`);
    url = outcome.location;
  }
}

/** Levels of a payload written entry by entry: request → children → kind → each child stringified whole. */
const SPLIT_DEPTH = 3;
/** Pieces are gathered into writes of about this many characters. */
const WRITE_CHARS = 64 * 1024;

/**
 * JSON.stringify(value) in pieces: a request of 50 000 children is tens of MiB as one string, so
 * its outer levels are written entry by entry, and each child is a string only while it is
 * written. Same text as JSON.stringify: keys in its order, undefined, function and symbol values
 * left out (null in an array), toJSON honoured.
 */
export function* jsonPieces(value: unknown, depth = 0): Generator<string> {
  const splittable =
    depth < SPLIT_DEPTH &&
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { toJSON?: unknown }).toJSON !== 'function' &&
    (Array.isArray(value) || Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null);
  if (!splittable) {
    yield JSON.stringify(value) ?? 'null';
    return;
  }
  if (Array.isArray(value)) {
    yield '[';
    for (let index = 0; index < value.length; index++) {
      if (index > 0) yield ',';
      yield* omitted(value[index]) ? ['null'] : jsonPieces(value[index], depth + 1);
    }
    yield ']';
    return;
  }
  yield '{';
  let first = true;
  for (const key of Object.keys(value)) {
    const entry = (value as Record<string, unknown>)[key];
    if (omitted(entry)) continue;
    yield `${first ? '' : ','}${JSON.stringify(key)}:`;
    first = false;
    yield* jsonPieces(entry, depth + 1);
  }
  yield '}';
}

const omitted = (value: unknown): boolean => value === undefined || typeof value === 'function' || typeof value === 'symbol';

/** A request body that is written afresh for each attempt (redirects), its length known up front. */
interface JsonBody {
  length: number;
  chunks(): Iterator<string> & Iterable<string>;
}

function jsonBody(payload: unknown): JsonBody {
  function* chunks(): Generator<string> {
    let gathered: string[] = [];
    let size = 0;
    for (const piece of jsonPieces(payload)) {
      gathered.push(piece);
      size += piece.length;
      if (size >= WRITE_CHARS) {
        yield gathered.join('');
        [gathered, size] = [[], 0];
      }
    }
    if (gathered.length > 0) yield gathered.join('');
  }
  // The length takes one pass of its own: holding the text to measure it is what this avoids. A
  // body of one write, as most are, is kept from that pass rather than made again.
  let length = 0;
  const written: string[] = [];
  for (const chunk of chunks()) {
    length += Buffer.byteLength(chunk);
    if (written.length < 2) written.push(chunk);
  }
  if (written.length === 1) return { length, chunks: () => written.values() };
  return { length, chunks };
}

function wholeBody(payload: unknown): JsonBody {
  const text = JSON.stringify(payload) ?? 'null';
  return { length: Buffer.byteLength(text), chunks: () => [text].values() };
}

/** The body as undici sends it: one string, or its chunks as bytes, written as the socket takes them. */
function dispatchBody(body: JsonBody): string | Iterable<Buffer> {
  const chunks = body.chunks();
  const first = chunks.next();
  if (first.done) return '';
  const second = chunks.next();
  if (second.done) return first.value;
  return (function* () {
    yield Buffer.from(first.value);
    yield Buffer.from(second.value);
    for (const chunk of chunks) yield Buffer.from(chunk);
  })();
}

function postOnce(
  target: string,
  body: JsonBody,
  deadline: number,
  hook: HookTarget,
  options: CallOptions,
): Promise<HookResult<string> | { location: string }> {
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    return Promise.resolve(syncError('config', `invalid webhook URL ${quote(target)}`));
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    return Promise.resolve(syncError('config', `unsupported webhook URL scheme "${url.protocol}"`));
  return new Promise((resolve) => {
    let settled = false;
    let controller: Dispatcher.DispatchController | undefined;
    const finish = (result: HookResult<string> | { location: string }, abort = false) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (abort) controller?.abort(new Error('the hook call is over'));
      resolve(result);
    };
    // One deadline for the whole exchange, body and redirects included (Go's http.Client.Timeout).
    const timer = setTimeout(
      () => finish(syncError('timeout', `http error: POST ${hook.url}: timed out after ${hook.timeoutMs} ms`), true),
      Math.max(0, deadline - Date.now()),
    );
    // Decoded as it comes: the answer is held once as text, not also as bytes and their concatenation.
    const decoder = new StringDecoder('utf8');
    const parts: string[] = [];
    let size = 0;
    let status = 0;
    const limit = options.maxResponseBytes ?? MAX_RESPONSE_BYTES;
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(started) {
        controller = started;
        // Timed out before a connection took it.
        if (settled) started.abort(new Error('the hook call is over'));
      },
      onResponseStart(_controller, statusCode, headers) {
        status = statusCode;
        const header = (name: string): string | undefined => {
          const value = headers[name];
          return Array.isArray(value) ? value[0] : value;
        };
        const location = header('location');
        if ((status === 307 || status === 308) && location) {
          // The rest of this answer is read and dropped; the connection stays.
          try {
            finish({ location: new URL(location, url).href });
          } catch {
            finish(syncError('status', `http error: POST ${target}: ${status} to an invalid Location ${quote(location)}`));
          }
          return;
        }
        if (status === 429) {
          const seconds = retryAfterSeconds(header('retry-after'), options.now?.() ?? new Date());
          finish({
            ok: false,
            failure: {
              type: 'TooManyRequests',
              retryAfterSeconds: seconds,
              reason: `Too many request, it will be resync after: ${seconds}`,
            },
          });
        }
      },
      onResponseData(_controller, chunk) {
        if (settled) return;
        size += chunk.length;
        if (size > limit) {
          finish(syncError('too-large', `hook answer from ${target} is larger than ${limit} bytes`), true);
          return;
        }
        parts.push(decoder.write(chunk));
      },
      onResponseEnd() {
        if (settled) return;
        parts.push(decoder.end());
        const text = parts.join('');
        if (status !== 200) finish(syncError('status', `unsupported status code: ${status} body: ${truncate(text)}`));
        else finish({ ok: true, value: text });
      },
      onResponseError(_controller, error) {
        if (status === 0) finish(syncError('unreachable', `http error: POST ${target}: ${error.message}`));
        else finish(syncError('unreachable', `can't read response body: ${error.message}`));
      },
    };
    try {
      (options.dispatcher ?? hookAgent).dispatch(
        {
          origin: url.origin,
          path: `${url.pathname}${url.search}`,
          method: 'POST',
          headers: { 'content-type': 'application/json', 'content-length': String(body.length) },
          // undici writes an iterable body as the socket drains (its types name only streams).
          body: dispatchBody(body) as Dispatcher.DispatchOptions['body'],
        },
        handler,
      );
    } catch (error) {
      finish(syncError('unreachable', `http error: POST ${target}: ${(error as Error).message}`));
    }
  });
}

export interface CompositeHookCall {
  webhook: Webhook | undefined;
  version: HookVersion;
  strict: boolean;
  hookType: 'sync' | 'finalize';
  request: unknown;
}

/**
 * Children and related objects a request may hold and still be made as one string: with the
 * controller and the parent, a few objects of at most about 1.5 MiB each (etcd's limit), no more
 * than the answer a hook may send (MAX_RESPONSE_BYTES).
 */
const WHOLE_REQUEST_OBJECTS = 4;

/** The objects in a hook request's `children` and `related` (each keyed by kind, then by name), counted until past the bound. */
function objectsIn(request: unknown): number {
  let count = 0;
  for (const field of ['children', 'related']) {
    const byKind = (request as Record<string, unknown> | null)?.[field];
    if (typeof byKind !== 'object' || byKind === null) continue;
    for (const objects of Object.values(byKind)) {
      if (typeof objects === 'object' && objects !== null) count += Object.keys(objects).length;
      if (count > WHOLE_REQUEST_OBJECTS) return count;
    }
  }
  return count;
}

/** One sync or finalize hook call, decoded: what the shell needs to act or to report. */
export async function callCompositeHook(call: CompositeHookCall, options: CallOptions = {}): Promise<HookResult<CompositeHookResponse>> {
  const target = webhookTarget(call.webhook);
  if (!target.ok) return target;
  const answer = await postJson(target.value, call.request, { whole: objectsIn(call.request) <= WHOLE_REQUEST_OBJECTS, ...options });
  if (!answer.ok) return answer;
  const parsed = parseHookResponse(answer.value, { version: call.version, strict: call.strict, hookType: call.hookType });
  return parsed.ok ? parsed : syncError('malformed', parsed.reason);
}

/** Keeps an Event message readable when a hook answers with a whole HTML page. */
const truncate = (text: string): string => (text.length > 512 ? `${text.slice(0, 512)}…` : text);
