// The generated Knative objects, run by the local plane, from one of two places: objects that
// live in the API server (the local control plane: the plane's own ApiServerSource, Resource
// mode, list+watch as client-go's reflector, watches the five kinds; status written to them), or
// objects held in memory (a configured cluster, whose Knative, if any, is not the plane's: the
// objects are applied once and their readiness kept on a StatusBoard). Either way the same
// controllers turn each object into what runs, one per kind. Every change is handled one at a
// time, so a Trigger resolved while a Service appears sees a consistent picture; a Broker or
// Service change re-resolves the objects that name them, as Knative's trackers do. Watching the
// API server, Namespaces are watched too: a namespace created, changed or deleted makes every
// ApiServerSource with a namespaceSelector select again (Knative's controller resyncs them all on
// any namespace event); changes arriving while one such pass waits share it. Objects held in
// memory select their namespaces once, when applied.
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import { apiVersionOf, Namespace, type KubeObject, type ResourceKind, type KubeClient } from '../../functions/runtime/index.ts';
import type { Broker } from '../broker/index.ts';
import { ApiServerSource as LocalSource } from '../source/index.ts';
import { ApiServerSourceController } from './api-server-sources.ts';
import { BrokerDirectory } from './brokers.ts';
import { ApiServerSource, Broker as BrokerKind, KnativeService, PingSource, Trigger } from './kinds.ts';
import { PingSourceController } from './ping-sources.ts';
import { ServiceDirectory, type LocalFunctions } from './services.ts';
import { apiServerStatus, type StatusWriter } from './status.ts';
import { TriggerController } from './triggers.ts';

export interface ObjectHandlers {
  apply(object: KubeObject): Promise<void>;
  remove(object: KubeObject): Promise<void>;
}

/** ApiServerSources a controller derives at run time from other objects (derived-sources.ts). */
export interface DerivedSources {
  start(): Promise<void>;
  stop(): Promise<void>;
  /** The names of the ApiServerSources applied, by the object they derive from. */
  applied(): Record<string, string[]>;
}

export interface KnativeControllerOptions {
  kube: KubeClient;
  broker: Pick<Broker, 'addTrigger' | 'removeTrigger' | 'publish'>;
  brokerUrl: string;
  functions: LocalFunctions;
  log: Logger;
  /** Where readiness goes (default: the objects' status in the API server). */
  status?: StatusWriter;
  /** Run these objects, held in memory, instead of watching the API server's. */
  objects?: KubeObject[];
  /** Kinds the sources resolve without discovery. */
  knownKinds?: ResourceKind[];
  /** Broker route of a Trigger (default <namespace>/<name>). */
  routeName?: (trigger: KubeObject) => string;
  /** A client authenticated as a ServiceAccount, for ApiServerSources (default: `kube`). */
  clientFor?: (namespace: string, serviceAccount: string) => Promise<KubeClient>;
  /**
   * ApiServerSources derived at run time rather than held as objects (derived-sources.ts: the
   * CompositeControllers' sources when objects are in memory), applied through the same
   * serialized handlers; started last, stopped first.
   */
  derivedSources?: (sources: ObjectHandlers) => DerivedSources;
  /**
   * ApiServerSources and PingSources are run by Knative's own adapters beside the plane: it
   * neither runs nor fires them, derives none, nor writes their status.
   */
  externalSources?: boolean;
}

export class KnativeControllers {
  readonly #options: KnativeControllerOptions;
  #watcher?: LocalSource;
  #derived?: DerivedSources;
  #serial: Promise<void> = Promise.resolve();
  /** A namespacesChanged pass is queued and has not started: later namespace events share it. */
  #namespacesQueued = false;
  readonly brokers: BrokerDirectory;
  readonly services: ServiceDirectory;
  readonly triggers: TriggerController;
  readonly pings: PingSourceController;
  readonly sources: ApiServerSourceController;

  constructor(options: KnativeControllerOptions) {
    this.#options = options;
    const { kube, broker, brokerUrl, functions, log } = options;
    const publish = (event: CloudEventV1<unknown>) => broker.publish(event);
    const status = options.status ?? apiServerStatus(kube);
    this.brokers = new BrokerDirectory(status, brokerUrl);
    this.services = new ServiceDirectory(status, functions);
    this.triggers = new TriggerController(status, broker, { brokers: this.brokers, services: this.services }, options.routeName);
    this.pings = new PingSourceController(status, this.brokers, publish, log.child({ component: 'pingsource' }));
    this.sources = new ApiServerSourceController({
      kube,
      brokers: this.brokers,
      publish,
      log: log.child({ component: 'source' }),
      status,
      knownKinds: options.knownKinds,
      clientFor: options.clientFor,
      // One change at a time, as every other: a retry waits its turn.
      reapply: (object) => this.#serialized(this.sources).apply(object),
    });
  }

