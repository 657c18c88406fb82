// The reconcile loop: the keys of one delivery, a few at a time, each through the per-key work
// queue, and their results turned into one answer (answers.ts). A reconcile's failure comes back
// as a value, never as a throw.
import type { Logger } from 'pino';
import type { ReconcileContext } from '../declaration.ts';
import { BadKeyError, statusForError, TerminalError, TransientError } from '../errors.ts';
import { kindKeyString, sameKind, type KindKey, type KubeObject } from '../kinds.ts';
import { ApiError } from '../kube/errors.ts';
import { forEachLimited } from '../concurrency.ts';
import type { EventSink } from '../recorder.ts';
import { answerFor, failedResult, type KeyResult, type Outcome } from './answers.ts';
import { reconcileWithFinalizer } from './finalizing.ts';
import type { HostSettings } from './host-options.ts';
import { eventObjectFromFirstRead } from './reference-reads.ts';
import type { SeenObjects } from './skips.ts';
import { UnmendableReconciles } from './unmendable.ts';
import { KeyedWorkQueue } from './workqueue.ts';

/**
 * The furthest a requeue is held (30 days). A later one (a hook's resyncAfterSeconds of 1e13)
 * comes back after this instead: one harmless extra reconcile, where the exact time would not
 * fit in a Date and would fail the answer of a reconcile that succeeded.
 */
export const MAX_REQUEUE_SECONDS = 30 * 24 * 3600;

/** When a reconcile asked to run again: never for a negative or non-numeric delay (Metacontroller's resyncAfterSeconds ≤ 0), at most MAX_REQUEUE_SECONDS ahead. */
export function requeueTime(requeueAfterSeconds: number | undefined, now: Date): number | undefined {
  if (requeueAfterSeconds === undefined || !(requeueAfterSeconds >= 0)) return undefined;
  return now.getTime() + Math.min(requeueAfterSeconds, MAX_REQUEUE_SECONDS) * 1000;
}

export class ReconcileLoop {
  readonly #settings: HostSettings;
  readonly #queue = new KeyedWorkQueue();
  readonly #seen: SeenObjects;
  readonly #events: EventSink;
  readonly #unmendable: UnmendableReconciles;

  constructor(settings: HostSettings, seen: SeenObjects, events: EventSink) {
    this.#settings = settings;
    this.#seen = seen;
    this.#events = events;
    this.#unmendable = new UnmendableReconciles(settings.declaration, settings.kube, events);
  }

  /** When a delivery arriving now stops starting work. */
  deadline(): number {
    return this.#settings.now().getTime() + this.#settings.deliveryBudgetMs;
  }

