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
import { TerminalError, TransientError } from './errors.ts';
import type { ResourceKind } from './kinds.ts';
import { ApiError, type KubeClient } from './kube.ts';

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

export class Discovery {
  readonly #kube: KubeClient;
  /** apiVersion → resource → kind; only top-level resources (no subresources). */
  readonly #groupVersions = new Map<string, { readAt: number; resources: Map<string, ResourceKind> }>();
  readonly #reading = new Map<string, Promise<void>>();

  constructor(kube: KubeClient) {
    this.#kube = kube;
  }

  /** The kind `resource` of `apiVersion` names; TransientError while the API server does not serve it. */
  async resolve(apiVersion: string, resource: string): Promise<ResourceKind> {
    const cached = this.#groupVersions.get(apiVersion);
    const hit = cached?.resources.get(resource);
    if (hit) return hit;
    if (!cached || Date.now() - cached.readAt >= MISS_REFRESH_MS) await this.#read(apiVersion);
    const found = this.#groupVersions.get(apiVersion)?.resources.get(resource);
    if (!found) throw new TransientError(`the API server does not serve ${resource} in ${apiVersion} (yet?); will retry`, { retryAfterSeconds: 5 });
    return found;
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
    const slash = apiVersion.indexOf('/');
    const group = slash < 0 ? '' : apiVersion.slice(0, slash);
    const version = slash < 0 ? apiVersion : apiVersion.slice(slash + 1);
    if (!version || /[^A-Za-z0-9.-]/.test(group) || /[^A-Za-z0-9]/.test(version)) {
      throw new TerminalError(`"${apiVersion}" is not an apiVersion (group/version, or a version of the core group)`, { reason: 'InvalidApiVersion' });
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
    for (const entry of document?.resources ?? []) {
      if (entry.name.includes('/')) continue;
      resources.set(entry.name, { group, version, kind: entry.kind, plural: entry.name, namespaced: entry.namespaced });
    }
    this.#groupVersions.set(apiVersion, { readAt: Date.now(), resources });
  }
}

const perClient = new WeakMap<KubeClient, Discovery>();

/** The process's discovery cache for this client's API server and identity. */
export function discoveryFor(kube: KubeClient): Discovery {
  let discovery = perClient.get(kube);
  if (!discovery) perClient.set(kube, (discovery = new Discovery(kube)));
  return discovery;
}
