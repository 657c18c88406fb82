// The filter's reply path (knative/eventing pkg/broker/filter/filter_handler.go): a subscriber's
// reply CloudEvent goes back into the broker's ingress (carrying the delivered event's TTL, which
// the ingress decrements); the keys of a reconcile reply that are due later are held until then,
// each at its own time (requeue-hold.ts).
// A reply the broker cannot take is dead-lettered to the file, never lost silently.
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import { withErrorExtensions } from '../delivery.ts';
import type { DeadLetterSink } from './dead-letters.ts';
import { requeueEvent, RequeueHold, splitReply } from './requeue-hold.ts';

/** open: replies routed or held; stopping: only what is due now is routed; closed: dropped. */
export type ReplyState = 'open' | 'stopping' | 'closed';

export class ReplyRouter {
  readonly #hold: RequeueHold;
  readonly #inFlight = new Set<Promise<void>>();
  readonly #log: Logger;
  readonly #ingest: (event: CloudEventV1<unknown>) => Promise<unknown>;
  readonly #deadLetters: DeadLetterSink;
  readonly #state: () => ReplyState;
  readonly #onSettled: () => void;
  readonly #routed: (event: CloudEventV1<unknown>) => boolean;
  #droppedWhileStopping = 0;

  constructor(options: {
    maxHeldKeysPerFunction?: number;
    /**
     * Would a Trigger take this event (the one held keys would leave in)? Keys are held only for
     * a function some Trigger routes to: a reply's `opfnfunction` is the subscriber's say, and the
     * hold's room is per function, so replies under made-up names would otherwise be held without
     * bound; and keys for a function no Trigger routes to would reach no one when due.
     */
    routed: (event: CloudEventV1<unknown>) => boolean;
    log: Logger;
    ingest: (event: CloudEventV1<unknown>) => Promise<unknown>;
    deadLetters: DeadLetterSink;
    state: () => ReplyState;
    onSettled: () => void;
  }) {
    this.#log = options.log;
    this.#ingest = options.ingest;
    this.#deadLetters = options.deadLetters;
    this.#state = options.state;
    this.#onSettled = options.onSettled;
    this.#routed = options.routed;
    this.#hold = new RequeueHold({
      maxKeysPerFunction: options.maxHeldKeysPerFunction,
      log: options.log,
      release: (event) => this.#routeNow(event, 'held'),
    });
  }

  /** Requeued keys held until they are due. */
  get held(): number {
    return this.#hold.size;
  }

  /** Replies being routed into the broker right now. */
  get inFlight(): number {
    return this.#inFlight.size;
  }

  /** Drops every held key (the plane is stopping); returns how many. */
  dropHeld(): number {
    return this.#hold.dropAll();
  }

  /** Keys due later in replies that came back while the plane was stopping (dropped). */
  get droppedWhileStopping(): number {
    return this.#droppedWhileStopping;
  }

  /** Routes the reply that `from` (a trigger) answered with. */
  route(reply: CloudEventV1<unknown>, from: string): void {
    const state = this.#state();
    if (state === 'closed') {
      this.#log.info({ trigger: from, id: reply.id, type: reply.type }, 'reply dropped because the plane stopped');
      return;
    }
    const now = Date.now();
    const { now: dueNow, later, problems } = splitReply(reply, now);
    for (const problem of problems) this.#log.warn({ trigger: from, id: reply.id, type: reply.type }, problem);
    if (later.length > 0 && state === 'stopping') {
      // A requeue for later cannot be kept; the resync covers it after the next start. Counted
      // into the broker's closing line rather than a line per reply.
      this.#droppedWhileStopping += later.length;
      this.#log.debug({ trigger: from, id: reply.id, dropped: later.length }, 'requeue dropped because the plane is stopping');
    } else if (later.length > 0 && !this.#routed(requeueEvent(later[0]!.function, later[0]!.source, []))) {
      // Only the part due now goes on (it reaches whom it matches, as any reply).
      this.#log.warn(
        { trigger: from, id: reply.id, function: later[0]!.function, dropped: later.length, keys: later.slice(0, 3).map(({ key }) => key) },
        'requeue for later not held: no Trigger routes reconcile events to the function the reply names',
      );
    } else if (later.length > 0) {
      this.#hold.add(later, now);
    }
    if (dueNow) this.#routeNow(dueNow, from);
  }

  #routeNow(event: CloudEventV1<unknown>, from: string): void {
    const task: Promise<void> = this.#ingestReply(event, from).finally(() => {
      this.#inFlight.delete(task);
      this.#onSettled();
    });
    this.#inFlight.add(task);
  }

  async #ingestReply(event: CloudEventV1<unknown>, from: string): Promise<void> {
    try {
      if (this.#state() === 'closed') throw new Error('broker closed');
      await this.#ingest(event);
    } catch (err) {
      const reason = `reply could not be routed: ${(err as Error).message}`;
      this.#log.warn({ trigger: from, id: event.id, type: event.type, reason, file: this.#deadLetters.file }, 'reply event dead-lettered');
      await this.#deadLetters.toFile(withErrorExtensions(event, { destination: from, body: `dispatch error: ${reason}`, reason }), {
        trigger: from,
        reason,
      });
    }
  }
}
