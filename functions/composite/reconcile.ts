// The composite function's reconcile. Its keys are of two kinds:
//
//   a CompositeController  check it, resolve its kinds, and sync every parent it governs (listed
//                          page by page, a few at a time): what a new or changed controller, its
//                          resyncPeriodSeconds and the function's resync bring;
//   a parent               sync that one parent under each controller of its kind: what the
//                          parent's and its children's events bring (routing.ts).
//
// One parent's failure never stops the others: each is reported on its own parent (SyncError
// Event). A parent key that failed is retried with backoff. A sweep reports its failed parents
// as failed keys of their own (ReconcileResult.failedKeys), so they alone are retried with
// backoff, unless its controller has a resyncPeriodSeconds: then the sweep asks for its requeue,
// and the failed parents are tried again with the next sweep (Sweep.result explains why). A
// parent whose hook asked for resyncAfterSeconds is requeued alone, at its own time. A sweep
// syncs parents until the delivery's deadline (ReconcileContext.deadline) and hands the rest back
// as deferred keys, each then synced on its own: 1200 parents behind a 3 s hook would otherwise
// take 450 s, past the request's timeout, and every retry would start the sweep over. The same
// deadline stops the child writes inside a parent's sync (children.ts applyChildOperations): a
// parent left with children to write is deferred too, and its next sync writes only those.
//
// Upstream: metacontroller pkg/controller/composite/controller.go (every parent is its own work
// item, so failures are independent; Start: resyncPeriodSeconds; a hook's resyncAfterSeconds
// requeues that parent).
import { resyncPeriodMs } from './metacontroller/index.ts';
import {
  type ReconcileContext,
  type ReconcileResult,
  agreedRetryAfter,
  TerminalError,
  TransientError,
  MAX_KEYS_PER_EVENT,
  apiVersionOf,
  groupKind,
  keyOf,
  kindKey,
  type KindKey,
  type KubeObject,
  ApiError,
  isRbacDenial,
  guessedResource,
  watchableBySource,
  forEachLimited,
  getNoOlderThan,
} from '../runtime/index.ts';
import { sharedLists, type CandidateLists } from './children.ts';
import { forgetComposites, resolveComposite, servedComposites, withParentKind } from './served-controllers.ts';
import { ensureEventing } from './ensure-event-sources.ts';
import { eventingOptionsFrom, EVENT_SOURCES_CONFIG } from './event-sources.ts';
import { parseHookUrls, type UrlRewrite } from './hooks.ts';
import { CompositeControllerKind } from './kinds.ts';
import { governs, syncParent, type ResolvedComposite } from './sync-parent.ts';

/** Parents synced at once in a sweep: hooks are remote calls, the API server is shared. */
const PARENT_CONCURRENCY = 8;

export async function reconcileComposite(key: KindKey, ctx: ReconcileContext): Promise<ReconcileResult | void> {
  return groupKind(key.kind) === groupKind(CompositeControllerKind) ? reconcileController(key, ctx) : reconcileParent(key, ctx);
}

/** The Event reason on a CompositeController the function's role does not cover (an install narrowed to other controllers). */
export const NOT_PERMITTED_REASON = 'NotPermitted';

/** The Event reason on a CompositeController whose work another 403 refused (an admission policy, a quota). */
export const REFUSED_REASON = 'Refused';

/**
 * Every parent of one controller; a 403 on the way is reported on it, not retried (the resync
 * tries again): an RBAC denial as a narrow install without this controller, any other as itself.
 */
async function reconcileController(key: KindKey, ctx: ReconcileContext): Promise<ReconcileResult | void> {
  try {
    return await syncController(key, ctx);
  } catch (error) {
    if (!(error instanceof ApiError) || error.code !== 403) throw error;
    if (!isRbacDenial(error))
      throw new TerminalError(
        `serving CompositeController ${key.name} was refused: ${error.message}. This is not the function's role (an admission policy or a quota refused it), so regenerating the install does not help; the resync tries again`,
        { reason: REFUSED_REASON, cause: error },
      );
    throw new TerminalError(
      `the composite function may not serve CompositeController ${key.name}: ${error.message}. Its install grants exactly the rights of the controllers it was generated with: regenerate it with this controller in \`opfn manifests --composite <file>\`, or choose \`--composite-broad\``,
      { reason: NOT_PERMITTED_REASON, cause: error },
    );
  }
}

