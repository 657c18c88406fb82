// The local activator: what Knative Serving's activator + autoscaler + queue-proxy do for a
// revision, done for function processes on this machine. This file is the front: it serves HTTP,
// routes each request to its function's pool and proxies it; the pieces live beside it:
// configuration.ts (scaling and timeout, checked), handler.ts (which function), pool.ts (one
// function's instances, slots and scaling loop), throttler.ts (bounded wait for a slot),
// decider.ts (how many instances), lb-policy.ts (which instance), instance.ts (one process's
// state machine), supervisor.ts (spawn, probe, stop), proxy.ts (forwarding with the request
// timeout), child-output.ts.
//
// - A request for a function with no ready instance is buffered while one instance starts (one
//   spawn for any number of concurrent requests), and proxied once `GET /health/readiness`
//   answers 200. No readiness within startTimeoutMs → 503 (the broker retries).
// - Scale up on every arrival as Knative's decider does (decider.ts); surplus requests wait in a
//   bounded queue (full → 503 "pending request queue full", as Knative's activator answers).
// - An instance with no request for idleTimeoutMs is stopped (SIGTERM, SIGKILL after stopGraceMs),
//   never below minScale; minScale 0 scales to zero.
// - A request gets the function's timeoutSeconds (Knative's default 300 s): past it, 504.
// - Warm path: `lease(url)` hands the broker a direct route to an instance with room, as Knative's
//   activator leaves the data path once capacity exists; the instance's load still counts for
//   scaling, and a buffered request always goes first. Asked with a wait while the function
//   starts from zero, it hands the route once an instance is ready: the burst that meets a
//   function at zero waits in the same queue, but is then sent to the instance directly rather
//   than received and forwarded here (each forwarded request costs this process a second HTTP
//   exchange). A wait that fails gets the answer the front door would have given (503, 404).
// - A child that dies: its in-flight requests get 502 (retried by the broker), it is removed and
//   the next request (or a buffered one) starts a new instance.
// - `configure()` changes a function's scaling and timeout while it runs (a Knative Service
//   edited live): decisions and new requests follow the new values; a changed container
//   environment rolls the instances (`roll()`, also used when a function is rebuilt).
import http from 'node:http';
import type net from 'node:net';
import type { Writable } from 'node:stream';
import type { Logger } from 'pino';
import type { Lease } from '../broker/index.ts';
import {
  type CheckedConfiguration,
  checkConfiguration,
  type FunctionConfiguration,
  type FunctionProcessSpec,
  type FunctionStats,
} from './configuration.ts';
import { routeOf } from './handler.ts';
import type { Instance } from './instance.ts';
import { partitionKeyOf } from './lb-policy.ts';
import { FunctionPool } from './pool.ts';
import { proxy, sendError } from './proxy.ts';
import { InstanceSupervisor } from './supervisor.ts';
import { ActivatorError, type LeaseWait } from './throttler.ts';

/** Where a sender whose wait for a lease failed is told why (no function name starts with a dot). */
const REFUSED_PATH = '/.refused/';

const sameEnvironment = (a: Record<string, string>, b: Record<string, string>): boolean =>
  Object.keys(a).length === Object.keys(b).length && Object.entries(a).every(([name, value]) => b[name] === value);

export interface ActivatorOptions {
  functions: FunctionProcessSpec[];
  log: Logger;
  /** An instance with no request for this long is stopped; default 30000. */
  idleTimeoutMs?: number;
  /** Readiness deadline for a new instance; default 20000. */
  startTimeoutMs?: number;
  /** SIGTERM, then SIGKILL after this; default 10000. */
  stopGraceMs?: number;
  /** Requests buffered per function beyond which the activator answers 503; default 1000. */
  maxQueue?: number;
  /** Between readiness probes of a starting instance that has not said it listens (LISTENING_MESSAGE); default 25. */
  probeIntervalMs?: number;
  /** Where children's stdout/stderr lines go, prefixed `[name#n] `: a stream (default process.stderr) or 'log' (pino, info). */
  childOutput?: Writable | 'log';
  /**
   * Instances one function may run at once on this host, whatever its max-scale (see
   * desiredScale); default unbounded. The plane sets it from the host's cores.
   */
  hostInstanceLimit?: number;
}

