// The local event plane: what Knative Eventing and Serving do in a cluster, on one machine. It
// runs the Knative objects `opfn manifests` generates (eventing/knative/): each Trigger becomes a
// route of the broker, each ApiServerSource a local source, each PingSource the function's
// resync, each Knative Service a process behind the scale-from-zero activator with the Service's
// scaling and timeout. Those objects live either in the API server (`knativeObjects`: the local
// control plane, where `kubectl edit` takes effect live) or, against a configured cluster, in
// memory (generated here, never installed: that cluster may have a real Knative). Nothing is
// derived from a declaration on another path, so local and cluster cannot drift. The broker sends
// straight to a function instance that has room (the activator's lease) and bounds each trigger's
// deliveries by its function's capacity at full scale, so a burst scales the function out.
import { availableParallelism } from 'node:os';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CloudEvent } from 'cloudevents';
import type { Logger } from 'pino';
import { type FunctionDeclaration, type KubeObject, type KubeClient, unservedKinds } from '../functions/runtime/index.ts';
import { Activator, type FunctionStats } from './activator/index.ts';
import { Broker, type DeliverySpec, type Trigger, type TriggerStats } from './broker/index.ts';
import { DEAD_LETTER_FILE } from './state-files.ts';
import {
  derivedSourcesFor,
  configurationFromService,
  functionOf,
  inMemoryConfig,
  KnativeControllers,
  pingEvent,
  StatusBoard,
  withConfigFromEnvironment,
  withResyncInterval,
} from './knative/index.ts';
import {
  broker as brokerObject,
  deadLetterSink,
  DEFAULT_OPTIONS,
  FUNCTION_EXTENSION,
  functionObjects,
  kindsOf,
  type ManifestOptions,
  pingSources,
  validateManifests,
} from './manifests/index.ts';
import type { SourceStats } from './source/index.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** The entry program of a function process (functions/main.ts), as this module runs: from the sources, or compiled in the npm package. */
export const FUNCTION_PROGRAM = join(ROOT, 'functions', `main${extname(fileURLToPath(import.meta.url))}`);

// The declaration-level wiring (the generator's building blocks) that plane users need too.
export { FUNCTION_EXTENSION, sourcesFor } from './manifests/index.ts';

/**
 * The Knative objects the plane runs for `functions` when they do not live in an API server:
 * what `opfn manifests` generates (Broker, dead-letter Service; per function its Service,
 * Trigger, PingSource and ApiServerSources; identities and CRDs are the cluster's business), with
 * the plane's delivery and `replace`. `resyncIntervalMs` replaces each PingSource's schedule
 * (0: no PingSources), for tests and benchmarks that want no resync or a fast one. Declared
 * configuration set in the plane's environment goes into the Services (withConfigFromEnvironment).
 */
export function planeObjects(
  functions: FunctionDeclaration[],
  options: { delivery?: DeliverySpec; replace?: Record<string, string>; resyncIntervalMs?: number } = {},
): KubeObject[] {
  const { retry, backoffPolicy, backoffDelay } = options.delivery ?? {};
  const manifestOptions: ManifestOptions = {
    ...DEFAULT_OPTIONS,
    replace: options.replace ?? {},
    delivery: {
      ...DEFAULT_OPTIONS.delivery,
      ...(retry !== undefined ? { retry } : {}),
      ...(backoffPolicy ? { backoffPolicy } : {}),
      ...(backoffDelay ? { backoffDelay } : {}),
    },
  };
  const run = new Set(['Broker', 'Service', 'Trigger', 'PingSource', 'ApiServerSource']);
  const objects = [
    brokerObject(manifestOptions),
    deadLetterSink(manifestOptions),
    ...functions.flatMap((declaration) => functionObjects(declaration, manifestOptions)),
  ];
  const problems = validateManifests(objects, new Set(Object.values(manifestOptions.replace).filter((target) => !target.includes('://'))));
  if (problems.length) throw new Error(`the generated objects are not sound:\n  ${problems.join('\n  ')}`);
  return withConfigFromEnvironment(
    withResyncInterval(
      objects.filter((object) => run.has(object.kind ?? '')),
      options.resyncIntervalMs,
    ),
    functions,
  );
}

/**
 * Triggers from Knative Trigger manifests (eventing.knative.dev/v1), so routes written for a
 * cluster work locally too; only `spec.subscriber.uri` is resolvable off-cluster.
 */
export function triggersFromManifests(objects: KubeObject[]): Trigger[] {
  return objects
    .filter((object) => object.kind === 'Trigger')
    .map((object) => {
      const spec = (object.spec ?? {}) as {
        filter?: Trigger['filter'];
        filters?: Trigger['filters'];
        subscriber?: { uri?: string };
        delivery?: DeliverySpec;
      };
      if (!spec.subscriber?.uri)
        throw new Error(
          `Trigger ${object.metadata.name}: locally only spec.subscriber.uri can be resolved (a Knative Service ref needs a cluster)`,
        );
      return {
        name: object.metadata.name!,
        filter: spec.filter,
        filters: spec.filters,
        subscriber: spec.subscriber.uri,
        delivery: spec.delivery,
      };
    });
}