async function syncController(key: KindKey, ctx: ReconcileContext): Promise<ReconcileResult | void> {
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
    for (const kind of [composite.parentKind, ...composite.childKinds].filter((kind) => !watchableBySource(kind))) {
      ctx.events.warning(
        object,
        CompositeControllerKind,
        'KindNotWatchable',
        `${kind.kind} is served as "${kind.plural}", and no kind name makes an ApiServerSource watch that (it guesses "${guessedResource(kind.kind)}" from ${kind.kind}): its changes reach this controller only through its resync`,
      );
    }
    const changed = results.filter((result) => result.operation !== 'unchanged');
    if (changed.length)
      ctx.log.info(
        { controller: key.name, changed: changed.map((result) => `${result.operation} ${result.kind} ${result.name}`) },
        'event sources of the CompositeController brought in line',
      );
  }
  const sweep = new Sweep(ctx, sharedLists(ctx.kube), ctx.deadline);
  // An install limited to one namespace may only list there.
  for await (const page of ctx.kube.pages(composite.parentKind, {
    namespace: composite.parentKind.namespaced ? ctx.installNamespace : undefined,
  })) {
    await forEachLimited(page.items, PARENT_CONCURRENCY, (parent) => sweep.sync(composite, parent));
  }
  const period = resyncPeriodMs(composite.controller);
  return sweep.result(period ? period / 1000 : 0, 'sweep');
}

/** One parent, under every controller of its kind (normally one). */
async function reconcileParent(key: KindKey, ctx: ReconcileContext): Promise<ReconcileResult | void> {
  const composites = withParentKind(await servedComposites(ctx.kube, ctx.log), apiVersionOf(key.kind), key.kind.kind);
  if (composites.length === 0) return undefined;
  // From the watch cache when it holds the version the event announced (the parent's own event):
  // as fresh as that event, and it spares etcd a read per sync. In a burst, from a watch of the
  // parent kind (its rights hold watch: policyRulesFor).
  ctx.kube.watchDuringBursts(key.kind, key.kind.namespaced ? ctx.installNamespace : undefined);
  const parent = await getNoOlderThan<KubeObject>(ctx.kube, key.kind, key, ctx.eventObject);
  if (!parent) return undefined;
  // Candidates are listed for this parent alone, by its child selector (sync-parent.ts).
  const sweep = new Sweep(ctx, undefined, Infinity);
  for (const composite of composites) await sweep.sync(composite, parent);
  return sweep.result(0, 'parent');
}

/** Syncs parents until its deadline, keeping the earliest requested resync, every failure and the parents left. */
class Sweep {
  readonly #ctx: ReconcileContext;
  readonly #hookUrls: UrlRewrite[];
  readonly #listed: CandidateLists | undefined;
  readonly #deadline: number;
  #started = 0;
  readonly #failures: { key: KindKey; error: TransientError }[] = [];
  /** The parents whose hooks asked to be called again (resyncAfterSeconds > 0). */
  readonly #resyncs: { key: KindKey; afterSeconds: number }[] = [];
  /** The parents not synced because the deadline had passed. */
  readonly #deferred: KindKey[] = [];
  /** The parents synced in part: the deadline stopped their child writes. */
  readonly #unfinished: KindKey[] = [];

  constructor(ctx: ReconcileContext, listed: CandidateLists | undefined, deadline: number) {
    const hookUrls = parseHookUrls(ctx.config.COMPOSITE_HOOK_URLS ?? '');
    if (typeof hookUrls === 'string') throw new TerminalError(hookUrls, { reason: 'InvalidConfig' });
    this.#ctx = ctx;
    this.#hookUrls = hookUrls;
    this.#listed = listed;
    this.#deadline = deadline;
  }

