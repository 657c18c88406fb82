// The composite function's reconcile. Its keys are of two kinds:
//
//   a CompositeController  check it, resolve its kinds, and sync every parent it governs (listed
//                          page by page, a few at a time): what a new or changed controller, its
//                          resyncPeriodSeconds and the function's resync bring;
//   a parent               sync that one parent under each controller of its kind: what the
//                          parent's and its children's events bring (routing.ts).
//
// One parent's failure never stops the others: each is reported on its own parent (SyncError
// Event) and, from a sweep, to the runtime as a failed key of its own (ReconcileResult.otherKeys):
// it is retried alone with the broker's backoff, while the sweep keeps its requeue (its
// controller's resyncPeriodSeconds), as upstream retries only the failing parent's work item.
// A hook's resyncAfterSeconds requeues its parent alone, in a sweep too.
//
// Upstream: metacontroller pkg/controller/composite/controller.go (every parent is its own work
// item, so failures are independent; Start: resyncPeriodSeconds; a hook's resyncAfterSeconds
// requeues that parent).
import { resyncPeriodMs } from '../composite/controller-spec.ts';
import type { ReconcileContext, ReconcileResult } from '../runtime/declaration.ts';
import { TerminalError, TransientError } from '../runtime/errors.ts';
import { MAX_KEYS_PER_EVENT } from '../runtime/events.ts';
import { apiVersionOf, groupKind, keyOf, kindKey, type KindKey, type KubeObject } from '../runtime/kinds.ts';
import { sharedLists, type CandidateLists } from './children.ts';
import { forgetComposites, resolveComposite, servedComposites, withParentKind } from './controllers.ts';
import { ensureEventing, eventingOptionsFrom, EVENT_SOURCES_CONFIG } from './eventing.ts';
import { parseHookUrls, type UrlRewrite } from './hooks.ts';
import { INSTALL_CONFIG } from '../runtime/knative-objects.ts';
import { CompositeControllerKind } from './kinds.ts';
import { syncParent, type ResolvedComposite } from './sync-parent.ts';

/** Parents synced at once in a sweep: hooks are remote calls, the API server is shared. */
const PARENT_CONCURRENCY = 8;

export async function reconcileComposite(key: KindKey, ctx: ReconcileContext): Promise<ReconcileResult | void> {
  return groupKind(key.kind) === groupKind(CompositeControllerKind) ? reconcileController(key, ctx) : reconcileParent(key, ctx);
}

/** Every parent of one controller. */
async function reconcileController(key: KindKey, ctx: ReconcileContext): Promise<ReconcileResult | void> {
  forgetComposites(ctx.kube);
  const object = await ctx.kube.get<KubeObject>(CompositeControllerKind, key);
  // Gone: its event sources go with it (they are owned by it: garbage-collected); children stay with their parents.
  if (!object || object.metadata.deletionTimestamp) return undefined;
  const composite = await resolveComposite(object, ctx.kube);
  // Its parents' and children's events start flowing once its sources exist.
  if (ctx.config[EVENT_SOURCES_CONFIG] !== 'plane') {
    const options = eventingOptionsFrom(ctx.config);
    if (typeof options === 'string') throw new TerminalError(options, { reason: 'InvalidConfig' });
    const results = await ensureEventing(object, { parent: composite.parentKind, children: composite.childKinds }, ctx, options);
    const changed = results.filter((result) => result.operation !== 'unchanged');
    if (changed.length) ctx.log.info({ controller: key.name, changed: changed.map((result) => `${result.operation} ${result.kind} ${result.name}`) }, 'event sources of the CompositeController brought in line');
  }
  const sweep = new Sweep(ctx, sharedLists(ctx.kube));
  // An install limited to one namespace (OPFN_SCOPE=namespace) may only list there.
  const namespace = ctx.config[INSTALL_CONFIG.scope] === 'namespace' && composite.parentKind.namespaced ? ctx.config[INSTALL_CONFIG.namespace] : undefined;
  for await (const page of ctx.kube.pages(composite.parentKind, { namespace })) {
    let next = 0;
    const worker = async () => {
      for (let index = next++; index < page.items.length; index = next++) await sweep.sync(composite, page.items[index]!);
    };
    await Promise.all(Array.from({ length: Math.min(PARENT_CONCURRENCY, page.items.length) }, worker));
  }
  const period = resyncPeriodMs(composite.controller);
  return sweep.sweepResult((period ?? 0) / 1000);
}

