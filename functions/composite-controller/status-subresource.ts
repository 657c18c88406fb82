// Whether a parent kind has the status subresource, from the API server's discovery document of
// its group-version. A CRD without it has no `/status` path: a PUT there is a 404 that reads
// exactly like a deleted parent, so the status must go through a plain update of the parent
// instead. The runtime's discovery (runtime/discovery.ts) keeps top-level resources only.
//
// Upstream: metacontroller pkg/dynamic/clientset/clientset.go AtomicStatusUpdate (UpdateStatus
// when HasSubresource("status"), else Update) and pkg/dynamic/discovery/discovery.go (the
// subresources of each resource, refreshed every discovery interval: 30 s by default).
import type { ResourceKind } from '../runtime/kinds.ts';
import type { KubeClient } from '../runtime/kube.ts';

/** As upstream's discovery interval: a CRD that gains or loses its status subresource is seen this late at most. */
const REFRESH_MS = 30_000;

const perClient = new WeakMap<KubeClient, Map<string, { readAt: number; has: Promise<boolean> }>>();

/** True when `<plural>/status` is served; a failed read is not kept (the next call reads again). */
export function hasStatusSubresource(kube: KubeClient, kind: ResourceKind): Promise<boolean> {
  const cache = perClient.get(kube) ?? new Map<string, { readAt: number; has: Promise<boolean> }>();
  perClient.set(kube, cache);
  const path = kind.group ? `/apis/${kind.group}/${kind.version}` : `/api/${kind.version}`;
  const id = `${path}/${kind.plural}`;
  const cached = cache.get(id);
  if (cached && performance.now() - cached.readAt < REFRESH_MS) return cached.has;
  const has = kube
    .request<{ resources?: { name: string }[] }>('GET', path, { resource: 'discovery' })
    .then((document) => (document.resources ?? []).some((resource) => resource.name === `${kind.plural}/status`));
  cache.set(id, { readAt: performance.now(), has });
  has.catch(() => cache.get(id)?.has === has && cache.delete(id));
  return has;
}