  async sync(composite: ResolvedComposite, parent: KubeObject): Promise<void> {
    const { kube, events, log, now } = this.#ctx;
    const key = kindKey(composite.parentKind, keyOf(parent));
    // The first parent is always synced: every delivery gets something done. A parent the
    // controller does not govern costs nothing to pass over (syncParent would do the same).
    if (this.#started > 0 && now().getTime() >= this.#deadline) {
      if (governs(composite, parent)) this.#deferred.push(key);
      return;
    }
    this.#started++;
    // Within a parent's sync the delivery's deadline stops its child writes (a parent's key has no
    // deadline of its own for starting parents: it has one). A parent left with writes to do is
    // deferred: synced again in the reply's delivery, which writes only what is still missing.
    const budget = { deadline: this.#ctx.deadline, now: () => now().getTime() };
    try {
      const synced = await syncParent(composite, parent, { kube, events, hookUrls: this.#hookUrls, listed: this.#listed, budget });
      if (synced.left) this.#unfinished.push(key);
      else if (synced.resyncAfterSeconds > 0) this.#resyncs.push({ key, afterSeconds: synced.resyncAfterSeconds });
    } catch (error) {
      const failure = error instanceof TransientError ? error : new TransientError((error as Error).message, { cause: error });
      log.warn({ parent: parent.metadata.name, err: failure.message }, 'sync of a parent failed; retried');
      this.#failures.push({ key, error: failure });
    }
  }

  /** What the sweep asks of the answer: the requeues and failures (below), and the parents it left undone (deferredKeys). */
  result(periodSeconds: number, answering: 'sweep' | 'parent'): ReconcileResult | undefined {
    const result = this.#requeuesAndFailures(periodSeconds, answering);
    if (this.#deferred.length === 0 && this.#unfinished.length === 0) return result;
    this.#ctx.log.info(
      { synced: this.#started, deferred: this.#deferred.length, unfinished: this.#unfinished.length },
      'stopped at the delivery deadline; the parents left, and those whose children are not all written yet, are synced one by one',
    );
    return { ...result, deferredKeys: [...this.#unfinished, ...this.#deferred] };
  }

  /**
   * The requeues, if any. A sweep requeues each parent whose hook asked for resyncAfterSeconds on
   * its own, at its own time (ReconcileResult.requeueKeys, as upstream's enqueueAfter of that
   * parent), and itself after the period; beyond the keys one answer carries, it comes back
   * itself at the soonest of them instead, which syncs every parent again, but none late. One
   * parent's key asks for the soonest of its controllers' hooks.
   *
   * When a parent failed: the requeues still, if the controller has a resyncPeriodSeconds; else,
   * for a sweep, the failed parents as failed keys of their own, and for one parent's key a
   * throw, retried after the shortest Retry-After all agree on.
   *
   * Why the period wins: a reply carries failed keys beside requeues (answers.ts), but on
   * Knative it is delivered, retried and dead-lettered whole. A sweep due after the delivery's
   * budget is not waited for, so a parent that keeps failing would fail that reply alone until
   * the broker dead-letters it, and the sweep's requeue with it: the periodic resync of every
   * parent of the controller would stop until the function's resync (upstream resyncs each
   * parent on its own, and retries only the failing key: controller.go Start and
   * processNextWorkItem). So the period keeps running, and it is what retries the failed
   * parents: each sweep tries them again (each failure is again a SyncError Event on its
   * parent), and any event of a failed parent retries that parent alone, with the broker's
   * backoff. Without a period the sweep reports them as failed keys, retried alone as upstream
   * does, and the parents that asked for resyncAfterSeconds keep their requeues beside them.
   */
  #requeuesAndFailures(periodSeconds: number, answering: 'sweep' | 'parent'): ReconcileResult | undefined {
    const failures = this.#failures;
    const apart = answering === 'sweep' && this.#resyncs.length <= MAX_KEYS_PER_EVENT;
    const own = [periodSeconds, ...(apart ? [] : this.#resyncs.map(({ afterSeconds }) => afterSeconds))].filter((seconds) => seconds > 0);
    const requeues: ReconcileResult = {};
    if (own.length > 0) requeues.requeueAfterSeconds = Math.min(...own);
    if (apart && this.#resyncs.length > 0) requeues.requeueKeys = this.#resyncs;
    const requeue = Object.keys(requeues).length > 0 ? requeues : undefined;
    if (failures.length > 0 && periodSeconds > 0) {
      this.#ctx.log.warn(
        { failed: failures.length, requeueAfterSeconds: requeue?.requeueAfterSeconds },
        'parents failed to sync; the periodic resync retries them',
      );
      return requeue;
    }
    if (failures.length > 0 && answering === 'sweep') return { ...requeue, failedKeys: failures };
    if (failures.length > 0) {
      const message = `${failures.length} parent(s) failed to sync: ${failures
        .slice(0, 3)
        .map(({ error }) => error.message)
        .join('; ')}${failures.length > 3 ? '; …' : ''}`;
      throw new TransientError(message, { retryAfterSeconds: agreedRetryAfter(failures.map(({ error }) => error.retryAfterSeconds)) });
    }
    return requeue;
  }
}
