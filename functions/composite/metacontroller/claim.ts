// Which objects are a parent's children: owned ones that still match its selector, plus orphans
// that match (adopted), minus owned ones that stopped matching (released).
//
// Upstream: metacontroller pkg/controller/composite/controller.go (claimChildren: candidates are
// the objects of each child kind controlled by the parent plus the orphans, in the parent's
// namespace or in all namespaces for a cluster-scoped parent), pkg/third_party/kubernetes/
// controller_ref_manager.go (BaseControllerRefManager.ClaimObject) and
// pkg/dynamic/controllerref/unstructured.go + controller_ref.go (adoptChild/releaseChild,
// addOwnerReference/removeOwnerReference). Objects controlled by anyone else are never touched.
//
// The shell carries out `adopt` and `release` as read-modify-write with the object's
// resourceVersion; before the first adoption it re-reads the parent uncached and adopts nothing
// if its uid changed or it is being deleted (canAdoptFunc / RecheckDeletionTimestamp upstream).
// An adoption that fails with NotFound just means the child is not ours; a release that fails
// with NotFound is fine.
import { type KubeObject, type OwnerReference, controllerOf } from '../../runtime/index.ts';
import type { Selector } from './selector.ts';

export type ClaimAction =
  | { action: 'adopt'; child: KubeObject; ownerReferences: OwnerReference[] }
  | { action: 'release'; child: KubeObject; ownerReferences: OwnerReference[] };

export interface ClaimPlan {
  /** Children owned already and matching: hand these to the hook. */
  claimed: KubeObject[];
  /** Orphans to adopt; each is a child too once its adoption succeeded. */
  adopt: Extract<ClaimAction, { action: 'adopt' }>[];
  /** Owned objects that no longer match the selector. */
  release: Extract<ClaimAction, { action: 'release' }>[];
}

export interface ClaimInput {
  parent: KubeObject;
  /** The parent's apiVersion as discovery resolved it (the ownerReference's apiVersion). */
  parentApiVersion: string;
  parentKind: string;
  /** Whether the parent's kind is namespaced: a namespaced parent only claims in its namespace. */
  parentNamespaced: boolean;
  selector: Selector;
  /** Every object of one child kind in scope (listed by the shell). */
  candidates: KubeObject[];
}

/** The controller reference a parent puts on what it adopts or creates (MakeControllerRef). */
export function controllerRefFor(parent: KubeObject, apiVersion: string, kind: string): OwnerReference {
  return { apiVersion, kind, name: parent.metadata.name ?? '', uid: parent.metadata.uid ?? '', controller: true, blockOwnerDeletion: true };
}

export function planClaim(input: ClaimInput): ClaimPlan {
  const { parent, selector } = input;
  const uid = parent.metadata.uid;
  const deleting = Boolean(parent.metadata.deletionTimestamp);
  const plan: ClaimPlan = { claimed: [], adopt: [], release: [] };
  for (const child of input.candidates) {
    if (input.parentNamespaced && (child.metadata.namespace ?? '') !== (parent.metadata.namespace ?? '')) continue;
    const controller = controllerOf(child);
    const matches = selector.matches(child.metadata.labels ?? {});
    if (controller) {
      if (controller.uid !== uid) continue; // someone else's
      if (matches) plan.claimed.push(child);
      else if (!deleting) {
        const ownerReferences = (child.metadata.ownerReferences ?? []).filter((reference) => reference.uid !== uid);
        plan.release.push({ action: 'release', child, ownerReferences });
      }
      continue;
    }
    // An orphan: adopt it if it matches, unless the parent or the orphan is going away.
    if (deleting || !matches || child.metadata.deletionTimestamp) continue;
    const reference = controllerRefFor(parent, input.parentApiVersion, input.parentKind);
    const existing = child.metadata.ownerReferences ?? [];
    const ownerReferences = existing.some((ref) => ref.uid === uid)
      ? existing.map((ref) => (ref.uid === uid ? reference : ref))
      : [...existing, reference];
    plan.adopt.push({ action: 'adopt', child, ownerReferences });
  }
  return plan;
}
