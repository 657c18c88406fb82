// Knative PingSources (sources.knative.dev/v1) on the local plane: each one sends its event to
// the broker on its schedule (cron.ts), as Knative's mt-ping adapter does: type
// `dev.knative.sources.ping`, source `/apis/v1/namespaces/<ns>/pingsources/<name>`, the spec's
// `data` with its `contentType`, and the `ceOverrides` extensions (the function tag its Trigger
// filters on). A changed schedule takes effect at once; a deleted PingSource stops.
import { randomUUID } from 'node:crypto';
import { CloudEvent } from 'cloudevents';
import type { Logger } from 'pino';
import { PING_TYPE, keyOf, keyString, type KubeObject, MAX_TIMER_MS } from '../../functions/runtime/index.ts';
import type { BrokerDirectory } from './brokers.ts';
import { ceOverridesProblem, overrideExtensions } from './ce-overrides.ts';
import { nextFire, parseSchedule, type Schedule } from './cron.ts';
import { PingSource } from './kinds.ts';
import { cleared, notReady, ready, type StatusWriter, type Verdict } from './status.ts';

interface PingSpec {
  schedule?: string;
  timezone?: string;
  contentType?: string;
  data?: string;
  ceOverrides?: { extensions?: Record<string, string> };
  sink?: { ref?: { kind?: string; name?: string; namespace?: string }; uri?: string };
}

/** The event a PingSource sends. */
/**
 * The objects with every PingSource rescheduled to fire each `intervalMs` (0: PingSources left
 * out), for local runs, tests and benchmarks that want a fast resync or none; undefined keeps the
 * generated schedules.
 */
export function withResyncInterval(objects: KubeObject[], intervalMs: number | undefined): KubeObject[] {
  if (intervalMs === undefined) return objects;
  return objects
    .filter((object) => !(object.kind === 'PingSource' && intervalMs === 0))
    .map((object) =>
      object.kind === 'PingSource'
        ? { ...object, spec: { ...(object.spec as object), schedule: `@every ${Math.round(intervalMs)}ms` } }
        : object,
    );
}

export function pingEvent(object: KubeObject): CloudEvent<unknown> {
  const spec = (object.spec ?? {}) as PingSpec;
  const contentType = spec.contentType ?? 'application/json';
  let data: unknown = spec.data ?? '';
  if (/json/.test(contentType) && typeof data === 'string' && data) {
    try {
      data = JSON.parse(data);
    } catch {
      /* sent as the text it is */
    }
  }
  return new CloudEvent<unknown>({
    id: randomUUID(),
    type: PING_TYPE,
    source: `/apis/v1/namespaces/${object.metadata.namespace}/pingsources/${object.metadata.name}`,
    datacontenttype: contentType,
    ...overrideExtensions(spec.ceOverrides),
    data,
  });
}

/** The schedule of a PingSource, or why it cannot run locally. */
export function pingPlan(object: KubeObject, brokers: Pick<BrokerDirectory, 'has' | 'url'>): { schedule?: Schedule; verdict: Verdict } {
  const spec = (object.spec ?? {}) as PingSpec;
  const namespace = object.metadata.namespace ?? '';
  const ref = spec.sink?.ref;
  if (ref?.kind !== 'Broker' || !ref.name)
    return {
      verdict: {
        conditions: [
          { type: 'SinkProvided', status: 'False', reason: 'NotFound', message: 'locally a PingSource can only send to a Broker' },
          notReady('NotFound', 'locally a PingSource can only send to a Broker'),
        ],
        fields: cleared('sinkUri'),
      },
    };
  if (!brokers.has(ref.namespace ?? namespace, ref.name))
    return {
      verdict: {
        conditions: [
          { type: 'SinkProvided', status: 'False', reason: 'NotFound', message: `Broker "${ref.name}" does not exist` },
          notReady('NotFound', `Broker "${ref.name}" does not exist`),
        ],
        fields: cleared('sinkUri'),
      },
    };
  const overridesProblem = ceOverridesProblem(spec.ceOverrides);
  if (overridesProblem) return { verdict: { conditions: [notReady('InvalidCEOverrides', overridesProblem)], fields: cleared('sinkUri') } };
  if (spec.timezone && spec.timezone !== 'UTC' && spec.timezone !== 'Etc/UTC')
    return {
      verdict: {
        conditions: [notReady('TimezoneUnsupported', `the local plane evaluates schedules in UTC, not ${spec.timezone}`)],
        fields: cleared('sinkUri'),
      },
    };
  try {
    const schedule = parseSchedule(spec.schedule ?? '* * * * *');
    return {
      schedule,
      verdict: {
        conditions: [
          { type: 'SinkProvided', status: 'True', reason: 'SinkProvided' },
          { type: 'Deployed', status: 'True', reason: 'Deployed' },
          ready(),
        ],
        fields: { sinkUri: brokers.url },
      },
    };
  } catch (error) {
    return { verdict: { conditions: [notReady('InvalidSchedule', (error as Error).message)], fields: cleared('sinkUri') } };
  }
}

