// How the results of a delivery's keys become one answer (Knative delivery rules, DESIGN.md):
//
//   every key done                         200, empty body (counts in the outcome header)
//   some keys asked to come back later     200 + reply CloudEvent naming them, due when the
//                                          soonest is (opfnnotbefore)
//   some keys failed, others succeeded     200 + reply naming only the failed ones: the broker
//                                          routes it back at once; the keys that succeeded are
//                                          not redone, and requeues wait for the resync
//   every key failed                       503/500 (the broker retries with backoff, then
//                                          dead-letters with the reason); 400 if none could
//                                          ever succeed
//   more failed keys than a reply carries  503: the whole event is retried (truthful, if costly)
// Nothing here grows with the number of keys except the reply, which is bounded.
import { MAX_KEYS_PER_EVENT } from './events.ts';
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

/** The result of one key's reconcile. */
export type KeyResult =
  | { type: 'done'; requeueAt?: number }
  | { type: 'failed'; status: number; error: string; retryAfterSeconds?: number };

/** Failures listed in a 5xx body: enough to debug, bounded whatever the number of keys. */
const LISTED_FAILURES = 5;

export function answerFor(functionName: string, keys: KindKey[], results: KeyResult[], now: Date): Outcome {
  const failed: { key: KindKey; result: Extract<KeyResult, { type: 'failed' }> }[] = [];
  const requeued: { key: KindKey; at: number }[] = [];
  keys.forEach((key, index) => {
    const result = results[index];
    if (result.type === 'failed') failed.push({ key, result });
    else if (result.requeueAt !== undefined) requeued.push({ key, at: result.requeueAt });
  });
  const counts = { reconciled: keys.length - failed.length, failed: failed.length, requeued: requeued.length };
  const listed = failed.slice(0, LISTED_FAILURES).map(({ key, result }) => ({ key: kindKeyString(key), error: result.error }));
  const retryable = failed.filter(({ result }) => result.status >= 500);
  // Keys that can never succeed (400) are not worth a reply: they are reported and dropped.
  if (failed.length === keys.length && keys.length > 0) {
    const status = retryable.length === 0 ? 400 : retryable.every(({ result }) => result.status === 503) ? 503 : 500;
    const retryAfter = Math.min(...retryable.map(({ result }) => result.retryAfterSeconds ?? Infinity));
    return { status, body: { error: listed[0].error, ...counts, failures: listed }, retryAfterSeconds: Number.isFinite(retryAfter) ? retryAfter : undefined };
  }
  // More failures than a reply may carry: the whole event is retried (truthful, if costly).
  if (retryable.length > MAX_KEYS_PER_EVENT) return { status: 503, body: { error: `${retryable.length} keys failed, more than a reply can carry; first: ${listed[0].error}`, ...counts, failures: listed } };
  if (retryable.length > 0) {
    // Only the failed keys: a requeued key riding along would succeed again in the reply's round
    // and ask again, so a key that keeps failing would come back at once, round after round,
    // never alone and so never with the broker's backoff. A requeue dropped here is caught up by
    // the resync (the function keeps its due time), as one beyond a reply's room is.
    return { status: 200, body: { ...counts, retrying: retryable.length, failures: listed }, reply: reconcileReply(functionName, retryable.map(({ key }) => kindKeyString(key))) };
  }
  if (requeued.length > 0) {
    // One reply, due when the earliest key is; later ones find they are early and ask again.
    // Beyond the limit a requeue is dropped: the function keeps its due time, the resync catches up.
    const soonest = requeued.sort((a, b) => a.at - b.at).slice(0, MAX_KEYS_PER_EVENT);
    return { status: 200, body: counts, reply: reconcileReply(functionName, soonest.map(({ key }) => kindKeyString(key)), new Date(Math.max(soonest[0].at, now.getTime()))) };
  }
  return { status: 200, body: counts };
}
