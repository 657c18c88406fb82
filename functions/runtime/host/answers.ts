// How the results of a delivery's keys become one answer (Knative delivery rules, DESIGN.md):
//
//   every key done                         200, empty body (counts in the outcome header)
//   some keys asked to come back later     200 + reply CloudEvent naming them, each with its
//                                          own due time (the soonest is opfnnotbefore)
//   some keys failed, others succeeded     200 + reply naming the failed ones (and the requeues,
//                                          each at its own time): the broker routes it back at
//                                          once; the keys that succeeded are not redone
//   some keys refused for good             200, their reasons in the body (unmendable.ts showed
//   (403, 422, a kind not served)          them on the objects); each comes back at its own
//                                          time if it asked to, else at its next change
//   every key failed                       503/500 (the broker retries with backoff, then
//                                          dead-letters with the reason); 400 if none could
//                                          ever succeed
//   more failed keys than a reply carries  503: the whole event is retried (truthful, if costly)
//   keys not started within the budget     200 + reply naming them (with the failed keys, and
//   (deferred, reconcile-loop.ts)          the requeues), so the answer goes
//                                          back before the request times out and the rest is
//                                          done in the reply's round; beyond a reply's room, a
//                                          window at a random place of them (the others wait for
//                                          the resync, and no key is always the one left out)
// The keys a reconcile reports as failed, requeued or deferred besides its own
// (ReconcileResult.failedKeys, requeueKeys, deferredKeys: a CompositeController's sweep and its
// parents) count as keys of the event. Nothing here grows with the number of keys except the
// reply, which is bounded, nor with the length of a failure's message (LISTED_ERROR_CHARS).
import { agreedRetryAfter, statusForError, TransientError } from '../errors.ts';
import { MAX_KEYS_PER_EVENT } from '../events.ts';
import { kindKeyString, type KindKey } from '../kinds.ts';
import { ApiError } from '../kube/errors.ts';
import { boundedMessage, cut } from '../bounded-messages.ts';
import { reconcileReply, type ReplyEvent } from './reply.ts';

export interface Outcome {
  status: number;
  body: Record<string, unknown>;
  /** A reply CloudEvent for the broker (2xx only): keys still to reconcile. */
  reply?: ReplyEvent;
  /** Seconds, for a Retry-After header on a 503. */
  retryAfterSeconds?: number;
}

export type FailedResult = { type: 'failed'; status: number; error: string; retryAfterSeconds?: number };

/** The result of one key's reconcile, with the other keys it reported; 'deferred': not started within the delivery's budget. */
export type KeyResult =
  | {
      type: 'done';
      requeueAt?: number;
      failedKeys?: { key: KindKey; result: FailedResult }[];
      requeueKeys?: { key: KindKey; at: number }[];
      deferredKeys?: KindKey[];
    }
  | FailedResult
  | RefusedResult
  | { type: 'deferred' };

/** A key whose reconcile failed in a way retrying cannot mend (unmendable.ts): answered 2xx, shown on the object. */
export type RefusedResult = { type: 'refused'; reason: string; error: string; requeueAt?: number };

/** A failed key's result: its status by error class (statusForError), and the Retry-After a TransientError or the API server asked for. */
export function failedResult(error: unknown): FailedResult {
  return {
    type: 'failed',
    status: statusForError(error),
    error: (error as Error).message,
    retryAfterSeconds: error instanceof TransientError || error instanceof ApiError ? error.retryAfterSeconds : undefined,
  };
}

/** Failures listed in a 5xx body: enough to debug, bounded whatever the number of keys. */
const LISTED_FAILURES = 5;
/**
 * Characters of each listed failure's message. A 2xx answer's body travels in a response header
 * (http-app.ts OUTCOME_HEADER), which Node and undici refuse past 16 KiB in all, and a message is
 * whatever a reconcile threw (a hook's answer, every child error of a sync). Written as ASCII
 * JSON a character takes at most 6 bytes (\uXXXX), and a key at most about 650, so the listed
 * failures take under 10 KiB whatever the messages.
 */
export const LISTED_ERROR_CHARS = 200;

/**
 * `random` places the window of deferred keys a reply carries when there are more than it has
 * room for (a start in [0, 1) of the list, wrapping around).
 */
