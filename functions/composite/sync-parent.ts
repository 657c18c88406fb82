// One sync of one parent of one CompositeController, in upstream's order: the labelSelector and
// finalizer checks, the finalizer itself, the child selector, the claim, the sync or finalize
// hook, then the answer applied (finalizer removal, child writes, status with
// observedGeneration: through the status subresource, or a plain update of the parent when its
// CRD has none). The child writes stop at the delivery's deadline (SyncEnvironment.budget): the
// caller syncs the parent again at once, and that sync finds the children written so far in
// place. The decisions are the pure modules in metacontroller/; this file only sequences them
// with the API calls.
//
// Upstream: metacontroller pkg/controller/composite/controller.go syncParentObject, sync
// (a 429 is requeued without an Event; any other failure is a Warning Event `SyncError`
// "Sync error: <reason>" and a rate-limited retry) and updateParentStatus.
//
// Deliberate difference: a controller without generateSelector whose parent has no
// spec.selector gets generateSelector's behaviour (children labelled controller-uid=<uid>)
// instead of failing every sync (the seed's manifest is such a controller).
import {
  finalizerAction,
  finalizerEnabled,
  finalizerName,
  hookToCall,
  isOurs,
  type HookFailure,
  type HookResult,
  type Hook,
  type HookRequestInput,
  type SyncPlan,
  type SyncPlanInput,
  buildHookRequest,
  childErrorsMessage,
  type UpdateStrategies,
  childSelector,
  type Selector,
  planSync,
  type CompositeController,
  type ResolvedResource,
} from './metacontroller/index.ts';
import {
  type EventRecorder,
  discoveryFor,
  TransientError,
  apiVersionOf,
  type KubeObject,
  type ResourceKind,
  isConflict,
  isNotFound,
  type KubeClient,
  ensureFinalizer,
  removeFinalizer,
} from '../runtime/index.ts';
import { applyChildOperations, claimChildren, selectedLists, type CandidateLists, type WriteBudget } from './children.ts';
import { batchedLists } from './batched-lists.ts';
import { callHook, type UrlRewrite } from './hooks.ts';
import { relatedFor } from './related.ts';

/** A controller with its kinds resolved: everything every parent's sync shares. */
export interface ResolvedComposite {
  controller: CompositeController;
  parentKind: ResourceKind;
  childKinds: ResourceKind[];
  childRules: ResolvedResource[];
  strategies: UpdateStrategies;
  parentFilter: Selector;
}

export interface SyncEnvironment {
  kube: KubeClient;
  events: EventRecorder;
  hookUrls: UrlRewrite[];
  /**
   * The child lists of this sweep (children.ts sharedLists); absent for the sync of one parent,
   * whose candidates are then listed by its child selector, with the parents synced at the same
   * time when it is one label's value (batched-lists.ts). Those cannot include a child that
   * stopped matching while still owned, so such a child is released by the next sweep.
   */
  listed?: CandidateLists;
  /** When the sync stops starting child writes (the delivery's deadline); none by default. */
  budget?: WriteBudget;
}

export interface ParentSynced {
  /** Sync this parent again after this many seconds (0: only on the next event or resync). */
  resyncAfterSeconds: number;
  /** Child writes the budget left undone: sync this parent again at once, in the next delivery. */
  left?: number;
}

/** A failed sync of one parent, already reported (Event) when upstream reports it. */
export class ParentSyncError extends TransientError {}

/** The spec a parent is synced with: generateSelector when neither it nor spec.selector is set (see above). */
export function effectiveController(controller: CompositeController, parent: KubeObject): CompositeController {
  const selector = (parent.spec as { selector?: unknown } | undefined)?.selector;
  if (controller.spec.generateSelector === true || (selector !== undefined && selector !== null)) return controller;
  return { ...controller, spec: { ...controller.spec, generateSelector: true } };
}

/**
 * How soon a parent is synced again when this sync knows it left work: children it deleted
 * (Recreate, finished pods) are to be created, or its status write met a newer parent. The
 * child's delete event or the parent's update event usually brings that sync first; this
 * requeue does not depend on them.
 */
export const AGAIN_SOON_SECONDS = 1;

