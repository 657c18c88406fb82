// Kubernetes Events, recorded as client-go's recorder does (tools/record/events_cache.go,
// EventCorrelator/EventAggregator): an Event with the same involved object, type, reason and
// message as one this process already posted is not posted again; the existing Event's `count`
// and `lastTimestamp` are patched instead. Similar Events, the same but for the message (an API
// error quoting a changing address), are combined once ten different messages came within ten
// minutes: from then on they count on one Event whose message is "(combined from similar
// events): " and the latest one. The cache is per process and bounded (LRU, like
// client-go's 4096 entries). Posting happens off the reconcile's critical path: recording only
// queues; a background loop writes; `flush()` (called on SIGTERM) waits until the queue is empty.
// Best effort throughout: a failed Event never fails the reconcile it describes.
//
// Normal Events are rate limited per process, as the kubelet limits its own (eventRecordQPS /
// eventBurst) and client-go's spam filter does per object (a token bucket, burst 25): a few
// dozen at once, then NORMAL_PER_SECOND. Beyond that they are dropped (logged at debug): a burst
// of thousands of routine "created pod" Events would otherwise double the API server's writes
// (one POST per object) for something the objects' status already
// says. Warnings are not rate limited.
//
// At most MAX_QUEUED Events wait to be written: an API server slower than the Events come (or
// unreachable, each write retried) would otherwise hold one per object in memory. Past that,
// new ones are dropped, as client-go's broadcaster drops when its queue is full.
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { apiVersionOf, CoreEvent, rfc3339, type KubeObject, type ResourceKind } from './kinds.ts';
import { isNotFound } from './kube/errors.ts';
import type { KubeClient } from './kube/client.ts';
import { setRecent } from './lru-map.ts';
import { boundedMessage } from './bounded-messages.ts';

/** Records Kubernetes Events (kubectl describe shows them) on reconciled objects. */
export interface EventRecorder {
  normal(object: KubeObject, kind: ResourceKind, reason: string, message: string): void;
  warning(object: KubeObject, kind: ResourceKind, reason: string, message: string): void;
}

interface Aggregate {
  namespace: string;
  /** Name of the Event object once posted. */
  name?: string;
  count: number;
  firstTimestamp: string;
  lastTimestamp: string;
  /** Occurrences recorded but not yet written. */
  pending: boolean;
  /** A write is under way: a new occurrence waits for it (the first write names the Event). */
  writing: boolean;
  body: Record<string, unknown>;
}

const CACHE_SIZE = 4096;
/** Normal Events posted at once before the rate applies. */
export const NORMAL_BURST = 25;
/** Normal Events per second after the burst. */
export const NORMAL_PER_SECOND = 5;
/** Writes at once; more would compete with reconciles for the API server. */
const WRITERS = 2;
/** client-go's maxQueuedEvents (tools/record/event.go). */
export const MAX_QUEUED = 1000;
/** client-go's defaultAggregateMaxEvents and defaultAggregateIntervalInSeconds. */
const AGGREGATE_MAX_MESSAGES = 10;
const AGGREGATE_INTERVAL_MS = 600_000;
const COMBINED_PREFIX = '(combined from similar events): ';

/** The different messages of similar Events seen lately (client-go's aggregateRecord). */
interface Similar {
  messages: Set<string>;
  lastSeen: number;
}

export class EventSink {
  readonly #kube: KubeClient;
  readonly #component: string;
  readonly #log: Logger;
  readonly #now: () => Date;
  /** Most recent last (setRecent). */
  readonly #cache = new Map<string, Aggregate>();
  /** By involved object, type and reason; bounded as #cache is. */
  readonly #similar = new Map<string, Similar>();
  readonly #queue: Aggregate[] = [];
  /** Events dropped since the queue was last empty (MAX_QUEUED). */
  #dropped = 0;
  #writers = 0;
  #idle: (() => void)[] = [];
  /** Normal Events that may be recorded now, refilled over time. */
  #normalTokens = NORMAL_BURST;
  #refilledAt?: number;

  constructor(kube: KubeClient, component: string, log: Logger, now: () => Date = () => new Date()) {
    this.#kube = kube;
    this.#component = component;
    this.#log = log;
    this.#now = now;
  }

  recorder(log: Logger = this.#log): EventRecorder {
    return {
      normal: (object, kind, reason, message) => this.record(object, kind, 'Normal', reason, message, log),
      warning: (object, kind, reason, message) => this.record(object, kind, 'Warning', reason, message, log),
    };
  }

