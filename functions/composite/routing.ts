// Which parents an event of a CompositeController's parent or child kind concerns: the
// runtime's `runtimeKinds` for the composite function, since these kinds are only known once a
// CompositeController names them. Every key is a parent (its own kind, its own namespace and
// name); the sync re-reads the parent and everything else, so a forged event can at most make a
// real parent be synced.
//
// The echo of a write of this process (kube.ownWrites: the object is at the resourceVersion it
// wrote) concerns no parent when the only parent it wakes is the one whose sync wrote it: a
// parent's own status or finalizer write, or a child (created, updated, adopted) of the parent
// that controls it. That sync already asked the hook again with the write observed (sync-parent.ts
// SYNC_ROUNDS), or is synced again soon, or failed and is retried. This holds only where a kind
// has one role: one that is a parent kind and a child kind, or the parent kind of more than one
// controller, is written by other syncs too, and its echoes are routed as any event. A released
// child wakes the parents that may adopt it, which never saw it. A forged body at our version
// can skip only its own delivery.
//
// Upstream: metacontroller pkg/controller/composite/controller.go (onParentAdd/Update/Delete
// enqueue the parent; onChildAdd/Update/Delete resolve the child's controller reference to its
// parent, or, for an orphan that is not being deleted, every parent whose selector matches it:
// findPotentialParents; the pure decisions are metacontroller/child-events.ts). Upstream's
// uid check of the referenced parent happens in the sync here (isOurs, claim): a reference to a
// parent of the same name but another uid syncs that parent, which changes nothing of the child.
import { potentialParents, referencedParent, type ParentKind } from './metacontroller/index.ts';
import {
  type MapperContext,
  type RuntimeKinds,
  type ChangeEvent,
  groupKind,
  kindKey,
  sameKind,
  type KindKey,
  type KubeObject,
  type ResourceKind,
  apiVersionOf,
  controllerOf,
} from '../runtime/index.ts';
import { servedComposites, withParentKind } from './served-controllers.ts';
import { effectiveController, type ResolvedComposite } from './sync-parent.ts';

const parentKindOf = (composite: ResolvedComposite): ParentKind => ({
  group: composite.parentKind.group,
  kind: composite.parentKind.kind,
  namespaced: composite.parentKind.namespaced,
});

export const compositeRuntimeKinds: RuntimeKinds = {
  async keysFor(event, ctx) {
    const composites = await servedComposites(ctx.kube, ctx.log);
    const { ref } = event;
    const keys: KindKey[] = [];
    const asParent = withParentKind(composites, ref.apiVersion, ref.kind);
    const asChild = composites.filter((composite) => composite.childKinds.some((kind) => sameKind(kind, ref.apiVersion, ref.kind)));
    const oneRole = (asParent.length === 1 && asChild.length === 0) || asParent.length === 0;
    const isEcho = (kind: ResourceKind, object: KubeObject | undefined): boolean =>
      oneRole && object !== undefined && event.action !== 'delete' && ctx.kube.ownWrites.isOwn(kind, object);
    const parent = asParent[0];
    if (parent && !isEcho(parent.parentKind, event.object))
      keys.push(kindKey(parent.parentKind, { namespace: ref.namespace, name: ref.name }));
    if (asChild.length > 0) keys.push(...(await parentsOfChild(event, asChild, ctx, isEcho)));
    return keys;
  },

  async kindOf(text, ctx) {
    const composites = await servedComposites(ctx.kube, ctx.log);
    return composites.find((composite) => groupKind(composite.parentKind) === text)?.parentKind;
  },
};

/** The parents a change of a child-kind object wakes, for each controller with that child kind. */
async function parentsOfChild(
  event: ChangeEvent,
  composites: ResolvedComposite[],
  { kube }: MapperContext,
  isEcho: (kind: ResourceKind, object: KubeObject) => boolean,
): Promise<KindKey[]> {
  const { ref } = event;
  const childKind = composites[0]!.childKinds.find((kind) => sameKind(kind, ref.apiVersion, ref.kind))!;
  // Reference mode carries no body: read the child (gone → its owner's sync already saw it go, or the resync does).
  const child: KubeObject | undefined = event.object ?? (await kube.get(childKind, { namespace: ref.namespace, name: ref.name }));
  if (!child) return [];
  const echo = isEcho(childKind, child);
  const keys: KindKey[] = [];
  for (const composite of composites) {
    const parent = parentKindOf(composite);
    const referenced = referencedParent(child, parent);
    if (referenced) {
      // Written by its controller's sync (only that sync writes a child it controls), which saw it.
      if (!echo || withParentKind(composites, apiVersionOf(composite.parentKind), composite.parentKind.kind).length > 1)
        keys.push(kindKey(composite.parentKind, referenced));
      continue;
    }
    // An orphan may be adopted; one being deleted, or without labels to match, wakes nobody.
    if (controllerOf(child) || event.action === 'delete' || Object.keys(child.metadata.labels ?? {}).length === 0) continue;
    const namespace = composite.parentKind.namespaced ? ref.namespace : undefined;
    // Read from etcd page by page, not from the watch cache. A stale list would be safe (it only
    // decides which parents to sync, and each sync re-reads its parent and children), but the
    // watch cache answers in one page whatever `limit` says (kube-apiserver 1.20 and later ones;
    // KubeClient.pages `cached`), and this list has no selector to keep that page small: every
    // parent of the namespace, or of the cluster for a cluster-scoped kind, at once for each
    // orphan's event. The cost stays bounded per page; only orphans with labels pay it.
    for await (const page of kube.pages(composite.parentKind, { namespace })) {
      for (const candidate of page.items) {
        const matching = potentialParents(effectiveController(composite.controller, candidate), composite.parentFilter, parent, child, [
          candidate,
        ]);
        if (matching.length > 0)
          keys.push(kindKey(composite.parentKind, { namespace: candidate.metadata.namespace ?? '', name: candidate.metadata.name ?? '' }));
      }
    }
  }
  return keys;
}