/**
 * Hook calls in one sync at most. After a round that wrote children, the hook is asked again with
 * them observed, and after a status write with the parent as written: what the events of those
 * writes would bring (upstream syncs on each), done here so that their echoes need no sync of
 * their own (routing.ts skips them). A sync that still wrote in its last round is synced again
 * soon, as the echo would have. A controller with parentResource.ignoreStatusChanges is not asked
 * again after a status write: upstream does not sync on a parent update that changes neither
 * generation, labels, annotations nor deletion (updateParentObject), which its own status write is.
 */
const SYNC_ROUNDS = 3;

export async function syncParent(composite: ResolvedComposite, listed: KubeObject, env: SyncEnvironment): Promise<ParentSynced> {
  try {
    return await syncParentOnce(composite, listed, env);
  } catch (error) {
    if (error instanceof ParentSyncError) throw error;
    // An API failure on the way (403 from narrower RBAC, an unreachable server, a discovery
    // miss for a related kind) is a SyncError too, as upstream reports every error but a 429.
    const message = (error as Error).message;
    env.events.warning(listed, composite.parentKind, 'SyncError', `Sync error: ${message}`);
    throw new ParentSyncError(`${composite.parentKind.kind} ${describe(listed)}: ${message}`, {
      cause: error,
      retryAfterSeconds: error instanceof TransientError ? error.retryAfterSeconds : undefined,
    });
  }
}

/** Is this parent the controller's to sync: selected by its labelSelector, or still carrying its finalizer? */
export const governs = (composite: ResolvedComposite, parent: KubeObject): boolean =>
  isOurs(parent, finalizerName(composite.controller), composite.parentFilter.matches(parent.metadata.labels ?? {}));

