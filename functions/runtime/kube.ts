// The Kubernetes client every function shares: client-node for configuration and authentication
// (kubeconfig, in-cluster service account, exec plugins), and a small REST layer over undici
// that addresses kinds from their declarations, so no discovery call is ever made.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { createSecureContext } from 'node:tls';
// The two modules of client-node this needs, not its index: that one loads every generated API
// group, watch, exec, attach, cp, port-forward and metrics client (and ws, tar-fs, jsonpath…).
import { KubeConfig } from '@kubernetes/client-node/dist/config.js';
import { HttpMethod, RequestContext } from '@kubernetes/client-node/dist/gen/http/http.js';
import { Agent, getGlobalDispatcher, request, type Dispatcher } from 'undici';
import { collectionPath, objectPath, type KubeObject, type ObjectKey, type ResourceKind } from './kinds.ts';
import { OwnWrites } from './own-writes.ts';
import { boundedMessage } from './bounded-messages.ts';

export { OwnWrites } from './own-writes.ts';

/**
 * client-node 2.0.1 builds a new undici Agent for every request when the cluster has TLS
 * settings, so no connection is ever reused: measured, that doubles the time of a burst of
 * writes and holds one socket per call. This KubeConfig hands out one dispatcher per distinct
 * TLS identity (CA, client certificate, proxy) instead. `createDispatcher` is private in the
 * typings, so it is wrapped on the instance rather than overridden.
 *
 * The direct (TLS) dispatcher speaks HTTP/1.1 only. undici 8 offers h2 by ALPN unless told not
 * to (allowH2 defaults to true) and kube-apiserver picks h2, so every request and watch of a
 * client shared one HTTP/2 session. undici's HTTP/2 client leaves a session whose watch stream
 * was aborted before its response headers (a source stopped right after its list) with a
 * socket 'end' handler that throws an uncaught SocketError "other side closed" when the API
 * server later closes the connection (a restart): it crashed plane processes
 * (test/integration/connections.test.ts reproduces it). HTTP/1.1 over a keep-alive pool is
 * undici's mature path and what the plane's own dispatchers use.
 */
export class ConnectionReusingKubeConfig extends KubeConfig {
  constructor(options: ConnectionOptions = {}) {
    super();
    const self = this as unknown as { createDispatcher(cluster: unknown, agentOptions: unknown): Dispatcher | undefined };
    const build = self.createDispatcher.bind(this);
    const dispatchers = new Map<string, Dispatcher | undefined>();
    self.createDispatcher = (cluster, agentOptions) => {
      // Credentials can rotate (exec plugins); keying on everything the dispatcher is built
      // from gives a fresh pool exactly when the identity changes.
      const dispatcher = this.createDispatcherOptions(cluster as never, agentOptions as never);
      const key = createHash('sha256').update(JSON.stringify(dispatcher)).digest('hex');
      if (!dispatchers.has(key)) {
        // One TLS context for the pool: given only ca/cert/key, tls.connect parses them into a
        // new context for every connection.
        const connect = dispatcher.type === 'agent' ? { ...dispatcher.connect, secureContext: createSecureContext(dispatcher.connect) } : undefined;
        dispatchers.set(key, connect ? new Agent({ connect, allowH2: false, connections: options.maxConnections ?? null }) : build(cluster, agentOptions));
      }
      return dispatchers.get(key);
    };
  }

  /** KUBECONFIG (or ~/.kube/config), else the in-cluster service account, as kubectl does. */
  static fromEnvironment(options: ConnectionOptions = {}): ConnectionReusingKubeConfig {
    // With nothing configured client-node falls back to http://localhost:8080, which then fails
    // with a TLS message that hides the real problem.
    const found = configuredKubeconfig();
    if (!found) throw new Error('no Kubernetes cluster configured: set KUBECONFIG (or create ~/.kube/config), or run in a pod with a service account');
    const config = new ConnectionReusingKubeConfig(options);
    if (found.inCluster) {
      // Without it (automountServiceAccountToken: false) every request would fail, each with a
      // message about something else; a function must not report ready like that.
      if (!existsSync(SERVICE_ACCOUNT_TOKEN)) throw new Error(`in a pod (KUBERNETES_SERVICE_HOST is set) but no service-account token at ${SERVICE_ACCOUNT_TOKEN}: mount one (automountServiceAccountToken: true), or set KUBECONFIG`);
      config.loadFromCluster();
    }
    const [first, ...rest] = found.files;
    if (first) config.loadFromFile(first);
    for (const file of rest) {
      const more = new KubeConfig();
      more.loadFromFile(file);
      config.mergeConfig(more);
    }
    if (!config.getCurrentCluster()) throw new Error(`no current cluster in ${found.files.join(delimiter) || 'the in-cluster configuration'}`);
    return config;
  }
}

