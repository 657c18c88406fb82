// Which parents a change of a child-kind object concerns: the doorbell routing of a
// CompositeController's children.
//
// Upstream: metacontroller pkg/controller/composite/controller.go (onChildAdd/onChildUpdate/
// onChildDelete: a child with a controller reference wakes that parent only, if the reference's
// API group and kind are the parent's and the uid matches the parent of that name — in the
// child's namespace for a namespaced parent; resolveControllerRef; an orphan wakes every parent
// whose selector matches its labels, in its namespace for namespaced parents, skipping parents
// whose selector cannot be built; findPotentialParents; a deleted orphan wakes nobody; a parent
// that neither matches parentResource.labelSelector nor carries our finalizer is never woken).
import { type KubeObject, type ObjectKey, parseApiVersion, controllerOf } from '../../runtime/index.ts';
import { finalizerName, isOurs } from './finalize.ts';
import { childSelector, type Selector } from './selector.ts';
import type { CompositeController } from './types.ts';

export interface ParentKind {
  group: string;
  kind: string;
  namespaced: boolean;
}

/**
 * The parent a controlled child points at; undefined for orphans and for references to other
 * kinds. Upstream then looks the parent up by name and compares the uid; here the parent's sync
 * does (a parent of that name with another uid is synced, which changes nothing of the child:
 * its claim ignores children controlled by another uid).
 */
export function referencedParent(child: KubeObject, parent: ParentKind): (ObjectKey & { uid: string }) | undefined {
  const reference = controllerOf(child);
  if (!reference || reference.kind !== parent.kind || parseApiVersion(reference.apiVersion).group !== parent.group) return undefined;
  return { namespace: parent.namespaced ? (child.metadata.namespace ?? '') : '', name: reference.name, uid: reference.uid };
}

/**
 * The parents an orphan may be adopted by (findPotentialParents), among `candidates` (all parents,
 * or those in the orphan's namespace for a namespaced parent kind). An orphan that is deleted or
 * being deleted wakes nobody (it is never adopted): do not call this for delete events.
 */
export function potentialParents(
  controller: CompositeController,
  parentFilter: Selector,
  parent: ParentKind,
  orphan: KubeObject,
  candidates: KubeObject[],
): KubeObject[] {
  if (controllerOf(orphan) || orphan.metadata.deletionTimestamp) return [];
  const name = finalizerName(controller);
  return candidates.filter((candidate) => {
    if (parent.namespaced && (candidate.metadata.namespace ?? '') !== (orphan.metadata.namespace ?? '')) return false;
    if (!isOurs(candidate, name, parentFilter.matches(candidate.metadata.labels ?? {}))) return false;
    const selector = childSelector(controller.spec, candidate);
    return selector.ok && selector.selector.matches(orphan.metadata.labels ?? {});
  });
}
