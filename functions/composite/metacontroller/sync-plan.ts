// What a hook's answer means for one parent, decided without any API call: the delayed resync,
// the finalizer, the children's writes and the status write, in upstream's order.
//
// Upstream: metacontroller pkg/controller/composite/controller.go syncParentObject (after the
// hook: enqueue after resyncAfterSeconds when > 0, remove the finalizer when `finalized`, then
// enforce the selector invariants — a violation stops before any child is touched and before the
// status is written —, manage children only while the parent lives or ShouldFinalize, and write
// the status even when managing children failed) and updateParentStatus (the answer's status,
// or {} when absent, plus observedGeneration = metadata.generation, written only when it
// differs from the current .status).
//
// Deliberate difference: a parent kind without the status subresource gets no
// observedGeneration. Its status is written by a plain update (clientset.go AtomicStatusUpdate),
// which the API server counts as a new generation, so the observedGeneration written would be
// stale at once and every sync would write it again: the hot loop of upstream's fallback
// (GoogleCloudPlatform/metacontroller#176; upstream since refuses such controllers,
// composite/metacontroller.go).
import { type KubeObject, jsonEqual } from '../../runtime/index.ts';
import { finalizerEnabled, finalizerName, manageChildren } from './finalize.ts';
import { desiredChildren, type Checked } from './hook-response.ts';
import { planChildren, type ChildOperation, type UpdateStrategies } from './manage-children.ts';
import type { Selector } from './selector.ts';
import type { CompositeController, CompositeHookResponse, ResolvedResource } from './types.ts';

export interface SyncPlanInput {
  controller: CompositeController;
  parent: KubeObject;
  parentApiVersion: string;
  parentKind: string;
  childRules: ResolvedResource[];
  strategies: UpdateStrategies;
  /** childSelector(spec, parent). */
  selector: Selector;
  /** Claimed (and successfully adopted) children. */
  observed: KubeObject[];
  response: CompositeHookResponse;
  /** Whether the parent kind has the status subresource (discovery): decides observedGeneration. */
  statusSubresource: boolean;
}

export interface SyncPlan {
  /** Sync this parent again after this many seconds (0 = only on events and resyncs). */
  resyncAfterSeconds: number;
  /** The hook said `finalized`: remove our finalizer (happens even if the rest is refused). */
  removeFinalizer: boolean;
  /** The writes, or why the answer is refused (→ Warning Event SyncError, retried). */
  outcome: Checked<{ children: ChildOperation[]; status: StatusWrite }>;
}

export interface StatusWrite {
  status: Record<string, unknown>;
  /** false: the parent's .status already says exactly this, write nothing. */
  changed: boolean;
}

export function planSync(input: SyncPlanInput): SyncPlan {
  const { controller, response } = input;
  const name = finalizerName(controller);
  const removeFinalizer = response.finalized && (input.parent.metadata.finalizers ?? []).includes(name);
  const parent = removeFinalizer
    ? {
        ...input.parent,
        metadata: { ...input.parent.metadata, finalizers: input.parent.metadata.finalizers!.filter((finalizer) => finalizer !== name) },
      }
    : input.parent;
  const base = { resyncAfterSeconds: response.resyncAfterSeconds > 0 ? response.resyncAfterSeconds : 0, removeFinalizer };

  const desired = desiredChildren({
    parent,
    children: response.children,
    childRules: input.childRules,
    selector: input.selector,
    generateSelector: controller.spec.generateSelector === true,
    controller,
  });
  if (!desired.ok) return { ...base, outcome: desired };

  const children = manageChildren(parent, name, finalizerEnabled(controller))
    ? planChildren({
        parent,
        parentApiVersion: input.parentApiVersion,
        parentKind: input.parentKind,
        observed: input.observed,
        desired: desired.value,
        strategies: input.strategies,
      })
    : [];
  return { ...base, outcome: { ok: true, value: { children, status: statusWrite(parent, response.status, input.statusSubresource) } } };
}

/** updateParentStatus: the hook's status plus observedGeneration (only with the status subresource, above), and whether it is news. */
export function statusWrite(parent: KubeObject, status: Record<string, unknown> | null, statusSubresource: boolean): StatusWrite {
  const next = statusSubresource ? { ...(status ?? {}), observedGeneration: parent.metadata.generation ?? 0 } : { ...(status ?? {}) };
  return { status: next, changed: !jsonEqual((parent as { status?: unknown }).status, next) };
}
