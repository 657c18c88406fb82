// The Kubernetes client every function shares: client-node for configuration and authentication
// (kubeconfig, in-cluster service account, exec plugins), and a small REST layer over undici
// that addresses kinds from their declarations, so no discovery call is ever made.
import type { KubeConfig } from '@kubernetes/client-node/dist/config.js';
import { HttpMethod, RequestContext } from '@kubernetes/client-node/dist/gen/http/http.js';
import { getGlobalDispatcher, request, type Dispatcher } from 'undici';
import { apiVersionOf, collectionPath, objectPath, type KubeObject, type ObjectKey, type ResourceKind } from '../kinds.ts';
import { OwnWrites } from '../own-writes.ts';
import { BurstWatch } from './burst-watch.ts';
import { ConnectionReusingKubeConfig, type ConnectionOptions } from './config.ts';
import { ApiError, errorFromResponse, expiredContinuation, isNotFound, isRbacDenial, parseJson } from './errors.ts';
import { Authentication, exchange, type Answer, type PreparedAuth, type RequestObserver } from './transport.ts';
import { watchEvents, type WatchEvent } from './watch.ts';

export interface ListOptions {
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Objects per page (the API server's `limit`); the pages are followed with `continue`. */
  limit?: number;
  /**
   * Served from the API server's watch cache (`resourceVersion=0`), possibly a little stale, as an
   * informer's cache is; without it a label-selected list reads every object of the collection
   * from etcd. The watch cache answers in one page whatever `limit` says (kube-apiserver 1.20 to 1.35),
   * so only for lists whose selector keeps the answer small.
   */
  cached?: boolean;
  /**
   * Only each object's metadata (PartialObjectMetadataList, kube-apiserver 1.15+, also from the
   * watch cache): names, labels, annotations, uids, without data or spec. For lists that decide
   * from metadata alone, such as which objects hold a name or which to delete: a list of
   * ConfigMaps or Secrets otherwise carries their data, up to 1 MiB each.
   */
  metadataOnly?: boolean;
  /**
   * Pages of about this many bytes, for objects whose size varies by orders of magnitude (a
   * ConfigMap of a few bytes or of 1 MiB): the first page asks for `limit` objects, each next one
   * for as many as fit at the average size of the page before it (at least one, at most LIST_PAGE_SIZE).
   * So small objects come 500 at a time and large ones a few at a time, and no answer holds
   * `limit` objects of the largest size.
   */
  pageBytes?: number;
}

/** An object as a metadata-only list returns it. */
export interface PartialObjectMetadata extends KubeObject {
  apiVersion?: 'meta.k8s.io/v1';
  kind?: 'PartialObjectMetadata';
}

/** Options of a metadata-only list: its items are PartialObjectMetadata, whatever the kind. */
export type MetadataListOptions = ListOptions & { metadataOnly: true };
/** Options of a full list: `metadataOnly` is not set, so the item type may be the kind's own. */
export type FullListOptions = ListOptions & { metadataOnly?: false };
/** What the API server serves a metadata-only list as (the `as`, `g`, `v` of its Accept header). */
const METADATA_LIST_ACCEPT = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1';

export interface ObjectList<T> {
  items: T[];
  metadata: { resourceVersion?: string; continue?: string };
}

export interface RequestOptions {
  body?: unknown;
  contentType?: string;
  accept?: string;
  /** For the observer (metrics): the resource the request concerns. */
  resource?: string;
  /** Told the length of a successful answer (its characters: its bytes, for the ASCII JSON of the API server). */
  onAnswer?: (length: number) => void;
}

/** Page size of lists (client-go's pager default): big enough for few round trips, small enough to bound each answer. */
export const LIST_PAGE_SIZE = 500;

const MERGE_PATCH = 'application/merge-patch+json';
const RETRIES_ON_TRANSIENT = 3;
const RETRY_BASE_MS = 100;
/**
 * A retry starts only this long after a request's first attempt, its wait included. An API
 * server that accepts and never answers costs one attempt (headersTimeout), not four, and one
 * asking for a longer wait (Retry-After) is not hit again sooner: the error goes up with the
 * wait, which the function's answer passes on to the broker. The delivery is what retries then.
 */
const RETRY_WINDOW_MS = 10_000;

/** How long one answer of /readyz decides whether the RBAC denials met meanwhile come from an API server still starting. */
const READINESS_TTL_MS = 1000;
/** When a denied /readyz is asked again: a starting API server denies it only for a moment. */
const READYZ_DENIED_RECHECK_MS = 250;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A burst watch per resource and version: objects of another version of the kind are served in another shape. */
const burstWatchId = (kind: ResourceKind) => `${apiVersionOf(kind)}/${kind.plural}`;

export class KubeClient {
  readonly config: KubeConfig;
  readonly #observe: RequestObserver;
  /** What this client wrote (create, replace, patch), to recognise the echoes of our own writes. */
  readonly ownWrites = new OwnWrites();
  /**
   * The client itself, also when reached through a view of it (hintFromFirstRead's proxy, one per
   * reconcile): what per-client caches are keyed on and hold, so every reconcile shares them.
   */
  readonly underlying: KubeClient = this;
  readonly #auth: Authentication;
  /** Kinds whose reads are served from a watch during bursts, by apiVersion and resource. */
  readonly #burstWatches = new Map<string, BurstWatch>();
  /** Told of each read while a burst watch is open: whether the watch answered it (the host counts them in its metrics). */
  onBurstRead: (resource: string, answered: boolean) => void = () => {};
  /** The last /readyz probe: when it started, and what it found. */
  #readiness?: { at: number; ready: Promise<boolean> };

