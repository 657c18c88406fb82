// The HTTP face of a function: CloudEvents posted to /, health for the platform's probes, and
// Prometheus metrics.
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import type { Outcome } from './answers.ts';
import type { FunctionMetrics } from './metrics.ts';

/** Response header carrying what a delivery did, in counts (never keys: headers are limited to 16 KiB). */
export const OUTCOME_HEADER = 'x-opfn-outcome';
const asciiJson = (value: unknown): string =>
  JSON.stringify(value).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

/** What the app serves and tells about. */
export interface AppEndpoints {
  metrics: FunctionMetrics;
  log: Logger;
  maxBodyBytes: number;
  /** True once the host drains: readiness answers 503. */
  draining(): boolean;
  /** Handles one CloudEvent's headers and body; never throws. */
  receive(headers: Record<string, string | string[] | undefined>, body: Buffer): Promise<Outcome>;
  /** A request came in; `requestClosed` follows once its answer is written out (or the connection dropped). */
  requestStarted(): void;
  requestClosed(): void;
}

export function functionApp(endpoints: AppEndpoints): express.Express {
  const { metrics, log, maxBodyBytes } = endpoints;
  const app = express();
  app.disable('x-powered-by');
  app.get('/health/liveness', (_req, res) => void res.json({ status: 'ok' }));
  app.get(
    '/health/readiness',
    (_req, res) => void res.status(endpoints.draining() ? 503 : 200).json({ status: endpoints.draining() ? 'draining' : 'ready' }),
  );
  app.get('/metrics', async (_req, res) => {
    res.type(metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  app.post('/', express.raw({ type: () => true, limit: maxBodyBytes }), async (req: Request, res: Response) => {
    // The request stays in flight until its answer is written out, not just until the work is
    // done: otherwise serve() could exit between the two, and the broker would redeliver an
    // event that had been handled.
    endpoints.requestStarted();
    res.once('close', () => endpoints.requestClosed());
    const outcome = await endpoints.receive(req.headers, Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0));
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
    const reason = tooLarge
      ? `request body larger than ${maxBodyBytes} bytes (the largest Kubernetes object fits; this is not an event this function can take)`
      : `unreadable request body: ${error.message}`;
    metrics.events.inc({ outcome: 'rejected' });
    log.warn({ reason }, 'rejected request');
    res.status(tooLarge ? 413 : error.status && error.status < 500 ? 400 : 500).json({ error: reason });
  });
  return app;
}
