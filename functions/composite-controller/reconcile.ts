// Reconciling one CompositeController: check it, resolve its kinds through discovery, then sync
// every parent it governs (listed page by page, a few at a time). One parent's failure never
// stops the others: each is reported on its own parent (SyncError Event), and the
// controller's key is retried with backoff once all were tried.
//
// Upstream: metacontroller pkg/controller/composite/controller.go (newParentController: the
// controller is checked and its kinds resolved once; Start: resyncPeriodSeconds; every parent
// is its own work item, so failures are independent).
//
// What brings a sweep (this slice): an event about the CompositeController, a resync, or the
// requeue this returns (resyncPeriodSeconds, a hook's resyncAfterSeconds, or "again soon" after
// deletes). Events about parents and children do not reach this function yet: the runtime
// routes only kinds compiled into a declaration, and these are known at run time.
import { checkController, resyncPeriodMs } from '../composite/controller-spec.ts';
import { updateStrategies } from '../composite/manage-children.ts';
import { parentFilter } from '../composite/selector.ts';
import type { CompositeController, ResolvedResource } from '../composite/types.ts';
import type { ReconcileContext, ReconcileResult } from '../runtime/declaration.ts';
import { discoveryFor } from '../runtime/discovery.ts';
import { TerminalError, TransientError } from '../runtime/errors.ts';
import { apiVersionOf, type KubeObject, type ObjectKey, type ResourceKind } from '../runtime/kinds.ts';
import { sharedLists } from './children.ts';
import { parseHookUrls } from './hooks.ts';
import { CompositeControllerKind } from './kinds.ts';
import { syncParent, type ResolvedComposite } from './sync-parent.ts';

/** Parents synced at once: hooks are remote calls, the API server is shared. */
const PARENT_CONCURRENCY = 8;

export async function reconcileCompositeController(key: ObjectKey, ctx: ReconcileContext): Promise<ReconcileResult | void> {
  const object = await ctx.kube.get<KubeObject>(CompositeControllerKind, key);
  // Gone: nothing to stop (this function keeps no watch per controller), children stay with their parents.
  if (!object || object.metadata.deletionTimestamp) return undefined;
  const checked = checkController(object);
  if (!checked.ok) throw new TerminalError(checked.reason, { reason: 'InvalidController' });
  const hookUrls = parseHookUrls(ctx.config.COMPOSITE_HOOK_URLS ?? '');
  if (typeof hookUrls === 'string') throw new TerminalError(hookUrls, { reason: 'InvalidConfig' });
  const composite = await resolve(checked.value, ctx);

  const failures: TransientError[] = [];
  let resyncAfterSeconds = 0;
  const env = { kube: ctx.kube, events: ctx.events, hookUrls, listed: sharedLists(ctx.kube) };
  for await (const page of ctx.kube.pages(composite.parentKind)) {
    let next = 0;
    const worker = async () => {
      for (let index = next++; index < page.items.length; index = next++) {
        try {
          const synced = await syncParent(composite, page.items[index]!, env);
          if (synced.resyncAfterSeconds > 0) resyncAfterSeconds = resyncAfterSeconds ? Math.min(resyncAfterSeconds, synced.resyncAfterSeconds) : synced.resyncAfterSeconds;
        } catch (error) {
          const failure = error instanceof TransientError ? error : new TransientError((error as Error).message, { cause: error });
          ctx.log.warn({ parent: page.items[index]!.metadata.name, err: failure.message }, 'sync of a parent failed; retried');
          failures.push(failure);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARENT_CONCURRENCY, page.items.length) }, worker));
  }
  if (failures.length > 0) {
    const waits = failures.map((failure) => failure.retryAfterSeconds).filter((seconds): seconds is number => seconds !== undefined);
    const message = `${failures.length} parent(s) failed to sync: ${failures.slice(0, 3).map((failure) => failure.message).join('; ')}${failures.length > 3 ? '; …' : ''}`;
    throw new TransientError(message, { retryAfterSeconds: waits.length === failures.length ? Math.min(...waits) : undefined });
  }
  const period = resyncPeriodMs(composite.controller);
  const candidates = [resyncAfterSeconds, period ? period / 1000 : 0].filter((seconds) => seconds > 0);
  return candidates.length ? { requeueAfterSeconds: Math.min(...candidates) } : undefined;
}

async function resolve(controller: CompositeController, ctx: ReconcileContext): Promise<ResolvedComposite> {
  const discovery = discoveryFor(ctx.kube);
  const { parentResource, childResources = [] } = controller.spec;
  const parentKind = await discovery.resolve(parentResource.apiVersion, parentResource.resource);
  const childKinds: ResourceKind[] = [];
  for (const rule of childResources) childKinds.push(await discovery.resolve(rule.apiVersion, rule.resource));
  const childRules: ResolvedResource[] = childKinds.map((kind) => ({ apiVersion: apiVersionOf(kind), resource: kind.plural, kind: kind.kind, namespaced: kind.namespaced }));
  const filter = parentFilter(controller.spec);
  // checkController compiled it already; kept total for the type.
  if (!filter.ok) throw new TerminalError(filter.reason, { reason: 'InvalidController' });
  return {
    controller,
    parentKind,
    childKinds,
    childRules,
    strategies: updateStrategies(childRules, childResources.map((rule) => rule.updateStrategy?.method)),
    parentFilter: filter.selector,
  };
}