async function syncParentOnce(composite: ResolvedComposite, listed: KubeObject, env: SyncEnvironment): Promise<ParentSynced> {
  const { controller, parentKind } = composite;
  const { kube, events } = env;
  const name = finalizerName(controller);
  const enabled = finalizerEnabled(controller);
  const matches = composite.parentFilter.matches(listed.metadata.labels ?? {});
  // governs(), with the name and the match this sync needs again below.
  if (!isOurs(listed, name, matches)) return { resyncAfterSeconds: 0 };

  let parent: KubeObject | undefined = { ...listed, apiVersion: apiVersionOf(parentKind), kind: parentKind.kind };
  const action = finalizerAction(parent, name, enabled);
  if (action === 'add') parent = await ensureFinalizer(kube, parentKind, parent, name);
  else if (action === 'remove') parent = await removeFinalizer(kube, parentKind, parent, name);
  if (!parent) return { resyncAfterSeconds: 0 };
  // Checked again with the parent as it is now: a parent outside the labelSelector that was ours
  // only through a finalizer we just removed (the controller lost its finalize hook) is not
  // synced (upstream: "Check the finalizer again in case we just removed it").
  const stillMatches = composite.parentFilter.matches(parent.metadata.labels ?? {});
  if (!isOurs(parent, name, stillMatches)) return { resyncAfterSeconds: 0 };

  const fail = (reason: string, eventReason = 'SyncError'): never => {
    events.warning(parent!, parentKind, eventReason, `Sync error: ${reason}`);
    throw new ParentSyncError(`${parentKind.kind} ${describe(parent!)}: ${reason}`);
  };
  // A 429 waits for Retry-After without an Event; every other failure is a SyncError.
  const hookFailed = (failure: HookFailure): never => {
    if (failure.type === 'TooManyRequests') {
      throw new ParentSyncError(`${parentKind.kind} ${describe(parent!)}: ${failure.reason}`, {
        retryAfterSeconds: Math.max(1, failure.retryAfterSeconds),
      });
    }
    return fail(failure.reason);
  };
  const effective = effectiveController(controller, parent);
  const selector = childSelector(effective.spec, parent);
  if (!selector.ok) return fail(selector.reason);

  let observed = await claimChildren(
    kube,
    { parent, kind: parentKind },
    composite.childKinds,
    selector.selector,
    env.listed ?? batchedLists(kube, selector.selector) ?? selectedLists(kube, selector.selector),
  );
  const hookType = hookToCall(controller, parent, stillMatches);
  if (hookType === 'none') return { resyncAfterSeconds: 0 };
  const hook = controller.spec.hooks![hookType]!;
  const customize = controller.spec.hooks?.customize;
  const related = customize
    ? await relatedFor(customize, controller, parent, parentKind, { kube, discovery: discoveryFor(kube), hookUrls: env.hookUrls })
    : undefined;
  if (related && !related.ok) return hookFailed(related.failure);
  // Without the subresource, /status is a 404 that reads like a deleted parent: a plain update instead (upstream's fallback).
  const statusSubresource = await discoveryFor(kube).hasStatusSubresource(parentKind);

  const statusWriteSyncs = controller.spec.parentResource.ignoreStatusChanges !== true;
  let current: KubeObject = parent;
  for (let round = 1; ; round++) {
    const planned = await askAndPlan(
      hook,
      hookType,
      env.hookUrls,
      {
        controller,
        parent: current,
        version: hook.version ?? 'v1',
        childRules: composite.childRules,
        children: observed,
        relatedRules: related?.value.rules,
        related: related?.value.objects,
        finalizing: hookType === 'finalize',
      },
      {
        controller: effective,
        parent: current,
        parentApiVersion: apiVersionOf(parentKind),
        parentKind: parentKind.kind,
        childRules: composite.childRules,
        strategies: composite.strategies,
        selector: selector.selector,
        observed,
        statusSubresource,
      },
    );
    if (!planned.ok) return hookFailed(planned.failure);
    const plan = planned.value;
    if (plan.removeFinalizer) {
      const kept = await removeFinalizer(kube, parentKind, current, name);
      if (!kept) return { resyncAfterSeconds: 0 };
      current = kept;
    }
    if (!plan.outcome.ok) return fail(plan.outcome.reason, plan.outcome.eventReason);

    const writes = await applyChildOperations(kube, composite.childKinds, plan.outcome.value.children, env.budget);
    const last = round === SYNC_ROUNDS;
    // A parent losing its finalizer is going away, or no longer ours; one with writes left over is
    // handed back to continue (`left`): its sync ends here.
    const again = !last && !plan.removeFinalizer && writes.left === 0;
    // Children written, and nothing else to wait for: ask again with them observed, before any status is written.
    if (again && writes.written.length > 0 && writes.deleted === 0 && writes.errors.length === 0) {
      observed = withWritten(observed, writes.written);
      continue;
    }
    const status = plan.outcome.value.status;
    let statusWritten = false;
    let statusConflict = false;
    if (status.changed) {
      try {
        const written = await kube.replace(parentKind, { ...current, status: status.status }, statusSubresource ? 'status' : undefined);
        current = { ...written, apiVersion: apiVersionOf(parentKind), kind: parentKind.kind };
        statusWritten = true;
      } catch (error) {
        // The parent changed (synced again soon) or went away meanwhile.
        if (isConflict(error)) statusConflict = true;
        else if (!isNotFound(error)) throw error;
      }
    }
    if (writes.errors.length > 0) return fail(childErrorsMessage(writes.errors));
    const soon = writes.deleted > 0 || statusConflict || (last && ((statusWritten && statusWriteSyncs) || writes.written.length > 0));
    // The hook sees the status it answered, as upstream's sync on its own status update gives it.
    if (statusWritten && statusWriteSyncs && !soon && again) continue;
    const resync = plan.resyncAfterSeconds;
    return { resyncAfterSeconds: soon ? Math.min(resync || AGAIN_SOON_SECONDS, AGAIN_SOON_SECONDS) : resync, left: writes.left };
  }
}

/**
 * The hook asked, and its answer planned. A function of its own so that the request and the
 * answer (the hook's every child) are not held while the children are written: an async
 * function keeps its locals across each await until they are assigned again.
 */
async function askAndPlan(
  hook: Hook,
  hookType: 'sync' | 'finalize',
  hookUrls: UrlRewrite[],
  request: HookRequestInput,
  planInput: Omit<SyncPlanInput, 'response'>,
): Promise<HookResult<SyncPlan>> {
  const answer = await callHook(hook, hookType, buildHookRequest(request), hookUrls);
  return answer.ok ? { ok: true, value: planSync({ ...planInput, response: answer.value }) } : answer;
}

/** `observed` with each written child in place of its older self (or added). */
function withWritten(observed: KubeObject[], written: KubeObject[]): KubeObject[] {
  const id = (object: KubeObject) => `${object.apiVersion}/${object.kind}/${object.metadata.namespace ?? ''}/${object.metadata.name}`;
  const replaced = new Map(written.map((object) => [id(object), object]));
  const kept = observed.filter((object) => !replaced.has(id(object)));
  return [...kept, ...written];
}

const describe = (object: KubeObject): string =>
  object.metadata.namespace ? `${object.metadata.namespace}/${object.metadata.name}` : `${object.metadata.name}`;