  /** Starts watching; resolves once every kind was listed and its objects applied. */
  async start(): Promise<void> {
    const { kube, log } = this.#options;
    const afterBrokers = async () => {
      await this.triggers.refresh();
      await this.pings.refresh();
      await this.sources.refresh();
    };
    const watched: [typeof Trigger, ObjectHandlers][] = [
      [BrokerKind, this.#serialized(this.brokers, afterBrokers)],
      [KnativeService, this.#serialized(this.services, () => this.triggers.refresh())],
      [Trigger, this.#serialized(this.triggers)],
      ...(this.#options.externalSources
        ? []
        : ([
            [PingSource, this.#serialized(this.pings)],
            [ApiServerSource, this.#serialized(this.sources)],
          ] as [typeof Trigger, ObjectHandlers][])),
    ];
    const handlers = new Map(watched.map(([kind, handler]) => [`${apiVersionOf(kind)} ${kind.kind}`, handler]));
    if (this.#options.objects) {
      // In memory: each kind in the order the watch would settle them (what an object names first).
      for (const [kind, handler] of watched) {
        for (const object of this.#options.objects)
          if (object.apiVersion === apiVersionOf(kind) && object.kind === kind.kind) void handler.apply(object);
      }
      await this.#serial;
      return this.#startDerived();
    }
    const isNamespace = (event: CloudEventV1<unknown>) =>
      (event as unknown as { kind: string }).kind === Namespace.kind &&
      (event as unknown as { apiversion: string }).apiversion === apiVersionOf(Namespace);
    const applyEvent = (event: CloudEventV1<unknown>): Promise<void> => {
      if (isNamespace(event)) return this.#namespacesChanged();
      const ext = event as unknown as { apiversion: string; kind: string };
      const handler = handlers.get(`${ext.apiversion} ${ext.kind}`);
      if (!handler) return Promise.resolve();
      const object = event.data as KubeObject;
      return event.type.endsWith('.delete') ? handler.remove(object) : handler.apply(object);
    };
    // The first listing is applied in the order objects name each other, as in memory: the kinds
    // are listed side by side, and an ApiServerSource applied before its Trigger would send the
    // add event of every existing object to a broker with no Trigger for it yet (dropped).
    let listing: CloudEventV1<unknown>[] | undefined = [];
    this.#watcher = new LocalSource({
      kube,
      // Namespaces in Reference mode: only that one changed matters, and labels are read again when the sources select.
      sources: [
        { name: 'knative-objects', mode: 'Resource', resources: watched.map(([kind]) => ({ kind })) },
        { name: 'knative-namespaces', mode: 'Reference', resources: [{ kind: Namespace }] },
      ],
      sink: async (event) => {
        // The first listing's namespaces are the ones the sources select as they are applied.
        if (listing) {
          if (!isNamespace(event)) listing.push(event);
        } else await applyEvent(event);
      },
      log: log.child({ component: 'knative' }),
      resyncIntervalMs: 0,
    });
    await this.#watcher.start();
    const rank = (event: CloudEventV1<unknown>) => watched.findIndex(([kind]) => kind.kind === (event as unknown as { kind: string }).kind);
    // Queued in order before any later event can be (stable sort: one object's events keep theirs).
    for (const event of listing.sort((a, b) => rank(a) - rank(b))) void applyEvent(event);
    listing = undefined;
    await this.#serial;
    await this.#startDerived();
  }

  async #startDerived(): Promise<void> {
    if (this.#options.externalSources) return;
    this.#derived = this.#options.derivedSources?.(this.#serialized(this.sources));
    await this.#derived?.start();
  }

  /** The derived ApiServerSources (once started), if any. */
  get derived(): DerivedSources | undefined {
    return this.#derived;
  }

  /** The objects held in memory, counted by kind ("1 Broker, 2 Service, …"). */
  describe(): string {
    const counts = new Map<string, number>();
    for (const object of this.#options.objects ?? []) counts.set(object.kind!, (counts.get(object.kind!) ?? 0) + 1);
    return [...counts].map(([kind, count]) => `${count} ${kind}`).join(', ');
  }

  async stop(): Promise<void> {
    await this.#derived?.stop();
    await this.#watcher?.stop();
    // Sources first: a handler may be waiting for a source's start, which waits for the broker.
    await this.sources.stop();
    await this.#serial;
    this.pings.stop();
  }

  /** Runs `work` after every change queued before it. */
  #run(work: () => Promise<void>): Promise<void> {
    const next = this.#serial.then(work);
    this.#serial = next.catch(() => {});
    return next;
  }

  /** Queues one pass of the sources over the namespaces they select, unless one is queued already. */
  #namespacesChanged(): Promise<void> {
    if (this.#namespacesQueued) return Promise.resolve();
    this.#namespacesQueued = true;
    return this.#run(async () => {
      this.#namespacesQueued = false;
      try {
        await this.sources.namespacesChanged();
      } catch (error) {
        this.#options.log.warn(
          { reason: (error as Error).message },
          `ApiServerSources selecting namespaces again: ${(error as Error).message}`,
        );
      }
    });
  }

  /** Handlers that run one at a time across all kinds, `then` after each change. */
  #serialized(controller: ObjectHandlers, then?: () => Promise<void>): ObjectHandlers {
    const run = (work: () => Promise<void>) => this.#run(work);
    // A failure is logged, never thrown back at the watcher: it would send the same event again.
    const log = this.#options.log.child({ component: 'knative' });
    const guarded = (what: 'apply' | 'remove') => (object: KubeObject) =>
      run(async () => {
        try {
          await controller[what](object);
          await then?.();
        } catch (error) {
          log.warn(
            { object: `${object.metadata.namespace}/${object.metadata.name}`, reason: (error as Error).message },
            `${what} ${object.metadata.namespace}/${object.metadata.name}: ${(error as Error).message}`,
          );
        }
      });
    return { apply: guarded('apply'), remove: guarded('remove') };
  }
}
