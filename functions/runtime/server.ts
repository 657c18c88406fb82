// The HTTP host every function runs in: CloudEvent intake answering by Knative delivery rules,
// health and metrics endpoints, and graceful shutdown.
//
//   2xx  the work is done (or there was nothing to do for this function)
//   400  the request can never succeed (malformed or meaningless event): not retried
//   503  the API was unreachable, overloaded, or kept conflicting: retried with backoff
//   500  reconcile failed otherwise: retried, then dead-lettered
import type { Server } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import type { FunctionDeclaration } from './declaration.ts';
import { BadEventError, decodeCloudEvent, interpretEvent, type FunctionEvent } from './events.ts';
import { keyString, type ObjectKey } from './kinds.ts';
import { ApiError, KubeClient } from './kube.ts';
import { createLogger } from './log.ts';
import { createMetrics, type FunctionMetrics } from './metrics.ts';
import { eventRecorder, StatusConflictError } from './reconciler.ts';
import { keysForEvent, uniqueKeys } from './routing.ts';

export interface FunctionHostOptions {
  declaration: FunctionDeclaration;
  kube: KubeClient;
  log: Logger;
  metrics: FunctionMetrics;
  /** Larger requests are refused with 400; a Resource-mode event for a big object fits easily. */
  maxBodyBytes?: number;
  /** Keys reconciled at once during a resync. */
  resyncConcurrency?: number;
}

export interface Outcome {
  status: number;
  body: Record<string, unknown>;
}

/** Runs tasks for one key one after another, so replicas' races are the only races left. */
class PerKeyQueue {
  readonly #tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(key) ?? Promise.resolve();
    const result = previous.then(task, task);
    const tail = result.catch(() => {});
    this.#tails.set(key, tail);
    tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return result;
  }
}

/** Response header carrying what a successful delivery did (reconciled keys, or why it was ignored). */
export const OUTCOME_HEADER = 'x-opfn-outcome';
const asciiJson = (value: unknown): string => JSON.stringify(value).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

const statusForError = (error: unknown): number =>
  (error instanceof ApiError && error.transient) || error instanceof StatusConflictError ? 503 : 500;

export class FunctionHost {
  readonly app: express.Express;
  readonly #options: Required<FunctionHostOptions>;
  readonly #perKey = new PerKeyQueue();
  #inFlight = 0;
  #draining = false;
  #drained?: () => void;
  #drainedPromise?: Promise<void>;

