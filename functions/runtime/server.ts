// The HTTP host every function runs in: CloudEvent intake answering by Knative delivery rules,
// health and metrics endpoints, and graceful shutdown.
//
//   2xx  the work is done (or there was nothing to do for this function); when part of a
//        fan-out failed or a key asked to be reconciled later, the answer carries a reply
//        CloudEvent naming those keys (reply.ts), so only they are tried again
//   400  the request can never succeed (malformed or meaningless event): not retried
//   413  the body is larger than any object the API server stores
//   503  the API was unreachable, overloaded, or kept conflicting: retried with backoff
//   500  reconcile failed otherwise: retried, then dead-lettered
// Which error becomes which answer is decided in one place: statusForError (errors.ts).
import type { Server } from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { resolveConfig } from './config.ts';
import { installNamespaceFrom } from './knative-objects.ts';
import type { FunctionDeclaration, ReconcileContext } from './declaration.ts';
import { BadKeyError, statusForError, TerminalError, TransientError } from './errors.ts';
import { BadEventError, decodeCloudEvent, interpretEvent, type FunctionEvent } from './events.ts';
import { httpClient, type HttpClient } from './http.ts';
import { groupKind, isValidNamespace, keyOf, kindKey, kindKeyString, parseKindKey, pathSegmentProblem, sameKind, splitKindKey, type KindKey, type KubeObject } from './kinds.ts';
import { quote } from './bounded-messages.ts';
import { ApiError } from './kube/errors.ts';
import { KubeClient } from './kube/client.ts';
import { createLogger } from './log.ts';
import { createMetrics, type FunctionMetrics } from './metrics.ts';
import { reconcileWithFinalizer } from './finalizing.ts';
import { EventSink } from './recorder.ts';
import { answerFor, failedResult, type KeyResult, type Outcome } from './answers.ts';
import { keysForEvent, uniqueKeys } from './routing.ts';
import { hintFromFirstRead } from './reference-reads.ts';
import { isSettled, SeenObjects, skipReason } from './skips.ts';
import { KeyedWorkQueue } from './workqueue.ts';
import { FanOutGate } from './fan-out-gate.ts';
import { forEachLimited } from './concurrency.ts';
import { DEFAULT_DELIVERY_BUDGET_SECONDS, deliveryBudgetFromEnvironment } from './delivery-budget.ts';

export interface FunctionHostOptions {
  declaration: FunctionDeclaration;
  kube: KubeClient;
  log: Logger;
  metrics: FunctionMetrics;
  /** Larger requests are refused with 413; a Resource-mode event for the largest object the API server stores (about 1.5 MiB) fits. */
  maxBodyBytes?: number;
  /** Keys reconciled at once during a fan-out (resync, mapper, reply). */
  fanOutConcurrency?: number;
  /** The least time between the end of one resync (or poll) and the start of the next: FanOutGate; default FAN_OUT_SPACING_MS. */
  fanOutSpacingMs?: number;
  /** How long a delivery starts work (delivery-budget.ts); default DEFAULT_DELIVERY_BUDGET_SECONDS. */
  deliveryBudgetMs?: number;
  /** The declared config; resolved from the environment when omitted. */
  config?: Readonly<Record<string, string>>;
  /**
   * The namespace an install limited to one runs in (from the environment when omitted:
   * installNamespaceFrom); undefined for a cluster-wide install. The function's Role grants only
   * there, so its resync, polls and mappers list namespaced kinds there, and an event or key
   * about another namespace is ignored (only a forged one can name it).
   */
  installNamespace?: string;
  http?: HttpClient;
  now?: () => Date;
  /** Waits for a key named ahead of its due time (tests move a clock instead). */
  sleep?: (ms: number) => Promise<void>;
}

export type { Outcome } from './answers.ts';

/** Response header carrying what a delivery did, in counts (never keys: headers are limited to 16 KiB). */
export const OUTCOME_HEADER = 'x-opfn-outcome';
const asciiJson = (value: unknown): string => JSON.stringify(value).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