/** One parent, under every controller of its kind (normally one). */
async function reconcileParent(key: KindKey, ctx: ReconcileContext): Promise<ReconcileResult | void> {
  const composites = withParentKind(await servedComposites(ctx.kube, ctx.log), apiVersionOf(key.kind), key.kind.kind);
  if (composites.length === 0) return undefined;
  const parent = await ctx.kube.get<KubeObject>(key.kind, key);
  if (!parent) return undefined;
  // Candidates are listed for this parent alone, by its child selector (sync-parent.ts).
  const sweep = new Sweep(ctx, undefined);
  for (const composite of composites) await sweep.sync(composite, parent);
  return sweep.parentResult();
}

/**
 * Parents requeued on their own by one sweep (their hooks' resyncAfterSeconds); beyond this, the
 * sweep requeues itself when the soonest of the rest is due (and syncs them all then): a reply
 * carries at most MAX_KEYS_PER_EVENT keys, and the failed parents come first.
 */
const PARENT_REQUEUES_PER_SWEEP = MAX_KEYS_PER_EVENT / 2;

/**
 * Syncs parents, keeping each one's requested resync and failure. A parent's own key throws its
 * failure (the broker retries it with backoff) and returns its requeue; a sweep reports its
 * parents' as keys of their own (ReconcileResult.otherKeys), so a failing parent neither redoes
 * the sweep nor stops its period, and one parent's short resyncAfterSeconds does not resync them all.
 */
class Sweep {
  readonly #ctx: ReconcileContext;
  readonly #hookUrls: UrlRewrite[];
  readonly #listed: CandidateLists | undefined;
  readonly #failures: { key: KindKey; error: TransientError }[] = [];
  readonly #requeues: { key: KindKey; requeueAfterSeconds: number }[] = [];

  constructor(ctx: ReconcileContext, listed: CandidateLists | undefined) {
    const hookUrls = parseHookUrls(ctx.config.COMPOSITE_HOOK_URLS ?? '');
    if (typeof hookUrls === 'string') throw new TerminalError(hookUrls, { reason: 'InvalidConfig' });
    this.#ctx = ctx;
    this.#hookUrls = hookUrls;
    this.#listed = listed;
  }

  async sync(composite: ResolvedComposite, parent: KubeObject): Promise<void> {
    const { kube, events, log } = this.#ctx;
    const key = kindKey(composite.parentKind, keyOf(parent));
    try {
      const synced = await syncParent(composite, parent, { kube, events, hookUrls: this.#hookUrls, listed: this.#listed });
      if (synced.resyncAfterSeconds > 0) this.#requeues.push({ key, requeueAfterSeconds: synced.resyncAfterSeconds });
    } catch (error) {
      const failure = error instanceof TransientError ? error : new TransientError((error as Error).message, { cause: error });
      log.warn({ parent: parent.metadata.name, err: failure.message }, 'sync of a parent failed; retried');
      this.#failures.push({ key, error: failure });
    }
  }

  /** One parent's result: its failure thrown (retried with backoff after the shortest Retry-After all agree on), or its soonest requeue. */
  parentResult(): ReconcileResult | undefined {
    const failures = this.#failures;
    if (failures.length > 0) {
      const waits = failures.map(({ error }) => error.retryAfterSeconds).filter((seconds): seconds is number => seconds !== undefined);
      const message = `${failures.length} parent(s) failed to sync: ${failures.slice(0, 3).map(({ error }) => error.message).join('; ')}${failures.length > 3 ? '; …' : ''}`;
      throw new TransientError(message, { retryAfterSeconds: waits.length === failures.length ? Math.min(...waits) : undefined });
    }
    return soonest(this.#requeues.map(({ requeueAfterSeconds }) => requeueAfterSeconds));
  }

  /**
   * A sweep's result: its period as its own requeue, its parents' failures and requeues as keys
   * of their own; a parent due no sooner than the sweep itself is left to the sweep.
   */
  sweepResult(periodSeconds: number): ReconcileResult | undefined {
    const requeues = this.#requeues.sort((a, b) => a.requeueAfterSeconds - b.requeueAfterSeconds);
    const own = soonest([periodSeconds, requeues[PARENT_REQUEUES_PER_SWEEP]?.requeueAfterSeconds ?? 0]);
    const reported = requeues.slice(0, PARENT_REQUEUES_PER_SWEEP).filter(({ requeueAfterSeconds }) => !own || requeueAfterSeconds < own.requeueAfterSeconds!);
    const otherKeys = [...this.#failures, ...reported];
    return own || otherKeys.length ? { ...own, ...(otherKeys.length ? { otherKeys } : {}) } : undefined;
  }
}

/** The soonest of the positive delays, as a requeue. */
function soonest(delays: number[]): ReconcileResult | undefined {
  const positive = delays.filter((seconds) => seconds > 0);
  return positive.length ? { requeueAfterSeconds: Math.min(...positive) } : undefined;
}
