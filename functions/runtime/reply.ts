// The reply CloudEvent a function answers with when part of its work is still to do: the failed
// keys of a fan-out (retried on their own, without redoing the keys that succeeded) or keys to
// reconcile again later (requeueAfterSeconds). A 2xx answer whose body is a CloudEvent is a
// reply in Knative's broker (filter_handler.go): it re-enters the broker, and the Trigger that
// selects on `opfnfunction` routes it back to this function with its delivery policy. The
// local broker holds a reply whose `opfnnotbefore` lies in the future until it is due; Knative
// delivers at once, and the function drops it as not yet due (its resync catches up).
import { randomUUID } from 'node:crypto';
import { FUNCTION_EXTENSION, MAX_KEYS_PER_EVENT, NOT_BEFORE_EXTENSION, RECONCILE_TYPE } from './events.ts';

export interface ReplyEvent {
  /** HTTP headers of the binary-mode CloudEvent. */
  headers: Record<string, string>;
  body: string;
}

const rfc3339 = (date: Date): string => date.toISOString().replace(/\.\d+Z$/, 'Z');

/**
 * The reply event for `keys` (1 to MAX_KEYS_PER_EVENT; each key string is at most about 330
 * bytes, so a reply stays well under the broker's body limit).
 */
export function reconcileReply(functionName: string, keys: string[], notBefore?: Date): ReplyEvent {
  if (keys.length === 0 || keys.length > MAX_KEYS_PER_EVENT) throw new Error(`a reconcile reply carries 1 to ${MAX_KEYS_PER_EVENT} keys, not ${keys.length}`);
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'ce-specversion': '1.0',
    'ce-id': randomUUID(),
    'ce-source': `/opfn/functions/${functionName}`,
    'ce-type': RECONCILE_TYPE,
    [`ce-${FUNCTION_EXTENSION}`]: functionName,
  };
  // Whole seconds, rounded up: never due before the requested time.
  if (notBefore) headers[`ce-${NOT_BEFORE_EXTENSION}`] = rfc3339(new Date(Math.ceil(notBefore.getTime() / 1000) * 1000));
  return { headers, body: JSON.stringify({ keys }) };
}
