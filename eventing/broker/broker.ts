// The local broker: a stand-in for a Knative Broker (MT channel-based) outside a cluster. This
// file is the façade (triggers, publish, listen, idle, stats, close) and the filter's reply path
// (pkg/broker/filter/filter_handler.go); the mechanics live beside it:
// ingress.ts (HTTP front door), ttl.ts (knativebrokerttl), trigger-queue.ts (per-trigger bounded
// queue), dispatcher.ts (one attempt and its verdict), dead-letters.ts (sink, file, log),
// hold.ts (replies due later), cloudevent-http.ts (the HTTP binding), ../filters.ts and
// ../delivery.ts (Knative's filter and delivery rules).
//
// Shutdown (close): intake stops first (ingress 503, publish refused), deliveries in flight and
// queued ones go on until they finish or `drainTimeoutMs` passes; then what is left is cut and
// dead-lettered with the reason. Held requeues are dropped with a log line.
import { resolve as resolvePath } from 'node:path';
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import { backoffDelayMs, KNATIVE_DEFAULT_DELIVERY, parseDeliverySpec, withErrorExtensions, type DeadLetterTarget, type DeliveryFailure, type DeliverySpec, type ResolvedDelivery } from '../delivery.ts';
import { matchesTrigger, validateTriggerFilters, type Trigger } from '../filters.ts';
import { eventProblem, plainEvent } from './cloudevent-http.ts';
import { DeadLetterSink } from './dead-letters.ts';
import { Dispatcher, judge, type DirectRoute } from './dispatcher.ts';
import { dueAt, NOT_BEFORE_EXTENSION, ReplyHold } from './hold.ts';
import { Ingress, MAX_EVENT_BYTES, type IngestResult } from './ingress.ts';
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
  /** Replies due later (opfnnotbefore) held at most; default 10000. */
  maxHeldReplies?: number;
  log: Logger;
}

export interface BrokerCloseOptions {
  /** How long deliveries in flight and queued may still run; default 10 s. */
  drainTimeoutMs?: number;
}

export type { TriggerStats };

