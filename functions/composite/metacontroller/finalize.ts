// The finalizer a CompositeController with a finalize hook keeps on its parents, and the
// decisions around it: which hook to call, whether to manage children, whether to sync at all.
//
// Upstream: metacontroller pkg/controller/common/finalizer/finalizer.go (Manager.SyncObject:
// add when enabled unless the parent is already being deleted, remove when not enabled;
// ShouldFinalize: never while a garbage-collector finalizer is on the parent, never once ours is
// gone), pkg/controller/composite/controller.go (newParentController: the name
// `metacontroller.io/compositecontroller-<name>`, enabled iff a finalize hook exists;
// syncParentObject: a parent that neither matches the labelSelector nor carries our finalizer is
// ignored; children are managed only while the parent lives or ShouldFinalize) and
// pkg/controller/composite/hooks.go (shouldCallFinalizeHook: the finalize hook is called when the
// parent is being deleted or has stopped matching the labelSelector, else the sync hook).
import { type KubeObject } from '../../runtime/index.ts';
import type { CompositeController } from './types.ts';

const GC_FINALIZERS = new Set(['foregroundDeletion', 'orphan']);

export const finalizerName = (controller: CompositeController): string =>
  `metacontroller.io/compositecontroller-${controller.metadata.name}`;

/** The finalizer is wanted exactly when the controller has a finalize hook. */
export const finalizerEnabled = (controller: CompositeController): boolean =>
  controller.spec.hooks?.finalize !== undefined && controller.spec.hooks.finalize !== null;

export const hasFinalizer = (object: KubeObject, name: string): boolean => object.metadata.finalizers?.includes(name) ?? false;

export type FinalizerAction = 'add' | 'remove' | 'none';

/** SyncObject: what to do to the parent's finalizers before anything else. */
export function finalizerAction(parent: KubeObject, name: string, enabled: boolean): FinalizerAction {
  if (hasFinalizer(parent, name) === enabled) return 'none';
  if (!enabled) return 'remove';
  // Never add to a parent being deleted: we may just have removed it.
  return parent.metadata.deletionTimestamp ? 'none' : 'add';
}

/** ShouldFinalize: may children still be managed while the parent is pending deletion? */
export function shouldFinalize(parent: KubeObject, name: string, enabled: boolean): boolean {
  if ((parent.metadata.finalizers ?? []).some((finalizer) => GC_FINALIZERS.has(finalizer))) return false;
  if (!hasFinalizer(parent, name)) return false;
  return enabled;
}

/** A parent outside the labelSelector is ours only while it still carries our finalizer. */
export const isOurs = (parent: KubeObject, name: string, matchesLabels: boolean): boolean => matchesLabels || hasFinalizer(parent, name);

export type HookChoice = 'finalize' | 'sync' | 'none';

/** determineHookToCall: finalize while deleting or after leaving the selector, else sync. */
export function hookToCall(controller: CompositeController, parent: KubeObject, matchesLabels: boolean): HookChoice {
  if (finalizerEnabled(controller) && (parent.metadata.deletionTimestamp || !matchesLabels)) return 'finalize';
  return controller.spec.hooks?.sync ? 'sync' : 'none';
}

/** Children are managed while the parent lives, or while it is finalized by us. */
export const manageChildren = (parent: KubeObject, name: string, enabled: boolean): boolean =>
  !parent.metadata.deletionTimestamp || shouldFinalize(parent, name, enabled);
