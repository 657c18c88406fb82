// The reply CloudEvent a function answers with when part of its work is still to do: the failed
// keys of a fan-out (retried on their own, without redoing the keys that succeeded), the keys it
// had no time to start (delivery-budget.ts), or keys to reconcile again later
// (requeueAfterSeconds), each at its own time. A 2xx answer whose body is
// a CloudEvent is a reply in Knative's broker (filter_handler.go): it re-enters the broker, and
// the Trigger that selects on `opfnfunction` routes it back to this function with its delivery
// policy. The local broker holds each key of a reply until it is due (eventing/broker/requeue-hold.ts);
// Knative delivers at once, and the function waits for the keys due within that delivery's budget
// and drops those due later (its resync catches up).
import { randomUUID } from 'node:crypto';
import { FUNCTION_EXTENSION, MAX_KEYS_PER_EVENT, NOT_BEFORE_EXTENSION, RECONCILE_TYPE } from '../events.ts';

export interface ReplyEvent {
  /** HTTP headers of the binary-mode CloudEvent. */
  headers: Record<string, string>;
  body: string;
}

/** A key of a reply and, for a requeue, when it is due (ms since the epoch). */
export interface ReplyKey {
  key: string;
  at?: number;
}

/**
 * The reply event for `keys` (1 to MAX_KEYS_PER_EVENT; each key string is at most about 330
 * bytes, so a reply stays well under the broker's body limit). When every key has a due time,
 * `opfnnotbefore` is the earliest; the data's `notBefore` names the keys due later than the
 * event, with their own times. Times keep their milliseconds: rounded to whole seconds, a 5 s
 * requeue came back every 6 s.
 */
export function reconcileReply(functionName: string, keys: ReplyKey[]): ReplyEvent {
  if (keys.length === 0 || keys.length > MAX_KEYS_PER_EVENT)
    throw new Error(`a reconcile reply carries 1 to ${MAX_KEYS_PER_EVENT} keys, not ${keys.length}`);
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'ce-specversion': '1.0',
    'ce-id': randomUUID(),
    'ce-source': `/opfn/functions/${functionName}`,
    'ce-type': RECONCILE_TYPE,
    [`ce-${FUNCTION_EXTENSION}`]: functionName,
  };
  const data: { keys: string[]; notBefore?: Record<string, string> } = { keys: keys.map(({ key }) => key) };
  const timed = keys.filter((key): key is Required<ReplyKey> => key.at !== undefined);
  // Due when its earliest key is, if every key has a time; else at once.
  const eventDue = timed.length === keys.length ? Math.min(...timed.map(({ at }) => at)) : -Infinity;
  if (eventDue > -Infinity) headers[`ce-${NOT_BEFORE_EXTENSION}`] = new Date(eventDue).toISOString();
  const later = timed.filter(({ at }) => at > eventDue);
  if (later.length > 0) data.notBefore = Object.fromEntries(later.map(({ key, at }) => [key, new Date(at).toISOString()]));
  return { headers, body: JSON.stringify(data) };
}
