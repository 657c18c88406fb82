// Resyncs (and polls) that cannot be multiplied. A ping asks for "every object reconciled as of
// now", and anyone who reaches the broker can send one, so, as the workqueue does for a key, one
// run is in progress and every ping arriving meanwhile joins ONE next run; that run may still be
// joined until it starts reading, so each answer stays truthful (its run read after the ping
// arrived). And a next run starts no sooner than `spacingMs`, or the last run's own duration if
// longer, after the last one ended: however many pings arrive, in a burst or one after another, a
// function spends at most about half its time on them, and a burst waiting out the spacing costs
// one run.
//
// The trade-off: a ping that joins waits for the run in progress and the spacing before its run
// starts (which then has a delivery budget of its own), so it may be answered after its own
// delivery budget, by at most one run plus the spacing: within the generated delivery timeout
// (the revision's, ten times the default budget).
const ignore = () => {};

/** A run's result, shared by every ping it served; `claim()` is true for the first caller only (who carries its reply). */
export interface SharedRun<T> {
  value: T;
  claim(): boolean;
}

export class FanOutGate<T> {
  readonly #spacingMs: number;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #now: () => number;
  /** The next run, joinable until it starts reading. */
  #next?: Promise<SharedRun<T>>;
  /** Settles when the run in progress (or the one waiting to start) ends. */
  #current: Promise<void> = Promise.resolve();
  #endedAt = Number.NEGATIVE_INFINITY;
  #lastMs = 0;

  constructor(spacingMs: number, sleep: (ms: number) => Promise<void>, now: () => number) {
    this.#spacingMs = spacingMs;
    this.#sleep = sleep;
    this.#now = now;
  }

  run(task: () => Promise<T>): Promise<SharedRun<T>> {
    if (this.#next) return this.#next;
    const previous = this.#current;
    const next = (async (): Promise<SharedRun<T>> => {
      await previous;
      const wait = this.#endedAt + Math.max(this.#spacingMs, this.#lastMs) - this.#now();
      if (wait > 0) await this.#sleep(wait);
      // Reading starts now: a ping from here on needs a run of its own.
      this.#next = undefined;
      const started = this.#now();
      try {
        const value = await task();
        let claimed = false;
        return { value, claim: () => !claimed && (claimed = true) };
      } finally {
        this.#endedAt = this.#now();
        this.#lastMs = this.#endedAt - started;
      }
    })();
    this.#next = next;
    this.#current = next.then(ignore, ignore);
    return next;
  }
}
