// The local broker: a stand-in for a Knative Broker (MT channel-based) outside a cluster. This
// file is the Broker class (triggers, publish, listen, idle, stats, close); the mechanics live beside
// it: ingress.ts (HTTP front door), ttl.ts (knativebrokerttl), triggers.ts (a Trigger checked and
// its delivery policy resolved), trigger-queue.ts (per-trigger bounded queue), attempts.ts (retry
// loop, direct routes), dispatcher.ts (one attempt and its verdict), dead-letters.ts (sink, file,
// log), replies.ts and requeue-hold.ts (the reply path, replies due later), cloudevent-http.ts (the HTTP
// binding), ../filters.ts and ../delivery.ts (Knative's filter and delivery rules).
//
// Shutdown (close): intake stops first (ingress 503, publish refused), deliveries in flight and
// queued ones go on until they finish or `drainTimeoutMs` passes; then what is left is cut and
// dead-lettered with the reason. Held requeues are dropped with a log line.
import { resolve as resolvePath } from 'node:path';
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import {
  KNATIVE_DEFAULT_DELIVERY,
  parseDeliverySpec,
  type DeadLetterTarget,
  type DeliveryFailure,
  type DeliverySpec,
} from '../delivery.ts';
import { matchesTrigger, type Trigger } from '../filters.ts';
import { deliverWithRetries, type AttemptContext } from './attempts.ts';
import { eventProblem, plainEvent } from './cloudevent-http.ts';
import { DeadLetterSink } from './dead-letters.ts';
import { Dispatcher, type DirectRoute } from './dispatcher.ts';
import { DEFAULT_MAX_WAITING_BYTES, DEFAULT_MAX_WAITING_REQUESTS, Ingress, MAX_EVENT_BYTES, type IngestResult } from './ingress.ts';
import { ReplyRouter } from './replies.ts';
import { checkTrigger, positiveInteger, resolveDelivery } from './triggers.ts';
import { TriggerQueue, type QueueItem, type TriggerStats } from './trigger-queue.ts';
import { nextTtl, TTL_ATTRIBUTE, withoutTtl } from './ttl.ts';

export interface BrokerOptions {
  triggers: Trigger[];
  /** Broker default; Knative defaults retry 10, exponential, PT0.2S (and no timeout). */
  delivery?: DeliverySpec;
  /** JSON-lines file used when no deadLetterSink is configured (0600, rotated at deadLetterMaxBytes). */
  deadLetterFile: string;
  deadLetterMaxBytes?: number;
  /** Events held per trigger (waiting + being delivered, retries included); default 1000. */
  queueLimit?: number;
  /** Concurrent deliveries per trigger unless the trigger sets its own; default 64. */
  maxInFlight?: number;
  /** Direct routes to subscribers (the activator's warm path); default: none. */
  route?: DirectRoute;
  /**
   * Ingress requests that may wait while a trigger queue is full, and the bytes of their bodies;
   * beyond either the ingress answers 503 (pending request queue full). Default 1000 and 32 MiB.
   * `publish()` is not bounded by them: in-process publishers wait.
   */
  maxWaitingRequests?: number;
  maxWaitingBytes?: number;
  /** Requeued keys (of reconcile replies due later) held at most per function; default 10000. */
  maxHeldKeysPerFunction?: number;
  log: Logger;
}

export interface BrokerCloseOptions {
  /** How long deliveries in flight and queued may still run; default 10 s. */
  drainTimeoutMs?: number;
}

export type { TriggerStats };

const DEFAULT_QUEUE_LIMIT = 1000;
const DEFAULT_MAX_IN_FLIGHT = 64;
/** How long close() lets deliveries in flight finish by default. */
const DEFAULT_DRAIN_MS = 10_000;

