// "Reconcile this key again after D" across scale-to-zero, kept per key as controller-runtime's
// workqueue keeps AddAfter in the controller's memory. A function answers 2xx with a reply
// CloudEvent of type dev.opfn.reconcile whose keys are due later: the event's `opfnnotbefore`
// (RFC 3339) and, for a key due later still, its own time in the data's `notBefore` (README,
// "Writing a function"; functions/runtime/host/reply.ts writes them). Knative's broker delivers replies
// at once (the function then drops the keys not yet due and its PingSource resync catches up);
// the local broker does better and holds each key until it is due.
//
// - Keys that are due (or carry no/an unreadable due time) go on at once, in the reply itself
//   (narrowed to them when other keys are held or a due time was unreadable).
// - One entry per (function, key), at the earliest time asked for: repeated reconciles of a key,
//   and fan-outs naming it, never multiply its timers, and a key comes back at its own time, not
//   with the earliest key of the reply that named it (which made a fan-out of N keys with N due
//   times cost about N²/2 reconciles).
// - Keys due at the same time share a timer and are released together, as one reconcile event
//   per function of at most MAX_KEYS_PER_EVENT keys.
// - Memory is bounded: at most `maxKeysPerFunction` keys per function (each function has its own
//   room, so one function's many requeues never crowd out another's) and `maxKeys` in all, each
//   of at most MAX_HELD_KEY_LENGTH characters. A reply's `opfnfunction` is the subscriber's word,
//   anyone's to forge, so the per-function room alone bounds nothing: the broker holds keys only
//   for a function one of its Triggers routes to (replies.ts, `routed`; the plane's Triggers
//   each filter on their function's exact name, so a made-up name is never held), and the
//   overall count bounds what a Trigger that takes every function could still let in. A key
//   beyond either count is dropped with a log line: the function keeps its own due time (in
//   status) and its resync catches up, which is all an early delivery would have done. A longer
//   key goes on at once (no real key is that long; the function refuses it).
// - On close every held key is dropped with a log line per function: the resync reconciles those
//   keys after the next start.
import { randomUUID } from 'node:crypto';
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import {
  dueTimeMs,
  FUNCTION_EXTENSION,
  MAX_KEYS_PER_EVENT,
  NOT_BEFORE_EXTENSION,
  RECONCILE_TYPE,
  MAX_TIMER_MS,
  quote,
} from '../../functions/runtime/index.ts';
import { TTL_ATTRIBUTE } from './ttl.ts';

// The extension is the runtime's (functions/runtime/events.ts): one name on both ends of the wire.
export { NOT_BEFORE_EXTENSION };
export const DEFAULT_MAX_HELD_KEYS = 10_000;
/** Keys held in all, whatever the functions: ten functions' default room, about 75 MiB with their timers. */
export const DEFAULT_MAX_HELD_KEYS_TOTAL = 100_000;
/** The runtime's keys are at most about 330 characters; a longer one is refused by the function anyway. */
export const MAX_HELD_KEY_LENGTH = 1024;
/** Keys named in log lines about many keys. */
const LOGGED_KEYS = 3;

type Due = { at: number } | { at: 'now'; problem?: string };

/** When a due time is: a time in ms, or 'now' (absent, past, or not a valid timestamp → `problem`). */
function dueAt(raw: unknown, now: number): Due {
  if (raw === undefined || raw === null || raw === '') return { at: 'now' };
  const at = dueTimeMs(raw);
  if (at === undefined) return { at: 'now', problem: `due time ${quote(raw)} is not an RFC 3339 time` };
  return at > now ? { at } : { at: 'now' };
}

/** A key of a function to deliver again at `at`. */
export interface Requeue {
  function: string;
  key: string;
  at: number;
  /** knativebrokerttl of the reply that asked (the ingress decrements it on release). */
  ttl?: number;
  source: string;
}

export interface ReplySplit {
  /** What goes on now: the reply unchanged, the reply narrowed to its due keys, or nothing. */
  now?: CloudEventV1<unknown>;
  later: Requeue[];
  /** Unreadable due times, for a log line (they count as due now). */
  problems: string[];
}

/** The data of a reconcile reply, whether the broker keeps it as bytes (binary mode) or as JSON. */
function reconcileData(event: CloudEventV1<unknown>): { keys: string[]; notBefore: Record<string, unknown> } | undefined {
  let data: unknown = event.data;
  try {
    if (typeof event.data_base64 === 'string') data = JSON.parse(Buffer.from(event.data_base64, 'base64').toString('utf8'));
    else if (typeof data === 'string') data = JSON.parse(data);
  } catch {
    return undefined;
  }
  if (typeof data !== 'object' || data === null) return undefined;
  const { keys, notBefore } = data as { keys?: unknown; notBefore?: unknown };
  if (!Array.isArray(keys) || keys.length === 0 || !keys.every((key) => typeof key === 'string')) return undefined;
  return {
    keys,
    notBefore:
      typeof notBefore === 'object' && notBefore !== null && !Array.isArray(notBefore) ? (notBefore as Record<string, unknown>) : {},
  };
}

