// Knative's dispatcher retry loop (pkg/kncloudevents RetryConfig: `delivery.retry` attempts after
// the first, backoff between them, retry only what SelectiveRetry allows; a 429/503's Retry-After
// lengthens the wait), shared by the two ways an event leaves the broker: one queued event's way
// to its subscriber, each attempt sent directly to a function instance when the route offers one
// (the activator's warm path, chosen by the event's `partitionkey`), else to the subscriber's
// URL, with what never succeeds going to the dead-letter sink with the last failure; and a
// letter's way to an HTTP dead-letter sink (dead-letters.ts).
//
// A Trigger edited while its event is being retried: in Knative each retry is a new request from
// the channel's dispatcher to the broker filter, which looks the Trigger up again, so every
// attempt goes to the Trigger's subscriber as it is then; here too (`queue.trigger` read per
// attempt). The retry loop itself (retry count, backoff, per-attempt timeout) is the channel
// dispatcher's RetryConfig, taken from the delivery spec when the event was dispatched, so it
// stays as the delivery began: an edit applies to events delivered after it.
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import { backoffDelayMs, retryAfterDelayMs, type DeliveryFailure, type ResolvedDelivery } from '../delivery.ts';
import { judge, type DirectRoute, type Dispatcher, type SendOutcome, type Verdict } from './dispatcher.ts';
import type { QueueItem, TriggerQueue } from './trigger-queue.ts';
import { withoutTtl } from './ttl.ts';

export interface AttemptContext {
  dispatcher: Dispatcher;
  route?: DirectRoute;
  /** True once the broker cut deliveries (drain deadline passed). */
  closed(): boolean;
  deadLetter(queue: TriggerQueue, event: CloudEventV1<unknown>, failure: DeliveryFailure): Promise<void>;
  log: Logger;
}

export type RetryResult =
  | { ok: true; reply?: CloudEventV1<unknown>; attempts: number }
  /** `closed`: stopped before an attempt because the broker cut deliveries; `failure` is the last attempt's, if any. */
  | { ok: false; failure?: DeliveryFailure; closed: boolean; attempts: number };

/** Sends with `attempt` (given the retry number, 0 first) until it succeeds, fails for good, the retries run out or `closed()`. */
export async function withRetries(
  dispatcher: Pick<Dispatcher, 'sleep'>,
  delivery: ResolvedDelivery,
  closed: () => boolean,
  attempt: (retry: number) => Promise<Verdict>,
): Promise<RetryResult> {
  let failure: DeliveryFailure | undefined;
  let askedWaitMs = 0;
  for (let retry = 0; retry <= delivery.retry; retry += 1) {
    if (retry > 0) await dispatcher.sleep(Math.max(backoffDelayMs(delivery, retry), askedWaitMs));
    if (closed()) return { ok: false, failure, closed: true, attempts: retry };
    const verdict = await attempt(retry);
    if (verdict.ok) return { ok: true, reply: verdict.reply, attempts: retry + 1 };
    failure = verdict.failure;
    if (!verdict.retryable || closed()) return { ok: false, failure, closed: false, attempts: retry + 1 };
    askedWaitMs = retryAfterDelayMs(failure.status ?? 0, verdict.retryAfter, delivery.retryAfterMaxMs);
  }
  return { ok: false, failure, closed: false, attempts: delivery.retry + 1 };
}

/** Delivers `item` with retries; resolves with the subscriber's reply, or undefined (no reply, or dead-lettered). */
export async function deliverWithRetries(
  ctx: AttemptContext,
  queue: TriggerQueue,
  item: QueueItem,
): Promise<CloudEventV1<unknown> | undefined> {
  // The loop's policy as the delivery began; the subscriber as the Trigger is at each attempt.
  const delivery = queue.delivery;
  const outgoing = withoutTtl(item.event);
  const partitionKey = typeof outgoing.partitionkey === 'string' ? outgoing.partitionkey : undefined;
  let direct = false;
  const result = await withRetries(ctx.dispatcher, delivery, ctx.closed, async (retry) => {
    if (retry > 0) queue.stats.retried += 1;
    const { subscriber, name } = queue.trigger;
    // A route may be waited for (a function starting from zero): the wait is part of the
    // attempt, as it was when the event waited in the activator, and its timeout covers both.
    const asked = performance.now();
    const routed = ctx.route?.(subscriber, partitionKey, { abort: ctx.dispatcher.signal, maxWaitMs: delivery.timeoutMs });
    const lease = routed instanceof Promise ? await routed : routed;
    const leftMs =
      delivery.timeoutMs > 0 && routed instanceof Promise ? delivery.timeoutMs - (performance.now() - asked) : delivery.timeoutMs;
    direct = lease !== undefined;
    if (lease) queue.stats.direct += 1;
    const timeoutMs = minTimeout(leftMs, lease?.timeoutMs ?? 0);
    const outcome: SendOutcome =
      delivery.timeoutMs > 0 && leftMs < 1
        ? { kind: 'error', message: `no answer within ${delivery.timeoutMs} ms (delivery timeout)`, retryable: true, timedOut: true }
        : await ctx.dispatcher.send(lease?.url ?? subscriber, outgoing, timeoutMs, true, lease !== undefined);
    lease?.release(outcome.kind === 'error' && !outcome.timedOut ? 'unreachable' : 'answered');
    const verdict = judge(subscriber, outcome);
    if (!verdict.ok && verdict.retryable && retry < delivery.retry) {
      ctx.log.debug(
        { trigger: name, id: item.event.id, attempt: retry + 1, reason: verdict.failure.reason },
        'delivery failed; will retry',
      );
    }
    return verdict;
  });
  const { name, subscriber } = queue.trigger;
  if (result.ok) {
    queue.stats.delivered += 1;
    ctx.log.debug(
      { trigger: name, id: item.event.id, attempts: result.attempts, direct, reply: result.reply !== undefined },
      'event delivered',
    );
    return result.reply;
  }
  const last = result.failure;
  const failure = result.closed
    ? {
        ...last,
        destination: subscriber,
        reason: `broker closed before the event was delivered${last ? ` (last failure: ${last.reason})` : ''}`,
      }
    : last;
  await ctx.deadLetter(queue, item.event, failure ?? { destination: subscriber, reason: 'delivery failed' });
  return undefined;
}

/** The smaller of two timeouts where 0 means none. */
function minTimeout(a: number, b: number): number {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return Math.min(a, b);
}
