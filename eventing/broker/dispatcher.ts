// One delivery attempt and its verdict, as knative/eventing pkg/kncloudevents/event_dispatcher.go
// (SendEvent → DispatchInfo) and the broker filter's answer handling do:
// - POST in binary mode with `Prefer: reply` over one keep-alive pool;
// - `delivery.timeout` bounds each attempt (Knative sets no default; the function's own request
//   timeout, Knative Serving's timeoutSeconds, bounds it on the way through the activator, and a
//   direct lease carries that timeout too);
// - 2xx with an empty body = done; 2xx with a CloudEvent = done with a reply; 2xx with another
//   body = 502 as Knative's filter answers (retried); other statuses per SelectiveRetry.
// - A function instance reached directly (a lease) gets at most INSTANCE_CONNECTIONS connections;
//   further deliveries wait in the pool. The events a process serves at once, and with them the
//   API requests it makes at once, stay bounded (more connections only made each object cost
//   more CPU, in the function and in kube-apiserver: docs/benchmarks.md). 32 is what a
//   function's Kubernetes client opens at most (functions/runtime/host/function-host.ts API_CONNECTIONS), so
//   a delivery it accepts does not wait there for a connection, holding its event and its promises.
import type { CloudEventV1 } from 'cloudevents';
import { Agent, request } from 'undici';
import { MAX_TIMER_MS } from '../../functions/runtime/index.ts';
import { isRetryableStatus, type DeliveryFailure } from '../delivery.ts';
import {
  BodyTooLarge,
  describeNetworkError,
  flattenHeaders,
  looksLikeCloudEvent,
  parseMessage,
  readBody,
  toBinaryMessage,
} from './cloudevent-http.ts';

export type SendOutcome =
  | { kind: 'response'; status: number; headers: Record<string, string>; body: Buffer }
  | { kind: 'error'; message: string; retryable: boolean; timedOut?: boolean };

/** A failed attempt's verdict carries the subscriber's Retry-After header, for the wait before the next attempt. */
export type Verdict =
  { ok: true; reply?: CloudEventV1<unknown> } | { ok: false; retryable: boolean; failure: DeliveryFailure; retryAfter?: string };

/**
 * A direct route to a subscriber, bypassing its front door: the activator hands one out when an
 * instance of the function has room (Knative's activator leaves the data path the same way once
 * capacity exists). `release` is called exactly once with how the attempt went.
 */
export interface Lease {
  url: string;
  /** The function's request timeout (Knative Serving timeoutSeconds); 0 = none. */
  timeoutMs: number;
  release(outcome: 'answered' | 'unreachable'): void;
}

/**
 * Looks up a direct route for a subscriber URL; undefined = send to the URL itself. `partitionKey`
 * (the event's `partitionkey` extension) lets the route keep one object's events on one instance.
 * A promise: the route once the subscriber can take the event (a function starting from zero),
 * waited for until `wait.abort` (the broker's deadline on close) or for `wait.maxWaitMs` at
 * most (the attempt's timeout; 0: none), after which it resolves undefined.
 */
export type DirectRoute = (
  subscriber: string,
  partitionKey: string | undefined,
  wait: { abort: AbortSignal; maxWaitMs: number },
) => Lease | undefined | Promise<Lease | undefined>;

/** Connections to one function instance on the direct path (see the top of this file). */
export const INSTANCE_CONNECTIONS = 32;

export class Dispatcher {
  readonly #agent = new Agent({ keepAliveTimeout: 30_000, keepAliveMaxTimeout: 600_000, connections: 256 });
  readonly #instances = new Agent({ keepAliveTimeout: 30_000, keepAliveMaxTimeout: 600_000, connections: INSTANCE_CONNECTIONS });
  readonly #abort: AbortSignal;
  readonly #maxResponseBytes: number;
  /**
   * What `abort` cuts: one listener on the shared signal for all attempts and waits, because an
   * EventTarget scans its listeners on every add and remove (hundreds of deliveries in flight made
   * that a quarter of the broker's CPU per send).
   */
  readonly #onAbort = new Set<() => void>();

  /** `abort` cuts every attempt and wait in progress (the broker's deadline on close). */
  constructor(options: { abort: AbortSignal; maxResponseBytes: number }) {
    this.#abort = options.abort;
    this.#maxResponseBytes = options.maxResponseBytes;
    this.#abort.addEventListener(
      'abort',
      () => {
        for (const cut of [...this.#onAbort]) cut();
      },
      { once: true },
    );
  }

  /** Runs `cut` when the dispatcher is aborted (at once if it already is); returns its removal. */
  #whenAborted(cut: () => void): () => void {
    if (this.#abort.aborted) {
      cut();
      return () => {};
    }
    this.#onAbort.add(cut);
    return () => this.#onAbort.delete(cut);
  }

