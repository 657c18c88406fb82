// Kinds known only at run time (a CompositeController names its parent and children by
// apiVersion + plural resource): resolved to a ResourceKind through the API server's discovery
// documents, cached per process.
//
// Upstream: metacontroller pkg/dynamic/discovery/discovery.go (ResourceMap.Get(apiVersion,
// resource), refreshed from the discovery API). Here a miss refreshes only that group-version,
// once, and a kind that is still not served is a TransientError: a CRD applied together with
// its CompositeController is served a moment later, so "not there yet" must be retried, never
// read as "gone". An apiVersion that cannot name any group-version is a TerminalError.
// Statically declared functions never call this (their kinds are compiled in).
//
// The same documents say which resources have the status subresource: a CRD without it has no
// `/status` path, so its status is written by a plain update (upstream: pkg/dynamic/clientset
// AtomicStatusUpdate). That answer is re-read after SUBRESOURCE_REFRESH_MS, upstream's discovery
// interval, since a CRD may gain or lose the subresource while its kind stays served.
import type { FunctionDeclaration } from './declaration.ts';
import { TerminalError, TransientError } from './errors.ts';
import { apiVersionOf, isValidGroupVersion, parseApiVersion, type ResourceKind } from './kinds.ts';
import { ApiError } from './kube/errors.ts';
import type { KubeClient } from './kube/client.ts';
import { quote } from './bounded-messages.ts';
import { setRecent } from './lru-map.ts';

interface ApiResource {
  name: string;
  kind: string;
  namespaced: boolean;
}

interface GroupVersionDocument {
  resources: ApiResource[];
}

/** A group-version read less than this long ago is not read again for a miss (a burst of misses costs one request). */
const MISS_REFRESH_MS = 1000;
/** How old an answer about subresources may be: upstream's discovery interval. */
const SUBRESOURCE_REFRESH_MS = 30_000;
/**
 * Group-versions remembered, the least recently used forgotten first. A cluster serves a few
 * dozen; the apiVersions asked about come from CompositeControllers and their hooks (a customize
 * hook's related rules), and a hook naming ever new groups must not grow the process. A forgotten
 * one costs one more read.
 */
export const MAX_GROUP_VERSIONS = 256;

export class Discovery {
  readonly #kube: KubeClient;
  /** apiVersion → resource → kind (top-level resources), and the resources served with `/status`. */
  readonly #groupVersions = new Map<string, { readAt: number; resources: Map<string, ResourceKind>; withStatus: Set<string> }>();
  readonly #reading = new Map<string, Promise<void>>();
  readonly #maxGroupVersions: number;

  constructor(kube: KubeClient, maxGroupVersions = MAX_GROUP_VERSIONS) {
    this.#kube = kube;
    this.#maxGroupVersions = maxGroupVersions;
  }

  /** The kind `resource` of `apiVersion` names; TransientError while the API server does not serve it. */
  async resolve(apiVersion: string, resource: string): Promise<ResourceKind> {
    const cached = this.#groupVersions.get(apiVersion);
    const hit = cached?.resources.get(resource);
    if (hit) {
      setRecent(this.#groupVersions, apiVersion, cached!, this.#maxGroupVersions);
      return hit;
    }
    if (!cached || Date.now() - cached.readAt >= MISS_REFRESH_MS) await this.#read(apiVersion);
    const found = this.#groupVersions.get(apiVersion)?.resources.get(resource);
    if (!found)
      throw new TransientError(`the API server does not serve ${resource} in ${apiVersion} (yet?); will retry`, { retryAfterSeconds: 5 });
    return found;
  }

  /** Whether the API server serves `<plural>/status` for `kind` (as of at most SUBRESOURCE_REFRESH_MS ago). */
  async hasStatusSubresource(kind: ResourceKind): Promise<boolean> {
    const apiVersion = apiVersionOf(kind);
    const cached = this.#groupVersions.get(apiVersion);
    if (!cached || Date.now() - cached.readAt >= SUBRESOURCE_REFRESH_MS) await this.#read(apiVersion);
    return this.#groupVersions.get(apiVersion)?.withStatus.has(kind.plural) ?? false;
  }

  /**
   * Why the API server does not serve `kind` as declared, read afresh; undefined when it does. A
   * group-version that serves the same kind under another plural says which (a plural mistyped).
   */
  async unservedReason(kind: ResourceKind): Promise<string | undefined> {
    const apiVersion = apiVersionOf(kind);
    await this.#read(apiVersion);
    const resources = this.#groupVersions.get(apiVersion)?.resources ?? new Map<string, ResourceKind>();
    if (resources.has(kind.plural)) return undefined;
    const what = `${kind.kind} (${kind.group ? `${kind.plural}.${kind.group}` : kind.plural}, ${apiVersion})`;
    if (resources.size === 0)
      return `${what} is not served: the API server serves no ${apiVersion}; is its CustomResourceDefinition applied (and Established)?`;
    const sameKind = [...resources.values()].find((served) => served.kind === kind.kind);
    if (sameKind)
      return `${what} is not served: ${apiVersion} serves ${kind.kind} as "${sameKind.plural}"; did you mean ${sameKind.plural}?`;
    return `${what} is not served: ${apiVersion} serves no "${kind.plural}"; is its CustomResourceDefinition applied, or is the plural mistyped?`;
  }

  /** Reads one group-version's discovery document; concurrent readers share one request. */
  #read(apiVersion: string): Promise<void> {
    const running = this.#reading.get(apiVersion);
    if (running) return running;
    const reading = this.#fetch(apiVersion).finally(() => this.#reading.delete(apiVersion));
    this.#reading.set(apiVersion, reading);
    return reading;
  }