/** The event of a function's generated resync PingSource, as the plane sends it. */
export function resyncEvent(declaration: FunctionDeclaration): CloudEvent<unknown> {
  return pingEvent(pingSources(declaration, DEFAULT_OPTIONS)[0]);
}

/** The event of a function's generated poll PingSource (only a kind no ApiServerSource can watch has one). */
export function pollEvent(declaration: FunctionDeclaration): CloudEvent<unknown> {
  const poll = pingSources(declaration, DEFAULT_OPTIONS)[1];
  if (!poll) throw new Error(`${declaration.name} has no poll: its kind ${declaration.reconciles.kind} is watched by its ApiServerSource`);
  return pingEvent(poll);
}

export interface PlaneOptions {
  functions: FunctionDeclaration[];
  kube: KubeClient;
  /** The KUBECONFIG of the function processes (a file, or files joined by ':'); undefined: in a pod, its service account. */
  kubeconfigPath: string | undefined;
  /** Per function, a kubeconfig of its own identity (its generated ServiceAccount) instead. */
  functionKubeconfigs?: Record<string, string>;
  log: Logger;
  /** Folder for the dead-letter file. */
  stateDir: string;
  /** Idle time after which a function scales to zero. */
  idleTimeoutMs?: number;
  /**
   * Instances one function may run at once on this machine, whatever its Service's max-scale
   * (which still bounds it). Default: the cores less one for the API server and the plane, at
   * least 1: instances beyond the cores only compete for them (docs/benchmarks.md).
   */
  hostInstanceLimit?: number;
  /**
   * Objects in memory only: each function's resync every this many ms instead of its
   * PingSource's schedule (0 = no resync). Default: the PingSource's schedule.
   */
  resyncIntervalMs?: number;
  /** Objects in memory only: the generated Triggers' retries and backoff (default Knative's). */
  delivery?: DeliverySpec;
  /** How to start a function process (the build's bundledFunctions gives the bundles' way); default: its TypeScript entry under Node 24. */
  command?: (declaration: FunctionDeclaration) => { command: string; args: string[] };
  /** Extra environment for function processes (e.g. LOG_LEVEL). */
  env?: Record<string, string>;
  /** Triggers added by configuration, beside the generated ones. */
  triggers?: Trigger[];
  /** Send to a function instance with room directly (Knative's activator leaves the data path); default true. */
  directDelivery?: boolean;
  /** Objects in memory only: function name → URL its events go to instead of the function (as `opfn manifests --replace`). */
  replace?: Record<string, string>;
  /**
   * Run the Knative objects that live in the API server (Brokers, Services, Triggers,
   * ApiServerSources, PingSources: eventing/knative/), status written to them, instead of the
   * generated objects in memory; `kubectl patch trigger …` then takes effect live. For a local
   * control plane holding the generated objects (eventing/knative/local-install.ts). `clientFor` gives
   * each source its ServiceAccount's identity.
   */
  knativeObjects?: { clientFor?: (namespace: string, serviceAccount: string) => Promise<KubeClient> };
  /**
   * With `knativeObjects`: leave the ApiServerSources and PingSources in the API server to
   * Knative's own adapters (run beside the plane, sending to a Broker's `status.address.url`);
   * the plane neither runs nor fires them, nor writes their status.
   */
  externalSources?: boolean;
}

export interface PlaneStats {
  source: SourceStats;
  broker: Record<string, TriggerStats>;
  heldRequeues: number;
  activator: Record<string, FunctionStats>;
}

/** The cores less one for the API server and the plane, at least 1 (see PlaneOptions.hostInstanceLimit). */
export const defaultHostInstanceLimit = (): number => Math.max(1, availableParallelism() - 1);

export class EventPlane {
  readonly activator: Activator;
  readonly broker: Broker;
  /** The ApiServerSources' counters, summed. */
  readonly source: { stats(): SourceStats };
  /** The controllers running the Knative objects (once started). */
  knative?: KnativeControllers;
  /** Readiness of the objects held in memory (without `knativeObjects`). */
  readonly status?: StatusBoard;
  readonly #options: PlaneOptions;
  readonly #objects?: KubeObject[];

  constructor(options: PlaneOptions) {
    this.#options = options;
    const { functions, log } = options;
    const command = options.command ?? ((declaration) => ({ command: process.execPath, args: [FUNCTION_PROGRAM, declaration.name] }));
    // The activator starts each function as its generated Service says; with `knativeObjects`
    // the Service in the API server then applies its own (ServiceDirectory → configure).
    const generated = planeObjects(functions, options.knativeObjects ? {} : options);
    if (!options.knativeObjects) {
      this.#objects = generated;
      this.status = new StatusBoard();
    }
    this.activator = new Activator({
      log: log.child({ component: 'activator' }),
      idleTimeoutMs: options.idleTimeoutMs,
      hostInstanceLimit: options.hostInstanceLimit ?? defaultHostInstanceLimit(),
      functions: functions.map((declaration) => {
        const service = generated.find((object) => object.kind === 'Service' && functionOf(object) === declaration.name)!;
        return {
          name: declaration.name,
          ...command(declaration),
          env: {
            KUBECONFIG: options.functionKubeconfigs?.[declaration.name] ?? options.kubeconfigPath,
            ...(options.knativeObjects ? {} : inMemoryConfig(declaration)),
            ...options.env,
          },
          ...configurationFromService(service),
        };
      }),
    });
    this.broker = new Broker({
      triggers: [],
      delivery: options.delivery,
      deadLetterFile: join(options.stateDir, DEAD_LETTER_FILE),
      log: log.child({ component: 'broker' }),
      route:
        options.directDelivery === false
          ? undefined
          : (subscriber, partitionKey, wait) => this.activator.lease(subscriber, partitionKey, wait),
    });
    this.source = {
      stats: () => this.knative?.sources.stats() ?? { emitted: 0, relists: 0, watchRestarts: 0, pending: 0, sinkRetries: 0 },
    };
  }