  /** Aborted when the broker cuts deliveries and waits (its deadline on close). */
  get signal(): AbortSignal {
    return this.#abort;
  }

  /** One POST in binary mode; `direct`: to a function instance (a lease). Never rejects. */
  async send(url: string, event: CloudEventV1<unknown>, timeoutMs: number, preferReply: boolean, direct = false): Promise<SendOutcome> {
    let message: { headers: Record<string, string>; body: string | Buffer };
    try {
      message = toBinaryMessage(event);
    } catch (err) {
      return { kind: 'error', message: `event cannot be encoded for HTTP: ${(err as Error).message}`, retryable: false };
    }
    if (preferReply) message.headers.prefer = 'reply';
    const controller = new AbortController();
    let timedOut = false;
    const timer =
      timeoutMs > 0
        ? setTimeout(() => {
            timedOut = true;
            controller.abort();
          }, timeoutMs)
        : undefined;
    const forget = this.#whenAborted(() => controller.abort());
    try {
      const response = await request(url, {
        method: 'POST',
        headers: message.headers,
        body: message.body,
        dispatcher: direct ? this.#instances : this.#agent,
        signal: controller.signal,
      });
      const body = await readBody(response.body, this.#maxResponseBytes);
      return { kind: 'response', status: response.statusCode, headers: flattenHeaders(response.headers), body };
    } catch (err) {
      if (timedOut)
        return { kind: 'error', message: `no answer within ${timeoutMs} ms (delivery timeout)`, retryable: true, timedOut: true };
      if (this.#abort.aborted) return { kind: 'error', message: 'broker closed during delivery', retryable: false };
      if (err instanceof BodyTooLarge) return { kind: 'error', message: `answer ${err.message}`, retryable: false };
      const error = err as Error & { code?: string };
      if (error.code === 'UND_ERR_INVALID_ARG' || error.name === 'InvalidArgumentError') {
        return { kind: 'error', message: `event cannot be sent as HTTP: ${error.message}`, retryable: false };
      }
      return { kind: 'error', message: describeNetworkError(error), retryable: true };
    } finally {
      if (timer) clearTimeout(timer);
      forget();
    }
  }

  /** Resolves after `ms` (at most MAX_TIMER_MS: a Retry-After under a long retryAfterMax), or at once when the dispatcher is aborted. */
  sleep(ms: number): Promise<void> {
    if (ms <= 0 || this.#abort.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        forget();
        resolve();
      };
      const timer = setTimeout(done, Math.min(ms, MAX_TIMER_MS));
      const forget = this.#whenAborted(done);
    });
  }

  async close(): Promise<void> {
    await Promise.all(
      [this.#agent, this.#instances].map(async (agent) => {
        try {
          await agent.close();
        } catch {
          await agent.destroy().catch(() => undefined);
        }
      }),
    );
  }
}

/** The broker filter's reading of one attempt. */
export function judge(destination: string, outcome: SendOutcome): Verdict {
  if (outcome.kind === 'error') {
    return {
      ok: false,
      retryable: outcome.retryable,
      failure: { destination, body: `dispatch error: ${outcome.message}`, reason: outcome.message },
    };
  }
  const { status, headers, body } = outcome;
  if (status >= 200 && status < 300) {
    if (looksLikeCloudEvent(headers)) {
      try {
        return { ok: true, reply: parseMessage(headers, body) };
      } catch (err) {
        return {
          ok: false,
          retryable: true,
          failure: {
            destination,
            status: 502,
            body,
            reason: `subscriber answered ${status} with an invalid CloudEvent (${(err as Error).message}); Knative's broker treats this as 502`,
          },
        };
      }
    }
    if (body.length > 0) {
      return {
        ok: false,
        retryable: true,
        failure: {
          destination,
          status: 502,
          body,
          reason: `subscriber answered ${status} with a non-empty body that is not a CloudEvent; Knative's broker treats this as 502 — answer with an empty body (e.g. 202) or a CloudEvent reply`,
        },
      };
    }
    return { ok: true };
  }
  return {
    ok: false,
    retryable: isRetryableStatus(status),
    failure: { destination, status, body, reason: `subscriber answered ${status}${isRetryableStatus(status) ? '' : ' (not retryable)'}` },
    retryAfter: headers['retry-after'],
  };
}