  /**
   * Reconciles the keys (a few at a time, each not before its `dueAt`) and turns their results
   * into one answer. Keys not started by the deadline are deferred, except the first: every
   * delivery gets something done.
   */
  async reconcileAll(
    keys: KindKey[],
    log: Logger,
    deadline: number,
    eventObject?: KubeObject,
    dueAt?: number[],
    listed?: KubeObject[],
  ): Promise<Outcome> {
    const { fanOutConcurrency, now, sleep, declaration } = this.#settings;
    const results: KeyResult[] = new Array(keys.length);
    const reads = readsOnce();
    await forEachLimited(keys, fanOutConcurrency, async (key, index) => {
      const early = (dueAt?.[index] ?? 0) - now().getTime();
      if (early > 0) await sleep(early);
      results[index] =
        index > 0 && now().getTime() >= deadline
          ? { type: 'deferred' }
          : await this.reconcileKey(key, log, eventObject, reads, deadline, listed?.[index]);
    });
    const outcome = answerFor(declaration.name, keys, results, now());
    if (outcome.body.deferred)
      log.warn(
        { ...outcome.body, budgetMs: this.#settings.deliveryBudgetMs },
        'delivery budget spent; the keys not started go back in the reply',
      );
    return outcome;
  }

  /**
   * One reconcile of one key, coalesced with the other requests for it (workqueue.ts); returns
   * the failure, if any, instead of throwing. `eventObject` is the event's body for this object (trusted
   * only to do less; a shared follow-up run gets none), `listed` a resync's or poll's listing of it
   * (ReconcileContext.listed; the same).
   */
  reconcileKey(
    key: KindKey,
    parentLog: Logger,
    eventObject?: KubeObject,
    reads = readsOnce(),
    deadline = this.deadline(),
    listed?: KubeObject,
  ): Promise<KeyResult> {
    const { metrics, now } = this.#settings;
    const id = kindKeyString(key);
    const log = parentLog.child({ key: id });
    // Taken now, in call order (reference-reads.ts explains why that keeps it safe).
    const announced = !eventObject && this.#seen.references.take(key);
    return this.#queue.run(id, async (shared) => {
      const started = performance.now();
      const observe = (result: string) => {
        const seconds = (performance.now() - started) / 1000;
        metrics.reconciles.inc({ result });
        metrics.reconcileSeconds.observe({ result }, seconds);
        return seconds;
      };
      // A run several events share may be older than some of their changes: it reads afresh,
      // and has a budget of its own (it starts when the run before it ends).
      const ctx = this.#context(log, shared ? undefined : eventObject, shared ? readsOnce() : reads, shared ? this.deadline() : deadline);
      if (announced && !shared) ctx.kube = eventObjectFromFirstRead(ctx, key);
      if (listed && !shared) ctx.listed = listed;
      try {
        const result = await reconcileWithFinalizer(this.#settings.declaration, key, ctx);
        const requeue = result?.requeueAfterSeconds;
        const seconds = observe(requeue !== undefined ? 'requeue' : 'success');
        if (ctx.eventObject && sameKind(key.kind, ctx.eventObject.apiVersion, ctx.eventObject.kind))
          this.#seen.remember(key, ctx.eventObject);
        log.debug({ ms: Math.round(seconds * 1000), requeueAfterSeconds: requeue, failedKeys: result?.failedKeys?.length }, 'reconciled');
        await this.#unmendable.succeeded(key, log);
        // A TerminalError is not retried (its reconcile reported it).
        const failedKeys = result?.failedKeys
          ?.filter(({ error }) => !(error instanceof TerminalError))
          .map(({ key, error }) => ({ key, result: failedResult(error) }));
        const requeueKeys = result?.requeueKeys?.flatMap(({ key, afterSeconds }) => {
          const at = requeueTime(afterSeconds, now());
          return at === undefined ? [] : [{ key, at }];
        });
        const deferredKeys = result?.deferredKeys;
        return {
          type: 'done',
          requeueAt: requeueTime(requeue, now()),
          ...(failedKeys?.length ? { failedKeys } : {}),
          ...(requeueKeys?.length ? { requeueKeys } : {}),
          ...(deferredKeys?.length ? { deferredKeys } : {}),
        };
      } catch (error) {
        const status = statusForError(error);
        if (error instanceof TerminalError) {
          observe('terminal');
          log.warn({ err: error.message, reason: error.reason }, 'reconcile failed for good; not retried');
          this.#events.record(
            { metadata: { name: key.name, namespace: key.namespace || undefined } },
            key.kind,
            'Warning',
            error.reason,
            error.message,
            log,
          );
          return { type: 'done' };
        }
        // 403, 422, a kind not served: shown on the object and answered 2xx (unmendable.ts).
        const unmended = await this.#unmendable.report(key, error, log);
        if (unmended) {
          observe('refused');
          return {
            type: 'refused',
            reason: unmended.reason,
            error: unmended.message,
            requeueAt: requeueTime(unmended.retryAfterSeconds, now()),
          };
        }
        observe('error');
        // An API answer (e.g. 403 from missing RBAC) is explained by its message; only a
        // failure of our own code needs the stack.
        const expected = error instanceof ApiError || error instanceof TransientError || error instanceof BadKeyError;
        log[status === 500 ? 'error' : 'warn'](
          { err: (error as Error).message, ...(expected ? {} : { stack: (error as Error).stack }) },
          status === 400 ? 'key can never be reconciled' : 'reconcile failed; it will be retried',
        );
        return failedResult(error);
      }
    });
  }

  /** The declaration's sweep (declaration.ts): logged when it fails, never failing the resync. */
  async sweep(log: Logger, deadline: number): Promise<void> {
    try {
      await this.#settings.declaration.sweep!(this.#context(log, undefined, readsOnce(), deadline));
    } catch (error) {
      log.warn({ err: (error as Error).message }, "the resync's sweep failed; the next resync tries again");
    }
  }

  #context(log: Logger, eventObject: KubeObject | undefined, readOnce: ReconcileContext['readOnce'], deadline: number): ReconcileContext {
    const { kube, config, http, now, installNamespace } = this.#settings;
    return { kube, log, events: this.#events.recorder(log), config, http, now, installNamespace, eventObject, readOnce, deadline };
  }
}

/** ReconcileContext.readOnce for one event: each read once; a read that failed is tried again by the next key that asks. */
function readsOnce(): ReconcileContext['readOnce'] {
  const reads = new Map<string, Promise<unknown>>();
  return <T>(name: string, read: () => Promise<T>): Promise<T> => {
    let pending = reads.get(name) as Promise<T> | undefined;
    if (!pending) {
      pending = read();
      reads.set(name, pending);
      pending.catch(() => reads.delete(name));
    }
    return pending;
  };
}