/**
 * Splits a reply into what is due now and the keys to hold. Only a reconcile reply with readable
 * keys is split; anything else (another type, data the function will refuse) goes on as it is,
 * early if it asked for later: the broker does not guess what such an event means.
 */
export function splitReply(event: CloudEventV1<unknown>, now: number): ReplySplit {
  const eventDue = dueAt(event[NOT_BEFORE_EXTENSION], now);
  const problems =
    'problem' in eventDue && eventDue.problem
      ? [`${NOT_BEFORE_EXTENSION}: ${eventDue.problem}, so the keys without a time of their own go on now`]
      : [];
  const fn = event[FUNCTION_EXTENSION];
  const data = event.type === RECONCILE_TYPE && typeof fn === 'string' ? reconcileData(event) : undefined;
  if (!data) {
    if (eventDue.at !== 'now')
      problems.push(`a ${String(event.type)} reply asked for later but is not a reconcile reply with keys, so it goes on now, unheld`);
    return { now: event, later: [], problems };
  }
  const dueNow: string[] = [];
  const later: Requeue[] = [];
  const ttl = typeof event[TTL_ATTRIBUTE] === 'number' ? (event[TTL_ATTRIBUTE] as number) : undefined;
  for (const key of data.keys) {
    // A key's own time is the more specific (an unreadable one: due now, as for the event's).
    const due = Object.hasOwn(data.notBefore, key) ? dueAt(data.notBefore[key], now) : eventDue;
    if (due !== eventDue && 'problem' in due && due.problem) problems.push(`key ${key}: ${due.problem}, so it goes on now`);
    if (due.at === 'now' || key.length > MAX_HELD_KEY_LENGTH) dueNow.push(key);
    else later.push({ function: fn as string, key, at: due.at, ttl, source: event.source });
  }
  if (later.length === 0 && problems.length === 0) return { now: event, later, problems };
  if (dueNow.length === 0) return { later, problems };
  // Narrowed to the keys due now, without the due times (an unreadable one would have the
  // function refuse the whole event).
  const { [NOT_BEFORE_EXTENSION]: _due, data: _data, data_base64: _bytes, ...attributes } = event;
  return { now: { ...attributes, datacontenttype: 'application/json', data: { keys: dueNow } } as CloudEventV1<unknown>, later, problems };
}

/** The keys due at one time, under one timer. */
interface Bucket {
  requeues: Set<Requeue>;
  timer: NodeJS.Timeout;
}

export class RequeueHold {
  /** By function, then key: one entry each. */
  readonly #held = new Map<string, Map<string, Requeue>>();
  /** By due time: keys due at the same time share a timer and leave together. */
  readonly #buckets = new Map<number, Bucket>();
  readonly #maxPerFunction: number;
  readonly #maxKeys: number;
  readonly #log: Logger;
  readonly #release: (event: CloudEventV1<unknown>) => void;
  /** Keys held, of every function. */
  #size = 0;

  /** `maxKeys` (in all) defaults to DEFAULT_MAX_HELD_KEYS_TOTAL, and is never below `maxKeysPerFunction`. */
  constructor(options: { maxKeysPerFunction?: number; maxKeys?: number; log: Logger; release: (event: CloudEventV1<unknown>) => void }) {
    this.#maxPerFunction = options.maxKeysPerFunction ?? DEFAULT_MAX_HELD_KEYS;
    this.#maxKeys = options.maxKeys ?? Math.max(DEFAULT_MAX_HELD_KEYS_TOTAL, this.#maxPerFunction);
    this.#log = options.log;
    this.#release = options.release;
  }

  /** Keys held, of every function. */
  get size(): number {
    return this.#size;
  }

