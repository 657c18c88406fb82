// The local broker: a stand-in for a Knative Broker (MT channel-based) outside a cluster.
//
// What it keeps identical to Knative Eventing, so that what works locally works on a cluster:
// - Trigger filtering: see filters.ts (filter.attributes, filters exact/prefix/suffix/all/any/not).
// - Delivery: binary-mode POST with `Prefer: reply`; retries, backoff and dead-lettering as in
//   delivery.ts; a Trigger's delivery replaces the Broker's.
// - 2xx answers: an empty body is done; a CloudEvent (binary or structured) is a reply that
//   re-enters the broker; a non-empty body that is not a CloudEvent is a failure, as Knative's
//   broker filter answers 502 for it (retried, then dead-lettered).
// - knativebrokerttl: set to 255 when an event enters without it, otherwise decreased by one on
//   every entry (replies re-enter with the TTL of the event they answer); an event whose TTL
//   reaches 0 is dropped with a log line. Subscribers never see the attribute (Knative's filter
//   strips it before delivery); dead-lettered events keep it.
// What is local: per-trigger bounded queues with back-pressure (publish waits while a queue is
// full), a JSON-lines dead-letter file when no sink is configured, and stats.
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve as resolvePath } from 'node:path';
import { CloudEvent, HTTP, type CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import { Agent, request } from 'undici';
import {
  appendJsonLine,
  backoffDelayMs,
  isRetryableStatus,
  KNATIVE_DEFAULT_DELIVERY,
  parseDeliverySpec,
  toStructuredJson,
  withErrorExtensions,
  type DeadLetterTarget,
  type DeliveryFailure,
  type DeliverySpec,
  type ResolvedDelivery,
} from './delivery.ts';
import { matchesTrigger, validateTriggerFilters, type Trigger } from './filters.ts';

export * from './delivery.ts';
export * from './filters.ts';

export interface BrokerOptions {
  triggers: Trigger[];
  /** Broker default; Knative defaults retry 10, exponential, PT0.2S. */
  delivery?: DeliverySpec;
  /** JSON-lines file used when no deadLetterSink is configured. */
  deadLetterFile: string;
  /** Events held per trigger (waiting + being delivered, retries included); default 1000. */
  queueLimit?: number;
  /** Concurrent deliveries per trigger; default 64. */
  maxInFlight?: number;
  log: Logger;
}

export interface TriggerStats {
  queued: number;
  inFlight: number;
  delivered: number;
  retried: number;
  deadLettered: number;
}

export const TTL_ATTRIBUTE = 'knativebrokerttl';
export const DEFAULT_TTL = 255;
const DEFAULT_QUEUE_LIMIT = 1000;
const DEFAULT_MAX_IN_FLIGHT = 64;
/** Largest response body read from a subscriber or sink. */
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;
/** Largest request accepted by the ingress. */
const MAX_INGRESS_BYTES = 16 * 1024 * 1024;

interface QueueItem {
  /** The event as the broker holds it, knativebrokerttl included. */
  event: CloudEventV1<unknown>;
  ttl: number;
}

interface Waiter {
  item: QueueItem;
  resolve: () => void;
  reject: (err: Error) => void;
}

interface TriggerQueue {
  trigger: Trigger;
  delivery: ResolvedDelivery;
  items: QueueItem[];
  waiters: Waiter[];
  inFlight: number;
  removed: boolean;
  stats: Omit<TriggerStats, 'queued' | 'inFlight'>;
}

type SendOutcome =
  | { kind: 'response'; status: number; headers: Record<string, string>; body: Buffer }
  | { kind: 'error'; message: string; retryable: boolean };

type Verdict = { ok: true; reply?: CloudEventV1<unknown> } | { ok: false; retryable: boolean; failure: DeliveryFailure };

export class Broker {
  readonly #log: Logger;
  readonly #deadLetterFile: string;
  readonly #queueLimit: number;
  readonly #maxInFlight: number;
  readonly #brokerDelivery: ReturnType<typeof parseDeliverySpec>;
  readonly #queues = new Map<string, TriggerQueue>();
  readonly #draining = new Set<TriggerQueue>();
  readonly #agent = new Agent({ keepAliveTimeout: 30_000, keepAliveMaxTimeout: 600_000 });
  readonly #closeController = new AbortController();
  readonly #active = new Set<Promise<void>>();
  #idleWaiters: Array<() => void> = [];
  #pendingReplies = 0;
  #closed = false;
  #closing?: Promise<void>;
  #server?: Server;

  constructor(options: BrokerOptions) {
    if (options === null || typeof options !== 'object') throw new Error('Broker: options are required ({ triggers, deadLetterFile, log })');
    if (!options.log || typeof options.log.warn !== 'function') throw new Error('Broker: options.log must be a pino Logger');
    this.#log = typeof options.log.child === 'function' ? options.log.child({ component: 'broker' }) : options.log;
    if (typeof options.deadLetterFile !== 'string' || options.deadLetterFile.trim() === '') {
      throw new Error('Broker: options.deadLetterFile must be a file path (dead-lettered events are appended there as JSON lines)');
    }
    this.#deadLetterFile = resolvePath(options.deadLetterFile);
    this.#queueLimit = positiveInteger(options.queueLimit, DEFAULT_QUEUE_LIMIT, 'queueLimit');
    this.#maxInFlight = positiveInteger(options.maxInFlight, DEFAULT_MAX_IN_FLIGHT, 'maxInFlight');
    this.#brokerDelivery = parseDeliverySpec(options.delivery ?? KNATIVE_DEFAULT_DELIVERY, 'broker.delivery');
    for (const warning of this.#brokerDelivery.warnings) this.#log.warn(warning);
    if (options.triggers !== undefined && !Array.isArray(options.triggers)) throw new Error('Broker: options.triggers must be a list');
    for (const trigger of options.triggers ?? []) this.addTrigger(trigger);
  }

  /** Adds a Trigger, or replaces the one with the same name (queued events then go to the new subscriber). */
  addTrigger(trigger: Trigger): void {
    if (this.#closed) throw new Error('Broker is closed');
    const checked = checkTrigger(trigger);
    const delivery = this.#resolveDelivery(checked);
    const existing = this.#queues.get(checked.name);
    if (existing) {
      existing.trigger = checked;
      existing.delivery = delivery;
      this.#log.info({ trigger: checked.name, subscriber: checked.subscriber }, 'trigger updated');
      return;
    }
    this.#queues.set(checked.name, {
      trigger: checked,
      delivery,
      items: [],
      waiters: [],
      inFlight: 0,
      removed: false,
      stats: { delivered: 0, retried: 0, deadLettered: 0 },
    });
    this.#log.info({ trigger: checked.name, subscriber: checked.subscriber }, 'trigger added');
  }

  /** Removes a Trigger: it gets no new events; events it already holds are still delivered (or dead-lettered). */
  removeTrigger(name: string): void {
    const queue = this.#queues.get(name);
    if (!queue) return;
    this.#queues.delete(name);
    queue.removed = true;
    if (!queueEmpty(queue)) this.#draining.add(queue);
    this.#log.info({ trigger: name, remaining: queue.items.length + queue.inFlight + queue.waiters.length }, 'trigger removed');
    this.#checkIdle();
  }

  /**
   * Enqueues the event for every matching trigger. Resolves once all their queues accepted it;
   * waits while a queue is full. Rejects (never throws synchronously) for a malformed event or a
   * closed broker. An event whose knativebrokerttl is exhausted is dropped with a log line.
   */
  async publish(event: CloudEventV1<unknown>): Promise<void> {
    if (this.#closed) throw new Error('Broker is closed: the event was not accepted');
    const problem = eventProblem(event);
    if (problem) throw new TypeError(`Broker.publish: not a CloudEvent (${problem})`);
    await this.#ingest(plainEvent(event), 'publish');
  }

  /** HTTP ingress: POST / with a CloudEvent (binary or structured) → 202; malformed → 400 with the reason. */
  async listen(port = 0, host = '127.0.0.1'): Promise<string> {
    if (this.#closed) throw new Error('Broker is closed');
    if (this.#server) throw new Error('Broker ingress is already listening');
    const server = createServer((req, res) => {
      void this.#handleIngress(req, res);
    });
    server.on('clientError', (_err, socket) => {
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
      else socket.destroy();
    });
    this.#server = server;
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error): void => {
        this.#server = undefined;
        reject(new Error(`Broker ingress cannot listen on ${host}:${port}: ${err.message}`));
      };
      server.once('error', onError);
      server.listen(port, host, () => {
        server.off('error', onError);
        server.on('error', (err) => this.#log.error({ err }, 'broker ingress error'));
        resolve();
      });
    });
    const address = server.address() as AddressInfo;
    const hostPart = address.address.includes(':') ? `[${address.address}]` : address.address;
    const url = `http://${hostPart}:${address.port}`;
    this.#log.info({ url }, 'broker ingress listening');
    return url;
  }

  /** Resolves when every queue is empty and nothing is in flight (retries and replies included). */
  idle(): Promise<void> {
    if (this.#isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  stats(): Record<string, TriggerStats> {
    const out: Record<string, TriggerStats> = {};
    for (const [name, queue] of this.#queues) {
      out[name] = { queued: queue.items.length, inFlight: queue.inFlight, ...queue.stats };
    }
    return out;
  }

  /**
   * Stops the ingress, timers and sockets. Publishers still waiting for room get an error; events
   * held by the broker that were not delivered yet are written to the dead-letter file.
   */
  close(): Promise<void> {
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  async #shutdown(): Promise<void> {
    this.#closed = true;
    this.#closeController.abort();
    const serverClosed = this.#closeServer();
    const undelivered: Array<{ queue: TriggerQueue; item: QueueItem }> = [];
    for (const queue of this.#allQueues()) {
      for (const waiter of queue.waiters.splice(0)) waiter.reject(new Error('Broker closed before the event was accepted'));
      for (const item of queue.items.splice(0)) undelivered.push({ queue, item });
    }
    await Promise.allSettled([...this.#active]);
    for (const { queue, item } of undelivered) {
      await this.#deadLetter(queue, item.event, {
        destination: queue.trigger.subscriber,
        body: 'dispatch error: broker closed before delivery',
        reason: 'broker closed before the event was delivered',
      });
    }
    await Promise.allSettled([...this.#active]);
    await serverClosed;
    try {
      await this.#agent.close();
    } catch {
      await this.#agent.destroy().catch(() => undefined);
    }
    this.#draining.clear();
    this.#checkIdle();
  }

  #closeServer(): Promise<void> {
    const server = this.#server;
    if (!server) return Promise.resolve();
    return new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  }

  *#allQueues(): Iterable<TriggerQueue> {
    yield* this.#queues.values();
    yield* this.#draining;
  }

  #resolveDelivery(trigger: Trigger): ResolvedDelivery {
    const own = trigger.delivery === undefined ? undefined : parseDeliverySpec(trigger.delivery, `trigger ${trigger.name}.delivery`);
    for (const warning of own?.warnings ?? []) this.#log.warn(warning);
    const base = own ?? this.#brokerDelivery;
    const deadLetter: DeadLetterTarget = own?.deadLetter ?? this.#brokerDelivery.deadLetter ?? { kind: 'file', path: this.#deadLetterFile };
    const resolved: ResolvedDelivery = { retry: base.retry, timeoutMs: base.timeoutMs, deadLetter };
    if (base.backoffPolicy !== undefined) resolved.backoffPolicy = base.backoffPolicy;
    if (base.backoffDelayMs !== undefined) resolved.backoffDelayMs = base.backoffDelayMs;
    return resolved;
  }

  // ---- entry: TTL, filtering, enqueueing ------------------------------------------------------

  async #ingest(event: CloudEventV1<unknown>, origin: 'publish' | 'ingress' | 'reply'): Promise<'accepted' | 'ttl-exhausted'> {
    const ttl = this.#nextTtl(event);
    if (ttl <= 0) {
      this.#log.warn(
        { origin, id: event.id, type: event.type, source: event.source, [TTL_ATTRIBUTE]: event[TTL_ATTRIBUTE] },
        'event dropped: knativebrokerttl exhausted (an event loop through replies?)',
      );
      return 'ttl-exhausted';
    }
    const held: CloudEventV1<unknown> = { ...event, [TTL_ATTRIBUTE]: ttl };
    const visible = withoutTtl(held);
    const targets: TriggerQueue[] = [];
    for (const queue of this.#queues.values()) {
      if (matchesTrigger(queue.trigger, visible)) targets.push(queue);
    }
    if (targets.length === 0) {
      this.#log.debug({ origin, id: event.id, type: event.type }, 'event matched no trigger');
      return 'accepted';
    }
    await Promise.all(targets.map((queue) => this.#enqueue(queue, { event: held, ttl })));
    return 'accepted';
  }

  #nextTtl(event: CloudEventV1<unknown>): number {
    const raw = event[TTL_ATTRIBUTE];
    if (raw === undefined || raw === null) return DEFAULT_TTL;
    const value = typeof raw === 'number' ? raw : typeof raw === 'string' && /^\s*-?\d+\s*$/.test(raw) ? Number.parseInt(raw, 10) : Number.NaN;
    if (!Number.isInteger(value) || value > 2 ** 31 - 1 || value < -(2 ** 31)) {
      this.#log.warn({ id: event.id, [TTL_ATTRIBUTE]: raw }, `knativebrokerttl is not an integer; using ${DEFAULT_TTL}`);
      return DEFAULT_TTL;
    }
    return Math.max(value - 1, 0);
  }

  #enqueue(queue: TriggerQueue, item: QueueItem): Promise<void> {
    if (this.#closed) return Promise.reject(new Error('Broker closed before the event was accepted'));
    if (queue.waiters.length === 0 && held(queue) < this.#queueLimit) {
      queue.items.push(item);
      this.#pump(queue);
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => queue.waiters.push({ item, resolve, reject }));
  }

  #admitWaiters(queue: TriggerQueue): void {
    while (!this.#closed && queue.waiters.length > 0 && held(queue) < this.#queueLimit) {
      const waiter = queue.waiters.shift() as Waiter;
      queue.items.push(waiter.item);
      waiter.resolve();
    }
  }

  #pump(queue: TriggerQueue): void {
    while (!this.#closed && queue.inFlight < this.#maxInFlight && queue.items.length > 0) {
      const item = queue.items.shift() as QueueItem;
      queue.inFlight += 1;
      const task: Promise<void> = this.#deliver(queue, item)
        .catch((err: unknown) => {
          this.#log.error({ err, trigger: queue.trigger.name, id: item.event.id }, 'unexpected delivery error');
          return undefined;
        })
        .then((reply) => {
          queue.inFlight -= 1;
          this.#active.delete(task);
          this.#admitWaiters(queue);
          this.#pump(queue);
          if (reply) this.#routeReply(queue, item, reply);
          if (queue.removed && queueEmpty(queue)) this.#draining.delete(queue);
          this.#checkIdle();
        });
      this.#active.add(task);
    }
  }

  #routeReply(queue: TriggerQueue, item: QueueItem, reply: CloudEventV1<unknown>): void {
    // Knative's filter puts the delivered event's TTL on the reply; the ingress then decrements it.
    const withTtl: CloudEventV1<unknown> = { ...reply, [TTL_ATTRIBUTE]: item.ttl };
    this.#pendingReplies += 1;
    const task: Promise<void> = this.#ingestReply(queue, withTtl).then(() => {
      this.#pendingReplies -= 1;
      this.#active.delete(task);
      this.#checkIdle();
    });
    this.#active.add(task);
  }

  async #ingestReply(queue: TriggerQueue, event: CloudEventV1<unknown>): Promise<void> {
    try {
      if (this.#closed) throw new Error('broker closed');
      await this.#ingest(event, 'reply');
    } catch (err) {
      const reason = `reply could not be routed: ${(err as Error).message}`;
      this.#log.warn({ trigger: queue.trigger.name, id: event.id, type: event.type, reason, file: this.#deadLetterFile }, 'reply event dead-lettered');
      await this.#writeDeadLetterFile(
        withErrorExtensions(event, { destination: queue.trigger.subscriber, body: `dispatch error: ${reason}`, reason }),
        { trigger: queue.trigger.name, reason },
      );
    }
  }

  // ---- delivery -------------------------------------------------------------------------------

  async #deliver(queue: TriggerQueue, item: QueueItem): Promise<CloudEventV1<unknown> | undefined> {
    const { trigger, delivery } = queue;
    const outgoing = withoutTtl(item.event);
    let failure: DeliveryFailure | undefined;
    for (let attempt = 0; attempt <= delivery.retry; attempt += 1) {
      if (attempt > 0) {
        queue.stats.retried += 1;
        await this.#sleep(backoffDelayMs(delivery, attempt));
      }
      if (this.#closed) {
        failure = { ...failure, destination: trigger.subscriber, reason: `broker closed before the event was delivered${failure ? ` (last failure: ${failure.reason})` : ''}` };
        break;
      }
      const outcome = await this.#send(trigger.subscriber, outgoing, delivery.timeoutMs, true);
      const verdict = this.#judge(trigger, outcome);
      if (verdict.ok) {
        queue.stats.delivered += 1;
        this.#log.debug({ trigger: trigger.name, id: item.event.id, attempts: attempt + 1, reply: verdict.reply !== undefined }, 'event delivered');
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

  #judge(trigger: Trigger, outcome: SendOutcome): Verdict {
    const destination = trigger.subscriber;
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
            failure: { destination, status: 502, body, reason: `subscriber answered ${status} with an invalid CloudEvent (${(err as Error).message}); Knative's broker treats this as 502` },
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
    };
  }

  /** One POST in binary mode over the shared keep-alive agent. Never rejects. */
  async #send(url: string, event: CloudEventV1<unknown>, timeoutMs: number, preferReply: boolean): Promise<SendOutcome> {
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
    const onClose = (): void => controller.abort();
    this.#closeController.signal.addEventListener('abort', onClose, { once: true });
    try {
      const response = await request(url, {
        method: 'POST',
        headers: message.headers,
        body: message.body,
        dispatcher: this.#agent,
        signal: controller.signal,
      });
      const body = await readLimited(response.body, MAX_RESPONSE_BYTES);
      return { kind: 'response', status: response.statusCode, headers: flattenHeaders(response.headers), body };
    } catch (err) {
      if (timedOut) return { kind: 'error', message: `no answer within ${timeoutMs} ms (delivery timeout)`, retryable: true };
      if (this.#closed) return { kind: 'error', message: 'broker closed during delivery', retryable: false };
      const error = err as Error & { code?: string };
      if (error.code === 'UND_ERR_INVALID_ARG' || error.name === 'InvalidArgumentError') {
        return { kind: 'error', message: `event cannot be sent as HTTP: ${error.message}`, retryable: false };
      }
      return { kind: 'error', message: describeNetworkError(error), retryable: true };
    } finally {
      if (timer) clearTimeout(timer);
      this.#closeController.signal.removeEventListener('abort', onClose);
    }
  }

  #sleep(ms: number): Promise<void> {
    if (ms <= 0 || this.#closed) return Promise.resolve();
    const signal = this.#closeController.signal;
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  // ---- dead letters ---------------------------------------------------------------------------

  async #deadLetter(queue: TriggerQueue, event: CloudEventV1<unknown>, failure: DeliveryFailure): Promise<void> {
    queue.stats.deadLettered += 1;
    const letter = withErrorExtensions(event, failure);
    const target: DeadLetterTarget = this.#closed ? { kind: 'file', path: this.#deadLetterFile } : queue.delivery.deadLetter;
    const sink = target.kind === 'http' ? target.url : target.path;
    this.#log.warn(
      {
        trigger: queue.trigger.name,
        subscriber: failure.destination,
        id: event.id,
        type: event.type,
        source: event.source,
        status: failure.status,
        reason: failure.reason,
        sink,
      },
      'event dead-lettered',
    );
    if (target.kind === 'http') {
      const error = await this.#sendToSink(target.url, letter, queue.delivery);
      if (error === undefined) return;
      this.#log.error({ trigger: queue.trigger.name, id: event.id, sink: target.url, error, fallback: this.#deadLetterFile }, 'dead-letter sink failed; writing the event to the dead-letter file');
    }
    await this.#writeDeadLetterFile(letter, { trigger: queue.trigger.name }, target.kind === 'file' ? target.path : this.#deadLetterFile);
  }

  /** Sends to an HTTP dead-letter sink with the same retry policy; returns the error text on failure. */
  async #sendToSink(url: string, letter: CloudEventV1<unknown>, delivery: ResolvedDelivery): Promise<string | undefined> {
    let last = 'not attempted';
    for (let attempt = 0; attempt <= delivery.retry; attempt += 1) {
      if (attempt > 0) await this.#sleep(backoffDelayMs(delivery, attempt));
      if (this.#closed && attempt > 0) return `${last}; broker closed`;
      const outcome = await this.#send(url, letter, delivery.timeoutMs, false);
      if (outcome.kind === 'response' && outcome.status >= 200 && outcome.status < 300) return undefined;
      const retryable = outcome.kind === 'error' ? outcome.retryable : isRetryableStatus(outcome.status);
      last = outcome.kind === 'error' ? outcome.message : `sink answered ${outcome.status}`;
      if (!retryable) break;
    }
    return last;
  }

  async #writeDeadLetterFile(letter: CloudEventV1<unknown>, context: Record<string, unknown>, path = this.#deadLetterFile): Promise<void> {
    const line = toStructuredJson(letter);
    try {
      await appendJsonLine(path, line);
    } catch (err) {
      // Last resort: the event goes into the log so that it is never lost silently.
      this.#log.error({ ...context, file: path, err, event: line }, 'cannot write the dead-letter file; the event is in this log line');
    }
  }

  // ---- ingress --------------------------------------------------------------------------------

  async #handleIngress(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      if (this.#closed) return reply(res, 503, 'broker is shutting down');
      let path = '/';
      try {
        path = new URL(req.url ?? '/', 'http://ingress').pathname;
      } catch {
        return reply(res, 400, 'malformed request URL');
      }
      if (path !== '/') return reply(res, 404, `no such path ${path}: POST CloudEvents to /`);
      if (req.method !== 'POST') {
        res.setHeader('Allow', 'POST');
        return reply(res, 405, 'method not allowed: POST CloudEvents to /');
      }
      let body: Buffer;
      try {
        body = await readLimited(req, MAX_INGRESS_BYTES);
      } catch (err) {
        const tooLarge = (err as Error).message.includes('too large');
        return reply(res, tooLarge ? 413 : 400, tooLarge ? `request body larger than ${MAX_INGRESS_BYTES} bytes` : `cannot read request body: ${(err as Error).message}`);
      }
      let event: CloudEventV1<unknown>;
      try {
        event = parseMessage(req.headers, body);
      } catch (err) {
        this.#log.debug({ reason: (err as Error).message }, 'ingress rejected a malformed request');
        return reply(res, 400, `malformed CloudEvent: ${(err as Error).message}`);
      }
      let outcome: 'accepted' | 'ttl-exhausted';
      try {
        outcome = await this.#ingest(event, 'ingress');
      } catch (err) {
        return reply(res, 503, `event not accepted: ${(err as Error).message}`);
      }
      if (outcome === 'ttl-exhausted') return reply(res, 400, 'event dropped: knativebrokerttl exhausted');
      return reply(res, 202, '');
    } catch (err) {
      this.#log.error({ err }, 'broker ingress failed to handle a request');
      if (!res.headersSent) reply(res, 500, 'internal error');
      else res.destroy();
    }
  }

  // ---- idle tracking --------------------------------------------------------------------------

  #isIdle(): boolean {
    if (this.#pendingReplies > 0) return false;
    for (const queue of this.#allQueues()) if (!queueEmpty(queue)) return false;
    return true;
  }

  #checkIdle(): void {
    if (this.#idleWaiters.length === 0 || !this.#isIdle()) return;
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}

// ---- helpers ------------------------------------------------------------------------------------

function held(queue: TriggerQueue): number {
  return queue.items.length + queue.inFlight;
}

function queueEmpty(queue: TriggerQueue): boolean {
  return queue.items.length === 0 && queue.inFlight === 0 && queue.waiters.length === 0;
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
  const validation = validateTriggerFilters(trigger, where);
  if (validation.errors.length > 0) throw new Error(`${where}: invalid filter: ${validation.errors.join('; ')}`);
  let copy: Trigger;
  try {
    copy = structuredClone(trigger);
  } catch {
    copy = { ...trigger };
  }
  return copy;
}

/** Light structural check for publish(); the HTTP ingress runs the SDK's full validation. */
function eventProblem(event: unknown): string | undefined {
  if (event === null || typeof event !== 'object' || Array.isArray(event)) return 'expected an object';
  const record = event as Record<string, unknown>;
  for (const attr of ['id', 'source', 'type', 'specversion']) {
    if (typeof record[attr] !== 'string' || record[attr] === '') return `attribute ${attr} must be a non-empty string`;
  }
  for (const key of Object.keys(record)) {
    if (key !== 'data_base64' && !/^[a-z0-9]+$/.test(key)) return `attribute name ${JSON.stringify(key)} is not lowercase letters and digits`;
  }
  return undefined;
}

/** Own enumerable attributes without undefined values; binary data kept once (as data_base64 when present). */
function plainEvent(event: CloudEventV1<unknown>): CloudEventV1<unknown> {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(event)) {
    const value = (event as Record<string, unknown>)[key];
    if (value !== undefined) out[key] = value;
  }
  if (typeof out.data_base64 === 'string') delete out.data;
  return out as unknown as CloudEventV1<unknown>;
}