/** Where the kubelet mounts a pod's service-account token (client-node's loadFromCluster reads it there). */
const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

/**
 * Where the cluster is configured, as kubectl looks: the KUBECONFIG files that exist (merged in
 * order; a missing one is skipped, as kubectl skips it), else ~/.kube/config when KUBECONFIG is
 * unset, else a pod's service account. The plane and its function processes all use this.
 */
export function configuredKubeconfig(env: NodeJS.ProcessEnv = process.env): { files: string[]; inCluster: boolean } | undefined {
  const listed = (env.KUBECONFIG ?? '').split(delimiter).filter((file) => file.trim() !== '');
  const files = listed.filter((file) => existsSync(file));
  if (files.length > 0) return { files, inCluster: false };
  const home = join(env.HOME ?? env.USERPROFILE ?? '', '.kube', 'config');
  if (listed.length === 0 && existsSync(home)) return { files: [home], inCluster: false };
  if (env.KUBERNETES_SERVICE_HOST) return { files: [], inCluster: true };
  return undefined;
}

export interface ConnectionOptions {
  /**
   * Connections per pool at most (direct connections; a proxy's pool is client-node's); further
   * requests wait for one. Unset: one per concurrent request. Only for a client that never holds
   * a connection open (a watch holds its own for as long as it runs).
   */
  maxConnections?: number;
}

/** The Kubernetes Status object an API error carries. */
export interface KubeStatus {
  kind?: 'Status';
  status?: string;
  message?: string;
  reason?: string;
  code?: number;
  details?: { name?: string; kind?: string; causes?: { field?: string; message?: string; reason?: string }[] };
  /** `continue`: where a list whose continue token expired can go on from (see expiredContinuation). */
  metadata?: { continue?: string };
}

export class ApiError extends Error {
  /** HTTP status; 0 when the API server could not be reached. */
  readonly code: number;
  /** Kubernetes reason (NotFound, AlreadyExists, Conflict, Invalid, Forbidden…) or the network error code. */
  readonly reason: string;
  readonly status?: KubeStatus;
  /** How long the API server asked us to wait (its Retry-After on a 429 or 5xx: API Priority and Fairness, a server shutting down). */
  readonly retryAfterSeconds?: number;

  constructor(code: number, reason: string, message: string, status?: KubeStatus, retryAfterSeconds?: number) {
    super(message);
    this.name = 'ApiError';
    this.code = code;
    this.reason = reason;
    this.status = status;
    this.retryAfterSeconds = retryAfterSeconds;
  }

  /** Worth trying again later: the API was unreachable, overloaded, timed out, or did not serve the kind yet. */
  get transient(): boolean {
    return this.code === 0 || this.code === 429 || this.code >= 500 || this.reason === NOT_SERVED;
  }
}

/**
 * The reason of a 404 that is about the resource type, not an object: the API server answers
 * "404 page not found" for a kind it does not serve. It does so for a kind whose CRD is missing,
 * and also for every custom resource for a moment after it starts, before its CRD informer has
 * synced. Reading that as "the object is gone" would drop the event, so it is kept apart from
 * NotFound and retried.
 */
export const NOT_SERVED = 'NotServed';

/** The object (or the namespace it was addressed in) does not exist. */
export const isNotFound = (error: unknown): boolean => error instanceof ApiError && error.code === 404 && error.reason !== NOT_SERVED;
export const isAlreadyExists = (error: unknown): boolean => error instanceof ApiError && error.code === 409 && error.reason === 'AlreadyExists';
export const isConflict = (error: unknown): boolean => error instanceof ApiError && error.code === 409 && error.reason === 'Conflict';

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

