// The local ApiServerSource: turns changes of Kubernetes objects into the CloudEvents Knative's
// ApiServerSource sends (built by apiserver-events.ts), for the local event plane.
//
// Knative's adapter (knative/eventing pkg/adapter/apiserver) runs one client-go Reflector per
// resource with a cache.Store whose Add/Update/Delete send add/update/delete events and whose
// Replace (called after every list, the first one included) and Resync are no-ops: objects that
// exist at start get no event, changes missed while a watch was down are lost, and a failed send
// is logged and dropped. The functions are level-triggered ("the event is a doorbell"), so this
// source closes those gaps while sending the same events:
//
// - one list+watch loop per (source, resource); ADDED → add, MODIFIED → update, DELETED → delete
//   (Resource mode: the object, its last state for delete); BOOKMARK only moves the
//   resourceVersion on;
// - the initial list emits `add` for every existing object; lists are paginated (limit/continue,
//   pages of LIST_PAGE_SIZE as client-go's pager);
// - a watch that ends, or fails (dropped connection, API server restart, an error), resumes from
//   the last resourceVersion (bookmarks move it on) with backoff and jitter; only 410 Gone (the
//   server no longer has that version) re-lists, as client-go's reflector does, and the re-list
//   emits what changed meanwhile (add / update / delete, against the last known state of every
//   object, kept per loop);
// - a periodic resync emits `update` for every known object;
// - the sink is retried with backoff until it accepts (an event is never dropped; a retry sends
//   the same event, same id); events of one object are delivered one at a time, in order, while
//   different objects are delivered concurrently up to a bound that pushes back on the watch.
import type { CloudEvent } from 'cloudevents';
import type { Logger } from 'pino';
import { collectionPath, keyOf, keyString, type KubeObject, type ResourceKind } from '../functions/runtime/kinds.ts';
import { ApiError, NOT_SERVED, type KubeClient, type WatchEvent } from '../functions/runtime/kube.ts';
import { apiServerSourceEvent, type ChangeAction, type SourceMode } from './apiserver-events.ts';

export interface SourceResource {
  kind: ResourceKind;
  labelSelector?: string;
}

/** One ApiServerSource. */
export interface SourceSpec {
  name: string;
  mode: SourceMode;
  resources: SourceResource[];
  /** ceOverrides.extensions: added to every event (the plane tags events with their function, e.g. {opfnfunction: 'immortal-container'}). */
  extensions?: Record<string, string>;
}

export interface SourceOptions {
  kube: KubeClient;
  sources: SourceSpec[];
  /** Where events go; resolves when accepted (the broker applies back-pressure by resolving late). Rejections are retried with backoff, never dropped. */
  sink: (event: CloudEvent<unknown>) => Promise<void>;
  log: Logger;
  /** Periodic full pass that emits `update` for every known object (0 = off); default 10 min. */
  resyncIntervalMs?: number;
  /** Server-side watch timeout; default 300. */
  watchTimeoutSeconds?: number;
  /** Events accepted from the watches but not yet accepted by the sink beyond which the watches wait; default 256. */
  maxPendingEvents?: number;
  /** Objects per LIST page (limit); default 500, as client-go's pager. */
  listPageSize?: number;
}

export interface SourceStats {
  /** Events the sink accepted. */
  emitted: number;
  /** Lists after the initial one (only after 410 Gone). */
  relists: number;
  /** Watches started after one ended, whatever the reason. */
  watchRestarts: number;
  /** The last failure (watch, list or sink), with the source and resource it concerned. */
  lastError?: string;
  /** Events waiting for the sink or being retried. */
  pending: number;
  /** Sink rejections (each one retried). */
  sinkRetries: number;
}

const DEFAULT_RESYNC_MS = 10 * 60_000;
const DEFAULT_WATCH_TIMEOUT_SECONDS = 300;
const DEFAULT_MAX_PENDING = 256;
const BACKOFF_INITIAL_MS = 200;
const BACKOFF_MAX_MS = 30_000;
/** A watch that ends normally this fast without a single event is treated as a failure (as client-go does). */
const SHORT_WATCH_MS = 1000;
/** client-go's pager default page size. */
export const LIST_PAGE_SIZE = 500;

