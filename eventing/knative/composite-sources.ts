// The event sources of each CompositeController, run by the local plane itself when it holds its
// Knative objects in memory (against a configured cluster). There the plane must not write
// Knative objects into the cluster, so the composite function runs with
// COMPOSITE_EVENT_SOURCES=plane and writes none; instead the plane watches CompositeControllers
// and hands its in-memory ApiServerSource controller exactly the ApiServerSources the function
// would have written (eventingObjectsFor, the same code), so the two modes cannot drift: same
// names, kinds, mode and extensions, delivered by the function's one generated Trigger. Their
// ServiceAccounts and roles are left out: in-memory sources run with the plane's own client, as
// the plane's other in-memory sources do. On Knative, and on the plane's own control plane
// (`knativeObjects`), the function writes these objects and the plane runs what it finds.
//
// Per CompositeController, level-triggered (each change re-reads it): its kinds are resolved
// through discovery (resolveComposite, as the function resolves them); a kind not served yet (a
// CRD applied after its controller), or an API server that does not answer, is retried with
// backoff, the sources it had staying as they were; an invalid controller gets no sources (the
// function reports it on the controller with a Warning Event); a deleted one loses them; one
// whose kinds changed gets the new set, and the sources it no longer needs stop.
//
// Upstream: metacontroller pkg/controller/composite/controller.go (newParentController starts an
// informer per parent and child kind when a CompositeController appears; Stop ends them when it
// goes), pkg/dynamic/discovery (a kind resolved through discovery, refreshed when missing).
import type { Logger } from 'pino';
import { resolveComposite } from '../../functions/composite-controller/controllers.ts';
import { COMPOSITE_FUNCTION, EVENT_SOURCES_CONFIG, eventingObjectsFor, type EventingOptions } from '../../functions/composite-controller/eventing.ts';
import { CompositeControllerKind } from '../../functions/composite-controller/kinds.ts';
import type { FunctionDeclaration } from '../../functions/runtime/declaration.ts';
import { TerminalError } from '../../functions/runtime/errors.ts';
import type { KubeObject } from '../../functions/runtime/kinds.ts';
import type { KubeClient } from '../../functions/runtime/kube.ts';
import { ApiServerSource as LocalSource, BACKOFF_MAX_MS, describe, jitter } from '../source/index.ts';
import type { DerivedSources, ObjectHandlers } from './controllers.ts';
import type { StatusBoard } from './status.ts';

/** Discovery re-reads a group-version at most once a second (functions/runtime/discovery.ts): retrying sooner finds nothing new. */
const RETRY_INITIAL_MS = 1000;

/** Whether the plane runs the CompositeControllers' sources: when it runs the composite function. */
const runsComposite = (functions: FunctionDeclaration[]): boolean => functions.some((declaration) => declaration.name === COMPOSITE_FUNCTION);

/**
 * Configuration the plane gives a function whose Knative objects it holds in memory: the
 * composite function leaves its sources to the plane (nothing written to the cluster).
 */
export function inMemoryConfig(declaration: FunctionDeclaration): Record<string, string> {
  return declaration.name === COMPOSITE_FUNCTION ? { [EVENT_SOURCES_CONFIG]: 'plane' } : {};
}

export interface CompositeSourcesOptions {
  /** The plane's own client: it watches the controllers and reads discovery. */
  kube: KubeClient;
  /** Where the ApiServerSources go (the in-memory ApiServerSource controller, through the plane's serialized handlers). */
  sources: ObjectHandlers;
  log: Logger;
  /** Namespace, Broker and scope of the plane's in-memory objects. */
  placement: EventingOptions;
  /** Where the ApiServerSource controller reports readiness: a source that is not Ready is logged (nobody reads the board after the start). */
  status?: Pick<StatusBoard, 'ready'>;
}

export class CompositeSources implements DerivedSources {
  readonly #options: CompositeSourcesOptions;
  /** Controller name → the ApiServerSources applied for it. */
  readonly #applied = new Map<string, KubeObject[]>();
  /** Controller name → failed attempts so far, and the timer of the next one. */
  readonly #retries = new Map<string, { attempts: number; timer?: ReturnType<typeof setTimeout> }>();
  #serial: Promise<void> = Promise.resolve();
  #watcher?: LocalSource;
  #stopped = false;

  constructor(options: CompositeSourcesOptions) {
    this.#options = options;
  }

