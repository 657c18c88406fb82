// "Reconcile this key again after D" across scale-to-zero: a function answers 2xx with a reply
// CloudEvent carrying the extension `opfnnotbefore` (RFC 3339 due time; see the runtime contract,
// RUNTIME-CONTRACT.md "Requeue semantics"). Knative's broker delivers replies at once (the
// function then drops an early one and its PingSource resync catches up); the local broker does
// better and holds such a reply until it is due, then routes it like any reply. controller-runtime
// keeps the same promise with its workqueue's AddAfter, which lives in the controller's memory.
//
// - Replies that are due (or carry no/an unreadable due time) go on at once.
// - Identical requeues (same function, type and data) are held once, at the earliest due time,
//   so repeated reconciles of a key never multiply its timers.
// - The count is bounded: beyond `maxHeld` a reply goes on at once with a log line (the function
//   sees it early and keeps its own due time in status, so nothing is lost but a timer).
// - On close every held reply is dropped with a log line ("dropped because the plane stopped"):
//   the functions' resync reconciles those keys after the next start.
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import { FUNCTION_EXTENSION, NOT_BEFORE_EXTENSION } from '../../functions/runtime/events.ts';
import { MAX_TIMER_MS } from '../../functions/runtime/timers.ts';

// The extension is the runtime's (functions/runtime/events.ts): one name on both ends of the wire.
export { NOT_BEFORE_EXTENSION };
export const DEFAULT_MAX_HELD = 10_000;

/** When the event is due: a time in ms, or 'now' (absent, past, or not a valid timestamp → `problem`). */
export function dueAt(event: CloudEventV1<unknown>, now: number): { at: number } | { at: 'now'; problem?: string } {
  const raw = event[NOT_BEFORE_EXTENSION];
  if (raw === undefined || raw === null || raw === '') return { at: 'now' };
  const at = typeof raw === 'string' && /^\d{4}-\d{2}-\d{2}T/.test(raw) ? Date.parse(raw) : Number.NaN;
  if (!Number.isFinite(at)) return { at: 'now', problem: `${NOT_BEFORE_EXTENSION} ${JSON.stringify(raw)} is not an RFC 3339 time` };
  return at > now ? { at } : { at: 'now' };
}

interface Held {
  event: CloudEventV1<unknown>;
  at: number;
  timer: NodeJS.Timeout;
}

export class ReplyHold {
  readonly #held = new Map<string, Held>();
  readonly #max: number;
  readonly #log: Logger;
  readonly #release: (event: CloudEventV1<unknown>) => void;

  constructor(options: { maxHeld?: number; log: Logger; release: (event: CloudEventV1<unknown>) => void }) {
    this.#max = options.maxHeld ?? DEFAULT_MAX_HELD;
    this.#log = options.log;
    this.#release = options.release;
  }

  get size(): number {
    return this.#held.size;
  }

  /** Holds the event until it is due; false when it should go on now. */
  hold(event: CloudEventV1<unknown>, now = Date.now()): boolean {
    const due = dueAt(event, now);
    if (due.at === 'now') {
      if ('problem' in due && due.problem) this.#log.warn({ id: event.id, type: event.type }, `${due.problem}; routing the reply now`);
      return false;
    }
    const identity = JSON.stringify([event.opfnfunction, event.type, event.data ?? event.data_base64 ?? null]);
    const existing = this.#held.get(identity);
    if (existing) {
      if (existing.at <= due.at) {
        this.#log.debug({ id: event.id, heldId: existing.event.id }, 'requeue already held at an earlier time');
        return true;
      }
      clearTimeout(existing.timer);
      this.#held.delete(identity);
    } else if (this.#held.size >= this.#max) {
      this.#log.warn({ id: event.id, held: this.#held.size, notBefore: event[NOT_BEFORE_EXTENSION] }, `${this.#held.size} requeues already held; routing this one now`);
      return false;
    }
    const timer = setTimeout(() => {
      this.#held.delete(identity);
      this.#release(event);
    }, Math.min(due.at - now, MAX_TIMER_MS));
    timer.unref();
    this.#held.set(identity, { event, at: due.at, timer });
    return true;
  }

  /** Drops everything held (plane stopping), one log line per event. */
  dropAll(): number {
    const count = this.#held.size;
    for (const held of this.#held.values()) {
      clearTimeout(held.timer);
      this.#log.info(
        { id: held.event.id, type: held.event.type, function: held.event[FUNCTION_EXTENSION], notBefore: held.event[NOT_BEFORE_EXTENSION] },
        'held requeue dropped because the plane stopped (the next resync reconciles its keys)',
      );
    }
    this.#held.clear();
    return count;
  }
}
