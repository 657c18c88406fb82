// The process a function runs as: its host served on PORT until SIGTERM or SIGINT, draining
// in-flight events before it exits.
import type { Server } from 'node:http';
import type { FunctionDeclaration } from '../declaration.ts';
import { deliveryBudgetFromEnvironment } from './delivery-budget.ts';
import { createFunctionHost, type FunctionHost } from './function-host.ts';
import { createLogger } from './log.ts';

/**
 * How long an idle keep-alive connection to the function stays open: longer than the proxy in
 * front keeps one. Knative's queue-proxy reaches the function through Go's http.Transport
 * (knative.dev/pkg/network, cloned from http.DefaultTransport: idle connections kept 90 s); with
 * Node's default of 5 s it may send a request on a connection Node is closing, and a POST that
 * fails so is answered 502 (Go retries only idempotent requests on a closed idle connection).
 */
export const KEEP_ALIVE_TIMEOUT_MS = 95_000;

/**
 * Sent on the IPC channel of a process the local plane started, once the server listens: its
 * activator probes readiness at once instead of at its next poll. Only a hint: the probe decides.
 */
export const LISTENING_MESSAGE = { opfn: 'listening' } as const;

/** When the check of the declared kinds runs if no request has come by then. */
const KIND_CHECK_AT_LATEST_MS = 1000;

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
  if (process.connected) process.send?.(LISTENING_MESSAGE, undefined, {}, () => {});
  log.info({ port, startupMs: Math.round(performance.now()) }, `${declaration.name} ready`);
  // The check asks the API server and opens the first connection to it, which a cold start's
  // first readiness probe must not wait behind.
  afterFirstAnswer(server, KIND_CHECK_AT_LATEST_MS, () => void host.checkKinds());
  return server;
}

/** Runs `work` once: when the server's first answer has been sent, or after `atLatestMs` if none has been by then. */
export function afterFirstAnswer(server: Server, atLatestMs: number, work: () => void): void {
  let done = false;
  const once = () => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    work();
  };
  const timer = setTimeout(once, atLatestMs).unref();
  server.once('request', (_request, response) => response.once('finish', once));
}