const DEFAULT_QUEUE_LIMIT = 1000;
const DEFAULT_MAX_IN_FLIGHT = 64;
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
  readonly #hold: ReplyHold;
  readonly #route?: DirectRoute;
  readonly #replies = new Set<Promise<void>>();
  #idleWaiters: Array<() => void> = [];
  /** No new events from outside (ingress, publish); replies of deliveries still in flight go on. */
  #intakeClosed = false;
  #closed = false;
  #closing?: Promise<void>;
  #listening = false;

  constructor(options: BrokerOptions) {
    if (options === null || typeof options !== 'object') throw new Error('Broker: options are required ({ triggers, deadLetterFile, log })');
    if (!options.log || typeof options.log.warn !== 'function') throw new Error('Broker: options.log must be a pino Logger');
    // One `component` key per line: add it only when the given logger does not carry one yet.
    const bound = typeof options.log.bindings === 'function' ? options.log.bindings() : {};
    this.#log = typeof options.log.child === 'function' && bound.component === undefined ? options.log.child({ component: 'broker' }) : options.log;
    if (typeof options.deadLetterFile !== 'string' || options.deadLetterFile.trim() === '') {
      throw new Error('Broker: options.deadLetterFile must be a file path (dead-lettered events are appended there as JSON lines)');
    }
    this.#queueLimit = positiveInteger(options.queueLimit, DEFAULT_QUEUE_LIMIT, 'queueLimit');
    this.#maxInFlight = positiveInteger(options.maxInFlight, DEFAULT_MAX_IN_FLIGHT, 'maxInFlight');
    this.#brokerDelivery = parseDeliverySpec(options.delivery ?? KNATIVE_DEFAULT_DELIVERY, 'broker.delivery');
    for (const warning of this.#brokerDelivery.warnings) this.#log.warn(warning);
    this.#route = options.route;
    this.#dispatcher = new Dispatcher({ abort: this.#abort.signal, maxResponseBytes: MAX_EVENT_BYTES });
    this.#deadLetters = new DeadLetterSink({ file: resolvePath(options.deadLetterFile), maxBytes: options.deadLetterMaxBytes, dispatcher: this.#dispatcher, log: this.#log });
    this.#ingress = new Ingress({ log: this.#log, ingest: (event) => this.#ingest(event, 'ingress'), accepting: () => !this.#intakeClosed });
    this.#hold = new ReplyHold({ maxHeld: options.maxHeldReplies, log: this.#log, release: (event) => this.#routeReplyNow(event, 'held') });
    if (options.triggers !== undefined && !Array.isArray(options.triggers)) throw new Error('Broker: options.triggers must be a list');
    for (const trigger of options.triggers ?? []) this.addTrigger(trigger);
  }

  /** Adds a Trigger, or replaces the one with the same name (queued events then go to the new subscriber). */
  addTrigger(trigger: Trigger): void {
    if (this.#closed || this.#intakeClosed) throw new Error('Broker is closed');
    const checked = checkTrigger(trigger);
    const delivery = this.#resolveDelivery(checked);
    const existing = this.#queues.get(checked.name);
    if (existing) {
      existing.trigger = checked;
      existing.delivery = delivery;
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

  /** Replies held until their opfnnotbefore time. */
  get heldReplies(): number {
    return this.#hold.size;
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
    const dropped = this.#hold.dropAll();
    const pending = this.#pendingCount();
    if (pending > 0) this.#log.info({ pending, drainTimeoutMs }, `broker stopping: waiting up to ${drainTimeoutMs} ms for ${pending} events in flight or queued`);
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
    if (!drained) this.#log.warn({ queued: undelivered.length, inFlight: this.#pendingCount() - undelivered.length }, 'broker drain deadline passed: cutting deliveries still running');
    for (const { queue, item } of undelivered) {
      await this.#deadLetter(queue, item.event, { destination: queue.trigger.subscriber, body: 'dispatch error: broker closed before delivery', reason: 'broker closed before the event was delivered' });
    }
    await this.idle();
    await ingressClosed;
    await this.#dispatcher.close();
    this.#draining.clear();
    this.#log.info({ dropped }, 'broker closed');
    this.#checkIdle();
  }

  *#allQueues(): Iterable<TriggerQueue> {
    yield* this.#queues.values();
    yield* this.#draining;
  }

  #pendingCount(): number {
    let n = this.#replies.size;
    for (const queue of this.#allQueues()) n += queue.queued + queue.inFlight;
    return n;
  }

  #resolveDelivery(trigger: Trigger): ResolvedDelivery {
    const own = trigger.delivery === undefined ? undefined : parseDeliverySpec(trigger.delivery, `trigger ${trigger.name}.delivery`);
    for (const warning of own?.warnings ?? []) this.#log.warn(warning);
    const base = own ?? this.#brokerDelivery;
    const deadLetter: DeadLetterTarget = own?.deadLetter ?? this.#brokerDelivery.deadLetter ?? { kind: 'file', path: this.#deadLetters.file };
    const resolved: ResolvedDelivery = { retry: base.retry, timeoutMs: base.timeoutMs, deadLetter };
    if (base.backoffPolicy !== undefined) resolved.backoffPolicy = base.backoffPolicy;
    if (base.backoffDelayMs !== undefined) resolved.backoffDelayMs = base.backoffDelayMs;
    return resolved;
  }

  // ---- entry: TTL, filtering, enqueueing ------------------------------------------------------

  async #ingest(event: CloudEventV1<unknown>, origin: 'publish' | 'ingress' | 'reply'): Promise<IngestResult> {
    const ttl = nextTtl(event, (raw) => this.#log.warn({ id: event.id, [TTL_ATTRIBUTE]: raw }, 'knativebrokerttl is not an integer; using 255'));
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
      const reply = await this.#attempts(queue, item);
      // Knative's filter puts the delivered event's TTL on the reply; the ingress then decrements it.
      if (reply) this.#routeReply(queue, { ...reply, [TTL_ATTRIBUTE]: item.ttl });
    } catch (err) {
      this.#log.error({ err, trigger: queue.trigger.name, id: item.event.id }, 'unexpected delivery error');
    }
  }

  async #attempts(queue: TriggerQueue, item: QueueItem): Promise<CloudEventV1<unknown> | undefined> {
    const { trigger, delivery } = queue;
    const outgoing = withoutTtl(item.event);
    let failure: DeliveryFailure | undefined;
    for (let attempt = 0; attempt <= delivery.retry; attempt += 1) {
      if (attempt > 0) {
        queue.stats.retried += 1;
        await this.#dispatcher.sleep(backoffDelayMs(delivery, attempt));
      }
      if (this.#closed) {
        failure = { ...failure, destination: trigger.subscriber, reason: `broker closed before the event was delivered${failure ? ` (last failure: ${failure.reason})` : ''}` };
        break;
      }
      const lease = this.#route?.(trigger.subscriber, typeof outgoing.partitionkey === 'string' ? outgoing.partitionkey : undefined);
      if (lease) queue.stats.direct += 1;
      const timeoutMs = minTimeout(delivery.timeoutMs, lease?.timeoutMs ?? 0);
      const outcome = await this.#dispatcher.send(lease?.url ?? trigger.subscriber, outgoing, timeoutMs, true);
      lease?.release(outcome.kind === 'error' && !outcome.timedOut ? 'unreachable' : 'answered');
      const verdict = judge(trigger.subscriber, outcome);
      if (verdict.ok) {
        queue.stats.delivered += 1;
        this.#log.debug({ trigger: trigger.name, id: item.event.id, attempts: attempt + 1, direct: lease !== undefined, reply: verdict.reply !== undefined }, 'event delivered');
        return verdict.reply;
      }
      failure = verdict.failure;
      if (!verdict.retryable || this.#closed) break;
      if (attempt < delivery.retry) {
        this.#log.debug({ trigger: trigger.name, id: item.event.id, attempt: attempt + 1, reason: failure.reason }, 'delivery failed; will retry');
      }
    }
    await this.#deadLetter(queue, item.event, failure ?? { destination: trigger.subscriber, reason: 'delivery failed' });
    return undefined;
  }

  // ---- replies --------------------------------------------------------------------------------

  #routeReply(queue: TriggerQueue, reply: CloudEventV1<unknown>): void {
    if (this.#closed) {
      this.#log.info({ trigger: queue.trigger.name, id: reply.id, type: reply.type }, 'reply dropped because the plane stopped');
      return;
    }
    if (this.#intakeClosed) {
      if (dueAt(reply, Date.now()).at !== 'now') {
        // Stopping: a requeue for later cannot be kept; the resync covers it after the next start.
        this.#log.info({ trigger: queue.trigger.name, id: reply.id, notBefore: reply[NOT_BEFORE_EXTENSION] }, 'requeue dropped because the plane stopped (the next resync reconciles its keys)');
        return;
      }
    } else if (this.#hold.hold(reply)) {
      return;
    }
    this.#routeReplyNow(reply, queue.trigger.name);
  }

  #routeReplyNow(event: CloudEventV1<unknown>, from: string): void {
    const task: Promise<void> = this.#ingestReply(event, from).finally(() => {
      this.#replies.delete(task);
      this.#checkIdle();
    });
    this.#replies.add(task);
  }

  async #ingestReply(event: CloudEventV1<unknown>, from: string): Promise<void> {
    try {
      if (this.#closed) throw new Error('broker closed');
      await this.#ingest(event, 'reply');
    } catch (err) {
      const reason = `reply could not be routed: ${(err as Error).message}`;
      this.#log.warn({ trigger: from, id: event.id, type: event.type, reason, file: this.#deadLetters.file }, 'reply event dead-lettered');
      await this.#deadLetters.toFile(withErrorExtensions(event, { destination: from, body: `dispatch error: ${reason}`, reason }), { trigger: from, reason });
    }
  }

  // ---- dead letters ---------------------------------------------------------------------------

  async #deadLetter(queue: TriggerQueue, event: CloudEventV1<unknown>, failure: DeliveryFailure): Promise<void> {
    queue.stats.deadLettered += 1;
    const letter = withErrorExtensions(event, failure);
    const target: DeadLetterTarget = this.#closed ? { kind: 'file', path: this.#deadLetters.file } : queue.delivery.deadLetter;
    const sink = target.kind === 'http' ? target.url : target.path;
    const context = { trigger: queue.trigger.name };
    this.#log.warn(
      { ...context, subscriber: failure.destination, id: event.id, type: event.type, source: event.source, status: failure.status, reason: failure.reason, sink },
      'event dead-lettered',
    );
    if (target.kind === 'http') await this.#deadLetters.toHttp(target.url, letter, queue.delivery, context);
    else await this.#deadLetters.toFile(letter, context, target.path);
  }

  // ---- idle tracking --------------------------------------------------------------------------

  #isIdle(): boolean {
    if (this.#replies.size > 0) return false;
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

/** The smaller of two timeouts where 0 means none. */
function minTimeout(a: number, b: number): number {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return Math.min(a, b);
}

function positiveInteger(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1) throw new Error(`Broker: options.${name} must be an integer >= 1, got ${String(value)}`);
  return value;
}

