// A Trigger as the broker takes it: checked once when added (a bad one is refused with the
// reason, never half-applied), and its delivery policy resolved against the broker's default as
// Knative does (the Trigger's `delivery` replaces the Broker's; the dead-letter sink falls back
// to the Broker's, then to the local file).
import type { Logger } from 'pino';
import { parseDeliverySpec, type DeadLetterTarget, type ResolvedDelivery } from '../delivery.ts';
import { validateTriggerFilters, type Trigger } from '../filters.ts';

/** A validated copy of `trigger`; throws with the reason when it cannot be used. */
export function checkTrigger(trigger: Trigger): Trigger {
  if (trigger === null || typeof trigger !== 'object') throw new Error('trigger must be an object with name and subscriber');
  const name = trigger.name;
  if (typeof name !== 'string' || name.trim() === '') throw new Error('trigger.name must be a non-empty string');
  const where = `trigger ${name}`;
  if (typeof trigger.subscriber !== 'string' || !/^https?:\/\//i.test(trigger.subscriber)) {
    throw new Error(`${where}: subscriber must be an http(s) URL, got ${JSON.stringify(trigger.subscriber)}`);
  }
  try {
    new URL(trigger.subscriber);
  } catch {
    throw new Error(`${where}: subscriber ${JSON.stringify(trigger.subscriber)} is not a valid URL`);
  }
  if (trigger.maxInFlight !== undefined && (!Number.isInteger(trigger.maxInFlight) || trigger.maxInFlight < 1)) {
    throw new Error(`${where}: maxInFlight must be an integer >= 1, got ${String(trigger.maxInFlight)}`);
  }
  const validation = validateTriggerFilters(trigger, where);
  if (validation.errors.length > 0) throw new Error(`${where}: invalid filter: ${validation.errors.join('; ')}`);
  try {
    return structuredClone(trigger);
  } catch {
    return { ...trigger };
  }
}

/** The delivery policy of `trigger`: its own, else the broker's; dead letters to its sink, the broker's, or `deadLetterFile`. */
export function resolveDelivery(
  trigger: Trigger,
  brokerDelivery: ReturnType<typeof parseDeliverySpec>,
  deadLetterFile: string,
  log: Logger,
): ResolvedDelivery {
  const own = trigger.delivery === undefined ? undefined : parseDeliverySpec(trigger.delivery, `trigger ${trigger.name}.delivery`);
  for (const warning of own?.warnings ?? []) log.warn(warning);
  const base = own ?? brokerDelivery;
  const deadLetter: DeadLetterTarget = own?.deadLetter ?? brokerDelivery.deadLetter ?? { kind: 'file', path: deadLetterFile };
  const resolved: ResolvedDelivery = { retry: base.retry, timeoutMs: base.timeoutMs, deadLetter };
  if (base.backoffPolicy !== undefined) resolved.backoffPolicy = base.backoffPolicy;
  if (base.backoffDelayMs !== undefined) resolved.backoffDelayMs = base.backoffDelayMs;
  if (base.retryAfterMaxMs !== undefined) resolved.retryAfterMaxMs = base.retryAfterMaxMs;
  return resolved;
}

export function positiveInteger(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1) throw new Error(`Broker: options.${name} must be an integer >= 1, got ${String(value)}`);
  return value;
}
