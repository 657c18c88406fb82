// The host every function runs in: the HTTP app (http-app.ts), intake (intake.ts) and the
// reconcile loop (reconcile-loop.ts) wired together, answering by Knative delivery rules, and
// draining before exit (serve.ts runs it as a process).
//
//   2xx  the work is done (or there was nothing to do for this function); when part of a
//        fan-out failed or a key asked to be reconciled later, the answer carries a reply
//        CloudEvent naming those keys (reply.ts), so only they are tried again
//   400  the request can never succeed (malformed or meaningless event): not retried
//   413  the body is larger than any object the API server stores
//   503  the API was unreachable, overloaded, or kept conflicting: retried with backoff
//   500  reconcile failed otherwise: retried, then dead-lettered
// Which error becomes which answer is decided in one place: statusForError (errors.ts), after
// the failures retrying cannot mend (403, 422, a kind not served) were shown on the object and
// answered 2xx (unmendable.ts).
import type { Logger } from 'pino';
import type { FunctionDeclaration } from '../declaration.ts';
import { BadEventError, decodeCloudEvent, interpretEvent, type FunctionEvent } from '../events.ts';
import { unservedKinds } from '../discovery.ts';
import { apiVersionOf, type KindKey, type KubeObject } from '../kinds.ts';
import { KubeClient } from '../kube/client.ts';
import { EventSink } from '../recorder.ts';
import type { KeyResult, Outcome } from './answers.ts';
import { type FunctionHostOptions, hostSettings, type HostSettings } from './host-options.ts';
import { functionApp } from './http-app.ts';
import { Intake } from './intake.ts';
import { createLogger } from './log.ts';
import { createMetrics } from './metrics.ts';
import { ReconcileLoop } from './reconcile-loop.ts';
import { SeenObjects } from './skips.ts';

/**
 * Connections a function opens to the API server at most (a burst watch holds one). A burst
 * comes in hundreds at a time (the broker's bound is the function's target × max scale), and with
 * a connection per concurrent request each is a TLS handshake for both sides; a few dozen shared
 * connections cost the function less CPU per reconcile and keep a burst as fast.
 */
const API_CONNECTIONS = 32;
/** How long a draining process waits for its Kubernetes Events to be written. */
const EVENT_FLUSH_DEADLINE_MS = 5000;

export class FunctionHost {
  readonly app: ReturnType<typeof functionApp>;
  readonly #settings: HostSettings;
  readonly #events: EventSink;
  readonly #loop: ReconcileLoop;
  readonly #intake: Intake;
  #inFlight = 0;
  #draining = false;
  #drained?: () => void;
  #drainedPromise?: Promise<void>;

  constructor(options: FunctionHostOptions) {
    this.#settings = hostSettings(options);
    if (options.declaration.watchDuringBursts)
      options.kube.watchDuringBursts(options.declaration.reconciles, this.#settings.installNamespace);
    options.kube.onBurstRead = (resource, answered) =>
      this.#settings.metrics.burstWatchReads.inc({ resource, answered_by: answered ? 'watch' : 'api' });
    this.#events = new EventSink(options.kube, options.declaration.name, options.log, this.#settings.now);
    const seen = new SeenObjects();
    this.#loop = new ReconcileLoop(this.#settings, seen, this.#events);
    this.#intake = new Intake(this.#settings, this.#loop, seen);
    this.app = functionApp({
      metrics: this.#settings.metrics,
      log: this.#settings.log,
      maxBodyBytes: this.#settings.maxBodyBytes,
      draining: () => this.#draining,
      receive: (headers, body) => this.receive(headers, body),
      requestStarted: () => void this.#inFlight++,
      requestClosed: () => {
        if (--this.#inFlight === 0 && this.#draining) this.#drained?.();
      },
    });
  }

  /** Handles one HTTP request body as a CloudEvent. Never throws. */
  async receive(headers: Record<string, string | string[] | undefined>, body: Buffer): Promise<Outcome> {
    const { metrics, log } = this.#settings;
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
    const outcome = await this.#intake.handle(event);
    metrics.events.inc({
      outcome: outcome.status >= 500 ? 'retry' : outcome.status >= 400 ? 'rejected' : outcome.body.ignored ? 'ignored' : 'done',
    });
    return outcome;
  }

  /** Reconciles what the event concerns (intake.ts). Never throws. */
  handle(event: FunctionEvent): Promise<Outcome> {
    return this.#intake.handle(event);
  }

  /**
   * One reconcile of one key, coalesced with the other requests for it (reconcile-loop.ts);
   * returns the failure, if any, instead of throwing.
   */
  reconcileKey(key: KindKey, parentLog: Logger, eventObject?: KubeObject): Promise<KeyResult> {
    return this.#loop.reconcileKey(key, parentLog, eventObject);
  }

  /** Stops taking events (readiness turns 503) and resolves when in-flight ones are answered and recorded Events written. */
  drain(): Promise<void> {
    this.#draining = true;
    // Every caller waits for the same moment (a second SIGTERM must not orphan the first).
    this.#drainedPromise ??= (this.#inFlight === 0 ? Promise.resolve() : new Promise<void>((resolve) => (this.#drained = resolve))).then(
      () =>
        // Events are best effort: an unreachable API must not hold the exit for long.
        Promise.race([this.#events.flush(), new Promise<void>((resolve) => setTimeout(resolve, EVENT_FLUSH_DEADLINE_MS).unref())]),
    );
    return this.#drainedPromise;
  }

  /**
   * Logs a warning for each kind of the declaration (reconciled, owned, watched) the API server
   * does not serve, with the reason (discovery.ts unservedReason). The function keeps running: a
   * CRD may be applied later, and a reconcile that meets the kind meanwhile says so on its object
   * (unmendable.ts). Never throws.
   */
  async checkKinds(): Promise<void> {
    const { declaration, kube, log } = this.#settings;
    for (const { kind, reason } of await unservedKinds(declaration, kube))
      log.warn({ kind: kind.kind, apiVersion: apiVersionOf(kind), plural: kind.plural }, `declaration of ${declaration.name}: ${reason}`);
  }

  /** Resolves when every recorded Kubernetes Event has been written. */
  flushEvents(): Promise<void> {
    return this.#events.flush();
  }
}

/**
 * Builds the host for a declaration. Its Kubernetes client comes from `kubeconfigPath` when given,
 * else from the environment (KUBECONFIG or in-cluster config); either way every API request is
 * counted in the host's metrics.
 */
export function createFunctionHost(
  declaration: FunctionDeclaration,
  overrides: Partial<FunctionHostOptions> & { kubeconfigPath?: string } = {},
): FunctionHost {
  const { kubeconfigPath, ...options } = overrides;
  const log = options.log ?? createLogger(declaration.name);
  const metrics = options.metrics ?? createMetrics(declaration.name);
  const observe = (verb: string, resource: string, code: number, seconds: number) => {
    metrics.apiRequests.inc({ verb, resource, code: String(code) });
    metrics.apiRequestSeconds.observe({ verb }, seconds);
  };
  const connections = { maxConnections: API_CONNECTIONS };
  const kube =
    options.kube ??
    (kubeconfigPath ? KubeClient.fromFile(kubeconfigPath, observe, connections) : KubeClient.fromEnvironment(observe, connections));
  return new FunctionHost({ ...options, declaration, kube, log, metrics });
}
