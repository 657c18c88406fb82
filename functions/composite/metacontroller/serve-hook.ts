// Serves pure hook functions over HTTP as Metacontroller webhooks, so a CompositeController
// manifest's `url` (or `service` + `path`) can point at a TypeScript `sync(request) → response`.
//
// The contract is the caller's (metacontroller pkg/hooks/webhook.go): a POST whose body is the
// JSON request; only a 200 with a JSON body counts as an answer; any other status makes the
// caller post a Warning Event `SyncError` carrying the status and body, so a request the
// function cannot serve gets a 400 whose body says why, and a failure of the function a 500.
// Health endpoints follow Knative Functions' Node runtime (/health/liveness, /health/readiness).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { HookRequestError } from './types.ts';
import { quote } from '../../runtime/index.ts';

/** A pure hook: the decoded request in, the response object out (or a Promise of it). */
export type HookFunction = (request: never) => unknown;

export const MAX_REQUEST_BYTES = 32 * 1024 * 1024;

export interface HookServerOptions {
  /** Path → hook, e.g. { '/sync': sync }. */
  hooks: Record<string, HookFunction>;
  port?: number;
  /** Loopback by default: a local plane must not expose hooks beyond this machine. */
  host?: string;
  onError?: (error: unknown, path: string) => void;
  /** Larger request bodies get 413 (default MAX_REQUEST_BYTES). */
  maxRequestBytes?: number;
}

export interface HookServer {
  url: string;
  server: http.Server;
  close(): Promise<void>;
}

export async function serveHooks(options: HookServerOptions): Promise<HookServer> {
  const server = http.createServer((request, response) => {
    handle(options, request, response).catch((error: unknown) => {
      options.onError?.(error, request.url ?? '');
      if (!response.headersSent) reply(response, 500, { error: 'internal error' });
      else response.destroy();
    });
  });
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function handle(options: HookServerOptions, request: http.IncomingMessage, response: http.ServerResponse): Promise<void> {
  const path = new URL(request.url ?? '/', 'http://hook').pathname;
  if (request.method === 'GET' && (path === '/health/liveness' || path === '/health/readiness'))
    return reply(response, 200, { status: 'ok' });
  const hook = Object.hasOwn(options.hooks, path) ? options.hooks[path] : undefined;
  if (!hook) return reply(response, 404, { error: `no hook at ${path}` });
  if (request.method !== 'POST') return reply(response, 405, { error: 'hooks are called with POST' }, { Allow: 'POST' });
  const type = (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json')
    return reply(response, 415, { error: `expected Content-Type application/json, got ${quote(request.headers['content-type'] ?? '')}` });

  const limit = options.maxRequestBytes ?? MAX_REQUEST_BYTES;
  const body = await readLimited(request, limit);
  if (body === undefined) return reply(response, 413, { error: `request body larger than ${limit} bytes` }, { Connection: 'close' });
  let decoded: unknown;
  try {
    decoded = JSON.parse(body);
  } catch (error) {
    return reply(response, 400, { error: `malformed JSON request: ${(error as Error).message}` });
  }
  if (typeof decoded !== 'object' || decoded === null || Array.isArray(decoded))
    return reply(response, 400, { error: 'the hook request must be a JSON object' });
  try {
    const answer = await hook(decoded as never);
    // `null` would read as "no children" upstream and delete them all: a missing answer is a bug.
    if (answer === undefined || answer === null) throw new Error(`the hook at ${path} returned no answer`);
    reply(response, 200, answer);
  } catch (error) {
    if (error instanceof HookRequestError) return reply(response, 400, { error: error.message });
    throw error;
  }
}

/** The body as text, or undefined when it exceeds the limit (the rest is not read). */
function readLimited(request: http.IncomingMessage, limit: number): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        request.pause();
        resolve(undefined);
        return;
      }
      chunks.push(chunk);
    });
    request.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.on('error', reject);
  });
}

function reply(response: http.ServerResponse, status: number, payload: unknown, headers: Record<string, string> = {}): void {
  const body = Buffer.from(JSON.stringify(payload ?? null));
  response.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': body.length, ...headers });
  response.end(body);
}