  constructor(config: KubeConfig, observe: RequestObserver = () => {}) {
    this.config = config;
    this.#auth = new Authentication(config);
    this.#observe = observe;
  }

  static fromEnvironment(observe?: RequestObserver, options?: ConnectionOptions): KubeClient {
    return new KubeClient(ConnectionReusingKubeConfig.fromEnvironment(options), observe);
  }

  /** A client for the current context of one kubeconfig file. */
  static fromFile(kubeconfigPath: string, observe?: RequestObserver, options?: ConnectionOptions): KubeClient {
    const config = new ConnectionReusingKubeConfig(options);
    config.loadFromFile(kubeconfigPath);
    return new KubeClient(config, observe);
  }

  /**
   * Serves getNoOlderThan's reads of `kind` from a watch while they come in bursts
   * (burst-watch.ts); `namespace` limits the watch to one. Needs `watch` on the kind.
   */
  watchDuringBursts(kind: ResourceKind, namespace?: string): void {
    const id = burstWatchId(kind);
    if (!this.#burstWatches.has(id))
      this.#burstWatches.set(id, new BurstWatch(this, kind, namespace, (answered) => this.onBurstRead(kind.plural, answered)));
  }

  /** The burst watch of `kind`, if its reads are served from one. */
  burstWatch(kind: ResourceKind): BurstWatch | undefined {
    return this.#burstWatches.get(burstWatchId(kind));
  }

  get server(): string {
    return this.config.getCurrentCluster()?.server ?? '';
  }

  /**
   * One REST call. Unreachable API, 429 and 5xx are retried a few times within RETRY_WINDOW_MS,
   * with exponential backoff or after the server's Retry-After (a create retried after a lost
   * response then answers AlreadyExists, which callers creating deterministic names treat as
   * success); other errors throw ApiError at once.
   */
  async request<T>(
    method: string,
    path: string,
    options: RequestOptions & { query?: Record<string, string | undefined> } = {},
  ): Promise<T> {
    const url = new URL(this.server + path);
    for (const [name, value] of Object.entries(options.query ?? {})) if (value !== undefined) url.searchParams.set(name, value);
    const started = Date.now();
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#send<T>(method, url, options);
      } catch (error) {
        if (!(error instanceof ApiError) || !error.transient || attempt >= RETRIES_ON_TRANSIENT) throw error;
        const wait =
          error.retryAfterSeconds !== undefined ? error.retryAfterSeconds * 1000 : RETRY_BASE_MS * 2 ** attempt * (0.5 + Math.random());
        if (Date.now() - started + wait > RETRY_WINDOW_MS) throw error;
        await sleep(wait);
      }
    }
  }