/** Objects up to the API server's limit (about 1.5 MiB) in a Resource-mode event, with room for JSON escaping. */
export const DEFAULT_MAX_EVENT_BYTES = 3 * 1024 * 1024;
/**
 * Connections a function opens to the API server at most (it never watches). A burst comes in
 * hundreds at a time (the broker's bound is the function's target × max scale), and with a
 * connection per concurrent request each is a TLS handshake for both sides. Measured on 500
 * reconciles fired at once at a freshly started bundled function, 4 rounds interleaved: the
 * function's CPU per reconcile 1.68–2.08 ms unbounded, 1.02–1.36 ms at 32 (16 and 64 in
 * between), and the burst as fast or faster.
 */
const API_CONNECTIONS = 32;
/**
 * The least time between two resyncs (or polls) of a function, end to start (FanOutGate), when
 * the last run was shorter: far below any resync schedule (minutes), and a burst of pings arriving
 * within it shares one run.
 */
const FAN_OUT_SPACING_MS = 1000;
/** How long a draining process waits for its Kubernetes Events to be written. */
const EVENT_FLUSH_DEADLINE_MS = 5000;
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

/** Is `namespace` (of a namespaced object; '' for a cluster-scoped one) outside an install limited to `installNamespace`? */
/** The answer when a delivery fails before any key is reconciled: statusForError's code, but 500 for a TerminalError (no key to record it on). */
function failedBeforeReconcile(error: unknown, log: Logger, what: string): Outcome {
  const status = statusForError(error);
  log[status === 400 ? 'warn' : 'error']({ err: (error as Error).message }, what);
  return { status: status === 200 ? 500 : status, body: { error: (error as Error).message } };
}

const outsideInstall = (installNamespace: string | undefined, namespace: string): boolean => installNamespace !== undefined && namespace !== '' && namespace !== installNamespace;

export class FunctionHost {
  readonly app: express.Express;
  readonly #options: Required<Omit<FunctionHostOptions, 'config' | 'installNamespace'>> & { config: Readonly<Record<string, string>>; installNamespace: string | undefined };
  readonly #queue = new KeyedWorkQueue();
  /** Resyncs and polls, each through its own gate (#fanOut). */
  readonly #fanOuts: Record<'resync' | 'poll', FanOutGate<Outcome>>;
  readonly #seen = new SeenObjects();
  readonly #events: EventSink;
  #inFlight = 0;
  #draining = false;
  #drained?: () => void;
  #drainedPromise?: Promise<void>;

  constructor(options: FunctionHostOptions) {
    const { declaration } = options;
    this.#options = {
      maxBodyBytes: DEFAULT_MAX_EVENT_BYTES,
      fanOutConcurrency: 8,
      fanOutSpacingMs: FAN_OUT_SPACING_MS,
      deliveryBudgetMs: DEFAULT_DELIVERY_BUDGET_SECONDS * 1000,
      http: httpClient(),
      now: () => new Date(),
      sleep: (ms: number) => delay(ms),
      ...options,
      config: options.config ?? resolveConfig(declaration.name, declaration.config),
      installNamespace: 'installNamespace' in options ? options.installNamespace : installNamespaceFrom(process.env),
    };
    this.#events = new EventSink(options.kube, declaration.name, options.log, this.#options.now);
    const gate = () => new FanOutGate<Outcome>(this.#options.fanOutSpacingMs, this.#options.sleep, () => this.#options.now().getTime());
    this.#fanOuts = { resync: gate(), poll: gate() };
    this.app = this.#buildApp();
  }