  /** Holds each key until it is due (the earliest time asked for, per function and key). */
  add(requeues: Requeue[], now = Date.now()): void {
    const refused: Requeue[] = [];
    let full = false;
    for (const requeue of requeues) {
      const keys = this.#held.get(requeue.function) ?? new Map<string, Requeue>();
      let held = keys.get(requeue.key);
      if (held) {
        held.ttl = maxTtl(held.ttl, requeue.ttl);
        if (held.at <= requeue.at) continue;
        this.#unbucket(held);
        held.at = requeue.at;
      } else if (keys.size >= this.#maxPerFunction || this.#size >= this.#maxKeys) {
        // Each function has its own room: one function's many requeues never crowd out another's.
        full ||= this.#size >= this.#maxKeys;
        refused.push(requeue);
        continue;
      } else {
        keys.set(requeue.key, (held = { ...requeue }));
        this.#held.set(requeue.function, keys);
        this.#size += 1;
      }
      const bucket = this.#buckets.get(held.at);
      if (bucket) bucket.requeues.add(held);
      else this.#buckets.set(held.at, { requeues: new Set([held]), timer: this.#arm(held.at, now) });
    }
    if (refused.length > 0) {
      const [max, whose] = full ? [this.#maxKeys, 'of all functions'] : [this.#maxPerFunction, 'of the function'];
      this.#log.warn(
        { function: refused[0].function, refused: refused.length, keys: refused.slice(0, LOGGED_KEYS).map(({ key }) => key), max },
        `${max} requeued keys ${whose} already held; ${refused.length} more dropped (the function keeps its due times and its resync reconciles them)`,
      );
    }
  }

  /** Drops everything held (plane stopping), one log line per function. */
  dropAll(): number {
    const count = this.size;
    for (const [fn, keys] of this.#held) {
      this.#log.info(
        { function: fn, dropped: keys.size, keys: [...keys.keys()].slice(0, LOGGED_KEYS) },
        'held requeues dropped because the plane stopped (the next resync reconciles their keys)',
      );
    }
    for (const bucket of this.#buckets.values()) clearTimeout(bucket.timer);
    this.#buckets.clear();
    this.#held.clear();
    this.#size = 0;
    return count;
  }

  #unbucket(requeue: Requeue): void {
    const bucket = this.#buckets.get(requeue.at);
    if (!bucket) return;
    bucket.requeues.delete(requeue);
    if (bucket.requeues.size > 0) return;
    clearTimeout(bucket.timer);
    this.#buckets.delete(requeue.at);
  }

  #arm(at: number, now: number): NodeJS.Timeout {
    // A wait beyond a timer's range (a requeue 30 days ahead) fires early and re-arms.
    const timer = setTimeout(
      () => {
        const bucket = this.#buckets.get(at);
        if (!bucket) return;
        if (Date.now() < at) {
          bucket.timer = this.#arm(at, Date.now());
          return;
        }
        this.#buckets.delete(at);
        this.#releaseDue(bucket.requeues);
      },
      Math.min(at - now, MAX_TIMER_MS),
    );
    timer.unref();
    return timer;
  }

  /** One reconcile event per function and MAX_KEYS_PER_EVENT keys. */
  #releaseDue(requeues: Set<Requeue>): void {
    const byFunction = new Map<string, Requeue[]>();
    for (const requeue of requeues) {
      if (this.#held.get(requeue.function)?.delete(requeue.key)) this.#size -= 1;
      const due = byFunction.get(requeue.function);
      if (due) due.push(requeue);
      else byFunction.set(requeue.function, [requeue]);
    }
    for (const [fn, due] of byFunction) {
      if (this.#held.get(fn)?.size === 0) this.#held.delete(fn);
      for (let start = 0; start < due.length; start += MAX_KEYS_PER_EVENT) {
        const batch = due.slice(start, start + MAX_KEYS_PER_EVENT);
        const ttl = batch.reduce<number | undefined>((highest, requeue) => maxTtl(highest, requeue.ttl), undefined);
        // The freshest reason to reconcile among the batch: an old requeue chain running out
        // of TTL must not take a key that was asked for afresh with it.
        this.#release(
          requeueEvent(
            fn,
            batch[0].source,
            batch.map((requeue) => requeue.key),
            ttl,
          ),
        );
      }
    }
  }
}

/**
 * The reconcile event a function's held keys leave in; without keys, the event the broker
 * matches against its Triggers to learn whether any routes to the function at all.
 */
export function requeueEvent(fn: string, source: string, keys: string[], ttl?: number): CloudEventV1<unknown> {
  return {
    specversion: '1.0',
    id: randomUUID(),
    source,
    type: RECONCILE_TYPE,
    [FUNCTION_EXTENSION]: fn,
    datacontenttype: 'application/json',
    data: { keys },
    ...(ttl === undefined ? {} : { [TTL_ATTRIBUTE]: ttl }),
  };
}

const maxTtl = (a: number | undefined, b: number | undefined): number | undefined =>
  a === undefined ? b : b === undefined ? a : Math.max(a, b);