  record(
    object: KubeObject,
    kind: ResourceKind,
    type: 'Normal' | 'Warning',
    reason: string,
    message: string,
    log: Logger = this.#log,
  ): void {
    message = boundedMessage(message);
    if (type === 'Normal' && !this.#takeNormalToken()) {
      log.debug({ reason }, 'Kubernetes Event not recorded: Normal Events are rate limited');
      return;
    }
    const involved = {
      apiVersion: apiVersionOf(kind),
      kind: kind.kind,
      name: object.metadata.name,
      namespace: object.metadata.namespace,
      uid: object.metadata.uid,
    };
    const similarKey = JSON.stringify([involved.apiVersion, involved.kind, involved.namespace, involved.name, involved.uid, type, reason]);
    const combined = this.#combine(similarKey, message);
    if (combined) message = `${COMBINED_PREFIX}${message}`;
    const key = combined ? similarKey : JSON.stringify([similarKey, message]);
    const now = rfc3339(this.#now());
    let aggregate = this.#cache.get(key);
    if (aggregate) {
      aggregate.count++;
      aggregate.lastTimestamp = now;
      aggregate.body.message = message;
    } else {
      aggregate = {
        namespace: object.metadata.namespace || 'default',
        count: 1,
        firstTimestamp: now,
        lastTimestamp: now,
        pending: false,
        writing: false,
        body: {
          involvedObject: { ...involved, resourceVersion: object.metadata.resourceVersion },
          type,
          reason,
          message,
          source: { component: this.#component },
          reportingComponent: this.#component,
        },
      };
    }
    setRecent(this.#cache, key, aggregate, CACHE_SIZE);
    log.debug({ reason, count: aggregate.count }, 'recording Kubernetes Event');
    // Occurrences that arrive before the write are folded into it.
    if (!aggregate.pending) {
      if (!aggregate.writing && this.#queue.length >= MAX_QUEUED) {
        // Its count stays in the cache: a later occurrence that finds room writes it.
        if (this.#dropped++ === 0)
          log.warn(
            { queued: MAX_QUEUED },
            'Kubernetes Events are recorded faster than the API server takes them: dropping new ones until the queue shortens',
          );
        return;
      }
      aggregate.pending = true;
      if (!aggregate.writing) this.#queue.push(aggregate);
      this.#pump();
    }
  }

  /** Whether this message joins the combined Event of its similar ones (the tenth different message within the interval, and every one after). */
  #combine(similarKey: string, message: string): boolean {
    const now = this.#now().getTime();
    let similar = this.#similar.get(similarKey);
    if (!similar || now - similar.lastSeen > AGGREGATE_INTERVAL_MS) similar = { messages: new Set(), lastSeen: now };
    setRecent(this.#similar, similarKey, similar, CACHE_SIZE);
    similar.lastSeen = now;
    // Past the limit the set stops growing: its size is all that matters then.
    if (similar.messages.size < AGGREGATE_MAX_MESSAGES) similar.messages.add(message);
    return similar.messages.size >= AGGREGATE_MAX_MESSAGES;
  }

  #takeNormalToken(): boolean {
    const now = this.#now().getTime();
    if (this.#refilledAt !== undefined && now > this.#refilledAt) {
      this.#normalTokens = Math.min(NORMAL_BURST, this.#normalTokens + ((now - this.#refilledAt) / 1000) * NORMAL_PER_SECOND);
    }
    this.#refilledAt = now;
    if (this.#normalTokens < 1) return false;
    this.#normalTokens--;
    return true;
  }

  /** Resolves when every recorded Event has been written (or given up on). */
  flush(): Promise<void> {
    if (this.#queue.length === 0 && this.#writers === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  #pump(): void {
    while (this.#writers < WRITERS && this.#queue.length > 0) {
      const aggregate = this.#queue.shift()!;
      this.#writers++;
      aggregate.writing = true;
      void this.#write(aggregate).finally(() => {
        aggregate.writing = false;
        if (aggregate.pending) this.#queue.push(aggregate);
        this.#writers--;
        this.#pump();
        if (this.#writers === 0 && this.#queue.length === 0) {
          if (this.#dropped > 0) this.#log.warn({ dropped: this.#dropped }, 'Kubernetes Events dropped while the queue was full');
          this.#dropped = 0;
          for (const resolve of this.#idle.splice(0)) resolve();
        }
      });
    }
  }

  async #write(aggregate: Aggregate): Promise<void> {
    aggregate.pending = false;
    const { count, lastTimestamp } = aggregate;
    const { message } = aggregate.body;
    try {
      if (aggregate.name) {
        try {
          // The message too, as client-go's patch has it: a combined Event shows the latest one.
          await this.#kube.mergePatch(
            CoreEvent,
            { namespace: aggregate.namespace, name: aggregate.name },
            { count, lastTimestamp, message },
          );
          return;
        } catch (error) {
          // Expired (Events live an hour by default): start a new one.
          if (!isNotFound(error)) throw error;
        }
      }
      const name = `${(aggregate.body.involvedObject as { name?: string }).name}.${randomBytes(8).toString('hex')}`;
      await this.#kube.create(CoreEvent, {
        metadata: { name, namespace: aggregate.namespace },
        ...aggregate.body,
        firstTimestamp: aggregate.firstTimestamp,
        lastTimestamp,
        count,
      });
      aggregate.name = name;
    } catch (error) {
      this.#log.warn({ err: (error as Error).message, reason: aggregate.body.reason }, 'could not record Kubernetes Event');
    }
  }
}
