// How the results of a delivery's keys become one answer (Knative delivery rules, DESIGN.md):
//
//   every key done                         200, empty body (counts in the outcome header)
//   some keys asked to come back later     200 + reply CloudEvent due when the soonest is
//                                          (opfnnotbefore), naming the keys due then; the later
//                                          ones ride along as requeues, untouched until due
//   some keys failed, others succeeded     200 + reply naming only the failed keys, due at once:
//                                          the broker routes it back; the keys that succeeded are
//                                          not redone, and their requeues ride along untouched
//   every key failed                       503/500 (the broker retries with backoff, then
//                                          dead-letters with the reason); 400 if none could
//                                          ever succeed
//   more failed keys than a reply carries  503: the whole event is retried (truthful, if costly)
//
// A requeue that rides along is not reconciled in the rounds that retry the failed keys, so a key
// that keeps failing is retried alone and with the broker's backoff (a requeued key reconciled
// with it would succeed every round, and the round would never fail as a whole), and yet no
// requeue waits for the resync because some other key failed. (While those keep failing, the
// broker retries the event the requeues ride in: one comes back at the first retry after it is
// due, or with the resync once the broker gives up.) The other keys a reconcile reports
// besides its own (ReconcileResult.otherKeys: a CompositeController's sweep and its parents)
// count as keys of the event, failed or requeued.
// Nothing here grows with the number of keys except the reply, which is bounded.
import { statusForError, TransientError } from './errors.ts';
import { MAX_KEYS_PER_EVENT, type CarriedRequeue } from './events.ts';
import { kindKeyString, type KindKey } from './kinds.ts';
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

/** A failed key's result: its status by error class (statusForError), and a TransientError's Retry-After. */
export function failedResult(error: unknown): FailedResult {
  return { type: 'failed', status: statusForError(error), error: (error as Error).message, retryAfterSeconds: error instanceof TransientError ? error.retryAfterSeconds : undefined };
}

/** The result of one key's reconcile, with those of the other keys it worked on (ReconcileResult.otherKeys). */
export type KeyResult = { type: 'done'; requeueAt?: number; others?: KeyOutcome[] } | FailedResult;

/** A key reconciled this round and its result. */
export interface KeyOutcome {
  key: KindKey;
  result: KeyResult;
}

/** Failures listed in a 5xx body: enough to debug, bounded whatever the number of keys. */
const LISTED_FAILURES = 5;
/** A reply's due time is whole seconds: requeues within a second of the soonest come back with it. */
const REPLY_GRANULARITY_MS = 1000;

/**
 * The answer for the keys reconciled this round (`reconciled`, with the other keys their
 * reconciles reported) and the requeues that rode along without being due (`carried`).
 */
export function answerFor(functionName: string, reconciled: KeyOutcome[], carried: CarriedRequeue<KindKey>[], now: Date): Outcome {
  const failed = new Map<string, FailedResult>();
  const requeued = new Map<string, CarriedRequeue<KindKey>>();
  const keys = new Map<string, KindKey>();
  for (const { key, result } of reconciled.flatMap((outcome) => [outcome, ...(outcome.result.type === 'done' ? (outcome.result.others ?? []) : [])])) {
    const id = kindKeyString(key);
    keys.set(id, key);
    if (result.type === 'failed') failed.set(id, result);
    else if (result.requeueAt !== undefined) requeued.set(id, { key, notBefore: new Date(result.requeueAt) });
  }
  for (const requeue of carried) requeued.set(kindKeyString(requeue.key), requeue);
  // A key that failed comes back at once: its own requeue, if any, is moot.
  for (const id of failed.keys()) requeued.delete(id);

  const reconciledCount = keys.size;
  const counts = { reconciled: reconciledCount - failed.size, failed: failed.size, requeued: requeued.size };
  const failures = [...failed].map(([id, result]) => ({ id, result }));
  const listed = failures.slice(0, LISTED_FAILURES).map(({ id, result }) => ({ key: id, error: result.error }));
  const retryable = failures.filter(({ result }) => result.status >= 500);
  const soonestFirst = [...requeued.values()].sort((a, b) => a.notBefore.getTime() - b.notBefore.getTime());

  if (failed.size === reconciledCount && reconciledCount > 0 && (retryable.length > 0 || requeued.size === 0)) {
    // The broker retries this very event (its ridden-along requeues with it) or, on a 400, drops
    // it: keys that can never succeed are reported, not worth a reply.
    const status = retryable.length === 0 ? 400 : retryable.every(({ result }) => result.status === 503) ? 503 : 500;
    const retryAfter = Math.min(...retryable.map(({ result }) => result.retryAfterSeconds ?? Infinity));
    return { status, body: { error: listed[0].error, ...counts, failures: listed }, retryAfterSeconds: Number.isFinite(retryAfter) ? retryAfter : undefined };
  }
  // More failures than a reply may carry: the whole event is retried (truthful, if costly).
  if (retryable.length > MAX_KEYS_PER_EVENT) return { status: 503, body: { error: `${retryable.length} keys failed, more than a reply can carry; first: ${listed[0].error}`, ...counts, failures: listed } };
  if (retryable.length > 0) {
    // Requeues beyond the reply's room are dropped: the function keeps its due time, the resync catches up.
    const riding = soonestFirst.slice(0, MAX_KEYS_PER_EVENT - retryable.length);
    const reply = reconcileReply(functionName, retryable.map(({ id }) => keys.get(id)!), undefined, riding);
    return { status: 200, body: { ...counts, retrying: retryable.length, failures: listed }, reply };
  }
  if (soonestFirst.length > 0) {
    // One reply, due when the soonest key is; the later ones ride along until their own time.
    const kept = soonestFirst.slice(0, MAX_KEYS_PER_EVENT);
    const due = Math.max(kept[0].notBefore.getTime(), now.getTime());
    const dueNow = kept.filter(({ notBefore }) => notBefore.getTime() < due + REPLY_GRANULARITY_MS);
    const reply = reconcileReply(functionName, dueNow.map(({ key }) => key), new Date(due), kept.slice(dueNow.length));
    return { status: 200, body: counts, reply };
  }
  return { status: 200, body: counts };
}
