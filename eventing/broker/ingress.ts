// The broker's HTTP front door, as knative/eventing pkg/broker/ingress/ingress_handler.go: POST /
// with one CloudEvent (binary or structured) → 202; malformed → 400 with the reason; a full
// trigger queue waits (back-pressure), a broker that is stopping answers 503.
//
// Waiting is bounded, as Knative's activator bounds the requests it queues for a revision
// (pkg/queue/breaker.go, QueueDepth; overflow is ErrRequestQueueFull, answered 503 "pending
// request queue full"): at most `maxWaitingRequests` requests, holding at most `maxWaitingBytes`
// of bodies (plus the one that finds nobody waiting), wait for room; beyond that the ingress
// answers 503 with the reason and Retry-After, and ApiServerSource and other senders retry. A
// request that finds the bound reached is refused before its body is kept (it is read and
// discarded). Each waiting request holds its body and its parsed event, about twice its size.
// The plane's own sources publish in process (Broker.publish), which still waits: back-pressure
// slows them down instead of refusing their events.
//
// Bodies: the API server accepts requests up to 3 MiB and objects up to ~1.5 MiB in etcd, so a
// Resource-mode event (the whole object plus attributes) fits in MAX_EVENT_BYTES; anything larger
// is read to its end (up to DRAIN_LIMIT, then cut) and answered 413 with the reason, never with a
// connection reset.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import { BodyTooLarge, parseMessage, readBody, reply } from './cloudevent-http.ts';

/** Largest CloudEvent the broker accepts or relays: room for a 1.5 MiB object as JSON, escaped. */
export const MAX_EVENT_BYTES = 4 * 1024 * 1024;
/** A larger body is read and discarded up to this size before the 413, then the socket is cut. */
const DRAIN_LIMIT = 64 * 1024 * 1024;
/** Requests that may wait for room in a full trigger queue. */
export const DEFAULT_MAX_WAITING_REQUESTS = 1000;
/** Bytes of bodies those requests may hold (about twice that in memory, with the parsed events). */
export const DEFAULT_MAX_WAITING_BYTES = 32 * 1024 * 1024;

export type IngestResult = 'accepted' | 'ttl-exhausted';

export class Ingress {
  readonly #log: Logger;
  readonly #ingest: (event: CloudEventV1<unknown>) => Promise<IngestResult>;
  readonly #accepting: () => boolean;
  readonly #maxBytes: number;
  readonly #maxWaiting: number;
  readonly #maxWaitingBytes: number;
  /** Requests handed to ingest and not answered yet, and the bytes of their bodies. */
  #waiting = 0;
  #waitingBytes = 0;
  /** Refusing since the waiting requests last drained: one warning per such spell, not one per request. */
  #refusing = false;
  #server?: Server;

  constructor(options: {
    log: Logger;
    ingest: (event: CloudEventV1<unknown>) => Promise<IngestResult>;
    accepting: () => boolean;
    maxBytes?: number;
    maxWaitingRequests?: number;
    maxWaitingBytes?: number;
  }) {
    this.#log = options.log;
    this.#ingest = options.ingest;
    this.#accepting = options.accepting;
    this.#maxBytes = options.maxBytes ?? MAX_EVENT_BYTES;
    this.#maxWaiting = options.maxWaitingRequests ?? DEFAULT_MAX_WAITING_REQUESTS;
    this.#maxWaitingBytes = options.maxWaitingBytes ?? DEFAULT_MAX_WAITING_BYTES;
  }

  /** Requests waiting for room in a trigger queue, and the bytes of their bodies. */
  get waiting(): { requests: number; bytes: number } {
    return { requests: this.#waiting, bytes: this.#waitingBytes };
  }

  /** Would a request with a body of `bytes` go beyond the bound? One always may wait when none does. */
  #full(bytes: number): boolean {
    return this.#waiting >= this.#maxWaiting || (this.#waiting > 0 && this.#waitingBytes + bytes > this.#maxWaitingBytes);
  }

