// Which parents an event of a CompositeController's parent or child kind concerns: the
// runtime's `runtimeKinds` for the composite function, since these kinds are only known once a
// CompositeController names them. Every key is a parent (its own kind, its own namespace and
// name); the sync re-reads the parent and everything else, so a forged event can at most make a
// real parent be synced.
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
    const asParent = withParentKind(composites, ref.apiVersion, ref.kind)[0];
    if (asParent) keys.push(kindKey(asParent.parentKind, { namespace: ref.namespace, name: ref.name }));
    const asChild = composites.filter((composite) => composite.childKinds.some((kind) => sameKind(kind, ref.apiVersion, ref.kind)));
    if (asChild.length > 0) keys.push(...(await parentsOfChild(event, asChild, ctx)));
    return keys;
  },

  async kindOf(text, ctx) {
    const composites = await servedComposites(ctx.kube, ctx.log);
    return composites.find((composite) => groupKind(composite.parentKind) === text)?.parentKind;
  },
};

/** The parents a change of a child-kind object wakes, for each controller with that child kind. */
async function parentsOfChild(event: ChangeEvent, composites: ResolvedComposite[], { kube }: MapperContext): Promise<KindKey[]> {
  const { ref } = event;
  const childKind = composites[0]!.childKinds.find((kind) => sameKind(kind, ref.apiVersion, ref.kind))!;
  // Reference mode carries no body: read the child (gone → its owner's sync already saw it go, or the resync does).
  const child: KubeObject | undefined = event.object ?? (await kube.get(childKind, { namespace: ref.namespace, name: ref.name }));
  if (!child) return [];
  const keys: KindKey[] = [];
  for (const composite of composites) {
    const parent = parentKindOf(composite);
    const referenced = referencedParent(child, parent);
    if (referenced) {
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