/**
 * The token to go on with when the API server answers a continued page 410 Expired: etcd has
 * compacted the revision the list is read at (kube-apiserver compacts every 5 minutes), so the
 * pages can no longer be one snapshot. kube-apiserver (1.13+) then puts in the Status a token
 * for the remainder at the latest revision, starting right after the last object returned.
 */
const expiredContinuation = (error: unknown): string | undefined =>
  (error instanceof ApiError && error.code === 410 && error.status?.metadata?.continue) || undefined;

/** What the API server serves a metadata-only list as (the `as`, `g`, `v` of its Accept header). */
const METADATA_LIST_ACCEPT = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1';

export interface ObjectList<T> {
  items: T[];
  metadata: { resourceVersion?: string; continue?: string };
}

interface RequestOptions {
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

/** Authentication headers and connection pool, prepared once per identity. */
interface PreparedAuth {
  headers: Record<string, string>;
  dispatcher: Dispatcher | undefined;
  preparedAt: number;
  /** A service-account token file (in-cluster config): read here, re-read when it changes. */
  tokenFile?: string;
  tokenModified?: number;
  checkedAt: number;
}

/**
 * How long prepared authentication is reused at most. Exec plugins cache their credential until
 * it expires; a token file is watched (below), and a 401 prepares again at once.
 */
const AUTH_REUSE_MS = 60_000;
/** How often a token file's modification time is looked at (a stat, not a read). */
const TOKEN_FILE_CHECK_MS = 1000;

const modifiedAt = (file: string): number | undefined => {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
};

export interface WatchEvent<T = KubeObject> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
}

/**
 * The non-empty lines of a byte stream, decoded as UTF-8 with a streaming decoder: a character
 * whose bytes are split across two chunks is decoded once both have arrived (chunk.toString()
 * would turn each half into U+FFFD).
 */
export async function* jsonLines(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder('utf-8');
  let buffered = '';
  for await (const chunk of chunks) {
    buffered += decoder.decode(chunk, { stream: true });
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline).trim();
      buffered = buffered.slice(newline + 1);
      if (line) yield line;
    }
  }
  const rest = (buffered + decoder.decode()).trim();
  if (rest) yield rest;
}

export interface RequestObserver {
  (verb: string, resource: string, code: number, seconds: number): void;
}

/** The body as JSON; undefined when it is empty or not JSON. */
function parseJson(text: string): unknown {
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}

/** The ApiError for a non-2xx answer with body `text`. */
function errorFromResponse(what: string, code: number, text: string, retryAfter?: string): ApiError {
  const parsed = parseJson(text);
  const status = parsed && typeof parsed === 'object' ? (parsed as KubeStatus) : undefined;
  // An object that does not exist comes back as a Status naming it; anything else is about the path.
  if (code === 404 && !(status?.reason === 'NotFound' && status.details?.name)) {
    return new ApiError(404, NOT_SERVED, `${what}: the API server does not serve this resource (is its CustomResourceDefinition installed and Established, or is the server still starting?)`, status);
  }
  // An Invalid answer quotes the refused value whole; the message goes into logs and conditions.
  // Only in whole seconds, as the API server writes it (client-go's checkWait reads it so too).
  const retryAfterSeconds = (code === 429 || code >= 500) && /^\d{1,9}$/.test(retryAfter ?? '') ? Number(retryAfter) : undefined;
  return new ApiError(code, status?.reason ?? String(code), `${what}: ${status?.message === undefined ? text.slice(0, 200) || code : boundedMessage(status.message)}`, status, retryAfterSeconds);
}

interface Answer {
  statusCode: number;
  text: string;
  retryAfter?: string;
}

/**
 * One request whose answer is read whole, through undici's dispatcher interface rather than its
 * `request()`: that one wraps every answer in a Readable stream and an async resource, which
 * this client, reading each answer to its end at once, has no use for. Measured against
 * kube-apiserver (1500 reads from its watch cache, 32 at a time, a fresh process each time, six
 * processes each): 395 ms of client CPU instead of 571 ms for the first 1500 (what a function
 * that has just started meets), 170 instead of 232 ms once warm.
 */