  constructor(options: FunctionHostOptions) {
    this.#options = { maxBodyBytes: 1024 * 1024, resyncConcurrency: 8, ...options };
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
      // CloudEvent body would be a reply event), so success has an empty body; the summary
      // travels in a header for people debugging with `opfn invoke`.
      if (outcome.status < 300) res.status(outcome.status).set(OUTCOME_HEADER, asciiJson(outcome.body)).end();
      else res.status(outcome.status).json(outcome.body);
    });
    // Body parser failures (too large, bad encoding, aborted) are the sender's fault: 400.
    app.use((error: Error & { type?: string; status?: number }, _req: Request, res: Response, _next: NextFunction) => {
      const reason = error.type === 'entity.too.large' ? `request body larger than ${maxBodyBytes} bytes` : `unreadable request body: ${error.message}`;
      metrics.events.inc({ outcome: 'rejected' });
      log.warn({ reason }, 'rejected request');
      res.status(error.status && error.status < 500 ? 400 : 500).json({ error: reason });
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
    metrics.events.inc({ outcome: outcome.status >= 300 ? 'retry' : outcome.body.ignored ? 'ignored' : 'done' });
    return outcome;
  }

  /** Reconciles what the event concerns. Never throws. */
  async handle(event: FunctionEvent): Promise<Outcome> {
    const { declaration, kube, log } = this.#options;
    const eventLog = log.child({ ceId: event.id });
    let keys: ObjectKey[];
    try {
      if (event.type === 'resync') {
        const list = await kube.list(declaration.reconciles);
        keys = list.items.map((item) => ({ namespace: item.metadata.namespace ?? '', name: item.metadata.name ?? '' }));
      } else {
        keys = uniqueKeys(await keysForEvent(declaration, event, kube, eventLog));
        if (keys.length === 0) return { status: 200, body: { ignored: `${event.ref.kind} ${event.ref.namespace}/${event.ref.name} concerns no ${declaration.reconciles.kind}` } };
      }
    } catch (error) {
      eventLog.error({ err: (error as Error).message }, 'could not work out what the event concerns');
      return { status: statusForError(error), body: { error: (error as Error).message } };
    }

    const failures: { key: string; error: string; status: number }[] = [];
    const queue = [...keys];
    const worker = async () => {
      for (let key = queue.shift(); key; key = queue.shift()) {
        const failure = await this.reconcileKey(key, eventLog);
        if (failure) failures.push({ key: keyString(key), ...failure });
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.#options.resyncConcurrency, keys.length) }, worker));
    const reconciled = keys.map(keyString);
    if (failures.length === 0) return { status: 200, body: { reconciled } };
    return { status: failures.every((failure) => failure.status === 503) ? 503 : 500, body: { reconciled, failed: failures } };
  }

  /** One reconcile of one key; returns the failure, if any, instead of throwing. */
  async reconcileKey(key: ObjectKey, parentLog: Logger): Promise<{ error: string; status: number } | undefined> {
    const { declaration, kube, metrics } = this.#options;
    const log = parentLog.child({ key: keyString(key) });
    return this.#perKey.run(keyString(key), async () => {
      const started = performance.now();
      try {
        await declaration.reconcile(key, { kube, log, events: eventRecorder(kube, declaration.name, log) });
        const seconds = (performance.now() - started) / 1000;
        metrics.reconciles.inc({ result: 'success' });
        metrics.reconcileSeconds.observe({ result: 'success' }, seconds);
        log.debug({ ms: Math.round(seconds * 1000) }, 'reconciled');
        return undefined;
      } catch (error) {
        metrics.reconciles.inc({ result: 'error' });
        metrics.reconcileSeconds.observe({ result: 'error' }, (performance.now() - started) / 1000);
        const status = statusForError(error);
        // An API answer (e.g. 403 from missing RBAC) is explained by its message; only a
        // failure of our own code needs the stack.
        const stack = error instanceof ApiError ? {} : { stack: (error as Error).stack };
        log[status === 503 ? 'warn' : 'error']({ err: (error as Error).message, ...stack }, 'reconcile failed; the event will be retried');
        return { error: (error as Error).message, status };
      }
    });
  }

  /** Stops taking events (readiness turns 503) and resolves when in-flight ones are done. */
  drain(): Promise<void> {
    this.#draining = true;
    // Every caller waits for the same moment (a second SIGTERM must not orphan the first).
    this.#drainedPromise ??= this.#inFlight === 0 ? Promise.resolve() : new Promise((resolve) => (this.#drained = resolve));
    return this.#drainedPromise;
  }
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
  const kube = options.kube ?? (kubeconfigPath ? KubeClient.fromFile(kubeconfigPath, observe) : KubeClient.fromEnvironment(observe));
  return new FunctionHost({ ...options, declaration, kube, log, metrics });
}

/** Serves the function on PORT (default 8080, as Knative sets it) until SIGTERM/SIGINT. */
export async function serve(declaration: FunctionDeclaration): Promise<Server> {
  const log = createLogger(declaration.name);
  let host: FunctionHost;
  try {
    host = createFunctionHost(declaration, { log });
  } catch (error) {
    log.fatal((error as Error).message);
    process.exit(1);
  }
  const port = Number(process.env.PORT ?? 8080);
  const server = host.app.listen(port, process.env.HOST ?? '0.0.0.0');
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
  await new Promise<void>((resolve, reject) => server.once('listening', resolve).once('error', reject));
  log.info({ port, startupMs: Math.round(performance.now()) }, `${declaration.name} ready`);
  return server;
}
