// Outbound HTTP for functions (an exchange-rate provider, a webhook): fetch with a timeout on
// every request, so a hung service can never hold a reconcile (and its delivery slot) forever,
// and a bound on every response body, so a huge (or endless) answer can never take the
// instance's memory: the body is read in chunks and the rest of it cancelled once past the bound.
// Retries are the caller's decision: a failed request becomes a TransientError, which the
// runtime answers so that the broker retries with backoff.
import { TransientError } from './errors.ts';

export interface HttpRequest extends Omit<RequestInit, 'signal'> {
  /** Per-request timeout; the client's default when omitted. */
  timeoutMs?: number;
  /** Largest response body accepted, in bytes (after content decoding); the client's default when omitted. */
  maxBodyBytes?: number;
}

export interface HttpClient {
  /**
   * The response, whatever its status, with its body fully read. Throws TransientError when no
   * response arrived in time or the connection failed, ResponseTooLargeError when the body is
   * larger than allowed; the message names the method and URL without its query.
   */
  fetch(url: string | URL, request?: HttpRequest): Promise<Response>;
}

/**
 * A Retry-After header as a wait in ms: delta-seconds or an HTTP date (RFC 9110 §10.2.3); an
 * elapsed date gives a negative wait, which each caller reads its own way; undefined when absent
 * or unreadable.
 */
export function retryAfterMs(value: string | undefined, now = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  const wait = /^\d+$/.test(text) ? Number(text) * 1000 : Date.parse(text) - now;
  return Number.isFinite(wait) ? wait : undefined;
}

/** The answer's body was larger than the caller allows; the rest of it was not read. */
export class ResponseTooLargeError extends TransientError {
  /** The HTTP status of the answer. */
  readonly status: number;
  readonly limitBytes: number;

  constructor(what: string, status: number, limitBytes: number) {
    super(`${what}: answered ${status} with a body over ${limitBytes} bytes; not read`);
    this.name = 'ResponseTooLargeError';
    this.status = status;
    this.limitBytes = limitBytes;
  }
}

export const DEFAULT_HTTP_TIMEOUT_MS = 10_000;
/** Far above any answer a function expects, far below the memory of an instance (256Mi). */
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;
const NULL_BODY_STATUSES = new Set([101, 204, 205, 304]);

export function httpClient(options: { timeoutMs?: number; maxBodyBytes?: number } = {}): HttpClient {
  const defaultTimeout = options.timeoutMs ?? DEFAULT_HTTP_TIMEOUT_MS;
  const defaultMaxBody = options.maxBodyBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  return {
    async fetch(url, request = {}) {
      const { timeoutMs = defaultTimeout, maxBodyBytes = defaultMaxBody, ...init } = request;
      const target = new URL(url);
      const what = `${init.method ?? 'GET'} ${target.origin}${target.pathname}`;
      try {
        // The timeout covers the body too: a response is returned only once fully read.
        const response = await fetch(target, { ...init, signal: AbortSignal.timeout(timeoutMs) });
        const body = NULL_BODY_STATUSES.has(response.status) ? null : await readBounded(response, maxBodyBytes, what);
        return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
      } catch (error) {
        if (error instanceof ResponseTooLargeError) throw error;
        const name = (error as Error).name;
        if (name === 'TimeoutError' || name === 'AbortError')
          throw new TransientError(`${what}: no answer within ${timeoutMs} ms`, { cause: error });
        const cause = (error as { cause?: { code?: string; message?: string } }).cause;
        throw new TransientError(`${what}: ${cause?.code ?? cause?.message ?? (error as Error).message}`, { cause: error });
      }
    },
  };
}

/**
 * The whole body, or ResponseTooLargeError as soon as more than `limit` bytes arrived. Counting
 * the bytes read rather than trusting Content-Length also bounds a chunked or compressed answer.
 * Cancelling the stream closes the connection, so the rest is never transferred.
 */
async function readBounded(response: Response, limit: number, what: string): Promise<Buffer<ArrayBuffer> | null> {
  if (!response.body) return null;
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
    size += chunk.value.byteLength;
    if (size > limit) {
      await reader.cancel();
      throw new ResponseTooLargeError(what, response.status, limit);
    }
    chunks.push(chunk.value);
  }
  return Buffer.concat(chunks);
}
