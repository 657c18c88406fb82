// The source's sink side: Knative's adapter logs and drops an event its sink refuses; here an
// event is retried until the sink accepts it, one object's events in order.
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import { BACKOFF_INITIAL_MS, BACKOFF_MAX_MS, describe, jitter, sleep } from './backoff.ts';

export interface Counters {
  relists: number;
  watchRestarts: number;
  lastError?: string;
}

/**
 * Hands events to the sink: one object's events one after another (a chain per key), different
 * objects concurrently; a rejection is retried with backoff until the sink accepts or the source
 * stops. Producers enqueue synchronously (that fixes the order) and then wait for room.
 */
export class Delivery {
  emitted = 0;
  sinkRetries = 0;
  readonly #counters: Counters;
  readonly #sink: (event: CloudEventV1<unknown>) => Promise<void>;
  readonly #log: Logger;
  readonly #signal: AbortSignal;
  readonly #maxPending: number;
  readonly #tails = new Map<string, Promise<boolean>>();
  #pending = 0;
  #waiters: (() => void)[] = [];

  constructor(
    sink: (event: CloudEventV1<unknown>) => Promise<void>,
    log: Logger,
    signal: AbortSignal,
    maxPending: number,
    counters: Counters,
  ) {
    this.#counters = counters;
    this.#sink = sink;
    this.#log = log;
    this.#signal = signal;
    this.#maxPending = maxPending;
    signal.addEventListener('abort', () => this.#wake(), { once: true });
  }

  get pending(): number {
    return this.#pending;
  }

  /** Queues `event` behind the earlier events of `key`; resolves true once the sink accepted it, false if the source stopped first. */
  enqueue(key: string, event: CloudEventV1<unknown>): Promise<boolean> {
    this.#pending++;
    const previous = this.#tails.get(key);
    const delivered = (previous ?? Promise.resolve(true)).then(() => this.#deliver(event));
    const tail = delivered.finally(() => {
      this.#pending--;
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
      this.#wake();
    });
    this.#tails.set(key, tail);
    return tail;
  }

  /** Resolves when fewer than maxPending events wait for the sink (or the source stops). */
  async room(): Promise<void> {
    while (this.#pending >= this.#maxPending && !this.#signal.aborted) {
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }

  async #deliver(event: CloudEventV1<unknown>): Promise<boolean> {
    let delay = BACKOFF_INITIAL_MS;
    for (let attempt = 1; ; attempt++) {
      if (this.#signal.aborted) return false;
      try {
        await this.#sink(event);
        this.emitted++;
        return true;
      } catch (error) {
        if (this.#signal.aborted) return false;
        this.sinkRetries++;
        const reason = describe(error);
        this.#counters.lastError = `sink: ${reason}`;
        const retryInMs = jitter(delay);
        this.#log.warn(
          { id: event.id, type: event.type, subject: event.subject, attempt, reason, retryInMs },
          `sink did not accept ${event.type} for ${event.subject} (${reason}); retrying in ${retryInMs} ms`,
        );
        await sleep(retryInMs, this.#signal);
        delay = Math.min(delay * 2, BACKOFF_MAX_MS);
      }
    }
  }
}
