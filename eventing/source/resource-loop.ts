// The list+watch loop of one resource of one source: client-go's Reflector (list, then watch
// from the list's resourceVersion; resume a dropped watch from the last version seen; re-list
// only on 410 Gone) with a store that turns each change into an ApiServerSource event.
import type { Logger } from 'pino';
import {
  keyOf,
  keyString,
  type KubeObject,
  type ResourceKind,
  ApiError,
  NOT_SERVED,
  LIST_PAGE_SIZE,
  type KubeClient,
  type WatchEvent,
  controllerOf,
} from '../../functions/runtime/index.ts';
import { apiServerSourceAttributes, type ChangeAction } from '../apiserver-events.ts';
import { abortable, BACKOFF_INITIAL_MS, BACKOFF_MAX_MS, describe, jitter, sleep } from './backoff.ts';
import type { Counters, Delivery } from './delivery.ts';
import { PARTITION_KEY_EXTENSION, partitionKey } from './partition.ts';
import type { SourceResource, SourceSpec } from './types.ts';

/** A watch that ends normally this fast without a single event is treated as a failure (as client-go does). */
const SHORT_WATCH_MS = 1000;
export { LIST_PAGE_SIZE };

/** Every object of the kind, page by page (limit/continue); the resourceVersion of the snapshot. */
async function listAll(
  kube: KubeClient,
  kind: ResourceKind,
  scope: { namespace?: string; labelSelector?: string },
  pageSize: number,
  signal: AbortSignal,
): Promise<{ items: KubeObject[]; resourceVersion?: string }> {
  const items: KubeObject[] = [];
  let resourceVersion: string | undefined;
  const pages = kube.pages(kind, { ...scope, limit: pageSize });
  for (let page = await abortable(pages.next(), signal); !page.done; page = await abortable(pages.next(), signal)) {
    items.push(...page.value.items);
    resourceVersion ??= page.value.metadata?.resourceVersion;
  }
  return { items, resourceVersion };
}

/**
 * spec.owner as Knative's adapter applies it (pkg/adapter/apiserver/filter.go, controllerFilter):
 * an object passes when its controller ownerReference has the owner's apiVersion and kind, an
 * empty one matching any; an object without a controller never passes.
 */
function controlledBy(object: KubeObject, owner: { apiVersion?: string; kind?: string }): boolean {
  const controller = controllerOf(object);
  return (
    !!controller && (!owner.apiVersion || owner.apiVersion === controller.apiVersion) && (!owner.kind || owner.kind === controller.kind)
  );
}

/** What the loop last knew of an object; `object` is the whole object in Resource mode, only its name otherwise. */
interface KnownObject {
  resourceVersion: string | undefined;
  uid: string | undefined;
  object: KubeObject;
}

export interface LoopContext {
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
export class ResourceLoop {
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
    this.#log = ctx.log.child({
      source: spec.name,
      resource: resource.kind.plural,
      ...(resource.labelSelector ? { labelSelector: resource.labelSelector } : {}),
    });
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
    // A source limited to one namespace lists and watches only there (cluster-scoped kinds everywhere), as Knative's adapter does.
    const namespace = kind.namespaced ? this.#spec.namespace : undefined;
    let delay = BACKOFF_INITIAL_MS;
    let needsList = true;
    let watches = 0;
    while (!signal.aborted) {
      try {
        if (needsList) {
          const list = await listAll(kube, kind, { namespace, labelSelector }, this.#ctx.listPageSize, signal);
          if (this.#listed) counters.relists++;
          const deliveries = await this.#applyList(list.items);
          this.#resourceVersion = list.resourceVersion;
          needsList = false;
          if (!this.#listed) {
            this.#listed = true;
            this.#log.info(
              { objects: list.items.length, resourceVersion: this.#resourceVersion },
              `listed ${list.items.length} ${kind.plural}; watching`,
            );
            void Promise.all(deliveries).then((accepted) => {
              if (accepted.every(Boolean)) this.#ready.resolve();
              else this.#ready.reject(new Error(`source ${this.#label} stopped before its initial events were accepted`));
            });
          } else {
            this.#log.info(
              { objects: list.items.length, resourceVersion: this.#resourceVersion },
              `re-listed ${kind.plural}; watching again`,
            );
          }
        }
        if (watches++ > 0) counters.watchRestarts++;
        const started = performance.now();
        let events = 0;
        for await (const event of kube.watch(kind, {
          namespace,
          resourceVersion: this.#resourceVersion,
          labelSelector,
          timeoutSeconds: this.#ctx.watchTimeoutSeconds,
          signal,
        })) {
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
          this.#ready.reject(
            new Error(
              `source ${this.#spec.name}: listing ${kind.plural}${labelSelector ? ` with labelSelector "${labelSelector}"` : ''} failed: ${reason}${hint}`,
            ),
          );
          return;
        }
        // client-go's reflector: only "410 Gone" (the version is no longer served) needs a new
        // list; anything else resumes the watch from the version already seen.
        const gone = error instanceof ApiError && error.code === 410;
        if (gone || this.#resourceVersion === undefined) needsList = true;
        const retryInMs = gone ? 0 : jitter(delay);
        const what = !this.#listed ? 'initial list' : needsList ? 'list' : 'watch';
        const next = needsList ? 're-listing' : `resuming the watch from resourceVersion ${this.#resourceVersion}`;
        this.#log.warn(
          { reason, retryInMs, resourceVersion: this.#resourceVersion },
          `${what} of ${kind.plural} failed (${reason}); ${next} in ${retryInMs} ms`,
        );
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
    const { name, namespace, resourceVersion, uid, ownerReferences } = object.metadata;
    // An owner filter judges a delete found by a re-list by the object's last known owners.
    const owners = this.#spec.owner && ownerReferences ? { ownerReferences } : {};
    return {
      resourceVersion,
      uid,
      object: this.#spec.mode === 'Resource' ? object : { metadata: { name, namespace, ...owners } },
    };
  }

  #emit(action: ChangeAction, key: string, object: KubeObject): Promise<boolean> {
    if (this.#spec.owner && !controlledBy(object, this.#spec.owner)) return Promise.resolve(true);
    const partition = partitionKey(this.#resource.partition, object);
    const extensions = partition === undefined ? this.#spec.extensions : { ...this.#spec.extensions, [PARTITION_KEY_EXTENSION]: partition };
    const event = apiServerSourceAttributes({
      server: this.#ctx.server,
      kind: this.#resource.kind,
      object,
      action,
      mode: this.#spec.mode,
      extensions,
    });
    return this.#ctx.delivery.enqueue(
      `${this.#spec.name}\u0000${this.#resource.kind.group}/${this.#resource.kind.plural}\u0000${key}`,
      event,
    );
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
