// The generated Knative objects, run by the local plane: watch loops (watch-loop.ts) over the
// five kinds feed one controller each, and every change is handled one at a time, so a Trigger
// resolved while a Service appears sees a consistent picture. A Broker or Service change
// re-resolves the objects that name them, as Knative's trackers do.
import type { CloudEvent } from 'cloudevents';
import type { Logger } from 'pino';
import type { KubeClient } from '../../functions/runtime/kube.ts';
import type { Broker } from '../broker.ts';
import { ApiServerSourceController } from './api-server-sources.ts';
import { BrokerDirectory } from './brokers.ts';
import { ApiServerSource, Broker as BrokerKind, KnativeService, PingSource, Trigger } from './kinds.ts';
import { PingSourceController } from './ping-sources.ts';
import { ServiceDirectory, type LocalFunctions } from './services.ts';
import { TriggerController } from './triggers.ts';
import { watchObjects, type ObjectHandlers } from './watch-loop.ts';

export interface KnativeControllerOptions {
  kube: KubeClient;
  broker: Pick<Broker, 'addTrigger' | 'removeTrigger' | 'publish'>;
  brokerUrl: string;
  functions: LocalFunctions;
  log: Logger;
  /** A client authenticated as a ServiceAccount, for ApiServerSources (default: `kube`). */
  clientFor?: (namespace: string, serviceAccount: string) => Promise<KubeClient>;
}

export class KnativeControllers {
  readonly #options: KnativeControllerOptions;
  readonly #abort = new AbortController();
  readonly #loops: Promise<void>[] = [];
  #serial: Promise<void> = Promise.resolve();
  readonly brokers: BrokerDirectory;
  readonly services: ServiceDirectory;
  readonly triggers: TriggerController;
  readonly pings: PingSourceController;
  readonly sources: ApiServerSourceController;

  constructor(options: KnativeControllerOptions) {
    this.#options = options;
    const { kube, broker, brokerUrl, functions, log } = options;
    const publish = (event: CloudEvent<unknown>) => broker.publish(event);
    this.brokers = new BrokerDirectory(kube, brokerUrl);
    this.services = new ServiceDirectory(kube, functions);
    this.triggers = new TriggerController(kube, broker, { brokers: this.brokers, services: this.services });
    this.pings = new PingSourceController(kube, this.brokers, publish, log.child({ component: 'pingsource' }));
    this.sources = new ApiServerSourceController({ kube, brokers: this.brokers, publish, log: log.child({ component: 'source' }), clientFor: options.clientFor });
  }

  /** Starts watching; resolves once every kind was listed and its objects applied. */
  async start(): Promise<void> {
    const { kube, log } = this.#options;
    const afterBrokers = async () => { await this.triggers.refresh(); await this.pings.refresh(); await this.sources.refresh(); };
    const watched: [typeof Trigger, ObjectHandlers][] = [
      [BrokerKind, this.#serialized(this.brokers, afterBrokers)],
      [KnativeService, this.#serialized(this.services, () => this.triggers.refresh())],
      [Trigger, this.#serialized(this.triggers)],
      [PingSource, this.#serialized(this.pings)],
      [ApiServerSource, this.#serialized(this.sources)],
    ];
    const listed: Promise<void>[] = [];
    for (const [kind, handlers] of watched) {
      const loop = watchObjects(kube, kind, handlers, log.child({ component: 'knative', kind: kind.kind }), this.#abort.signal);
      this.#loops.push(loop.done);
      listed.push(loop.listed);
    }
    await Promise.all(listed);
    await this.#serial;
  }

  async stop(): Promise<void> {
    this.#abort.abort();
    await Promise.allSettled(this.#loops);
    await this.#serial;
    this.pings.stop();
    await this.sources.stop();
  }

  /** Handlers that run one at a time across all kinds, `then` after each change. */
  #serialized(controller: ObjectHandlers, then?: () => Promise<void>): ObjectHandlers {
    const run = (work: () => Promise<void>) => {
      const next = this.#serial.then(work);
      this.#serial = next.catch(() => {});
      return next;
    };
    return {
      apply: (object) => run(async () => { await controller.apply(object); await then?.(); }),
      remove: (object) => run(async () => { await controller.remove(object); await then?.(); }),
    };
  }
}