function checkTrigger(trigger: Trigger): Trigger {
  if (trigger === null || typeof trigger !== 'object') throw new Error('trigger must be an object with name and subscriber');
  const name = trigger.name;
  if (typeof name !== 'string' || name.trim() === '') throw new Error('trigger.name must be a non-empty string');
  const where = `trigger ${name}`;
  if (typeof trigger.subscriber !== 'string' || !/^https?:\/\//i.test(trigger.subscriber)) {
    throw new Error(`${where}: subscriber must be an http(s) URL, got ${JSON.stringify(trigger.subscriber)}`);
  }
  try {
    new URL(trigger.subscriber);
  } catch {
    throw new Error(`${where}: subscriber ${JSON.stringify(trigger.subscriber)} is not a valid URL`);
  }
  if (trigger.maxInFlight !== undefined && (!Number.isInteger(trigger.maxInFlight) || trigger.maxInFlight < 1)) {
    throw new Error(`${where}: maxInFlight must be an integer >= 1, got ${String(trigger.maxInFlight)}`);
  }
  const validation = validateTriggerFilters(trigger, where);
  if (validation.errors.length > 0) throw new Error(`${where}: invalid filter: ${validation.errors.join('; ')}`);
  try {
    return structuredClone(trigger);
  } catch {
    return { ...trigger };
  }
}