function exchange(dispatcher: Dispatcher, options: Dispatcher.DispatchOptions): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let statusCode = 0;
    let retryAfter: string | undefined;
    dispatcher.dispatch(options, {
      onRequestStart() {}, // required by undici, nothing to do here
      onResponseStart(_controller, code, headers) {
        statusCode = code;
        const value = headers['retry-after'];
        retryAfter = Array.isArray(value) ? value[0] : value;
      },
      onResponseData(_controller, chunk) {
        chunks.push(chunk);
      },
      onResponseEnd() {
        resolve({ statusCode, text: Buffer.concat(chunks).toString('utf8'), retryAfter });
      },
      onResponseError(_controller, error) {
        reject(error);
      },
    });
  });
}

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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

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
  #auth?: Promise<PreparedAuth>;

  constructor(config: KubeConfig, observe: RequestObserver = () => {}) {
    this.config = config;
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

  get server(): string {
    return this.config.getCurrentCluster()?.server ?? '';
  }

  /**
   * One REST call. Unreachable API, 429 and 5xx are retried a few times within RETRY_WINDOW_MS,
   * with exponential backoff or after the server's Retry-After (a create retried after a lost
   * response then answers AlreadyExists, which callers creating deterministic names treat as
   * success); other errors throw ApiError at once.
   */
  async request<T>(method: string, path: string, options: RequestOptions & { query?: Record<string, string | undefined> } = {}): Promise<T> {
    const url = new URL(this.server + path);
    for (const [name, value] of Object.entries(options.query ?? {})) if (value !== undefined) url.searchParams.set(name, value);
    const started = Date.now();
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#send<T>(method, url, options);
      } catch (error) {
        if (!(error instanceof ApiError) || !error.transient || attempt >= RETRIES_ON_TRANSIENT) throw error;
        const wait = error.retryAfterSeconds !== undefined ? error.retryAfterSeconds * 1000 : RETRY_BASE_MS * 2 ** attempt * (0.5 + Math.random());
        if (Date.now() - started + wait > RETRY_WINDOW_MS) throw error;
        await sleep(wait);
      }
    }
  }

  /**
   * Headers and dispatcher for this client's identity. client-node's applySecurityAuthentication
   * reads certificate files and rebuilds TLS options on every call; doing it once per identity
   * (again when the token file changes, after AUTH_REUSE_MS, or after a 401) saves that work on
   * every request.
   *
   * `refused`: the authentication a request was just answered 401 with. It is prepared again
   * only if it is still the current one: of many requests refused with the same credential, the
   * first prepares again and the others use that preparation, not one each.
   */
  #authentication(refused?: PreparedAuth): Promise<PreparedAuth> {
    const current = this.#auth;
    if (!current) return this.#prepare(current);
    return current.then((auth) => (auth !== refused && this.#stillGood(auth) ? auth : this.#prepare(current)));
  }

  #stillGood(auth: PreparedAuth): boolean {
    const now = Date.now();
    if (now - auth.preparedAt >= AUTH_REUSE_MS) return false;
    if (auth.tokenFile && now - auth.checkedAt >= TOKEN_FILE_CHECK_MS) {
      auth.checkedAt = now;
      return modifiedAt(auth.tokenFile) === auth.tokenModified;
    }
    return true;
  }

  /** Prepares again, unless a concurrent request already replaced `stale`. */
  #prepare(stale: Promise<PreparedAuth> | undefined): Promise<PreparedAuth> {
    if (this.#auth && this.#auth !== stale) return this.#auth;
    const prepared = (async () => {
      const context = new RequestContext(this.server || 'https://localhost', HttpMethod.GET);
      await this.config.applySecurityAuthentication(context);
      const headers = context.getHeaders();
      // client-node caches a token file's contents for 60 s; read it here so a rotated token
      // is used as soon as the file changes.
      const tokenFile = (this.config.getCurrentUser()?.authProvider as { config?: { tokenFile?: string } } | undefined)?.config?.tokenFile;
      const tokenModified = tokenFile ? modifiedAt(tokenFile) : undefined;
      if (tokenFile) headers.Authorization = `Bearer ${readFileSync(tokenFile, 'utf8').trim()}`;
      const now = Date.now();
      return { headers, dispatcher: context.getDispatcher() as Dispatcher | undefined, preparedAt: now, tokenFile, tokenModified, checkedAt: now };
    })();
    this.#auth = prepared;
    // A failed preparation is not kept.
    prepared.catch(() => {
      if (this.#auth === prepared) this.#auth = undefined;
    });
    return prepared;
  }

  async #send<T>(method: string, url: URL, options: RequestOptions, refusedAuth?: PreparedAuth): Promise<T> {
    const auth = await this.#authentication(refusedAuth);
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
    throw errorFromResponse(`${method} ${url.pathname}`, statusCode, text, answer.retryAfter);
  }

  /**
   * The object, or undefined when it does not exist. `cached: true` reads from the API server's
   * watch cache (resourceVersion=0): cheaper, possibly a little stale; only for reads that a
   * conditional write (resourceVersion or uid precondition, create → 409) checks anyway.
   */
  async get<T extends KubeObject = KubeObject>(kind: ResourceKind, key: ObjectKey, options: { cached?: boolean } = {}): Promise<T | undefined> {
    try {
      return await this.request<T>('GET', objectPath(kind, key), { resource: kind.plural, query: { resourceVersion: options.cached ? '0' : undefined } });
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
          query: { labelSelector: options.labelSelector, fieldSelector: options.fieldSelector, limit: String(limit), continue: token, resourceVersion: options.cached ? '0' : undefined },
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
    const replaced = await this.request<T>('PUT', objectPath(kind, key, subresource), { body: object, resource: subresource ? `${kind.plural}/${subresource}` : kind.plural });
    this.ownWrites.record(kind, replaced);
    return replaced;
  }

  /** JSON merge patch (RFC 7386); the content type is explicit, client-node would send a JSON patch. */
  async mergePatch<T extends KubeObject = KubeObject>(kind: ResourceKind, key: ObjectKey, patch: unknown, subresource?: string): Promise<T> {
    const patched = await this.request<T>('PATCH', objectPath(kind, key, subresource), { body: patch, contentType: MERGE_PATCH, resource: subresource ? `${kind.plural}/${subresource}` : kind.plural });
    this.ownWrites.record(kind, patched);
    return patched;
  }

  /**
   * Deletes the object; with `uid`, only that incarnation (a precondition, so a replica acting
   * on a stale read never deletes the pod another replica just created). False when it was gone.
   */
  async delete(kind: ResourceKind, key: ObjectKey, options: { uid?: string; propagationPolicy?: 'Background' | 'Foreground' | 'Orphan' } = {}): Promise<boolean> {
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
  async *watch<T extends KubeObject = KubeObject>(kind: ResourceKind, options: ListOptions & { resourceVersion?: string; timeoutSeconds?: number; signal?: AbortSignal }): AsyncGenerator<WatchEvent<T>> {
    const url = new URL(this.server + collectionPath(kind, options.namespace));
    url.searchParams.set('watch', 'true');
    url.searchParams.set('allowWatchBookmarks', 'true');
    if (options.resourceVersion) url.searchParams.set('resourceVersion', options.resourceVersion);
    if (options.labelSelector) url.searchParams.set('labelSelector', options.labelSelector);
    if (options.timeoutSeconds) url.searchParams.set('timeoutSeconds', String(options.timeoutSeconds));
    const context = new RequestContext(url.toString(), HttpMethod.GET);
    await this.config.applySecurityAuthentication(context);
    let response: Dispatcher.ResponseData;
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
      const code = (error as { code?: string }).code ?? 'NetworkError';
      throw new ApiError(0, code, `watch ${kind.plural}: Kubernetes API unreachable (${code})`);
    }
    if (response.statusCode !== 200) {
      throw errorFromResponse(`watch ${kind.plural}`, response.statusCode, await response.body.text());
    }
    for await (const line of jsonLines(response.body)) {
      const event = JSON.parse(line) as WatchEvent<T>;
      if (event.type === 'ERROR') {
        const status = event.object as unknown as KubeStatus;
        throw new ApiError(status.code ?? 500, status.reason ?? 'WatchError', `watch ${kind.plural}: ${boundedMessage(status.message ?? 'error')}`, status);
      }
      yield event;
    }
  }
}
