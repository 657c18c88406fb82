// Outbound HTTP for functions (an exchange-rate provider, a webhook): fetch with a timeout on
// every request, so a hung service can never hold a reconcile (and its delivery slot) forever.
// Retries are the caller's decision: a failed request becomes a TransientError, which the
// runtime answers so that the broker retries with backoff.
import { TransientError } from './errors.ts';

export interface HttpRequest extends Omit<RequestInit, 'signal'> {
  /** Per-request timeout; the client's default when omitted. */
  timeoutMs?: number;
}

export interface HttpClient {
  /**
   * The response, whatever its status. Throws TransientError when no response arrived in time or
   * the connection failed; the message names the method and URL without its query.
   */
  fetch(url: string | URL, request?: HttpRequest): Promise<Response>;
}

export const DEFAULT_HTTP_TIMEOUT_MS = 10_000;
const NULL_BODY_STATUSES = new Set([101, 204, 205, 304]);

export function httpClient(options: { timeoutMs?: number } = {}): HttpClient {
  const defaultTimeout = options.timeoutMs ?? DEFAULT_HTTP_TIMEOUT_MS;
  return {
    async fetch(url, request = {}) {
      const { timeoutMs = defaultTimeout, ...init } = request;
      const target = new URL(url);
      const what = `${init.method ?? 'GET'} ${target.origin}${target.pathname}`;
      try {
        // The timeout covers the body too: a response is returned only once fully read.
        const response = await fetch(target, { ...init, signal: AbortSignal.timeout(timeoutMs) });
        const body = NULL_BODY_STATUSES.has(response.status) ? null : await response.arrayBuffer();
        return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
      } catch (error) {
        const name = (error as Error).name;
        if (name === 'TimeoutError' || name === 'AbortError') throw new TransientError(`${what}: no answer within ${timeoutMs} ms`, { cause: error });
        const cause = (error as { cause?: { code?: string; message?: string } }).cause;
        throw new TransientError(`${what}: ${cause?.code ?? cause?.message ?? (error as Error).message}`, { cause: error });
      }
    },
  };
}
