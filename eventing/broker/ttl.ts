// knativebrokerttl, as knative/eventing pkg/broker/ttl.go handles it: an event that enters the
// broker without the attribute gets 255; every entry (replies included) decrements it; an event
// whose TTL reaches 0 is dropped. Subscribers never see the attribute (the filter strips it before
// delivery); dead-lettered events keep it.
import type { CloudEventV1 } from 'cloudevents';

export const TTL_ATTRIBUTE = 'knativebrokerttl';
export const DEFAULT_TTL = 255;

/** The TTL the event carries after this entry (0 = drop); `warn` hears about an unusable value. */
export function nextTtl(event: CloudEventV1<unknown>, warn: (raw: unknown) => void = () => undefined): number {
  const raw = event[TTL_ATTRIBUTE];
  if (raw === undefined || raw === null) return DEFAULT_TTL;
  const value =
    typeof raw === 'number' ? raw : typeof raw === 'string' && /^\s*-?\d+\s*$/.test(raw) ? Number.parseInt(raw, 10) : Number.NaN;
  if (!Number.isInteger(value) || value > 2 ** 31 - 1 || value < -(2 ** 31)) {
    warn(raw);
    return DEFAULT_TTL;
  }
  return Math.max(value - 1, 0);
}

export function withoutTtl(event: CloudEventV1<unknown>): CloudEventV1<unknown> {
  const { [TTL_ATTRIBUTE]: _ttl, ...rest } = event;
  return rest as CloudEventV1<unknown>;
}