  /** Watches the controllers; resolves once each existing one was handled (applied, or left to a retry). */
  async start(): Promise<void> {
    const { kube, log } = this.#options;
    this.#watcher = new LocalSource({
      kube,
      // Reference mode: each change only names the controller; it is read afresh when handled.
      sources: [{ name: 'composite-controllers', mode: 'Reference', resources: [{ kind: CompositeControllerKind }] }],
      sink: (event) => this.#schedule(String((event.data as { name?: unknown } | undefined)?.name ?? '')),
      log: log.child({ component: 'composite-sources' }),
      resyncIntervalMs: 0,
    });
    try {
      await this.#watcher.start();
    } catch (error) {
      // CompositeControllers cannot be listed (no CRD, no right): the composite function's own
      // source of that kind fails the same way, and the plane reports it as not Ready.
      log.error({ reason: describe(error) }, `cannot watch CompositeControllers, so none gets event sources: ${describe(error)}`);
    }
    await this.#serial;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    for (const retry of this.#retries.values()) clearTimeout(retry.timer);
    await this.#watcher?.stop();
    await this.#serial;
  }

  /** The names of the ApiServerSources applied for each controller. */
  applied(): Record<string, string[]> {
    return Object.fromEntries([...this.#applied].map(([name, objects]) => [name, objects.map((object) => object.metadata.name!)]));
  }

  /** Handles `name` after what is queued (one controller at a time: they are few, and share the handlers). */
  #schedule(name: string): Promise<void> {
    clearTimeout(this.#retries.get(name)?.timer);
    const next = this.#serial.then(() => this.#handle(name));
    this.#serial = next.catch(() => {});
    return next;
  }

  async #handle(name: string): Promise<void> {
    if (this.#stopped || !name) return;
    const { kube, log, placement } = this.#options;
    let wanted: KubeObject[];
    try {
      const controller = await kube.get<KubeObject>(CompositeControllerKind, { namespace: '', name });
      wanted = controller && !controller.metadata.deletionTimestamp ? await this.#sourcesOf(controller, placement) : [];
    } catch (error) {
      if (!(error instanceof TerminalError)) return this.#retryLater(name, error);
      log.info({ controller: name, reason: error.message }, `CompositeController ${name} is invalid: no event sources (${error.message})`);
      wanted = [];
    }
    this.#retries.delete(name);
    await this.#converge(name, wanted);
  }

  async #sourcesOf(controller: KubeObject, placement: EventingOptions): Promise<KubeObject[]> {
    const composite = await resolveComposite(controller, this.#options.kube);
    const objects = eventingObjectsFor(controller, { parent: composite.parentKind, children: composite.childKinds }, placement);
    return objects.filter((object) => object.kind === 'ApiServerSource');
  }

  /** Stops the sources `name` no longer needs, then applies the ones it needs (an unchanged one keeps running). */
  async #converge(name: string, wanted: KubeObject[]): Promise<void> {
    const { sources, log } = this.#options;
    const keep = new Set(wanted.map((object) => object.metadata.name));
    const before = this.#applied.get(name) ?? [];
    for (const object of before) if (!keep.has(object.metadata.name)) await sources.remove(object);
    for (const object of wanted) {
      if (this.#stopped) return;
      await sources.apply(object);
      const ready = this.#options.status?.ready(`${object.kind} ${object.metadata.namespace}/${object.metadata.name}`);
      if (ready && ready.status !== 'True') log.warn({ controller: name, source: object.metadata.name, reason: ready.reason, message: ready.message }, `event source ${object.metadata.name} of CompositeController ${name} is not Ready: ${ready.reason}: ${ready.message ?? ''}`);
    }
    if (wanted.length) this.#applied.set(name, wanted);
    else this.#applied.delete(name);
    const names = (objects: KubeObject[]) => objects.map((object) => object.metadata.name).join(', ');
    if (names(before) !== names(wanted)) log.info({ controller: name, sources: wanted.map((object) => object.metadata.name) }, `event sources of CompositeController ${name}: ${names(wanted) || 'none'}`);
  }

  #retryLater(name: string, error: unknown): void {
    const attempts = (this.#retries.get(name)?.attempts ?? 0) + 1;
    const delayMs = jitter(Math.min(RETRY_INITIAL_MS * 2 ** (attempts - 1), BACKOFF_MAX_MS));
    this.#options.log.info({ controller: name, attempts, reason: describe(error), retryInMs: delayMs }, `event sources of CompositeController ${name} not resolved (${describe(error)}); retrying in ${delayMs} ms`);
    if (this.#stopped) return;
    const timer = setTimeout(() => void this.#schedule(name), delayMs);
    timer.unref();
    this.#retries.set(name, { attempts, timer });
  }
}

/** The CompositeControllers' sources for a plane running `functions` in memory, or undefined when it does not run the composite function. */
export function compositeSourcesFor(functions: FunctionDeclaration[], options: Omit<CompositeSourcesOptions, 'sources'>): ((sources: ObjectHandlers) => CompositeSources) | undefined {
  return runsComposite(functions) ? (sources) => new CompositeSources({ ...options, sources }) : undefined;
}
