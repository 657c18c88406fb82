// Per-key coalescing, as client-go's workqueue does it (util/workqueue/queue.go: the `dirty` and
// `processing` sets; its doc.go calls the queue "stingy"): a key is never reconciled twice at
// once, and every request that arrives while the key runs shares ONE follow-up run. That run
// starts after all of them arrived, so each caller's answer is still truthful ("the state you
// rang about has been reconciled"), and a burst of N doorbells for one object costs at most two
// reconciles instead of N. Replicas' races are the only races left.
//
// A follow-up run that only one request joined is that request's own run, merely later: it may
// use what that request knows (an event body trusted to do less). One that several joined is
// told it is shared, and uses none of their hints.

interface Slot {
  /** Settles (never rejects) when the current run ends. */
  running: Promise<void>;
  /** The one follow-up run every request arriving meanwhile shares. */
  waiting?: Promise<unknown>;
  /** Requests that joined `waiting`. */
  joined: number;
}

const settle = () => {};

export class KeyedWorkQueue {
  readonly #slots = new Map<string, Slot>();

  /** Keys running or waiting (for tests and metrics). */
  get size(): number {
    return this.#slots.size;
  }

  /** `task` learns whether its run is shared by several requests (then it must not trust any caller's event object). */
  run<T>(key: string, task: (shared: boolean) => Promise<T>): Promise<T> {
    const slot = this.#slots.get(key);
    if (!slot) {
      const fresh: Slot = { running: Promise.resolve(), joined: 0 };
      this.#slots.set(key, fresh);
      return this.#begin(key, fresh, () => task(false));
    }
    slot.joined++;
    slot.waiting ??= slot.running.then(() => {
      const shared = slot.joined > 1;
      slot.waiting = undefined;
      slot.joined = 0;
      return this.#begin(key, slot, () => task(shared));
    });
    return slot.waiting as Promise<T>;
  }

  #begin<T>(key: string, slot: Slot, task: () => Promise<T>): Promise<T> {
    const result = (async () => task())();
    const running = result.then(settle, settle);
    slot.running = running;
    void running.then(() => {
      if (slot.running === running && !slot.waiting) this.#slots.delete(key);
    });
    return result;
  }
}