  async #fetch(apiVersion: string): Promise<void> {
    const { group, version } = parseApiVersion(apiVersion);
    if (!isValidGroupVersion({ group, version })) {
      throw new TerminalError(`${quote(apiVersion)} is not an apiVersion (group/version, or a version of the core group)`, {
        reason: 'InvalidApiVersion',
      });
    }
    const path = group ? `/apis/${group}/${version}` : `/api/${version}`;
    let document: GroupVersionDocument | undefined;
    try {
      document = await this.#kube.request<GroupVersionDocument>('GET', path, { resource: 'discovery' });
    } catch (error) {
      // 404: the group-version is not served (yet): an empty map, retried after MISS_REFRESH_MS.
      if (!(error instanceof ApiError && error.code === 404)) throw error;
    }
    const resources = new Map<string, ResourceKind>();
    const withStatus = new Set<string>();
    for (const entry of document?.resources ?? []) {
      const [plural, subresource] = entry.name.split('/', 2);
      if (subresource === 'status') withStatus.add(plural!);
      if (subresource !== undefined) continue;
      resources.set(entry.name, { group, version, kind: entry.kind, plural: entry.name, namespaced: entry.namespaced });
    }
    setRecent(this.#groupVersions, apiVersion, { readAt: Date.now(), resources, withStatus }, this.#maxGroupVersions);
  }

  /** Group-versions remembered now (at most the limit it was made with, MAX_GROUP_VERSIONS by default). */
  get size(): number {
    return this.#groupVersions.size;
  }
}

/**
 * The declaration's kinds (reconciled, owned, watched) the API server does not serve, each with
 * the reason (Discovery.unservedReason): what a function and the plane report at start. A kind
 * whose check failed (the API server unreachable) is left out: nothing is known about it.
 */
export async function unservedKinds(
  declaration: Pick<FunctionDeclaration, 'reconciles' | 'owns' | 'watches'>,
  kube: KubeClient,
): Promise<{ kind: ResourceKind; reason: string }[]> {
  const discovery = discoveryFor(kube);
  const kinds = new Map<string, ResourceKind>();
  for (const kind of [
    declaration.reconciles,
    ...declaration.owns.map((owned) => owned.kind),
    ...declaration.watches.map((watched) => watched.kind),
  ])
    kinds.set(`${apiVersionOf(kind)} ${kind.plural}`, kind);
  const unserved: { kind: ResourceKind; reason: string }[] = [];
  for (const kind of kinds.values()) {
    const reason = await discovery.unservedReason(kind).catch(() => undefined);
    if (reason) unserved.push({ kind, reason });
  }
  return unserved;
}

const perClient = new WeakMap<KubeClient, Discovery>();

/** The process's discovery cache for this client's API server and identity. */
export function discoveryFor(kube: KubeClient): Discovery {
  const client = kube.underlying;
  let discovery = perClient.get(client);
  if (!discovery) perClient.set(client, (discovery = new Discovery(client)));
  return discovery;
}
