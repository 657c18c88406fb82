// The local event plane: what Knative Eventing and Serving do in a cluster, on one machine.
// Each function declaration becomes ApiServerSources (its own kind in Resource mode, so the
// runtime can skip a status-only update by its body; owned and watched kinds in Resource mode, so
// a delete still names the owner; Secrets always in Reference mode, because Secret contents must
// never travel through the plane), a resync ping, a Trigger on the broker, and a process behind
// the scale-from-zero activator. The broker sends straight to a function instance that has room
// (the activator's lease) and bounds each trigger's deliveries by its function's capacity at
// full scale, so a burst scales the function out.
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CloudEvent } from 'cloudevents';
import type { Logger } from 'pino';
import type { FunctionDeclaration } from '../functions/runtime/declaration.ts';
import { PING_TYPE } from '../functions/runtime/events.ts';
import type { KubeObject, ResourceKind } from '../functions/runtime/kinds.ts';
import type { KubeClient } from '../functions/runtime/kube.ts';
import { Activator, capacityAtMaxScale, type FunctionStats } from './activator.ts';
import { localScaling } from './activator/decider.ts';
import { Broker, type DeliverySpec, type Trigger, type TriggerStats } from './broker.ts';
import { KnativeControllers } from './knative/controllers.ts';
import { ApiServerSource, type SourceResource, type SourceSpec, type SourceStats } from './source.ts';
import type { PartitionRule } from './source/partition.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** CloudEvent extension naming the function a source serves (ApiServerSource ceOverrides). */
export const FUNCTION_EXTENSION = 'opfnfunction';

/** The ApiServerSources of one function, exactly as the Knative manifests declare them. */
export function sourcesFor(declaration: FunctionDeclaration): SourceSpec[] {
  const extensions = { [FUNCTION_EXTENSION]: declaration.name };
  const primary = declaration.reconciles;
  const sources: SourceSpec[] = [{ name: `${declaration.name}-objects`, mode: isSecret(primary) ? 'Reference' : 'Resource', resources: [{ kind: primary, partition: { by: 'self' } }], extensions }];
  const related: SourceResource[] = [
    ...declaration.owns.map((owned) => ({ kind: owned.kind, labelSelector: owned.ownerNameLabel, partition: ownerPartition(primary, owned) })),
    ...declaration.watches.map((watched) => ({ kind: watched.kind, labelSelector: watched.labelSelector })),
  ];
  const resources = related.filter((r) => !isSecret(r.kind));
  const secrets = related.filter((r) => isSecret(r.kind));
  if (resources.length) sources.push({ name: `${declaration.name}-related`, mode: 'Resource', resources, extensions });
  if (secrets.length) sources.push({ name: `${declaration.name}-secrets`, mode: 'Reference', resources: secrets, extensions });
  return sources;
}

/** Events of an owned kind are partitioned by their owner (eventing/source/partition.ts). */
function ownerPartition(owner: ResourceKind, owned: FunctionDeclaration['owns'][number]): PartitionRule {
  const labels = owned.ownerLabels ?? (owned.ownerNameLabel ? { name: owned.ownerNameLabel } : undefined);
  return labels ? { by: 'owner', owner, labels } : { by: 'owner', owner };
}

/** Secrets are never watched in Resource mode: their data must not reach events, logs or dead letters. */
export function isSecret(kind: ResourceKind): boolean {
  return kind.group === '' && kind.kind === 'Secret';
}

/** The Trigger routing a function's events (its sources' and its resync pings) to it. */
export function triggerFor(declaration: FunctionDeclaration, subscriber: string, delivery?: DeliverySpec): Trigger {
  const trigger: Trigger = { name: declaration.name, filter: { attributes: { [FUNCTION_EXTENSION]: declaration.name } }, subscriber, delivery };
  const capacity = capacityAtMaxScale(declaration.scaling);
  if (capacity !== undefined) trigger.maxInFlight = capacity;
  return trigger;
}

/** The function's request timeout (Knative Serving timeoutSeconds) when its declaration sets one. */
function timeoutSecondsOf(declaration: FunctionDeclaration): number | undefined {
  const declared = declaration as FunctionDeclaration & { timeoutSeconds?: number; scaling: { timeoutSeconds?: number } };
  return declared.timeoutSeconds ?? declared.scaling.timeoutSeconds;
}

/**
 * Triggers from Knative Trigger manifests (eventing.knative.dev/v1), so routes written for a
 * cluster work locally too; only `spec.subscriber.uri` is resolvable off-cluster.
 */
