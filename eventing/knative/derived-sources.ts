// The event sources a function derives at run time from each object of its reconciled kind
// (the declaration's `derivedSources`: a CompositeController names the kinds whose changes the
// composite function needs), run by the local plane itself when it holds its Knative objects in
// memory (against a configured cluster). There the plane must not write Knative objects into the
// cluster: it starts the function with the declaration's `planeConfig`, so the function writes
// none, watches the reconciled kind, and hands its in-memory ApiServerSource controller exactly the
// sources `sourcesFor` answers. On Knative, and on the plane's own control plane
// (`knativeObjects`), the function writes these objects and the plane runs what it finds.
//
// Per object, level-triggered (each change re-reads it): `sourcesFor` failing with anything but a
// TerminalError (a kind not served yet, an API server that does not answer) is retried with
// backoff, the sources it had staying as they were; a TerminalError (an invalid object) gives no
// sources; a deleted object loses them; one whose answer changed gets the new set, and the
// sources it no longer needs stop.
import type { Logger } from 'pino';
import {
  type FunctionDeclaration,
  TerminalError,
  type KubeObject,
  type ResourceKind,
  type KubeClient,
  type DerivedSourcesDeclaration,
  type InstallPlacement,
} from '../../functions/runtime/index.ts';
import { ApiServerSource as LocalSource, BACKOFF_MAX_MS, describe, jitter } from '../source/index.ts';
import type { DerivedSources, ObjectHandlers } from './controllers.ts';
import type { StatusBoard } from './status.ts';

/** Discovery re-reads a group-version at most once a second (functions/runtime/discovery.ts): retrying sooner finds nothing new. */
const RETRY_INITIAL_MS = 1000;

/** Configuration the plane gives a function whose Knative objects it holds in memory: one that derives sources leaves them to the plane. */
export function inMemoryConfig(declaration: FunctionDeclaration): Record<string, string> {
  return declaration.derivedSources?.planeConfig ?? {};
}

export interface DerivedSourcesOptions {
  /** The function whose objects the sources derive from (its `derivedSources` and reconciled kind). */
  declaration: FunctionDeclaration;
  /** The plane's own client: it watches the objects and is what `sourcesFor` reads with. */
  kube: KubeClient;
  /** Where the ApiServerSources go (the in-memory ApiServerSource controller, through the plane's serialized handlers). */
  sources: ObjectHandlers;
  log: Logger;
  /** Namespace, Broker and scope of the plane's in-memory objects. */
  placement: InstallPlacement;
  /** Where the ApiServerSource controller reports readiness: a source that is not Ready is logged (nobody reads the board after the start). */
  status?: Pick<StatusBoard, 'ready'>;
}

export class FunctionDerivedSources implements DerivedSources {
  readonly #options: DerivedSourcesOptions;
  readonly #derived: DerivedSourcesDeclaration;
  readonly #kind: ResourceKind;
  /** Object name → the ApiServerSources applied for it. */
  readonly #applied = new Map<string, KubeObject[]>();
  /** Object name → failed attempts so far, and the timer of the next one. */
  readonly #retries = new Map<string, { attempts: number; timer?: ReturnType<typeof setTimeout> }>();
  #serial: Promise<void> = Promise.resolve();
  #watcher?: LocalSource;
  #stopped = false;

  constructor(options: DerivedSourcesOptions) {
    const { declaration } = options;
    if (!declaration.derivedSources) throw new Error(`function ${declaration.name} declares no derivedSources`);
    this.#options = options;
    this.#derived = declaration.derivedSources;
    this.#kind = declaration.reconciles;
  }