  /** Starts every part; a start that fails stops what it had started (listeners, instances, sources) before it throws. */
  async start(): Promise<{ activatorUrl: string; brokerUrl: string }> {
    try {
      return await this.#start();
    } catch (error) {
      await this.stop({ drainTimeoutMs: 0 });
      throw error;
    }
  }

  /** Starts activator and broker first, so the sources' initial add events find their way. */
  async #start(): Promise<{ activatorUrl: string; brokerUrl: string }> {
    const activatorUrl = await this.activator.listen(0, '127.0.0.1');
    for (const trigger of this.#options.triggers ?? []) this.broker.addTrigger(trigger);
    const brokerUrl = await this.broker.listen(0, '127.0.0.1');
    await this.activator.start();
    const { functions, kube, log, knativeObjects } = this.#options;
    // Functions start on their first event, so their own check would wait for one: said here, at
    // once (a function whose CRD is missing gets none), without holding the start.
    for (const declaration of functions)
      void unservedKinds(declaration, kube).then((unserved) => {
        for (const { kind, reason } of unserved)
          log.warn({ fn: declaration.name, kind: kind.kind }, `declaration of ${declaration.name}: ${reason}`);
      });
    this.knative = new KnativeControllers({
      kube,
      broker: this.broker,
      brokerUrl,
      functions: {
        urlFor: (name) => (functions.some((declaration) => declaration.name === name) ? this.activator.urlFor(name) : undefined),
        configure: (name, configuration) => this.activator.configure(name, configuration),
        withdraw: (name, reason) => this.activator.withdraw(name, reason),
      },
      log,
      clientFor: knativeObjects?.clientFor,
      externalSources: this.#options.externalSources,
      // In memory: one namespace, the plane's own objects; routes (and their stats) by the function's name;
      // the CompositeControllers' sources derived here, as the composite function does not write them.
      ...(this.#objects
        ? {
            objects: this.#objects,
            status: this.status,
            routeName: (trigger: KubeObject) => trigger.metadata.name!,
            knownKinds: functions.flatMap(kindsOf),
            derivedSources: derivedSourcesFor(functions, { kube, log, placement: DEFAULT_OPTIONS, status: this.status }),
          }
        : {}),
    });
    await this.knative.start();
    // Objects in memory have no status anyone could read: what is not Ready fails the start.
    const problems = this.status?.problems() ?? [];
    if (problems.length) throw new Error(`the plane cannot run its Knative objects:\n  ${problems.join('\n  ')}`);
    await this.#resyncWhatExists();
    return { activatorUrl, brokerUrl };
  }

  /**
   * One resync at start of each function that has objects, as a controller-runtime manager
   * reconciles every object after its informers' first list. The sources' add events of objects
   * whose status says all is done are skipped, so what changed while the plane was down (a pod
   * deleted or ended, a copy edited) would otherwise wait for the next scheduled resync. A
   * function without objects stays at zero.
   */
  async #resyncWhatExists(): Promise<void> {
    const { functions, kube, log } = this.#options;
    // Asked only for a function with a Ready PingSource (none when resyncs are off): one `limit=1` list.
    await this.knative?.pings.fireNow(async (event) => {
      const declaration = functions.find((fn) => fn.name === event[FUNCTION_EXTENSION]);
      if (!declaration) return false;
      try {
        for await (const page of kube.pages(declaration.reconciles, { limit: 1 })) return page.items.length > 0;
      } catch (error) {
        log.debug({ function: declaration.name, reason: (error as Error).message }, 'no resync at start: its objects could not be listed');
      }
      return false;
    });
  }

  /**
   * Stops intake first (sources, pings), lets the broker deliver what it holds for up to
   * `drainTimeoutMs` (what is still undelivered then is dead-lettered with the reason), then
   * stops the function processes.
   */
  async stop(options: { drainTimeoutMs?: number } = {}): Promise<void> {
    await this.knative?.stop();
    await this.broker.close({ drainTimeoutMs: options.drainTimeoutMs });
    await this.activator.close();
  }

  stats(): PlaneStats {
    return {
      source: this.source.stats(),
      broker: this.broker.stats(),
      heldRequeues: this.broker.heldRequeues,
      activator: this.activator.stats(),
    };
  }
}