export function triggersFromManifests(objects: KubeObject[]): Trigger[] {
  return objects
    .filter((object) => object.kind === 'Trigger')
    .map((object) => {
      const spec = (object.spec ?? {}) as { filter?: Trigger['filter']; filters?: Trigger['filters']; subscriber?: { uri?: string }; delivery?: DeliverySpec };
      if (!spec.subscriber?.uri) throw new Error(`Trigger ${object.metadata.name}: locally only spec.subscriber.uri can be resolved (a Knative Service ref needs a cluster)`);
      return { name: object.metadata.name!, filter: spec.filter, filters: spec.filters, subscriber: spec.subscriber.uri, delivery: spec.delivery };
    });
}

/** A PingSource event, as Knative sends it on the function's resync schedule. */
export function resyncEvent(declaration: FunctionDeclaration, namespace = 'default'): CloudEvent<unknown> {
  return new CloudEvent<unknown>({
    id: randomUUID(),
    type: PING_TYPE,
    source: `/apis/v1/namespaces/${namespace}/pingsources/${declaration.name}-resync`,
    datacontenttype: 'application/json',
    [FUNCTION_EXTENSION]: declaration.name,
    data: {},
  });
}

/**
 * Builds the functions' esbuild bundles into `outdir` and returns how to run them, as the
 * container image does (bundle + compile cache): a cold start takes about a third of the time
 * of running the TypeScript sources (bench/cold-start.ts).
 */
export async function bundledFunctions(outdir: string): Promise<Required<Pick<PlaneOptions, 'command' | 'env'>>> {
  const { buildFunctions } = await import('../bin/build.ts');
  await buildFunctions({ outdir });
  return {
    command: (declaration) => ({ command: process.execPath, args: [join(outdir, 'main.mjs'), declaration.name] }),
    env: { NODE_COMPILE_CACHE: join(outdir, '.compile-cache') },
  };
}

export interface PlaneOptions {
  functions: FunctionDeclaration[];
  kube: KubeClient;
  /** Kubeconfig file the function processes use. */
  kubeconfigPath: string;
  /** Per function, a kubeconfig of its own identity (its generated ServiceAccount) instead. */
  functionKubeconfigs?: Record<string, string>;
  log: Logger;
  /** Folder for the dead-letter file. */
  stateDir: string;
  /** Idle time after which a function scales to zero. */
  idleTimeoutMs?: number;
  /** How often each function gets a resync ping, as its PingSource sends on Knative (0 = never). */
  resyncIntervalMs?: number;
  delivery?: DeliverySpec;
  /** How to start a function process; default: its TypeScript entry under Node 24. */
  command?: (declaration: FunctionDeclaration) => { command: string; args: string[] };
  /** Extra environment for function processes (e.g. LOG_LEVEL). */
  env?: Record<string, string>;
  /** Triggers added by configuration, beside the ones derived from the declarations. */
  triggers?: Trigger[];
  /** Send to a function instance with room directly (Knative's activator leaves the data path); default true. */
  directDelivery?: boolean;
  /** Function name → URL its events go to instead of the function (as `opfn manifests --replace`). */
  replace?: Record<string, string>;
  /**
   * Run the Knative objects that live in the API server (Brokers, Services, Triggers,
   * ApiServerSources, PingSources: eventing/knative/) instead of deriving sources, triggers and
   * pings from the declarations; `kubectl patch trigger …` then takes effect live. For a local
   * control plane holding the generated objects (eventing/knative/local.ts). `clientFor` gives
   * each source its ServiceAccount's identity.
   */
  knativeObjects?: { clientFor?: (namespace: string, serviceAccount: string) => Promise<KubeClient> };
}

export interface PlaneStats {
  source: SourceStats;
  broker: Record<string, TriggerStats>;
  heldReplies: number;
  activator: Record<string, FunctionStats>;
}

/** How long `stop()` lets deliveries in flight finish by default. */
export const DEFAULT_DRAIN_MS = 10_000;

export class EventPlane {
  readonly activator: Activator;
  readonly broker: Broker;
  readonly source: ApiServerSource;
  /** The controllers running the Knative objects (with `knativeObjects`). */
  knative?: KnativeControllers;
  readonly #options: PlaneOptions;
  readonly #log: Logger;
  #pingTimer?: NodeJS.Timeout;