/** Every object of the kind, page by page (limit/continue); the resourceVersion of the snapshot. */
async function listAll(kube: KubeClient, kind: ResourceKind, labelSelector: string | undefined, pageSize: number, signal: AbortSignal): Promise<{ items: KubeObject[]; resourceVersion?: string }> {
  const items: KubeObject[] = [];
  let token: string | undefined;
  let resourceVersion: string | undefined;
  do {
    const page = await abortable(
      kube.request<{ items: KubeObject[]; metadata: { resourceVersion?: string; continue?: string } }>('GET', collectionPath(kind), {
        resource: kind.plural,
        query: { labelSelector, limit: String(pageSize), continue: token },
      }),
      signal,
    );
    items.push(...page.items);
    resourceVersion = page.metadata.resourceVersion;
    token = page.metadata.continue || undefined;
  } while (token);
  return { items, resourceVersion };
}

/** Between half and all of `ms`, so loops that failed together do not retry together. */
const jitter = (ms: number): number => Math.round(ms * (0.5 + Math.random() * 0.5));

/** Resolves after `ms`, or at once when `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** `promise`, or a rejection as soon as `signal` aborts (the work itself is abandoned, not cancelled). */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/** One line saying what went wrong. */
function describe(error: unknown): string {
  let text: string;
  if (error instanceof ApiError) {
    const status = error.code === 0 ? 'unreachable' : String(error.code);
    text = error.reason && error.reason !== status ? `${status} ${error.reason}: ${error.message}` : `${status}: ${error.message}`;
  } else if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    text = typeof code === 'string' ? `${code}: ${error.message}` : error.message;
  } else {
    text = String(error);
  }
  return text.replace(/\s+/g, ' ').trim();
}

/**
 * Hands events to the sink: one object's events one after another (a chain per key), different
 * objects concurrently; a rejection is retried with backoff until the sink accepts or the source
 * stops. Producers enqueue synchronously (that fixes the order) and then wait for room.
 */
class Delivery {
  emitted = 0;
  sinkRetries = 0;
  readonly #counters: Counters;
  readonly #sink: (event: CloudEvent<unknown>) => Promise<void>;
  readonly #log: Logger;
  readonly #signal: AbortSignal;
  readonly #maxPending: number;
  readonly #tails = new Map<string, Promise<boolean>>();
  #pending = 0;
  #waiters: (() => void)[] = [];