  /** Watches the objects; resolves once each existing one was handled (applied, or left to a retry). */
  async start(): Promise<void> {
    const { kube, log, declaration } = this.#options;
    const kind = this.#kind;
    this.#watcher = new LocalSource({
      kube,
      // Reference mode: each change only names the object; it is read afresh when handled.
      sources: [{ name: `${declaration.name}-derived-sources`, mode: 'Reference', resources: [{ kind }] }],
      sink: (event) => {
        const { namespace, name } = (event.data ?? {}) as { namespace?: unknown; name?: unknown };
        return this.#schedule(namespace ? `${String(namespace)}/${String(name ?? '')}` : String(name ?? ''));
      },
      log: log.child({ component: 'derived-sources', function: declaration.name }),
      resyncIntervalMs: 0,
    });
    try {
      await this.#watcher.start();
    } catch (error) {
      // The objects cannot be listed (no CRD, no right): the function's own source of that kind
      // fails the same way, and the plane reports it as not Ready.
      log.error({ reason: describe(error) }, `cannot watch ${kind.kind}s, so none gets event sources: ${describe(error)}`);
    }
    await this.#serial;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    for (const retry of this.#retries.values()) clearTimeout(retry.timer);
    await this.#watcher?.stop();
    await this.#serial;
  }

  /** The names of the ApiServerSources applied for each object (`<namespace>/<name>`, or the name of a cluster-scoped one). */
  applied(): Record<string, string[]> {
    return Object.fromEntries([...this.#applied].map(([key, objects]) => [key, objects.map((object) => object.metadata.name!)]));
  }

  /** Handles `key` after what is queued (one object at a time: they are few, and share the handlers). */
  #schedule(key: string): Promise<void> {
    clearTimeout(this.#retries.get(key)?.timer);
    const next = this.#serial.then(() => this.#handle(key));
    this.#serial = next.catch(() => {});
    return next;
  }

  async #handle(key: string): Promise<void> {
    if (this.#stopped || !key || key.endsWith('/')) return;
    const { kube, log, placement } = this.#options;
    const slash = key.indexOf('/');
    const objectKey = slash < 0 ? { namespace: '', name: key } : { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
    let wanted: KubeObject[];
    try {
      const object = await kube.get<KubeObject>(this.#kind, objectKey);
      wanted = object && !object.metadata.deletionTimestamp ? await this.#derived.sourcesFor(object, { kube, placement }) : [];
    } catch (error) {
      if (!(error instanceof TerminalError)) return this.#retryLater(key, error);
      log.info({ object: key, reason: error.message }, `${this.#kind.kind} ${key} is invalid: no event sources (${error.message})`);
      wanted = [];
    }
    this.#retries.delete(key);
    await this.#converge(key, wanted);
  }

  /** Stops the sources `key` no longer needs, then applies the ones it needs (an unchanged one keeps running). */
  async #converge(key: string, wanted: KubeObject[]): Promise<void> {
    const { sources, log } = this.#options;
    const what = `${this.#kind.kind} ${key}`;
    const keep = new Set(wanted.map((object) => object.metadata.name));
    const before = this.#applied.get(key) ?? [];
    for (const object of before) if (!keep.has(object.metadata.name)) await sources.remove(object);
    for (const object of wanted) {
      if (this.#stopped) return;
      await sources.apply(object);
      const ready = this.#options.status?.ready(`${object.kind} ${object.metadata.namespace}/${object.metadata.name}`);
      if (ready && ready.status !== 'True')
        log.warn(
          { object: key, source: object.metadata.name, reason: ready.reason, message: ready.message },
          `event source ${object.metadata.name} of ${what} is not Ready: ${ready.reason}: ${ready.message ?? ''}`,
        );
    }
    if (wanted.length) this.#applied.set(key, wanted);
    else this.#applied.delete(key);
    const names = (objects: KubeObject[]) => objects.map((object) => object.metadata.name).join(', ');
    if (names(before) !== names(wanted))
      log.info(
        { object: key, sources: wanted.map((object) => object.metadata.name) },
        `event sources of ${what}: ${names(wanted) || 'none'}`,
      );
  }

  #retryLater(key: string, error: unknown): void {
    const attempts = (this.#retries.get(key)?.attempts ?? 0) + 1;
    const delayMs = jitter(Math.min(RETRY_INITIAL_MS * 2 ** (attempts - 1), BACKOFF_MAX_MS));
    this.#options.log.info(
      { object: key, attempts, reason: describe(error), retryInMs: delayMs },
      `event sources of ${this.#kind.kind} ${key} not resolved (${describe(error)}); retrying in ${delayMs} ms`,
    );
    if (this.#stopped) return;
    const timer = setTimeout(() => void this.#schedule(key), delayMs);
    timer.unref();
    this.#retries.set(key, { attempts, timer });
  }
}

/** Several functions' derived sources as one: started in turn, stopped together. */
class AllDerivedSources implements DerivedSources {
  readonly #parts: DerivedSources[];

  constructor(parts: DerivedSources[]) {
    this.#parts = parts;
  }

  async start(): Promise<void> {
    for (const part of this.#parts) await part.start();
  }

  async stop(): Promise<void> {
    await Promise.all(this.#parts.map((part) => part.stop()));
  }

  applied(): Record<string, string[]> {
    return Object.assign({}, ...this.#parts.map((part) => part.applied()));
  }
}

/** The derived sources of the `functions` a plane runs in memory, or undefined when none of them declares any. */
export function derivedSourcesFor(
  functions: FunctionDeclaration[],
  options: Omit<DerivedSourcesOptions, 'sources' | 'declaration'>,
): ((sources: ObjectHandlers) => DerivedSources) | undefined {
  const deriving = functions.filter((declaration) => declaration.derivedSources);
  if (!deriving.length) return undefined;
  return (sources) => {
    const parts = deriving.map((declaration) => new FunctionDerivedSources({ ...options, declaration, sources }));
    return parts.length === 1 ? parts[0]! : new AllDerivedSources(parts);
  };
}