  async #send<T>(method: string, url: URL, options: RequestOptions, refusedAuth?: PreparedAuth): Promise<T> {
    const auth = await this.#auth.current(refusedAuth);
    const headers: Record<string, string> = { ...auth.headers, accept: options.accept ?? 'application/json' };
    if (options.body !== undefined) headers['content-type'] = options.contentType ?? 'application/json';
    const started = performance.now();
    const verb = method.toLowerCase();
    let answer: Answer;
    try {
      answer = await exchange(auth.dispatcher ?? getGlobalDispatcher(), {
        origin: url.origin,
        path: url.pathname + url.search,
        method: method as Dispatcher.HttpMethod,
        headers,
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
        headersTimeout: 30_000,
        bodyTimeout: 60_000,
      });
    } catch (error) {
      this.#observe(verb, options.resource ?? '', 0, (performance.now() - started) / 1000);
      const code = (error as { code?: string }).code ?? 'NetworkError';
      throw new ApiError(0, code, `Kubernetes API ${this.server} unreachable (${code}): ${(error as Error).message}`);
    }
    const { statusCode, text } = answer;
    this.#observe(verb, options.resource ?? '', statusCode, (performance.now() - started) / 1000);
    if (statusCode >= 200 && statusCode < 300) {
      options.onAnswer?.(text.length);
      return parseJson(text) as T;
    }
    // A rotated or expired credential: prepare authentication again and try once more.
    if (statusCode === 401 && !refusedAuth) return this.#send<T>(method, url, options, auth);
    const error = errorFromResponse(`${method} ${url.pathname}`, statusCode, text, answer.retryAfter);
    // Right after it starts, kube-apiserver denies what RBAC allows until its authorizer has
    // caught up, and says it is not ready meanwhile: such a denial is retried like a 503, not
    // reported as a missing right.
    if (isRbacDenial(error) && !(await this.#isReady()))
      throw new ApiError(
        503,
        'NotReady',
        `${error.message} (the API server is not ready: while it starts it denies what RBAC allows; retried)`,
        error.status,
      );
    throw error;
  }

  /**
   * Does the API server say it is ready (/readyz)? One probe at a time, its answer reused for
   * READINESS_TTL_MS. While it starts, /readyz itself is denied for a moment, then answers 500
   * until it is ready: a denied /readyz is asked again shortly. Denied again, this identity may
   * not read it, and counts it as ready (a denial then stays a denial); answered, the server was
   * starting.
   */
  #isReady(): Promise<boolean> {
    const now = Date.now();
    if (this.#readiness && now - this.#readiness.at < READINESS_TTL_MS) return this.#readiness.ready;
    const ready = this.#probeReadiness();
    this.#readiness = { at: now, ready };
    return ready;
  }

  async #probeReadiness(): Promise<boolean> {
    const first = await this.#readyzStatus();
    if (first !== 401 && first !== 403) return first >= 200 && first < 300;
    await sleep(READYZ_DENIED_RECHECK_MS);
    const second = await this.#readyzStatus();
    return second === 401 || second === 403;
  }