function withoutTtl(event: CloudEventV1<unknown>): CloudEventV1<unknown> {
  const { [TTL_ATTRIBUTE]: _ttl, ...rest } = event;
  return rest as CloudEventV1<unknown>;
}

/** Binary-mode message (ce-* headers) built with the SDK; time and binary data passed through unchanged. */
function toBinaryMessage(event: CloudEventV1<unknown>): { headers: Record<string, string>; body: string | Buffer } {
  const { time, data_base64: dataBase64, ...rest } = event;
  const message = HTTP.binary(rest as CloudEventV1<unknown>);
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(message.headers)) {
    if (value === undefined) continue;
    headers[name.toLowerCase()] = headerValue(value);
  }
  if (time !== undefined && time !== null) {
    headers['ce-time'] = (time as unknown) instanceof Date ? (time as unknown as Date).toISOString() : String(time);
  }
  let body: string | Buffer;
  if (typeof dataBase64 === 'string') body = Buffer.from(dataBase64, 'base64');
  else if (message.body === undefined || message.body === null) body = '';
  else if (typeof message.body === 'string') body = message.body;
  else if (Buffer.isBuffer(message.body)) body = message.body;
  else if (ArrayBuffer.isView(message.body)) body = Buffer.from(message.body.buffer, message.body.byteOffset, message.body.byteLength);
  else body = String(message.body);
  return { headers, body };
}