export class Activator {
  #log: Logger;
  #fns = new Map<string, FunctionPool>();
  #supervisor: InstanceSupervisor;
  #server?: http.Server;
  #base?: string;
  #closed = false;
  #closing?: Promise<void>;
  /** Answers owed to senders whose wait for a lease failed (see lease()), by the token of the URL they were given. */
  readonly #refusals = new Map<string, ActivatorError>();
  #refusalSeq = 0;

  constructor(options: ActivatorOptions) {
    this.#log = options.log;
    const pool = (inst: Instance): FunctionPool => this.#fns.get(inst.fn)!;
    this.#supervisor = new InstanceSupervisor({
      log: options.log,
      startTimeoutMs: options.startTimeoutMs ?? 20_000,
      stopGraceMs: options.stopGraceMs ?? 10_000,
      childOutput: options.childOutput ?? process.stderr,
      probeIntervalMs: options.probeIntervalMs,
      hooks: {
        ready: (inst) => pool(inst).onReady(inst),
        startFailed: (inst, reason) => pool(inst).startFailed(inst, reason),
        gone: (inst, info) => pool(inst).onGone(inst, info),
      },
    });
    const poolOptions = {
      log: options.log,
      supervisor: this.#supervisor,
      idleTimeoutMs: options.idleTimeoutMs ?? 30_000,
      maxQueue: options.maxQueue ?? 1000,
      hostInstanceLimit: options.hostInstanceLimit,
    };
    for (const spec of options.functions) {
      if (!spec.name || spec.name.includes('/')) throw new Error(`function name "${spec.name}" must be non-empty and contain no "/"`);
      if (this.#fns.has(spec.name)) throw new Error(`function "${spec.name}" is declared twice`);
      this.#fns.set(spec.name, new FunctionPool(spec, checkConfiguration(spec.name, spec), poolOptions));
    }
  }

  listen(port = 0, host = '127.0.0.1'): Promise<string> {
    if (this.#server) return Promise.reject(new Error('activator is already listening'));
    if (this.#closed) return Promise.reject(new Error('activator is closed'));
    const server = http.createServer((req, res) => {
      this.#handle(req, res).catch((err: unknown) => {
        this.#log.error({ err }, 'activator: unexpected error while handling a request');
        sendError(res, 500, 'activator internal error');
      });
    });
    server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
      this.#log.debug({ err: err.message, code: err.code }, 'activator: bad request from client');
      if (socket.writable && err.code !== 'ECONNRESET')
        socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      else socket.destroy();
    });
    this.#server = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        server.on('error', (err) => this.#log.error({ err }, 'activator: server error'));
        const addr = server.address() as net.AddressInfo;
        const h = addr.family === 'IPv6' || addr.address.includes(':') ? `[${addr.address}]` : addr.address;
        this.#base = `http://${h}:${addr.port}`;
        this.#log.info({ url: this.#base, functions: [...this.#fns.keys()] }, 'activator listening');
        resolve(this.#base);
      });
    });
  }

  urlFor(name: string): string {
    if (!this.#base) throw new Error('activator is not listening: call listen() first');
    if (!this.#fns.has(name)) throw new Error(`no function named "${name}"`);
    return `${this.#base}/${name}`;
  }

  /** Instances running (ready or starting), not counting those being stopped. */
  instances(name: string): number {
    return this.#fn(name).live();
  }

  stats(): Record<string, FunctionStats> {
    const out: Record<string, FunctionStats> = {};
    for (const [name, fn] of this.#fns) out[name] = { instances: fn.live(), ...fn.stats };
    return out;
  }

  /** The scaling, request timeout and delivery budget a function runs with now. */
  configurationOf(name: string): CheckedConfiguration {
    const { scaling, timeoutSeconds, deliveryBudgetSeconds } = this.#fn(name).spec;
    return { scaling: { ...scaling }, timeoutSeconds, deliveryBudgetSeconds };
  }

  /**
   * Applies a new configuration to a running function (a Knative Service edited live: Serving
   * rolls a new revision). New requests and every later decision follow the new scaling and
   * timeout at once, and instances started from now on get the new delivery budget. A changed
   * container environment rolls the instances (roll()), since a process reads its environment
   * only at start; otherwise none is stopped for it except idle ones above a lowered max-scale
   * (busy ones stop when their last request is answered), and instances held only by a lowered
   * min-scale fall back to the idle timeout. Throws on an invalid configuration, leaving the old
   * one in force. Returns whether anything changed.
   */
  configure(name: string, next: FunctionConfiguration): boolean {
    const fn = this.#fn(name);
    const configuration = checkConfiguration(name, next);
    const before = this.configurationOf(name);
    const envChanged = next.containerEnv !== undefined && !sameEnvironment(next.containerEnv, fn.spec.containerEnv ?? {});
    if (!fn.withdrawn && !envChanged && JSON.stringify(before) === JSON.stringify(configuration)) return false;
    const { scaling, timeoutSeconds, deliveryBudgetSeconds } = configuration;
    this.#log.info(
      { fn: name, from: before, to: configuration },
      `${name} ${fn.withdrawn ? 'runs again' : 'reconfigured'}: ${JSON.stringify(scaling)}, timeout ${timeoutSeconds}s, delivery budget ${deliveryBudgetSeconds}s${envChanged ? ', environment changed' : ''}`,
    );
    fn.reconfigure({ ...configuration, ...(next.containerEnv !== undefined ? { containerEnv: { ...next.containerEnv } } : {}) });
    if (envChanged) this.roll(name, "its Service's environment changed");
    return true;
  }

  /**
   * Replaces the function's instances with new ones (a new revision: a changed environment, a
   * rebuilt bundle): the running ones drain what they serve and stop; requests meanwhile wait
   * for a new instance. Returns how many were replaced.
   */
  roll(name: string, reason: string): number {
    const replaced = this.#fn(name).roll(reason);
    this.#log.info({ fn: name, replaced, reason }, `${name} rolled (${reason}): ${replaced} instance(s) replaced`);
    return replaced;
  }

  /** Names of the functions it runs. */
  get functionNames(): string[] {
    return [...this.#fns.keys()];
  }

  /**
   * The function's Knative Service was deleted: its requests are refused (404 with `reason`) and
   * its instances stop, as Serving removes the revision's route and pods, until `configure()`
   * runs it again (the Service created anew).
   */
  withdraw(name: string, reason: string): void {
    const fn = this.#fn(name);
    if (fn.withdrawn) return;
    this.#log.info({ fn: name, reason }, `${name} withdrawn: ${reason}`);
    fn.withdraw(reason);
  }

  /**
   * A direct route for the broker to `subscriber` (one of this activator's URLs, no sub-path)
   * when an instance has room and no request is buffered; undefined otherwise. With `wait` (how
   * long the sender may wait), while the function starts from zero: a promise of that route once
   * an instance is ready (FunctionPool.leaseWhenStarted). When that wait fails, the route leads
   * to the answer the front door would have given (a start that failed: 503, as to the requests
   * buffered here); undefined when the sender gave up or its time passed.
   */
  lease(subscriber: string, partitionKey?: string): Lease | undefined;
  lease(subscriber: string, partitionKey: string | undefined, wait: LeaseWait): Lease | Promise<Lease | undefined> | undefined;
  lease(subscriber: string, partitionKey?: string, wait?: LeaseWait): Lease | Promise<Lease | undefined> | undefined {
    if (this.#closed || !this.#base || !subscriber.startsWith(`${this.#base}/`)) return undefined;
    const fn = this.#fns.get(subscriber.slice(this.#base.length + 1));
    if (!fn) return undefined;
    const inst = fn.lease(partitionKey);
    if (inst) return this.#leaseOf(fn, inst);
    const started = wait ? fn.leaseWhenStarted(wait) : undefined;
    return started?.then(
      (inst) => this.#leaseOf(fn, inst),
      (err: unknown) => {
        const refusal = err instanceof ActivatorError ? err : new ActivatorError(500, String(err));
        return refusal.status === 499 || !this.#base ? undefined : this.#refusalLease(refusal);
      },
    );
  }

  #leaseOf(fn: FunctionPool, inst: Instance): Lease {
    let released = false;
    return {
      url: `http://127.0.0.1:${inst.port}/`,
      timeoutMs: fn.timeoutMs,
      release: (outcome) => {
        if (released) return;
        released = true;
        if (outcome === 'unreachable') void fn.check(inst);
        fn.release(inst);
      },
    };
  }

  /** A route to this activator that answers `refusal` once (see #handle). */
  #refusalLease(refusal: ActivatorError): Lease {
    const token = String(++this.#refusalSeq);
    this.#refusals.set(token, refusal);
    return { url: `${this.#base}${REFUSED_PATH}${token}`, timeoutMs: 0, release: () => this.#refusals.delete(token) };
  }

  /** Starts minScale instances of each function; rejects if any of them does not become ready. */
  async start(): Promise<void> {
    for (const fn of this.#fns.values()) fn.scale();
    const waits: Promise<string | undefined>[] = [];
    for (const fn of this.#fns.values()) {
      for (const inst of fn.instances)
        waits.push(inst.ready.then((ok) => (ok ? undefined : `${fn.name}#${inst.n}: ${inst.startError ?? 'did not start'}`)));
    }
    const failed = (await Promise.all(waits)).filter((x): x is string => x !== undefined);
    if (failed.length > 0) throw new Error(`activator: function instances failed to start: ${failed.join('; ')}`);
  }

  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  #fn(name: string): FunctionPool {
    const fn = this.#fns.get(name);
    if (!fn) throw new Error(`no function named "${name}"`);
    return fn;
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    req.on('error', () => {}); // a client that goes away mid-upload is handled via res 'close'
    res.on('error', () => {});
    if (this.#closed) {
      res.setHeader('connection', 'close');
      sendError(res, 503, 'activator is shutting down');
      return;
    }
    if (req.url?.startsWith(REFUSED_PATH)) {
      const refusal = this.#refusals.get(req.url.slice(REFUSED_PATH.length));
      this.#refusals.delete(req.url.slice(REFUSED_PATH.length));
      if (refusal && refusal.status >= 500)
        this.#log.warn({ status: refusal.status, reason: refusal.message }, 'activator: request not proxied');
      sendError(res, refusal?.status ?? 404, refusal?.message ?? 'no such refusal');
      return;
    }
    const route = routeOf(req.url ?? '/', this.#fns);
    if ('status' in route) {
      sendError(res, route.status, route.message);
      return;
    }
    const { name, path } = route;
    const fn = this.#fns.get(name)!;
    let inst: Instance;
    try {
      inst = await fn.acquire(res, partitionKeyOf(req.headers['ce-partitionkey']));
    } catch (err) {
      const e = err instanceof ActivatorError ? err : new ActivatorError(500, String(err));
      if (e.status >= 500) this.#log.warn({ fn: name, status: e.status, reason: e.message }, 'activator: request not proxied');
      if (!res.destroyed) sendError(res, e.status, e.message);
      return;
    }
    fn.stats.proxied++;
    proxy(
      { fn: name, instance: inst.n, port: inst.port, agent: inst.agent, timeoutMs: fn.timeoutMs },
      req,
      res,
      path,
      {
        release: () => fn.release(inst),
        failed: async () => {
          await fn.check(inst);
          return { gone: inst.state === 'exited' || inst.state === 'stopping' };
        },
      },
      this.#log,
    );
  }

  async #close(): Promise<void> {
    this.#closed = true;
    const server = this.#server;
    const serverClosed = server ? new Promise<void>((r) => server.close(() => r())) : Promise.resolve();
    server?.closeIdleConnections();
    const stops: Promise<void>[] = [];
    for (const fn of this.#fns.values()) stops.push(...fn.close());
    if (stops.length > 0) this.#log.info({ instances: stops.length }, 'activator: stopping function instances');
    // Children drain their in-flight requests on SIGTERM; their answers still reach the clients.
    await Promise.all(stops);
    server?.closeAllConnections();
    await serverClosed;
    this.#log.info('activator closed');
  }
}
