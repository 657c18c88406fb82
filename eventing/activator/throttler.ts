// Requests waiting for a slot on an instance of one function: knative/serving
// pkg/activator/net/throttler.go with queue-proxy's breaker (pkg/queue/breaker.go) — a bounded
// wait queue (full → 503 "pending request queue full", ErrRequestQueueFull upstream), handed
// out in arrival order as instances get room, abandoned when the client goes away (499).
import type http from 'node:http';

/** An answer the activator gives itself instead of proxying (status + reason). */
export class ActivatorError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

/** How a sender that holds its request waits for a lease: until `abort`, at most `maxWaitMs` (0: no bound). */
export interface LeaseWait {
  abort: AbortSignal;
  maxWaitMs?: number;
}

interface Waiter<T> {
  resolve: (slot: T) => void;
  reject: (err: ActivatorError) => void;
}

export class Throttler<T> {
  readonly #name: string;
  readonly #maxQueue: number;
  readonly #waiters: Waiter<T>[] = [];

  constructor(name: string, maxQueue: number) {
    this.#name = name;
    this.#maxQueue = maxQueue;
  }

  get waiting(): number {
    return this.#waiters.length;
  }

  /** Waits for a slot (given by `hand`); rejects at once when the queue is full, or when `res` closes first. */
  wait(res: http.ServerResponse): Promise<T> {
    return this.#wait((abandon) => res.once('close', abandon));
  }

  /**
   * Waits for a slot in the same queue for a sender that holds the request itself (the broker's
   * direct path); rejects at once when the queue is full, and with 499 when `wait.abort` aborts
   * or `wait.maxWaitMs` (0: none) passes first.
   */
  waitFor(wait: LeaseWait): Promise<T> {
    if (wait.abort.aborted) return Promise.reject(new ActivatorError(499, 'the sender gave up the request'));
    return this.#wait((abandon) => {
      const timer = wait.maxWaitMs ? setTimeout(abandon, wait.maxWaitMs) : undefined;
      timer?.unref();
      const onAbort = () => abandon();
      wait.abort.addEventListener('abort', onAbort, { once: true });
      return () => {
        clearTimeout(timer);
        wait.abort.removeEventListener('abort', onAbort);
      };
    });
  }

  #wait(onAbandon: (abandon: () => void) => (() => void) | unknown): Promise<T> {
    if (this.#waiters.length >= this.#maxQueue) {
      return Promise.reject(
        new ActivatorError(503, `pending request queue full (${this.#maxQueue} requests buffered for "${this.#name}")`),
      );
    }
    return new Promise<T>((resolve, reject) => {
      let forget: unknown;
      const settled = () => typeof forget === 'function' && forget();
      const waiter: Waiter<T> = {
        resolve: (slot) => {
          settled();
          resolve(slot);
        },
        reject: (err) => {
          settled();
          reject(err);
        },
      };
      this.#waiters.push(waiter);
      forget = onAbandon(() => {
        const i = this.#waiters.indexOf(waiter);
        if (i >= 0) {
          this.#waiters.splice(i, 1); // the sender went away while buffered
          waiter.reject(new ActivatorError(499, 'client closed the request'));
        }
      });
    });
  }

  /** Hands slots to waiters, oldest first, while `take` finds one. */
  hand(take: () => T | undefined): void {
    while (this.#waiters.length > 0) {
      const slot = take();
      if (slot === undefined) return;
      this.#waiters.shift()!.resolve(slot);
    }
  }

  /** Fails every waiter with `status` (nothing will serve them). */
  rejectAll(status: number, message: string): void {
    for (const waiter of this.#waiters.splice(0)) waiter.reject(new ActivatorError(status, message));
  }
}