  #buildApp(): express.Express {
    const { metrics, log, maxBodyBytes } = this.#options;
    const app = express();
    app.disable('x-powered-by');
    app.get('/health/liveness', (_req, res) => void res.json({ status: 'ok' }));
    app.get('/health/readiness', (_req, res) => void res.status(this.#draining ? 503 : 200).json({ status: this.#draining ? 'draining' : 'ready' }));
    app.get('/metrics', async (_req, res) => {
      res.type(metrics.registry.contentType).send(await metrics.registry.metrics());
    });
    app.post('/', express.raw({ type: () => true, limit: maxBodyBytes }), async (req: Request, res: Response) => {
      // The request stays in flight until its answer is written out, not just until the work is
      // done: otherwise serve() could exit between the two, and the broker would redeliver an
      // event that had been handled.
      this.#inFlight++;
      res.once('close', () => {
        if (--this.#inFlight === 0 && this.#draining) this.#drained?.();
      });
      const outcome = await this.receive(req.headers, Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0));
      // A 2xx body that is not a CloudEvent counts as a failed delivery in Knative's broker (a
      // CloudEvent body is a reply event), so success has an empty body or a reply; the summary
      // travels in a header, as counts, for people debugging with `opfn invoke`.
      if (outcome.status < 300) {
        res.status(outcome.status).set(OUTCOME_HEADER, asciiJson(outcome.body));
        if (outcome.reply) res.set(outcome.reply.headers).send(outcome.reply.body);
        else res.end();
      } else {
        if (outcome.retryAfterSeconds) res.set('retry-after', String(Math.ceil(outcome.retryAfterSeconds)));
        res.status(outcome.status).json(outcome.body);
      }
    });
    // Body parser failures (too large, bad encoding, aborted; body-parser sets `type`) are the
    // sender's fault. Anything else here is a bug of ours: 500, retried, and logged with its stack.
    app.use((error: Error & { type?: string; status?: number }, _req: Request, res: Response, _next: NextFunction) => {
      if (error.type === undefined) {
        metrics.events.inc({ outcome: 'retry' });
        log.error({ err: error.message, stack: error.stack }, 'failed to answer a request');
        res.status(500).json({ error: `internal error: ${error.message}` });
        return;
      }
      const tooLarge = error.type === 'entity.too.large';
      const reason = tooLarge ? `request body larger than ${maxBodyBytes} bytes (the largest Kubernetes object fits; this is not an event this function can take)` : `unreadable request body: ${error.message}`;
      metrics.events.inc({ outcome: 'rejected' });
      log.warn({ reason }, 'rejected request');
      res.status(tooLarge ? 413 : error.status && error.status < 500 ? 400 : 500).json({ error: reason });
    });
    return app;
  }

  /** Handles one HTTP request body as a CloudEvent. Never throws. */
  async receive(headers: Record<string, string | string[] | undefined>, body: Buffer): Promise<Outcome> {
    const { metrics, log } = this.#options;
    if (this.#draining) return { status: 503, body: { error: 'shutting down; deliver again' } };
    let event: FunctionEvent;
    try {
      event = interpretEvent(decodeCloudEvent(headers, body));
    } catch (error) {
      const reason = error instanceof BadEventError ? error.message : `unreadable event: ${(error as Error).message}`;
      metrics.events.inc({ outcome: 'rejected' });
      log.warn({ reason, ceId: headers['ce-id'] }, 'rejected event');
      return { status: 400, body: { error: reason } };
    }
    const outcome = await this.handle(event);
    metrics.events.inc({ outcome: outcome.status >= 500 ? 'retry' : outcome.status >= 400 ? 'rejected' : outcome.body.ignored ? 'ignored' : 'done' });
    return outcome;
  }

  /** Reconciles what the event concerns. Never throws. */
  async handle(event: FunctionEvent): Promise<Outcome> {
    const { declaration, kube, log, installNamespace } = this.#options;
    const deadline = this.#deadline();
    // Made on first use: most events are skipped below without a line logged.
    let child: Logger | undefined;
    const eventLog = () => (child ??= log.child({ ceId: event.id }));
    const reconciled = declaration.reconciles;
    let keys: KindKey[];
    let hint: KubeObject | undefined;
    /** When each key may start (ms since the epoch), for keys a reconcile event names ahead of their time. */
    let dueAt: number[] | undefined;
    if (event.type === 'resync' || event.type === 'poll') return this.#fanOut(event.type, eventLog());
    try {
      if (event.type === 'reconcile') {
        const parsed = await Promise.all(event.keys.map((text) => this.#parseKey(text, eventLog())));
        const bad = parsed.find((key): key is string => typeof key === 'string');
        if (bad) return { status: 400, body: { error: `reconcile event: ${bad}` } };
        // Keys not yet due come from a broker that does not hold requeues (Knative's sends a
        // reply at once). One due within this delivery's budget is waited for here, so a short
        // requeue (a 10 s CrashLoopBackOff) keeps its time on Knative too; one due later is
        // dropped, neither done nor failed: the function keeps its due time and its resync
        // catches up.
        const dueTimes = event.keys.map((text) => (event.keyNotBefore?.get(text) ?? event.notBefore)?.getTime() ?? 0);
        const waited = (parsed as KindKey[]).map((key, index) => ({ key, at: dueTimes[index]! })).filter(({ at }) => at <= deadline);
        if (waited.length === 0) {
          const earliest = new Date(Math.min(...dueTimes));
          return { status: 200, body: { ignored: `not due until ${earliest.toISOString()}; the function keeps its due time and its resync catches up` } };
        }
        if (waited.length < parsed.length) eventLog().info({ dropped: parsed.length - waited.length }, 'keys due after this delivery\'s budget dropped; the resync catches up');
        // Soonest first (a key named twice counts at its earliest time): each waits for its own time.
        waited.sort((a, b) => a.at - b.at);
        keys = uniqueKeys(waited.map(({ key }) => key));
        const dueOf = new Map(waited.map(({ key, at }) => [key, at]));
        dueAt = keys.map((key) => dueOf.get(key)!);
      } else {
        if (outsideInstall(installNamespace, event.ref.namespace)) return { status: 200, body: { ignored: `${event.ref.kind} ${event.ref.namespace}/${event.ref.name} is outside the install's namespace ${installNamespace}` } };
        const skip = skipReason(declaration, event, kube.ownWrites, this.#seen);
        if (skip) return { status: 200, body: { ignored: skip } };
        keys = uniqueKeys(await keysForEvent(declaration, event, kube, eventLog(), installNamespace));
        if (keys.length === 0) return { status: 200, body: { ignored: `${event.ref.kind} ${event.ref.namespace}/${event.ref.name} concerns ${declaration.runtimeKinds ? `nothing ${declaration.name} reconciles` : `no ${reconciled.kind}`}` } };
        // The body is a hint for the one object it maps to (its own key, or its owner's); a
        // delete's body is the object's last state, not its present one.
        if (event.object && event.action !== 'delete' && keys.length === 1) hint = { apiVersion: event.ref.apiVersion, kind: event.ref.kind, ...event.object };
      }
    } catch (error) {
      return failedBeforeReconcile(error, eventLog(), 'could not work out what the event concerns');
    }
    if (installNamespace !== undefined) {
      const inside = keys.map((key) => !outsideInstall(installNamespace, key.namespace));
      if (!inside.every(Boolean)) {
        eventLog().warn({ dropped: inside.filter((x) => !x).length, installNamespace }, 'keys outside the install\'s namespace dropped');
        keys = keys.filter((_key, index) => inside[index]);
        dueAt = dueAt?.filter((_at, index) => inside[index]);
        if (keys.length === 0) return { status: 200, body: { ignored: `every key is outside the install's namespace ${installNamespace}` } };
      }
    }
    return this.#reconcileAll(keys, eventLog(), deadline, hint, dueAt);
  }

  /**
   * A resync or poll through its gate (fan-out-gate.ts): pings arriving together share one run,
   * and runs are spaced. The run's answer goes to every ping it served; its reply CloudEvent
   * (failed, requeued or deferred keys) to the first only, so the keys are sent back once.
   */
  async #fanOut(type: 'resync' | 'poll', log: Logger): Promise<Outcome> {
    const run = await this.#fanOuts[type].run(() => this.#listAndReconcile(type, log, this.#deadline()));
    if (run.claim()) return run.value;
    const { reply: _reply, ...rest } = run.value;
    return rest.status < 300 ? { ...rest, body: { ...rest.body, coalesced: `${type} run shared with another delivery, which carries its reply` } } : rest;
  }

  /** Lists the reconciled kind and reconciles every object (a resync, after the declaration's sweep) or those not settled (a poll). */
  async #listAndReconcile(type: 'resync' | 'poll', log: Logger, deadline: number): Promise<Outcome> {
    const { declaration, kube, installNamespace } = this.#options;
    const reconciled = declaration.reconciles;
    const keys: KindKey[] = [];
    try {
      if (type === 'resync' && declaration.sweep) await this.#sweep(log, deadline);
      let listed = 0;
      for await (const page of kube.pages(reconciled, { namespace: reconciled.namespaced ? installNamespace : undefined })) {
        listed += page.items.length;
        for (const item of page.items) {
          const key = kindKey(reconciled, keyOf(item));
          if (type === 'resync' || !isSettled(declaration, key, item, this.#seen)) keys.push(key);
        }
      }
      if (keys.length === 0 && type === 'poll') return { status: 200, body: { ignored: `poll: all ${listed} ${reconciled.kind} objects settled` } };
    } catch (error) {
      return failedBeforeReconcile(error, log, `could not list for the ${type}`);
    }
    return this.#reconcileAll(keys, log, deadline);
  }

  /** When a delivery arriving now stops starting work. */
  #deadline(): number {
    return this.#options.now().getTime() + this.#options.deliveryBudgetMs;
  }

  /** The key a reconcile event names: of the reconciled kind, or of a kind the function resolves at run time; else why not. */
  async #parseKey(text: string, log: Logger): Promise<KindKey | string> {
    const { declaration, kube } = this.#options;
    const parsed = parseKindKey(text, [declaration.reconciles]);
    const parts = splitKindKey(text);
    if (typeof parsed !== 'string' || !declaration.runtimeKinds || typeof parts === 'string' || parts.groupKind === groupKind(declaration.reconciles)) return parsed;
    // Another kind: refuse what no kind could make a valid key (a name that is not one path
    // segment, a namespace that is not a DNS-1123 label) before asking the function (an API
    // read); the kind's own rule decides afterwards.
    const nameProblem = pathSegmentProblem(parts.key.name);
    if (nameProblem) return `invalid object name ${quote(parts.key.name)}: ${nameProblem}`;
    if (parts.key.namespace !== '' && !isValidNamespace(parts.key.namespace)) return `invalid namespace ${quote(parts.key.namespace)} (a DNS-1123 label)`;
    const kind = await declaration.runtimeKinds.kindOf(parts.groupKind, { kube, log });
    return kind ? parseKindKey(text, [kind]) : parsed;
  }

  /**
   * Reconciles the keys (a few at a time, each not before its `dueAt`) and turns their results
   * into one answer. Keys not started by the deadline are deferred, except the first: every
   * delivery gets something done.
   */
  async #reconcileAll(keys: KindKey[], log: Logger, deadline: number, hint?: KubeObject, dueAt?: number[]): Promise<Outcome> {
    const { fanOutConcurrency, now, sleep, declaration } = this.#options;
    const results: KeyResult[] = new Array(keys.length);
    const reads = sharedReads();
    await forEachLimited(keys, fanOutConcurrency, async (key, index) => {
      const early = (dueAt?.[index] ?? 0) - now().getTime();
      if (early > 0) await sleep(early);
      results[index] = index > 0 && now().getTime() >= deadline ? { type: 'deferred' } : await this.reconcileKey(key, log, hint, reads, deadline);
    });
    const outcome = answerFor(declaration.name, keys, results, now());
    if (outcome.body.deferred) log.warn({ ...outcome.body, budgetMs: this.#options.deliveryBudgetMs }, 'delivery budget spent; the keys not started go back in the reply');
    return outcome;
  }

  /**
   * One reconcile of one key, coalesced with the other requests for it (workqueue.ts); returns
   * the failure, if any, instead of throwing. `hint` is the event's body for this object (trusted
   * only to do less; a shared follow-up run gets none).
   */
  reconcileKey(key: KindKey, parentLog: Logger, hint?: KubeObject, reads = sharedReads(), deadline = this.#deadline()): Promise<KeyResult> {
    const { metrics, now } = this.#options;
    const id = kindKeyString(key);
    const log = parentLog.child({ key: id });
    // Taken now, in call order (reference-reads.ts explains why that keeps it safe).
    const announced = !hint && this.#seen.references.take(key);
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
      const ctx = this.#context(log, shared ? undefined : hint, shared ? sharedReads() : reads, shared ? this.#deadline() : deadline);
      if (announced && !shared) ctx.kube = hintFromFirstRead(ctx, key);
      try {
        const result = await reconcileWithFinalizer(this.#options.declaration, key, ctx);
        const requeue = result?.requeueAfterSeconds;
        const seconds = observe(requeue !== undefined ? 'requeue' : 'success');
        if (ctx.hint && sameKind(key.kind, ctx.hint.apiVersion, ctx.hint.kind)) this.#seen.remember(key, ctx.hint);
        log.debug({ ms: Math.round(seconds * 1000), requeueAfterSeconds: requeue, failedKeys: result?.failedKeys?.length }, 'reconciled');
        // A TerminalError is not retried (its reconcile reported it).
        const failedKeys = result?.failedKeys?.filter(({ error }) => !(error instanceof TerminalError)).map(({ key, error }) => ({ key, result: failedResult(error) }));
        const requeueKeys = result?.requeueKeys?.flatMap(({ key, afterSeconds }) => {
          const at = requeueTime(afterSeconds, now());
          return at === undefined ? [] : [{ key, at }];
        });
        const deferredKeys = result?.deferredKeys;
        return { type: 'done', requeueAt: requeueTime(requeue, now()), ...(failedKeys?.length ? { failedKeys } : {}), ...(requeueKeys?.length ? { requeueKeys } : {}), ...(deferredKeys?.length ? { deferredKeys } : {}) };
      } catch (error) {
        const status = statusForError(error);
        if (error instanceof TerminalError) {
          observe('terminal');
          log.warn({ err: error.message, reason: error.reason }, 'reconcile failed for good; not retried');
          this.#events.record({ metadata: { name: key.name, namespace: key.namespace || undefined } }, key.kind, 'Warning', error.reason, error.message, log);
          return { type: 'done' };
        }
        observe('error');
        // An API answer (e.g. 403 from missing RBAC) is explained by its message; only a
        // failure of our own code needs the stack.
        const expected = error instanceof ApiError || error instanceof TransientError || error instanceof BadKeyError;
        log[status === 500 ? 'error' : 'warn']({ err: (error as Error).message, ...(expected ? {} : { stack: (error as Error).stack }) }, status === 400 ? 'key can never be reconciled' : 'reconcile failed; it will be retried');
        return failedResult(error);
      }
    });
  }

  /** The declaration's sweep (declaration.ts): logged when it fails, never failing the resync. */
  async #sweep(log: Logger, deadline: number): Promise<void> {
    try {
      await this.#options.declaration.sweep!(this.#context(log, undefined, sharedReads(), deadline));
    } catch (error) {
      log.warn({ err: (error as Error).message }, 'the resync\'s sweep failed; the next resync tries again');
    }
  }

  #context(log: Logger, hint: KubeObject | undefined, shared: ReconcileContext['shared'], deadline: number): ReconcileContext {
    const { kube, config, http, now, installNamespace } = this.#options;
    return { kube, log, events: this.#events.recorder(log), config, http, now, installNamespace, hint, shared, deadline };
  }

  /** Stops taking events (readiness turns 503) and resolves when in-flight ones are answered and recorded Events written. */
  drain(): Promise<void> {
    this.#draining = true;
    // Every caller waits for the same moment (a second SIGTERM must not orphan the first).
    this.#drainedPromise ??= (this.#inFlight === 0 ? Promise.resolve() : new Promise<void>((resolve) => (this.#drained = resolve))).then(() =>
      // Events are best effort: an unreachable API must not hold the exit for long.
      Promise.race([this.#events.flush(), new Promise<void>((resolve) => setTimeout(resolve, EVENT_FLUSH_DEADLINE_MS).unref())]));
    return this.#drainedPromise;
  }

  /** Resolves when every recorded Kubernetes Event has been written. */
  flushEvents(): Promise<void> {
    return this.#events.flush();
  }
}

/** ReconcileContext.shared for one event: each read once; a read that failed is tried again by the next key that asks. */
function sharedReads(): ReconcileContext['shared'] {
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

/**
 * Builds the host for a declaration. Its Kubernetes client comes from `kubeconfigPath` when given,
 * else from the environment (KUBECONFIG or in-cluster config); either way every API request is
 * counted in the host's metrics.
 */
export function createFunctionHost(declaration: FunctionDeclaration, overrides: Partial<FunctionHostOptions> & { kubeconfigPath?: string } = {}): FunctionHost {
  const { kubeconfigPath, ...options } = overrides;
  const log = options.log ?? createLogger(declaration.name);
  const metrics = options.metrics ?? createMetrics(declaration.name);
  const observe = (verb: string, resource: string, code: number, seconds: number) => {
    metrics.apiRequests.inc({ verb, resource, code: String(code) });
    metrics.apiRequestSeconds.observe({ verb }, seconds);
  };
  const connections = { maxConnections: API_CONNECTIONS };
  const kube = options.kube ?? (kubeconfigPath ? KubeClient.fromFile(kubeconfigPath, observe, connections) : KubeClient.fromEnvironment(observe, connections));
  return new FunctionHost({ ...options, declaration, kube, log, metrics });
}

/**
 * How long an idle keep-alive connection to the function stays open: longer than the proxy in
 * front keeps one. Knative's queue-proxy reaches the function through Go's http.Transport
 * (knative.dev/pkg/network, cloned from http.DefaultTransport: idle connections kept 90 s); with
 * Node's default of 5 s it may send a request on a connection Node is closing, and a POST that
 * fails so is answered 502 (Go retries only idempotent requests on a closed idle connection).
 */
export const KEEP_ALIVE_TIMEOUT_MS = 95_000;

/** Serves the function on PORT (default 8080, as Knative sets it) until SIGTERM/SIGINT. */
export async function serve(declaration: FunctionDeclaration): Promise<Server> {
  const log = createLogger(declaration.name);
  let host: FunctionHost;
  try {
    const budgetSeconds = deliveryBudgetFromEnvironment();
    host = createFunctionHost(declaration, { log, ...(budgetSeconds === undefined ? {} : { deliveryBudgetMs: budgetSeconds * 1000 }) });
  } catch (error) {
    log.fatal((error as Error).message);
    process.exit(1);
  }
  const port = Number(process.env.PORT ?? 8080);
  const server = host.app.listen(port, process.env.HOST ?? '0.0.0.0');
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'draining in-flight events before exit');
    await host.drain();
    server.close();
    server.closeIdleConnections();
    log.info('stopped');
    process.exit(0);
  };
  // Installed before readiness is announced: whoever reads "ready" (Knative, the activator) may
  // send SIGTERM at once, and until a handler exists the kernel's default action kills the process
  // without draining.
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  // Started by the local plane (its activator opens an IPC channel): a plane killed outright
  // (SIGKILL, out of memory) runs no exit hook, and the channel closing is the only news of it.
  // Nothing is drained then: no answer can reach a broker that is gone, and the log's pipe is
  // broken too (pino would retry its write forever). A reconcile cut short is retried by the
  // plane that starts next, from its listing.
  if (process.channel) {
    process.channel.unref();
    process.once('disconnect', () => process.exit(0));
  }
  await new Promise<void>((resolve, reject) => server.once('listening', resolve).once('error', reject));
  log.info({ port, startupMs: Math.round(performance.now()) }, `${declaration.name} ready`);
  return server;
}