export class Broker {
  readonly #log: Logger;
  readonly #queueLimit: number;
  readonly #maxInFlight: number;
  readonly #brokerDelivery: ReturnType<typeof parseDeliverySpec>;
  readonly #queues = new Map<string, TriggerQueue>();
  readonly #draining = new Set<TriggerQueue>();
  readonly #abort = new AbortController();
  readonly #dispatcher: Dispatcher;
  readonly #deadLetters: DeadLetterSink;
  readonly #ingress: Ingress;
  readonly #replies: ReplyRouter;
  readonly #attempts: AttemptContext;
  #idleWaiters: Array<() => void> = [];
  /** No new events from outside (ingress, publish); replies of deliveries still in flight go on. */
  #intakeClosed = false;
  #closed = false;
  #closing?: Promise<void>;
  #listening = false;

  constructor(options: BrokerOptions) {
    if (options === null || typeof options !== 'object')
      throw new Error('Broker: options are required ({ triggers, deadLetterFile, log })');
    if (!options.log || typeof options.log.warn !== 'function') throw new Error('Broker: options.log must be a pino Logger');
    // One `component` key per line: add it only when the given logger does not carry one yet.
    const bound = typeof options.log.bindings === 'function' ? options.log.bindings() : {};
    this.#log =
      typeof options.log.child === 'function' && bound.component === undefined ? options.log.child({ component: 'broker' }) : options.log;
    if (typeof options.deadLetterFile !== 'string' || options.deadLetterFile.trim() === '') {
      throw new Error('Broker: options.deadLetterFile must be a file path (dead-lettered events are appended there as JSON lines)');
    }
    this.#queueLimit = positiveInteger(options.queueLimit, DEFAULT_QUEUE_LIMIT, 'queueLimit');
    this.#maxInFlight = positiveInteger(options.maxInFlight, DEFAULT_MAX_IN_FLIGHT, 'maxInFlight');
    this.#brokerDelivery = parseDeliverySpec(options.delivery ?? KNATIVE_DEFAULT_DELIVERY, 'broker.delivery');
    for (const warning of this.#brokerDelivery.warnings) this.#log.warn(warning);
    this.#dispatcher = new Dispatcher({ abort: this.#abort.signal, maxResponseBytes: MAX_EVENT_BYTES });
    this.#deadLetters = new DeadLetterSink({
      file: resolvePath(options.deadLetterFile),
      maxBytes: options.deadLetterMaxBytes,
      dispatcher: this.#dispatcher,
      log: this.#log,
    });
    this.#ingress = new Ingress({
      log: this.#log,
      ingest: (event) => this.#ingest(event, 'ingress'),
      accepting: () => !this.#intakeClosed,
      maxWaitingRequests: positiveInteger(options.maxWaitingRequests, DEFAULT_MAX_WAITING_REQUESTS, 'maxWaitingRequests'),
      maxWaitingBytes: positiveInteger(options.maxWaitingBytes, DEFAULT_MAX_WAITING_BYTES, 'maxWaitingBytes'),
    });
    this.#replies = new ReplyRouter({
      maxHeldKeysPerFunction: options.maxHeldKeysPerFunction,
      routed: (event) => [...this.#queues.values()].some((queue) => matchesTrigger(queue.trigger, event)),
      log: this.#log,
      ingest: (event) => this.#ingest(event, 'reply'),
      deadLetters: this.#deadLetters,
      state: () => (this.#closed ? 'closed' : this.#intakeClosed ? 'stopping' : 'open'),
      onSettled: () => this.#checkIdle(),
    });
    this.#attempts = {
      dispatcher: this.#dispatcher,
      route: options.route,
      closed: () => this.#closed,
      deadLetter: (queue, event, failure) => this.#deadLetter(queue, event, failure),
      log: this.#log,
    };
    if (options.triggers !== undefined && !Array.isArray(options.triggers)) throw new Error('Broker: options.triggers must be a list');
    for (const trigger of options.triggers ?? []) this.addTrigger(trigger);
  }

  /** Adds a Trigger, or replaces the one with the same name (queued events then go to the new subscriber). */
  addTrigger(trigger: Trigger): void {
    if (this.#closed || this.#intakeClosed) throw new Error('Broker is closed');
    const checked = checkTrigger(trigger);
    const delivery = resolveDelivery(checked, this.#brokerDelivery, this.#deadLetters.file, this.#log);
    const existing = this.#queues.get(checked.name);
    if (existing) {
      existing.update(checked, delivery);
      this.#log.info({ trigger: checked.name, subscriber: checked.subscriber }, 'trigger updated');
      return;
    }
    const queue = new TriggerQueue(checked, delivery, {
      queueLimit: this.#queueLimit,
      maxInFlight: this.#maxInFlight,
      run: (q, item) => this.#deliver(q, item),
      onSettled: () => {
        if (queue.removed && queue.empty) this.#draining.delete(queue);
        this.#checkIdle();
      },
    });
    this.#queues.set(checked.name, queue);
    this.#log.info({ trigger: checked.name, subscriber: checked.subscriber, maxInFlight: queue.maxInFlight }, 'trigger added');
  }

  /** Removes a Trigger: it gets no new events; events it already holds are still delivered (or dead-lettered). */
  removeTrigger(name: string): void {
    const queue = this.#queues.get(name);
    if (!queue) return;
    this.#queues.delete(name);
    queue.removed = true;
    if (!queue.empty) this.#draining.add(queue);
    this.#log.info({ trigger: name, remaining: queue.queued + queue.inFlight }, 'trigger removed');
    this.#checkIdle();
  }

  /**
   * Enqueues the event for every matching trigger. Resolves once all their queues accepted it;
   * waits while a queue is full. Rejects (never throws synchronously) for a malformed event or a
   * closed broker. An event whose knativebrokerttl is exhausted is dropped with a log line.
   */
  async publish(event: CloudEventV1<unknown>): Promise<void> {
    if (this.#intakeClosed) throw new Error('Broker is closed: the event was not accepted');
    const problem = eventProblem(event);
    if (problem) throw new TypeError(`Broker.publish: not a CloudEvent (${problem})`);
    await this.#ingest(plainEvent(event), 'publish');
  }

  /** HTTP ingress: POST / with a CloudEvent (binary or structured) → 202; malformed → 400; too large → 413. */
  async listen(port = 0, host = '127.0.0.1'): Promise<string> {
    if (this.#closed || this.#intakeClosed) throw new Error('Broker is closed');
    if (this.#listening) throw new Error('Broker ingress is already listening');
    this.#listening = true;
    try {
      const url = await this.#ingress.listen(port, host);
      this.#log.info({ url }, 'broker ingress listening');
      return url;
    } catch (err) {
      this.#listening = false;
      throw err;
    }
  }

  /** Resolves when every queue is empty and nothing is in flight (retries and replies included; held requeues are not counted). */
  idle(): Promise<void> {
    if (this.#isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  stats(): Record<string, TriggerStats> {
    const out: Record<string, TriggerStats> = {};
    for (const [name, queue] of this.#queues) out[name] = queue.snapshot();
    return out;
  }

  /** Requeued keys held until they are due. */
  get heldRequeues(): number {
    return this.#replies.held;
  }

  /** Where dead letters go when no sink is configured. */
  get deadLetterFile(): string {
    return this.#deadLetters.file;
  }

  /**
   * Stops intake at once, lets deliveries finish for up to `drainTimeoutMs`, then cuts what is
   * left and dead-letters it (with the reason). Publishers still waiting for room get an error.
   */
  close(options: BrokerCloseOptions = {}): Promise<void> {
    this.#closing ??= this.#shutdown(options.drainTimeoutMs ?? DEFAULT_DRAIN_MS);
    return this.#closing;
  }

  async #shutdown(drainTimeoutMs: number): Promise<void> {
    this.#intakeClosed = true;
    const ingressClosed = this.#ingress.close();
    for (const queue of this.#allQueues()) queue.refuseWaiters('Broker closed before the event was accepted');
    const dropped = this.#replies.dropHeld();
    const pending = this.#pendingCount();
    if (pending > 0)
      this.#log.info(
        { pending, drainTimeoutMs },
        `broker stopping: waiting up to ${drainTimeoutMs} ms for ${pending} events in flight or queued`,
      );
    let timer: NodeJS.Timeout | undefined;
    const drained = await Promise.race([
      this.idle().then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), drainTimeoutMs);
      }),
    ]);
    clearTimeout(timer);
    this.#closed = true;
    this.#abort.abort();
    const undelivered: Array<{ queue: TriggerQueue; item: QueueItem }> = [];
    for (const queue of this.#allQueues()) for (const item of queue.stop()) undelivered.push({ queue, item });
    if (!drained)
      this.#log.warn(
        { queued: undelivered.length, inFlight: this.#pendingCount() - undelivered.length },
        'broker drain deadline passed: cutting deliveries still running',
      );
    for (const { queue, item } of undelivered) {
      await this.#deadLetter(queue, item.event, {
        destination: queue.trigger.subscriber,
        body: 'dispatch error: broker closed before delivery',
        reason: 'broker closed before the event was delivered',
      });
    }
    await this.idle();
    await ingressClosed;
    await this.#dispatcher.close();
    this.#draining.clear();
    // Held requeues dropped: those held at the signal, and those replied while draining.
    this.#log.info({ dropped: dropped + this.#replies.droppedWhileStopping }, 'broker closed');
    this.#checkIdle();
  }

  *#allQueues(): Iterable<TriggerQueue> {
    yield* this.#queues.values();
    yield* this.#draining;
  }

  #pendingCount(): number {
    let n = this.#replies.inFlight;
    for (const queue of this.#allQueues()) n += queue.queued + queue.inFlight;
    return n;
  }

  // ---- entry: TTL, filtering, enqueueing ------------------------------------------------------

  async #ingest(event: CloudEventV1<unknown>, origin: 'publish' | 'ingress' | 'reply'): Promise<IngestResult> {
    const ttl = nextTtl(event, (raw) =>
      this.#log.warn({ id: event.id, [TTL_ATTRIBUTE]: raw }, 'knativebrokerttl is not an integer; using 255'),
    );
    if (ttl <= 0) {
      this.#log.warn(
        { origin, id: event.id, type: event.type, source: event.source, [TTL_ATTRIBUTE]: event[TTL_ATTRIBUTE] },
        'event dropped: knativebrokerttl exhausted (an event loop through replies?)',
      );
      return 'ttl-exhausted';
    }
    const held: CloudEventV1<unknown> = { ...event, [TTL_ATTRIBUTE]: ttl };
    const visible = withoutTtl(held);
    const targets = [...this.#queues.values()].filter((queue) => matchesTrigger(queue.trigger, visible));
    if (targets.length === 0) {
      this.#log.debug({ origin, id: event.id, type: event.type }, 'event matched no trigger');
      return 'accepted';
    }
    await Promise.all(targets.map((queue) => queue.enqueue({ event: held, ttl })));
    return 'accepted';
  }

  // ---- delivery -------------------------------------------------------------------------------

  /** Delivers one item with retries; dead-letters it when that fails; routes its reply. Never rejects. */
  async #deliver(queue: TriggerQueue, item: QueueItem): Promise<void> {
    try {
      const reply = await deliverWithRetries(this.#attempts, queue, item);
      // Knative's filter puts the delivered event's TTL on the reply; the ingress then decrements it.
      if (reply) this.#replies.route({ ...reply, [TTL_ATTRIBUTE]: item.ttl }, queue.trigger.name);
    } catch (err) {
      this.#log.error({ err, trigger: queue.trigger.name, id: item.event.id }, 'unexpected delivery error');
    }
  }

  async #deadLetter(queue: TriggerQueue, event: CloudEventV1<unknown>, failure: DeliveryFailure): Promise<void> {
    queue.stats.deadLettered += 1;
    const target: DeadLetterTarget = this.#closed ? { kind: 'file', path: this.#deadLetters.file } : queue.delivery.deadLetter;
    await this.#deadLetters.send(target, event, failure, queue.delivery, { trigger: queue.trigger.name });
  }

  // ---- idle tracking --------------------------------------------------------------------------

  #isIdle(): boolean {
    if (this.#replies.inFlight > 0) return false;
    for (const queue of this.#allQueues()) if (!queue.empty) return false;
    return true;
  }

  #checkIdle(): void {
    if (this.#idleWaiters.length === 0 || !this.#isIdle()) return;
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
