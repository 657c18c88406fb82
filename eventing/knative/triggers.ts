// Knative Triggers (eventing.knative.dev/v1) on the local plane: each Trigger object becomes a
// route of the local broker (addTrigger; an update replaces it, so the next events go to the new
// subscriber; a delete removes it), and its status says whether it could be resolved, with
// Knative's condition types (knative/eventing pkg/apis/eventing/v1 trigger_lifecycle.go:
// BrokerReady, SubscriberResolved, DeadLetterSinkResolved, Ready) and `status.subscriberUri`.
//
// Resolution: `subscriber.uri` as given; `subscriber.ref` to a Knative Service through the
// ServiceDirectory (a function → the activator's URL). `delivery.deadLetterSink` the same way;
// the generated dead-letter Service resolves to the broker's own dead-letter file.
import { keyOf, keyString, type KubeObject } from '../../functions/runtime/index.ts';
import type { Broker, DeliverySpec, Trigger } from '../broker/index.ts';
import type { BrokerDirectory } from './brokers.ts';
import { Trigger as TriggerKind } from './kinds.ts';
import type { Address, ServiceDirectory } from './services.ts';
import { cleared, notReady, ready, type Condition, type StatusWriter, type Verdict } from './status.ts';

type Destination = { ref?: { apiVersion?: string; kind?: string; name?: string; namespace?: string }; uri?: string };
interface TriggerSpec {
  broker?: string;
  filter?: Trigger['filter'];
  filters?: Trigger['filters'];
  subscriber?: Destination;
  delivery?: Omit<DeliverySpec, 'deadLetterSink'> & { deadLetterSink?: Destination };
}

export interface Resolvers {
  brokers: Pick<BrokerDirectory, 'has'>;
  services: Pick<ServiceDirectory, 'address'>;
}

/** Where a Destination points locally: a URL, the broker's dead-letter file, or why neither. */
export function resolveDestination(destination: Destination | undefined, namespace: string, services: Resolvers['services']): Address {
  if (!destination) return { reason: 'Missing', message: 'no destination given' };
  if (destination.uri)
    return /^https?:\/\//i.test(destination.uri)
      ? { url: destination.uri }
      : { reason: 'UnsupportedURI', message: `${destination.uri}: locally only http(s) URLs can be reached` };
  const ref = destination.ref;
  if (ref?.kind === 'Service' && ref.apiVersion?.startsWith('serving.knative.dev/') && ref.name)
    return services.address(ref.namespace ?? namespace, ref.name);
  return {
    reason: 'UnsupportedReference',
    message: `${ref?.apiVersion ?? '?'} ${ref?.kind ?? '?'} ${ref?.name ?? ''}: locally only a Knative Service or a URL can be resolved`,
  };
}