  #refuseFull(res: ServerResponse, bytes: number | undefined): void {
    const why = `${this.#waiting} requests (${this.#waitingBytes} bytes) already wait for room in a full trigger queue (at most ${this.#maxWaiting} requests, ${this.#maxWaitingBytes} bytes)`;
    if (!this.#refusing)
      this.#log.warn({ waiting: this.#waiting, waitingBytes: this.#waitingBytes, bytes }, `ingress refusing events (503) while ${why}`);
    else
      this.#log.debug(
        { waiting: this.#waiting, waitingBytes: this.#waitingBytes, bytes },
        'ingress refused an event (503): pending request queue full',
      );
    this.#refusing = true;
    reply(res, 503, `pending request queue full: ${why}; retry later`, { 'Retry-After': '1' });
  }

  async listen(port: number, host: string): Promise<string> {
    if (this.#server) throw new Error('Broker ingress is already listening');
    const server = createServer((req, res) => {
      void this.#handle(req, res);
    });
    server.on('clientError', (_err, socket) => {
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
      else socket.destroy();
    });
    this.#server = server;
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error): void => {
        this.#server = undefined;
        reject(new Error(`Broker ingress cannot listen on ${host}:${port}: ${err.message}`));
      };
      server.once('error', onError);
      server.listen(port, host, () => {
        server.off('error', onError);
        server.on('error', (err) => this.#log.error({ err }, 'broker ingress error'));
        resolve();
      });
    });
    const address = server.address() as AddressInfo;
    const hostPart = address.address.includes(':') ? `[${address.address}]` : address.address;
    return `http://${hostPart}:${address.port}`;
  }

  close(): Promise<void> {
    const server = this.#server;
    if (!server) return Promise.resolve();
    return new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      if (!this.#accepting()) return reply(res, 503, 'broker is shutting down', { Connection: 'close' });
      let path = '/';
      try {
        path = new URL(req.url ?? '/', 'http://ingress').pathname;
      } catch {
        return reply(res, 400, 'malformed request URL');
      }
      if (path !== '/') return reply(res, 404, `no such path ${path}: POST CloudEvents to /`);
      if (req.method !== 'POST') {
        res.setHeader('Allow', 'POST');
        return reply(res, 405, 'method not allowed: POST CloudEvents to /');
      }
      const declared = Number(req.headers['content-length'] ?? 0);
      if (this.#full(0)) {
        // Read to its end and discard (never kept, never a connection reset), then refuse.
        await readBody(req, 0, DRAIN_LIMIT).catch(() => undefined);
        return this.#refuseFull(res, declared || undefined);
      }
      let body: Buffer;
      try {
        body = await readBody(req, this.#maxBytes, declared > DRAIN_LIMIT ? this.#maxBytes : DRAIN_LIMIT);
      } catch (err) {
        if (err instanceof BodyTooLarge) {
          this.#log.warn({ bytes: declared || undefined, limit: this.#maxBytes }, 'ingress refused an event larger than the limit (413)');
          return reply(
            res,
            413,
            `event larger than ${this.#maxBytes} bytes (the limit fits any Kubernetes object, ~1.5 MiB, as a Resource-mode event)`,
            { Connection: 'close' },
          );
        }
        return reply(res, 400, `cannot read request body: ${(err as Error).message}`);
      }
      let event: CloudEventV1<unknown>;
      try {
        event = parseMessage(req.headers, body);
      } catch (err) {
        this.#log.debug({ reason: (err as Error).message }, 'ingress rejected a malformed request');
        return reply(res, 400, `malformed CloudEvent: ${(err as Error).message}`);
      }
      const bytes = body.length;
      if (this.#full(bytes)) return this.#refuseFull(res, bytes);
      let outcome: IngestResult;
      this.#waiting += 1;
      this.#waitingBytes += bytes;
      try {
        outcome = await this.#ingest(event);
      } catch (err) {
        return reply(res, 503, `event not accepted: ${(err as Error).message}`);
      } finally {
        this.#waiting -= 1;
        this.#waitingBytes -= bytes;
        if (this.#waiting === 0) this.#refusing = false;
      }
      if (outcome === 'ttl-exhausted') return reply(res, 400, 'event dropped: knativebrokerttl exhausted');
      return reply(res, 202, '');
    } catch (err) {
      this.#log.error({ err }, 'broker ingress failed to handle a request');
      if (!res.headersSent) reply(res, 500, 'internal error');
      else res.destroy();
    }
  }
}