export function answerFor(
  functionName: string,
  keys: KindKey[],
  results: KeyResult[],
  now: Date,
  random: () => number = Math.random,
): Outcome {
  const failures = new Map<string, { key: KindKey; result: FailedResult }>();
  const fail = (key: KindKey, result: FailedResult) => {
    const id = kindKeyString(key);
    if (!failures.has(id)) failures.set(id, { key, result });
  };
  // A key requeued twice (by its own reconcile and by another's) comes back at the earlier time.
  const requeues = new Map<string, { key: KindKey; at: number }>();
  const requeue = (key: KindKey, at: number) => {
    const id = kindKeyString(key);
    const earlier = requeues.get(id);
    if (!earlier || at < earlier.at) requeues.set(id, { key, at });
  };
  const deferrals = new Map<string, KindKey>();
  const defer = (key: KindKey) => deferrals.set(kindKeyString(key), key);
  let succeeded = 0;
  const refusals: { key: KindKey; result: RefusedResult }[] = [];
  keys.forEach((key, index) => {
    const result = results[index];
    if (result.type === 'failed') return fail(key, result);
    if (result.type === 'deferred') return defer(key);
    if (result.type === 'refused') {
      refusals.push({ key, result });
      if (result.requeueAt !== undefined) requeue(key, result.requeueAt);
      return;
    }
    succeeded++;
    if (result.requeueAt !== undefined) requeue(key, result.requeueAt);
    for (const other of result.requeueKeys ?? []) requeue(other.key, other.at);
    for (const other of result.failedKeys ?? []) fail(other.key, other.result);
    for (const other of result.deferredKeys ?? []) defer(other);
  });
  // A key that is retried or deferred comes back at once anyway.
  for (const id of [...failures.keys(), ...deferrals.keys()]) requeues.delete(id);
  for (const id of failures.keys()) deferrals.delete(id);
  const requeued = [...requeues.values()];
  const failed = [...failures.values()];
  const deferred = [...deferrals.values()];
  const counts = {
    reconciled: succeeded,
    failed: failed.length,
    requeued: requeued.length,
    ...(deferred.length ? { deferred: deferred.length } : {}),
    // Refusals share the listed failures' room (the body's bound, LISTED_ERROR_CHARS).
    ...(refusals.length
      ? {
          refused: refusals.length,
          refusals: refusals
            .slice(0, Math.max(1, LISTED_FAILURES - failed.length))
            .map(({ key, result }) => ({ key: kindKeyString(key), reason: result.reason, error: cut(result.error, LISTED_ERROR_CHARS) })),
        }
      : {}),
  };
  const listed = failed
    .slice(0, refusals.length ? LISTED_FAILURES - 1 : LISTED_FAILURES)
    .map(({ key, result }) => ({ key: kindKeyString(key), error: cut(result.error, LISTED_ERROR_CHARS) }));
  const retryable = failed.filter(({ result }) => result.status >= 500);
  // Keys that can never succeed (400) are not worth a reply: they are reported and dropped.
  if (succeeded === 0 && refusals.length === 0 && failed.length > 0) {
    const status = retryable.length === 0 ? 400 : retryable.every(({ result }) => result.status === 503) ? 503 : 500;
    const retryAfterSeconds = agreedRetryAfter(retryable.map(({ result }) => result.retryAfterSeconds));
    return { status, body: { error: boundedMessage(failed[0].result.error), ...counts, failures: listed }, retryAfterSeconds };
  }
  // More failures than a reply may carry: the whole event is retried (truthful, if costly).
  // With the Retry-After the failed keys agree on (a hook's 429), as when every key failed.
  if (retryable.length > MAX_KEYS_PER_EVENT) {
    const retryAfterSeconds = agreedRetryAfter(retryable.map(({ result }) => result.retryAfterSeconds));
    return {
      status: 503,
      body: {
        error: `${retryable.length} keys failed, more than a reply can carry; first: ${boundedMessage(failed[0].result.error)}`,
        ...counts,
        failures: listed,
      },
      retryAfterSeconds,
    };
  }
  // The failed keys (due at once), then the deferred ones, then the soonest requeues with their
  // own times, as many as a reply has room for. A requeue beyond the room is dropped: the
  // function keeps its due time, the resync catches up.
  //
  // Requeues ride beside failed keys, so one failing parent of a sweep does not cost the
  // others their resyncAfterSeconds (upstream's parents are work items of their own). The cost,
  // on Knative only: its broker delivers a reply whole and at once, and the function waits for a
  // key due within its budget (intake.ts), so a round that retries a failed key also syncs a
  // requeue due within 30 s. When that one succeeds, the round is a partial success and the
  // failed key comes back in the next reply without the broker's backoff: it is retried at the
  // pace of its neighbour's requeue (never sooner, as the round's answer waits for it), not
  // backed off. A requeue due later is not waited for, so the failed key fails alone (503) and
  // is backed off until then. The local broker holds each key apart (eventing/broker/requeue-hold.ts):
  // there the failed keys are retried alone, with backoff, and each requeue at its own time.
  if (retryable.length > 0 || deferred.length > 0 || requeued.length > 0) {
    const room = MAX_KEYS_PER_EVENT - retryable.length;
    const carried = deferred.length <= room ? deferred : windowOf(deferred, room, random);
    const later = requeued.sort((a, b) => a.at - b.at).slice(0, room - carried.length);
    const replyKeys = [
      ...retryable.map(({ key }) => ({ key: kindKeyString(key) })),
      ...carried.map((key) => ({ key: kindKeyString(key) })),
      ...later.map(({ key, at }) => ({ key: kindKeyString(key), at: Math.max(at, now.getTime()) })),
    ];
    return {
      status: 200,
      body: {
        ...counts,
        ...(retryable.length ? { retrying: retryable.length, failures: listed } : {}),
        ...(carried.length < deferred.length ? { deferredLeft: deferred.length - carried.length } : {}),
      },
      reply: reconcileReply(functionName, replyKeys),
    };
  }
  return { status: 200, body: counts };
}

/** `size` consecutive items of `items` from a random start, wrapping around. */
function windowOf<T>(items: T[], size: number, random: () => number): T[] {
  const start = Math.floor(random() * items.length);
  return [...items.slice(start), ...items.slice(0, start)].slice(0, size);
}
