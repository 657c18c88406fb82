// One queued event's way to its subscriber: Knative's dispatcher retry loop (pkg/kncloudevents
// RetryConfig: `delivery.retry` attempts after the first, backoff between them, retry only what
// SelectiveRetry allows; a 429/503's Retry-After lengthens the wait), each attempt sent directly
// to a function instance when the route offers one (the activator's warm path, chosen by the
// event's `partitionkey`), else to the subscriber's URL. What never succeeds goes to the
// dead-letter sink with the last failure.
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import { backoffDelayMs, retryAfterDelayMs, type DeliveryFailure } from '../delivery.ts';
import { judge, type DirectRoute, type Dispatcher } from './dispatcher.ts';
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

/** Delivers `item` with retries; resolves with the subscriber's reply, or undefined (no reply, or dead-lettered). */
export async function deliverWithRetries(ctx: AttemptContext, queue: TriggerQueue, item: QueueItem): Promise<CloudEventV1<unknown> | undefined> {
  const { trigger, delivery } = queue;
  const outgoing = withoutTtl(item.event);
  const partitionKey = typeof outgoing.partitionkey === 'string' ? outgoing.partitionkey : undefined;
  let failure: DeliveryFailure | undefined;
  let askedWaitMs = 0;
  for (let attempt = 0; attempt <= delivery.retry; attempt += 1) {
    if (attempt > 0) {
      queue.stats.retried += 1;
      await ctx.dispatcher.sleep(Math.max(backoffDelayMs(delivery, attempt), askedWaitMs));
    }
    if (ctx.closed()) {
      failure = { ...failure, destination: trigger.subscriber, reason: `broker closed before the event was delivered${failure ? ` (last failure: ${failure.reason})` : ''}` };
      break;
    }
    const lease = ctx.route?.(trigger.subscriber, partitionKey);
    if (lease) queue.stats.direct += 1;
    const timeoutMs = minTimeout(delivery.timeoutMs, lease?.timeoutMs ?? 0);
    const outcome = await ctx.dispatcher.send(lease?.url ?? trigger.subscriber, outgoing, timeoutMs, true, lease !== undefined);
    lease?.release(outcome.kind === 'error' && !outcome.timedOut ? 'unreachable' : 'answered');
    const verdict = judge(trigger.subscriber, outcome);
    if (verdict.ok) {
      queue.stats.delivered += 1;
      ctx.log.debug({ trigger: trigger.name, id: item.event.id, attempts: attempt + 1, direct: lease !== undefined, reply: verdict.reply !== undefined }, 'event delivered');
      return verdict.reply;
    }
    failure = verdict.failure;
    askedWaitMs = retryAfterDelayMs(failure.status ?? 0, verdict.retryAfter, delivery.retryAfterMaxMs);
    if (!verdict.retryable || ctx.closed()) break;
    if (attempt < delivery.retry) {
      ctx.log.debug({ trigger: trigger.name, id: item.event.id, attempt: attempt + 1, reason: failure.reason }, 'delivery failed; will retry');
    }
  }
  await ctx.deadLetter(queue, item.event, failure ?? { destination: trigger.subscriber, reason: 'delivery failed' });
  return undefined;
}

/** The smaller of two timeouts where 0 means none. */
function minTimeout(a: number, b: number): number {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return Math.min(a, b);
}