  /**
   * The status /readyz answers this identity (200 for any success); 0 when the API server cannot
   * be reached. A denied path is not a denied resource (isRbacDenial), so this never probes again.
   */
  async #readyzStatus(): Promise<number> {
    try {
      await this.#send('GET', new URL(this.server + '/readyz'), { accept: 'text/plain' });
      return 200;
    } catch (error) {
      return error instanceof ApiError ? error.code : 0;
    }
  }

  /**
   * The object, or undefined when it does not exist. `cached: true` reads from the API server's
   * watch cache (resourceVersion=0): cheaper, possibly a little stale; only for reads that a
   * conditional write (resourceVersion or uid precondition, create → 409) checks anyway.
   */
  async get<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    key: ObjectKey,
    options: { cached?: boolean } = {},
  ): Promise<T | undefined> {
    try {
      return await this.request<T>('GET', objectPath(kind, key), {
        resource: kind.plural,
        query: { resourceVersion: options.cached ? '0' : undefined },
      });
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }

  /**
   * Every page of a list, one at a time (`limit`/`continue`), so no answer grows with the cluster.
   * A list read slowly (a resync reconciling between pages) can outlive its snapshot: etcd
   * compacts it and the next page is refused (410 Expired). It then goes on with the token the
   * API server offers for the rest, read at the latest revision: every object that existed
   * throughout is still yielded exactly once, one created or deleted meanwhile may be or not.
   * Starting over would yield the pages already read again, and a list too long to read between
   * two compactions would never end. Each page's `metadata.resourceVersion` is the one it was read at.
   */
  pages(kind: ResourceKind, options: MetadataListOptions): AsyncGenerator<ObjectList<PartialObjectMetadata>>;
  pages<T extends KubeObject = KubeObject>(kind: ResourceKind, options?: FullListOptions): AsyncGenerator<ObjectList<T>>;
  async *pages<T extends KubeObject = KubeObject>(kind: ResourceKind, options: ListOptions = {}): AsyncGenerator<ObjectList<T>> {
    let token: string | undefined;
    let limit = options.limit ?? LIST_PAGE_SIZE;
    let answerBytes = 0;
    do {
      let page: ObjectList<T>;
      try {
        page = await this.request<ObjectList<T>>('GET', collectionPath(kind, options.namespace), {
          resource: kind.plural,
          accept: options.metadataOnly ? METADATA_LIST_ACCEPT : undefined,
          query: {
            labelSelector: options.labelSelector,
            fieldSelector: options.fieldSelector,
            limit: String(limit),
            continue: token,
            resourceVersion: options.cached ? '0' : undefined,
          },
          onAnswer: (bytes) => (answerBytes = bytes),
        });
      } catch (error) {
        const remainder = token ? expiredContinuation(error) : undefined;
        if (!remainder) throw error;
        token = remainder;
        continue; // a token is set, so the loop goes on with the remainder
      }
      // A metadata-only list with no items says `"items": null` (PartialObjectMetadataList).
      page.items ??= [];
      if (options.pageBytes && page.items.length > 0) {
        limit = Math.max(1, Math.min(LIST_PAGE_SIZE, Math.floor(options.pageBytes / (answerBytes / page.items.length))));
      }
      yield page;
      token = page.metadata?.continue || undefined;
    } while (token);
  }

  /**
   * The whole list, read page by page; `metadata.resourceVersion` is the first page's: the list's
   * snapshot, or, when the snapshot expired midway (see pages), the oldest revision any of its
   * objects was read at: a watch from it still sees every change made after any of them was read
   * (and replays some that the later pages already show).
   */
  list(kind: ResourceKind, options: MetadataListOptions): Promise<ObjectList<PartialObjectMetadata>>;
  list<T extends KubeObject = KubeObject>(kind: ResourceKind, options?: FullListOptions): Promise<ObjectList<T>>;
  async list<T extends KubeObject = KubeObject>(kind: ResourceKind, options: ListOptions = {}): Promise<ObjectList<T>> {
    const items: T[] = [];
    let resourceVersion: string | undefined;
    for await (const page of this.pages<T>(kind, options as FullListOptions)) {
      resourceVersion ??= page.metadata?.resourceVersion;
      items.push(...page.items);
    }
    return { items, metadata: { resourceVersion } };
  }

  async create<T extends KubeObject = KubeObject>(kind: ResourceKind, object: T, namespace = object.metadata.namespace ?? ''): Promise<T> {
    const created = await this.request<T>('POST', collectionPath(kind, namespace), { body: object, resource: kind.plural });
    this.ownWrites.record(kind, created);
    return created;
  }

  /** PUT: optimistic concurrency through metadata.resourceVersion (409 Conflict when stale). */
  async replace<T extends KubeObject = KubeObject>(kind: ResourceKind, object: T, subresource?: string): Promise<T> {
    const key = { namespace: object.metadata.namespace ?? '', name: object.metadata.name ?? '' };
    const replaced = await this.request<T>('PUT', objectPath(kind, key, subresource), {
      body: object,
      resource: subresource ? `${kind.plural}/${subresource}` : kind.plural,
    });
    this.ownWrites.record(kind, replaced);
    return replaced;
  }

  /** JSON merge patch (RFC 7386); the content type is explicit, client-node would send a JSON patch. */
  async mergePatch<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    key: ObjectKey,
    patch: unknown,
    subresource?: string,
  ): Promise<T> {
    const patched = await this.request<T>('PATCH', objectPath(kind, key, subresource), {
      body: patch,
      contentType: MERGE_PATCH,
      resource: subresource ? `${kind.plural}/${subresource}` : kind.plural,
    });
    this.ownWrites.record(kind, patched);
    return patched;
  }

  /**
   * Deletes the object; with `uid`, only that incarnation (a precondition, so a replica acting
   * on a stale read never deletes the pod another replica just created). False when it was gone.
   */
  async delete(
    kind: ResourceKind,
    key: ObjectKey,
    options: { uid?: string; propagationPolicy?: 'Background' | 'Foreground' | 'Orphan' } = {},
  ): Promise<boolean> {
    const body: Record<string, unknown> = { apiVersion: 'v1', kind: 'DeleteOptions' };
    if (options.uid) body.preconditions = { uid: options.uid };
    if (options.propagationPolicy) body.propagationPolicy = options.propagationPolicy;
    try {
      await this.request('DELETE', objectPath(kind, key), { body, resource: kind.plural });
      return true;
    } catch (error) {
      // 409 on a uid precondition: the object was already replaced by a newer incarnation.
      if (isNotFound(error) || (options.uid && error instanceof ApiError && error.code === 409)) return false;
      throw error;
    }
  }

  /**
   * Streams watch events until the server ends the watch, `signal` aborts, or an error occurs.
   * Throws ApiError(410) when resourceVersion is too old, so the caller re-lists.
   */
  async *watch<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    options: ListOptions & { resourceVersion?: string; timeoutSeconds?: number; signal?: AbortSignal },
  ): AsyncGenerator<WatchEvent<T>> {
    const url = new URL(this.server + collectionPath(kind, options.namespace));
    url.searchParams.set('watch', 'true');
    url.searchParams.set('allowWatchBookmarks', 'true');
    if (options.resourceVersion) url.searchParams.set('resourceVersion', options.resourceVersion);
    if (options.labelSelector) url.searchParams.set('labelSelector', options.labelSelector);
    if (options.timeoutSeconds) url.searchParams.set('timeoutSeconds', String(options.timeoutSeconds));
    const context = new RequestContext(url.toString(), HttpMethod.GET);
    await this.config.applySecurityAuthentication(context);
    let response: Dispatcher.ResponseData;
    const started = performance.now();
    try {
      response = await request(url, {
        method: 'GET',
        headers: { ...context.getHeaders(), accept: 'application/json' },
        dispatcher: context.getDispatcher() as Dispatcher | undefined,
        signal: options.signal,
        headersTimeout: 30_000,
        bodyTimeout: 0,
      });
    } catch (error) {
      this.#observe('watch', kind.plural, 0, (performance.now() - started) / 1000);
      const code = (error as { code?: string }).code ?? 'NetworkError';
      throw new ApiError(0, code, `watch ${kind.plural}: Kubernetes API unreachable (${code})`);
    }
    // Counted when its answer starts: a watch lasts as long as it is wanted.
    this.#observe('watch', kind.plural, response.statusCode, (performance.now() - started) / 1000);
    if (response.statusCode !== 200) {
      throw errorFromResponse(`watch ${kind.plural}`, response.statusCode, await response.body.text());
    }
    yield* watchEvents<T>(response.body, kind.plural);
  }
}