export class PingSourceController {
  readonly #timers = new Map<string, NodeJS.Timeout>();
  readonly #sources = new Map<string, KubeObject>();
  readonly #status: StatusWriter;
  readonly #brokers: Pick<BrokerDirectory, 'has' | 'url'>;
  readonly #publish: (event: CloudEvent<unknown>) => Promise<void>;
  readonly #log: Logger;

  constructor(
    status: StatusWriter,
    brokers: Pick<BrokerDirectory, 'has' | 'url'>,
    publish: (event: CloudEvent<unknown>) => Promise<void>,
    log: Logger,
  ) {
    this.#status = status;
    this.#brokers = brokers;
    this.#publish = publish;
    this.#log = log;
  }

  async apply(object: KubeObject): Promise<void> {
    const key = keyString(keyOf(object));
    this.#sources.set(key, object);
    this.#stopTimer(key);
    const { schedule, verdict } = pingPlan(object, this.#brokers);
    if (schedule) this.#arm(key, schedule);
    await this.#status.write(PingSource, object, verdict);
  }

  async remove(object: KubeObject): Promise<void> {
    const key = keyString(keyOf(object));
    this.#sources.delete(key);
    this.#stopTimer(key);
  }

  async refresh(): Promise<void> {
    for (const object of [...this.#sources.values()]) await this.apply(object);
  }

  /** Sends at once, off schedule, the ping of each Ready PingSource whose event `wanted` takes (the plane's resync at start). */
  async fireNow(wanted: (event: CloudEvent<unknown>) => Promise<boolean>): Promise<void> {
    for (const [key, object] of this.#sources) {
      if (!pingPlan(object, this.#brokers).schedule) continue;
      const event = pingEvent(object);
      if (!(await wanted(event))) continue;
      await this.#publish(event).catch((error: unknown) =>
        this.#log.warn({ pingsource: key, reason: (error as Error).message }, `ping of ${key} not accepted by the broker`),
      );
    }
  }

  stop(): void {
    for (const key of [...this.#timers.keys()]) this.#stopTimer(key);
  }

  #arm(key: string, schedule: Schedule): void {
    const at = nextFire(schedule, new Date());
    // A fire later than a timer holds re-arms on the way.
    const wait = Math.min(at.getTime() - Date.now(), MAX_TIMER_MS);
    const timer = setTimeout(
      () => {
        const object = this.#sources.get(key);
        if (!object) return;
        if (Date.now() >= at.getTime()) {
          this.#publish(pingEvent(object)).catch((error: unknown) =>
            this.#log.warn({ pingsource: key, reason: (error as Error).message }, `ping of ${key} not accepted by the broker`),
          );
        }
        this.#arm(key, schedule);
      },
      Math.max(wait, 0),
    );
    timer.unref();
    this.#timers.set(key, timer);
  }

  #stopTimer(key: string): void {
    clearTimeout(this.#timers.get(key));
    this.#timers.delete(key);
  }
}