function headerValue(value: unknown): string {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return value.map(String).join(', ');
  if (value instanceof Date) return value.toISOString();
  if (ArrayBuffer.isView(value)) return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64');
  if (typeof value === 'object' && value !== null) return JSON.stringify(value);
  return String(value);
}

function flattenHeaders(headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    out[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  return out;
}

/** Knative (sdk-go ReadEncoding): binary when ce-specversion is present, structured for application/cloudevents+json. */
function looksLikeCloudEvent(headers: Record<string, string>): boolean {
  if (headers['ce-specversion'] !== undefined) return true;
  return (headers['content-type'] ?? '').trim().toLowerCase().startsWith('application/cloudevents+json');
}

const TEXTUAL = /^(text\/|application\/(json|cloudevents\+json|[a-z0-9.+-]*\+json|xml|[a-z0-9.+-]*\+xml|x-www-form-urlencoded|javascript))/i;

/** HTTP message → CloudEvent with the SDK (HTTP.toEvent + validate). Throws an Error with the reason. */
export function parseMessage(rawHeaders: IncomingHttpHeaders | Record<string, string | string[] | undefined>, body: Buffer): CloudEventV1<unknown> {
  const headers = flattenHeaders(rawHeaders);
  const contentType = headers['content-type'] ?? '';
  const structured = /^application\/cloudevents/i.test(contentType.trim());
  if (structured && body.length === 0) throw new Error('structured-mode request without a body');
  const textual = structured || contentType === '' || TEXTUAL.test(contentType.trim());
  const payload: string | Buffer = textual ? body.toString('utf8') : body;
  let parsed: CloudEventV1<unknown> | CloudEventV1<unknown>[];
  try {
    parsed = HTTP.toEvent({ headers, body: body.length === 0 && !structured ? undefined : payload });
  } catch (err) {
    throw new Error(describeSdkError(err));
  }
  if (Array.isArray(parsed)) throw new Error('batched CloudEvents (application/cloudevents-batch+json) are not accepted; send one event per request');
  const sdkEvent = parsed as CloudEvent<unknown>;
  try {
    const valid = sdkEvent.validate();
    if (!valid && sdkEvent.specversion !== '0.3') throw new Error(`unsupported specversion ${JSON.stringify(sdkEvent.specversion)}`);
  } catch (err) {
    throw new Error(describeSdkError(err));
  }
  const problem = eventProblem(plainEvent(sdkEvent));
  if (problem) throw new Error(problem);
  const event = plainEvent(sdkEvent) as Record<string, unknown>;
  // The SDK invents a time when the message has none and replaces an unparsable one with "now";
  // Knative passes the attribute through unchanged and rejects a malformed one.
  const time = originalTime(headers, payload, structured);
  if (time === undefined || time === null) {
    delete event.time;
  } else if (typeof time !== 'string' || !RFC3339.test(time.trim())) {
    throw new Error(`attribute time ${JSON.stringify(time)} is not an RFC 3339 timestamp`);
  } else {
    event.time = time;
  }
  return event as unknown as CloudEventV1<unknown>;
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

function originalTime(headers: Record<string, string>, payload: string | Buffer, structured: boolean): unknown {
  if (!structured) return headers['ce-time'];
  try {
    const json = JSON.parse(typeof payload === 'string' ? payload : payload.toString('utf8')) as unknown;
    return json !== null && typeof json === 'object' ? (json as Record<string, unknown>).time : undefined;
  } catch {
    return undefined;
  }
}

function describeSdkError(err: unknown): string {
  const error = err as Error & { errors?: unknown[] };
  const details = Array.isArray(error?.errors) && error.errors.length > 0
    ? error.errors
        .map((e) => {
          const item = e as { instancePath?: string; dataPath?: string; message?: string };
          const where = item?.instancePath || item?.dataPath || 'event';
          return item && typeof item === 'object' && item.message ? `${where} ${item.message}` : String(e);
        })
        .join('; ')
    : '';
  const head = (error?.message ?? String(err)).split('\n')[0] ?? 'invalid CloudEvent';
  return details ? `${head}: ${details}` : head;
}

function describeNetworkError(error: Error & { code?: string; cause?: unknown }): string {
  const cause = error.cause as (Error & { code?: string }) | undefined;
  const code = error.code ?? cause?.code;
  const message = cause?.message && cause.message !== error.message ? `${error.message}: ${cause.message}` : error.message;
  return code ? `${message} (${code})` : message;
}

async function readLimited(stream: AsyncIterable<unknown> & { destroy?: (err?: Error) => void }, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string);
    size += buf.length;
    if (size > limit) {
      stream.destroy?.();
      throw new Error(`body too large (more than ${limit} bytes)`);
    }
    chunks.push(buf);
  }
  return Buffer.concat(chunks);
}

function reply(res: ServerResponse, status: number, text: string): void {
  if (res.headersSent) return;
  res.statusCode = status;
  if (text) {
    res.setHeader('Content-Type', 'text/plain; charset=utf-8');
    res.end(`${text}\n`);
  } else {
    res.end();
  }
}
