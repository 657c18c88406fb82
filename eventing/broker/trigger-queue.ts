// One trigger's share of the broker: the events it holds, bounded, and how many it delivers at
// once. Knative fans an event out to every subscription (pkg/channel/fanout) and each delivery
// is independent; locally each trigger gets its own bounded queue so a slow subscriber holds
// back only its own events, and publishers wait (back-pressure) while a queue is full.
import type { CloudEventV1 } from 'cloudevents';
import type { ResolvedDelivery } from '../delivery.ts';
import type { Trigger } from '../filters.ts';

export interface TriggerStats {
  queued: number;
  inFlight: number;
  delivered: number;
  retried: number;
  deadLettered: number;
  /** Deliveries sent straight to a function instance (the activator left the data path). */
  direct: number;
  /** Concurrent deliveries allowed for this trigger. */
  maxInFlight: number;
}

export interface QueueItem {
  /** The event as the broker holds it, knativebrokerttl included. */
  event: CloudEventV1<unknown>;
  ttl: number;
}

interface Waiter {
  item: QueueItem;
  resolve: () => void;
  reject: (err: Error) => void;
}

export class TriggerQueue {
  #trigger: Trigger;
  #delivery: ResolvedDelivery;
  removed = false;
  readonly stats = { delivered: 0, retried: 0, deadLettered: 0, direct: 0 };
  readonly #items: QueueItem[] = [];
  readonly #waiters: Waiter[] = [];
  readonly #queueLimit: number;
  readonly #defaultMaxInFlight: number;
  readonly #run: (queue: TriggerQueue, item: QueueItem) => Promise<void>;
  #inFlight = 0;
  #stopped = false;

  /** `run` delivers one item and never rejects; the queue calls `onSettled` after each. */
  constructor(
    trigger: Trigger,
    delivery: ResolvedDelivery,
    options: {
      queueLimit: number;
      maxInFlight: number;
      run: (queue: TriggerQueue, item: QueueItem) => Promise<void>;
      onSettled: () => void;
    },
  ) {
    this.#trigger = trigger;
    this.#delivery = delivery;
    this.#queueLimit = options.queueLimit;
    this.#defaultMaxInFlight = options.maxInFlight;
    this.#run = options.run;
    this.#onSettled = options.onSettled;
  }

  readonly #onSettled: () => void;

  /** The Trigger as last added: each delivery attempt reads its subscriber (attempts.ts). */
  get trigger(): Trigger {
    return this.#trigger;
  }

  /** Its delivery policy as last added: a delivery's retry loop takes it when the delivery starts. */
  get delivery(): ResolvedDelivery {
    return this.#delivery;
  }

  /**
   * The Trigger edited (same name): queued events go to its new subscriber, and a raised
   * `maxInFlight` starts queued events now rather than when a delivery in flight settles.
   */
  update(trigger: Trigger, delivery: ResolvedDelivery): void {
    this.#trigger = trigger;
    this.#delivery = delivery;
    this.#pump();
  }

  /** The trigger's own bound (its function's scaling) or the broker's default. */
  get maxInFlight(): number {
    return this.trigger.maxInFlight ?? this.#defaultMaxInFlight;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  get queued(): number {
    return this.#items.length;
  }

  get empty(): boolean {
    return this.#items.length === 0 && this.#inFlight === 0 && this.#waiters.length === 0;
  }

  /** Resolves once the queue holds the item; waits while the queue is full. */
  enqueue(item: QueueItem): Promise<void> {
    if (this.#stopped) return Promise.reject(new Error('Broker closed before the event was accepted'));
    if (this.#waiters.length === 0 && this.#held() < this.#queueLimit) {
      this.#items.push(item);
      this.#pump();
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => this.#waiters.push({ item, resolve, reject }));
  }

  /** No more intake: waiting publishers are refused (their events were never accepted). */
  refuseWaiters(reason: string): void {
    for (const waiter of this.#waiters.splice(0)) waiter.reject(new Error(reason));
  }

  /** Stops delivering: returns the items not started yet (the caller dead-letters them). */
  stop(): QueueItem[] {
    this.#stopped = true;
    this.refuseWaiters('Broker closed before the event was accepted');
    return this.#items.splice(0);
  }

  snapshot(): TriggerStats {
    return { queued: this.#items.length, inFlight: this.#inFlight, ...this.stats, maxInFlight: this.maxInFlight };
  }

  #held(): number {
    return this.#items.length + this.#inFlight;
  }

  #pump(): void {
    while (!this.#stopped && this.#inFlight < this.maxInFlight && this.#items.length > 0) {
      const item = this.#items.shift() as QueueItem;
      this.#inFlight += 1;
      void this.#run(this, item).finally(() => {
        this.#inFlight -= 1;
        this.#admitWaiters();
        this.#pump();
        this.#onSettled();
      });
    }
  }

  #admitWaiters(): void {
    while (!this.#stopped && this.#waiters.length > 0 && this.#held() < this.#queueLimit) {
      const waiter = this.#waiters.shift() as Waiter;
      this.#items.push(waiter.item);
      waiter.resolve();
    }
  }
}