/** The broker route for a Trigger object (named <namespace>/<name> unless `name` is given), or the conditions saying why there is none. */
export function brokerTriggerFor(
  object: KubeObject,
  resolvers: Resolvers,
  name = keyString(keyOf(object)),
): { trigger?: Trigger; verdict: Verdict } {
  const spec = (object.spec ?? {}) as TriggerSpec;
  const namespace = object.metadata.namespace ?? '';
  const conditions: Condition[] = [];
  const failed = (type: string, reason: string, message: string) => conditions.push({ type, status: 'False', reason, message });

  if (spec.broker && resolvers.brokers.has(namespace, spec.broker))
    conditions.push({ type: 'BrokerReady', status: 'True', reason: 'BrokerReady' });
  else failed('BrokerReady', 'BrokerDoesNotExist', `Broker "${spec.broker ?? ''}" does not exist`);

  const subscriber = resolveDestination(spec.subscriber, namespace, resolvers.services);
  if ('url' in subscriber) conditions.push({ type: 'SubscriberResolved', status: 'True', reason: 'SubscriberResolved' });
  else if ('standIn' in subscriber) failed('SubscriberResolved', 'Unresolvable', 'the dead-letter sink is no subscriber');
  else failed('SubscriberResolved', subscriber.reason, subscriber.message);

  let deadLetterSink: string | undefined;
  if (spec.delivery?.deadLetterSink) {
    const sink = resolveDestination(spec.delivery.deadLetterSink, namespace, resolvers.services);
    if ('reason' in sink) failed('DeadLetterSinkResolved', sink.reason, sink.message);
    else {
      deadLetterSink = 'url' in sink ? sink.url : undefined;
      conditions.push({
        type: 'DeadLetterSinkResolved',
        status: 'True',
        reason: 'DeadLetterSinkResolved',
        ...('standIn' in sink ? { message: "the broker's dead-letter file" } : {}),
      });
    }
  }

  const failure = conditions.find((condition) => condition.status === 'False');
  if (failure)
    return { verdict: { conditions: [...conditions, notReady(failure.reason!, failure.message!)], fields: cleared('subscriberUri') } };
  const { deadLetterSink: _, ...delivery } = spec.delivery ?? {};
  const trigger: Trigger = {
    name,
    ...(spec.filter ? { filter: spec.filter } : {}),
    ...(spec.filters ? { filters: spec.filters } : {}),
    subscriber: (subscriber as { url: string }).url,
    // As the plane's own triggers: deliveries bounded by the function's capacity at full scale.
    ...((subscriber as { maxInFlight?: number }).maxInFlight ? { maxInFlight: (subscriber as { maxInFlight: number }).maxInFlight } : {}),
    ...(spec.delivery ? { delivery: { ...delivery, ...(deadLetterSink ? { deadLetterSink } : {}) } } : {}),
  };
  return { trigger, verdict: { conditions: [...conditions, ready()], fields: { subscriberUri: trigger.subscriber } } };
}

/** Keeps the local broker's routes equal to the Trigger objects. */
export class TriggerController {
  readonly #triggers = new Map<string, KubeObject>();
  /** The route each Trigger has in the broker now (its JSON), so an unchanged one is not re-added. */
  readonly #routes = new Map<string, string>();
  readonly #status: StatusWriter;
  readonly #broker: Pick<Broker, 'addTrigger' | 'removeTrigger'>;
  readonly #resolvers: Resolvers;
  readonly #routeName: (object: KubeObject) => string;

  /** `routeName`: the broker route of a Trigger (default <namespace>/<name>; its stats are kept under it). */
  constructor(
    status: StatusWriter,
    broker: Pick<Broker, 'addTrigger' | 'removeTrigger'>,
    resolvers: Resolvers,
    routeName = (object: KubeObject) => keyString(keyOf(object)),
  ) {
    this.#status = status;
    this.#routeName = routeName;
    this.#broker = broker;
    this.#resolvers = resolvers;
  }

  async apply(object: KubeObject): Promise<void> {
    const key = this.#routeName(object);
    this.#triggers.set(key, object);
    const { trigger, verdict } = brokerTriggerFor(object, this.#resolvers, key);
    if (trigger) {
      try {
        if (this.#routes.get(key) !== JSON.stringify(trigger)) this.#broker.addTrigger(trigger);
        this.#routes.set(key, JSON.stringify(trigger));
      } catch (error) {
        this.#unroute(key);
        await this.#status.write(TriggerKind, object, {
          conditions: [notReady('Invalid', (error as Error).message)],
          fields: cleared('subscriberUri'),
        });
        return;
      }
    } else {
      // A Trigger that cannot be resolved routes nothing (as Knative removes its subscription).
      this.#unroute(key);
    }
    await this.#status.write(TriggerKind, object, verdict);
  }

  async remove(object: KubeObject): Promise<void> {
    const key = this.#routeName(object);
    this.#triggers.delete(key);
    this.#unroute(key);
  }

  #unroute(key: string): void {
    this.#routes.delete(key);
    this.#broker.removeTrigger(key);
  }

  /** Resolves every Trigger again (a Service or Broker it names appeared, changed or went). */
  async refresh(): Promise<void> {
    for (const object of [...this.#triggers.values()]) await this.apply(object);
  }
}