  constructor(sink: (event: CloudEvent<unknown>) => Promise<void>, log: Logger, signal: AbortSignal, maxPending: number, counters: Counters) {
    this.#counters = counters;
    this.#sink = sink;
    this.#log = log;
    this.#signal = signal;
    this.#maxPending = maxPending;
    signal.addEventListener('abort', () => this.#wake(), { once: true });
  }

  get pending(): number {
    return this.#pending;
  }

  /** Queues `event` behind the earlier events of `key`; resolves true once the sink accepted it, false if the source stopped first. */
  enqueue(key: string, event: CloudEvent<unknown>): Promise<boolean> {
    this.#pending++;
    const previous = this.#tails.get(key);
    const delivered = (previous ?? Promise.resolve(true)).then(() => this.#deliver(event));
    const tail = delivered.finally(() => {
      this.#pending--;
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
      this.#wake();
    });
    this.#tails.set(key, tail);
    return tail;
  }

  /** Resolves when fewer than maxPending events wait for the sink (or the source stops). */
  async room(): Promise<void> {
    while (this.#pending >= this.#maxPending && !this.#signal.aborted) {
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }

  async #deliver(event: CloudEvent<unknown>): Promise<boolean> {
    let delay = BACKOFF_INITIAL_MS;
    for (let attempt = 1; ; attempt++) {
      if (this.#signal.aborted) return false;
      try {
        await this.#sink(event);
        this.emitted++;
        return true;
      } catch (error) {
        if (this.#signal.aborted) return false;
        this.sinkRetries++;
        const reason = describe(error);
        this.#counters.lastError = `sink: ${reason}`;
        const retryInMs = jitter(delay);
        this.#log.warn({ id: event.id, type: event.type, subject: event.subject, attempt, reason, retryInMs }, `sink did not accept ${event.type} for ${event.subject} (${reason}); retrying in ${retryInMs} ms`);
        await sleep(retryInMs, this.#signal);
        delay = Math.min(delay * 2, BACKOFF_MAX_MS);
      }
    }
  }
}

/** What the loop last knew of an object; `object` is the whole object in Resource mode, only its name otherwise. */
interface KnownObject {
  resourceVersion: string | undefined;
  uid: string | undefined;
  object: KubeObject;
}

interface Counters {
  relists: number;
  watchRestarts: number;
  lastError?: string;
}

interface LoopContext {
  kube: KubeClient;
  server: string;
  log: Logger;
  delivery: Delivery;
  signal: AbortSignal;
  watchTimeoutSeconds: number;
  listPageSize: number;
  counters: Counters;
}

/** The list+watch loop of one resource of one source. */
class ResourceLoop {
  readonly #spec: SourceSpec;
  readonly #resource: SourceResource;
  readonly #ctx: LoopContext;
  readonly #log: Logger;
  readonly #known = new Map<string, KnownObject>();
  #resourceVersion: string | undefined;
  #listed = false;
  #resyncing = false;
  readonly #ready = Promise.withResolvers<void>();

  constructor(spec: SourceSpec, resource: SourceResource, ctx: LoopContext) {
    this.#spec = spec;
    this.#resource = resource;
    this.#ctx = ctx;
    this.#log = ctx.log.child({ source: spec.name, resource: resource.kind.plural, ...(resource.labelSelector ? { labelSelector: resource.labelSelector } : {}) });
  }

  /** Settles once the initial list was emitted (accepted by the sink), or with the reason it cannot be. */
  get ready(): Promise<void> {
    return this.#ready.promise;
  }

  get #label(): string {
    const selector = this.#resource.labelSelector ? ` (${this.#resource.labelSelector})` : '';
    return `${this.#spec.name}/${this.#resource.kind.plural}${selector}`;
  }

  async run(): Promise<void> {
    const { kube, signal, counters } = this.#ctx;
    const { kind, labelSelector } = this.#resource;
    let delay = BACKOFF_INITIAL_MS;
    let needsList = true;
    let watches = 0;
    while (!signal.aborted) {
      try {
        if (needsList) {
          const list = await listAll(kube, kind, labelSelector, this.#ctx.listPageSize, signal);
          if (this.#listed) counters.relists++;
          const deliveries = await this.#applyList(list.items);
          this.#resourceVersion = list.resourceVersion;
          needsList = false;
          if (!this.#listed) {
            this.#listed = true;
            this.#log.info({ objects: list.items.length, resourceVersion: this.#resourceVersion }, `listed ${list.items.length} ${kind.plural}; watching`);
            void Promise.all(deliveries).then((accepted) => {
              if (accepted.every(Boolean)) this.#ready.resolve();
              else this.#ready.reject(new Error(`source ${this.#label} stopped before its initial events were accepted`));
            });
          } else {
            this.#log.info({ objects: list.items.length, resourceVersion: this.#resourceVersion }, `re-listed ${kind.plural}; watching again`);
          }
        }
        if (watches++ > 0) counters.watchRestarts++;
        const started = performance.now();
        let events = 0;
        for await (const event of kube.watch(kind, { resourceVersion: this.#resourceVersion, labelSelector, timeoutSeconds: this.#ctx.watchTimeoutSeconds, signal })) {
          events++;
          delay = BACKOFF_INITIAL_MS;
          await this.#applyWatchEvent(event);
        }
        if (signal.aborted) break;
        const lasted = performance.now() - started;
        if (events === 0 && lasted < SHORT_WATCH_MS) throw new Error(`watch ended after ${Math.round(lasted)} ms without any event`);
        if (lasted >= SHORT_WATCH_MS) delay = BACKOFF_INITIAL_MS;
        this.#log.debug({ resourceVersion: this.#resourceVersion, events }, 'watch ended; resuming from the last resourceVersion');
      } catch (error) {
        if (signal.aborted) break;
        const reason = describe(error);
        counters.lastError = `${this.#label}: ${reason}`;
        if (!this.#listed && error instanceof ApiError && error.code !== 0 && (!error.transient || error.reason === NOT_SERVED)) {
          // Forbidden, not served (CRD missing), Invalid (bad selector): a user has to act. Once
          // listed, a kind that is not served is the API server restarting: retry until it is.
          const hint = error.code === 403 ? ' (does the identity in the kubeconfig have list/watch on it?)' : '';
          this.#ready.reject(new Error(`source ${this.#spec.name}: listing ${kind.plural}${labelSelector ? ` with labelSelector "${labelSelector}"` : ''} failed: ${reason}${hint}`));
          return;
        }
        // client-go's reflector: only "410 Gone" (the version is no longer served) needs a new
        // list; anything else resumes the watch from the version already seen.
        const gone = error instanceof ApiError && error.code === 410;
        if (gone || this.#resourceVersion === undefined) needsList = true;
        const retryInMs = gone ? 0 : jitter(delay);
        const what = !this.#listed ? 'initial list' : needsList ? 'list' : 'watch';
        const next = needsList ? 're-listing' : `resuming the watch from resourceVersion ${this.#resourceVersion}`;
        this.#log.warn({ reason, retryInMs, resourceVersion: this.#resourceVersion }, `${what} of ${kind.plural} failed (${reason}); ${next} in ${retryInMs} ms`);
        await sleep(retryInMs, signal);
        if (!gone) delay = Math.min(delay * 2, BACKOFF_MAX_MS);
      }
    }
    if (!this.#listed) this.#ready.reject(new Error(`source ${this.#label} stopped before its initial list`));
  }

  /** `update` for every known object (lost events heal); skipped while one is still running. */
  async resync(): Promise<void> {
    if (!this.#listed || this.#resyncing) return;
    this.#resyncing = true;
    try {
      for (const key of [...this.#known.keys()]) {
        if (this.#ctx.signal.aborted) return;
        // Read at enqueue time: the watch may have moved the object on since the pass began.
        const current = this.#known.get(key);
        if (!current) continue;
        this.#emit('update', key, current.object);
        await this.#ctx.delivery.room();
      }
    } finally {
      this.#resyncing = false;
    }
  }

  #remember(object: KubeObject): KnownObject {
    const { name, namespace, resourceVersion, uid } = object.metadata;
    return {
      resourceVersion,
      uid,
      object: this.#spec.mode === 'Resource' ? object : { metadata: { name, namespace } },
    };
  }

  #emit(action: ChangeAction, key: string, object: KubeObject): Promise<boolean> {
    const event = apiServerSourceEvent({ server: this.#ctx.server, kind: this.#resource.kind, object, action, mode: this.#spec.mode, extensions: this.#spec.extensions });
    return this.#ctx.delivery.enqueue(`${this.#spec.name}\u0000${this.#resource.kind.group}/${this.#resource.kind.plural}\u0000${key}`, event);
  }

  /** Compares a fresh list with what was known and emits the difference; returns the deliveries. */
  async #applyList(items: KubeObject[]): Promise<Promise<boolean>[]> {
    const deliveries: Promise<boolean>[] = [];
    const listed = new Set<string>();
    for (const item of items) {
      const key = keyString(keyOf(item));
      listed.add(key);
      const previous = this.#known.get(key);
      this.#known.set(key, this.#remember(item));
      if (!previous) {
        deliveries.push(this.#emit('add', key, item));
      } else if (previous.uid && item.metadata.uid && previous.uid !== item.metadata.uid) {
        // Deleted and created again while unobserved: two objects, two stories.
        deliveries.push(this.#emit('delete', key, previous.object), this.#emit('add', key, item));
      } else if (previous.resourceVersion !== item.metadata.resourceVersion) {
        deliveries.push(this.#emit('update', key, item));
      } else {
        continue;
      }
      await this.#ctx.delivery.room();
    }
    for (const [key, previous] of [...this.#known]) {
      if (listed.has(key)) continue;
      this.#known.delete(key);
      deliveries.push(this.#emit('delete', key, previous.object));
      await this.#ctx.delivery.room();
    }
    return deliveries;
  }

  async #applyWatchEvent(event: WatchEvent): Promise<void> {
    const object = event.object;
    const resourceVersion = object?.metadata?.resourceVersion;
    if (event.type === 'ADDED' || event.type === 'MODIFIED' || event.type === 'DELETED') {
      const key = keyString(keyOf(object));
      if (event.type === 'DELETED') this.#known.delete(key);
      else this.#known.set(key, this.#remember(object));
      this.#emit(event.type === 'ADDED' ? 'add' : event.type === 'MODIFIED' ? 'update' : 'delete', key, object);
    }
    // BOOKMARK: only the resourceVersion moves on.
    if (resourceVersion) this.#resourceVersion = resourceVersion;
    await this.#ctx.delivery.room();
  }
}

export class ApiServerSource {
  readonly #options: SourceOptions;
  readonly #abort = new AbortController();
  readonly #delivery: Delivery;
  readonly #counters: Counters = { relists: 0, watchRestarts: 0 };
  readonly #loops: ResourceLoop[] = [];
  readonly #running: Promise<void>[] = [];
  #timer: ReturnType<typeof setInterval> | undefined;
  #started = false;

  constructor(options: SourceOptions) {
    for (const spec of options.sources) {
      if (spec.mode !== 'Reference' && spec.mode !== 'Resource') throw new Error(`source ${spec.name}: mode must be "Reference" or "Resource", not "${String(spec.mode)}"`);
      if (spec.resources.length === 0) throw new Error(`source ${spec.name}: no resources to watch`);
    }
    this.#options = options;
    this.#delivery = new Delivery(options.sink, options.log, this.#abort.signal, Math.max(1, options.maxPendingEvents ?? DEFAULT_MAX_PENDING), this.#counters);
  }

  /**
   * Lists every resource, emits an `add` event for every existing object (Knative's
   * ApiServerSource does not), then watches. Resolves once the sink accepted the initial
   * events; rejects (and stops) when a list fails in a way only a user can fix (403, 404,
   * invalid selector). An unreachable API server is retried, logged, until it answers.
   */
  async start(): Promise<void> {
    if (this.#started) throw new Error('ApiServerSource already started');
    this.#started = true;
    const { kube, log } = this.#options;
    const ctx: LoopContext = {
      kube,
      server: kube.server,
      log,
      delivery: this.#delivery,
      signal: this.#abort.signal,
      watchTimeoutSeconds: this.#options.watchTimeoutSeconds ?? DEFAULT_WATCH_TIMEOUT_SECONDS,
      listPageSize: Math.max(1, this.#options.listPageSize ?? LIST_PAGE_SIZE),
      counters: this.#counters,
    };
    for (const spec of this.#options.sources) {
      for (const resource of spec.resources) {
        const loop = new ResourceLoop(spec, resource, ctx);
        this.#loops.push(loop);
        this.#running.push(
          loop.run().catch((error: unknown) => {
            // Not expected: run() handles its own failures. Say so loudly rather than stop silently.
            log.error({ source: spec.name, resource: resource.kind.plural, reason: describe(error) }, `watch loop of ${resource.kind.plural} crashed: ${describe(error)}`);
          }),
        );
      }
    }
    try {
      await Promise.all(this.#loops.map((loop) => loop.ready));
    } catch (error) {
      await this.stop();
      throw error;
    }
    const resyncMs = this.#options.resyncIntervalMs ?? DEFAULT_RESYNC_MS;
    if (resyncMs > 0 && !this.#abort.signal.aborted) {
      this.#timer = setInterval(() => {
        for (const loop of this.#loops) {
          loop.resync().catch((error: unknown) => log.warn({ reason: describe(error) }, `resync failed: ${describe(error)}`));
        }
      }, resyncMs);
      this.#timer.unref();
    }
  }

  /** Aborts the watches, lists and sink retries and clears the timer; a sink call already in flight is not awaited. */
  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#abort.abort(new Error('ApiServerSource stopped'));
    await Promise.all(this.#running);
  }

  stats(): SourceStats {
    const { relists, watchRestarts, lastError } = this.#counters;
    return {
      emitted: this.#delivery.emitted,
      relists,
      watchRestarts,
      ...(lastError ? { lastError } : {}),
      pending: this.#delivery.pending,
      sinkRetries: this.#delivery.sinkRetries,
    };
  }
}