  constructor(options: PlaneOptions) {
    this.#options = options;
    this.#log = options.log.child({ component: 'plane' });
    const { functions, log } = options;
    const command = options.command ?? ((declaration) => ({ command: process.execPath, args: [join(ROOT, 'functions/runtime/main.ts'), declaration.name] }));
    this.activator = new Activator({
      log: log.child({ component: 'activator' }),
      idleTimeoutMs: options.idleTimeoutMs,
      functions: functions.map((declaration) => ({
        name: declaration.name,
        ...command(declaration),
        env: { KUBECONFIG: options.functionKubeconfigs?.[declaration.name] ?? options.kubeconfigPath, ...options.env },
        scaling: localScaling(declaration.scaling),
        timeoutSeconds: timeoutSecondsOf(declaration),
      })),
    });
    this.broker = new Broker({
      triggers: [],
      delivery: options.delivery,
      deadLetterFile: join(options.stateDir, 'dead-letters.jsonl'),
      log: log.child({ component: 'broker' }),
      route: options.directDelivery === false ? undefined : (subscriber, partitionKey) => this.activator.lease(subscriber, partitionKey),
    });
    this.source = new ApiServerSource({
      kube: options.kube,
      sources: options.knativeObjects ? [] : functions.flatMap(sourcesFor),
      sink: (event) => this.broker.publish(event),
      log: log.child({ component: 'source' }),
      // The resync ping already reconciles every object of every function from one list; the
      // source's own periodic pass would reconcile each of them a second time. The source still
      // re-lists after every watch failure, so events lost meanwhile are emitted all the same.
      resyncIntervalMs: 0,
    });
  }

  /** Starts activator and broker first, so the source's initial add events find their way. */
  async start(): Promise<{ activatorUrl: string; brokerUrl: string }> {
    const activatorUrl = await this.activator.listen(0, '127.0.0.1');
    const { knativeObjects, replace = {} } = this.#options;
    if (!knativeObjects) for (const declaration of this.#options.functions) this.broker.addTrigger(triggerFor({ ...declaration, scaling: localScaling(declaration.scaling) }, replace[declaration.name] ?? this.activator.urlFor(declaration.name)));
    for (const trigger of this.#options.triggers ?? []) this.broker.addTrigger(trigger);
    const brokerUrl = await this.broker.listen(0, '127.0.0.1');
    await this.activator.start();
    if (knativeObjects) await this.#startKnative(brokerUrl, knativeObjects.clientFor);
    await this.source.start();
    // With Knative objects, each function's PingSource sends its resync.
    const every = knativeObjects ? 0 : this.#options.resyncIntervalMs ?? 0;
    if (every > 0) {
      this.#pingTimer = setInterval(() => {
        for (const declaration of this.#options.functions) {
          // Refused while the plane stops: the ping is simply not sent (never an unhandled rejection).
          this.broker.publish(resyncEvent(declaration)).catch((error: unknown) => this.#log.debug({ reason: (error as Error).message }, 'resync ping not accepted'));
        }
      }, every);
      this.#pingTimer.unref();
    }
    return { activatorUrl, brokerUrl };
  }

  /**
   * Stops intake first (source, pings), lets the broker deliver what it holds for up to
   * `drainTimeoutMs` (what is still undelivered then is dead-lettered with the reason), then
   * stops the function processes.
   */
  async stop(options: { drainTimeoutMs?: number } = {}): Promise<void> {
    clearInterval(this.#pingTimer);
    await this.knative?.stop();
    await this.source.stop();
    await this.broker.close({ drainTimeoutMs: options.drainTimeoutMs ?? DEFAULT_DRAIN_MS });
    await this.activator.close();
  }

  async #startKnative(brokerUrl: string, clientFor?: (namespace: string, serviceAccount: string) => Promise<KubeClient>): Promise<void> {
    const declarations = new Map(this.#options.functions.map((declaration) => [declaration.name, declaration]));
    this.knative = new KnativeControllers({
      kube: this.#options.kube,
      broker: this.broker,
      brokerUrl,
      functions: {
        urlFor: (name) => (declarations.has(name) ? this.activator.urlFor(name) : undefined),
        scalingOf: (name) => declarations.get(name)?.scaling,
      },
      log: this.#options.log,
      clientFor,
    });
    await this.knative.start();
  }

  stats(): PlaneStats {
    return { source: this.source.stats(), broker: this.broker.stats(), heldReplies: this.broker.heldReplies, activator: this.activator.stats() };
  }
}
