// The local activator: what Knative Serving's activator + autoscaler + queue-proxy do for a
// revision, done for function processes on this machine. This file routes requests and holds
// the per-function state; the pieces live beside it: handler.ts (which function), throttler.ts
// (bounded wait for a slot), decider.ts (how many instances), lb-policy.ts
// (which instance), instance.ts (one process's state machine), supervisor.ts (spawn, probe, stop),
// proxy.ts (forwarding with the request timeout), child-output.ts.
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
//   scaling, and a buffered request always goes first.
// - A child that dies: its in-flight requests get 502 (retried by the broker), it is removed and
//   the next request (or a buffered one) starts a new instance.
// - `configure()` changes a function's scaling and timeout while it runs (a Knative Service
//   edited live): decisions and new requests follow the new values, running instances stay.
import http from 'node:http';
import type net from 'node:net';
import type { Writable } from 'node:stream';
import type { Logger } from 'pino';
import type { Scaling } from '../../functions/runtime/declaration.ts';
import type { Lease } from '../broker/dispatcher.ts';
import { desiredScale, effectiveTarget } from './decider.ts';
import { Instance } from './instance.ts';
import { routeOf } from './handler.ts';
import { partitionKeyOf, pick } from './lb-policy.ts';
import { proxy, sendError } from './proxy.ts';
import { formatDuration, InstanceSupervisor, type ExitInfo } from './supervisor.ts';
import { ActivatorError, Throttler } from './throttler.ts';

export type { Scaling };

export interface FunctionProcessSpec {
  name: string;
  command: string;
  args: string[];
  /** Merged over process.env; the activator sets PORT and HOST=127.0.0.1 (and K_SERVICE unless given) per instance. */
  env?: Record<string, string>;
  scaling: Scaling;
  /** Knative Serving's per-request timeout (revision timeoutSeconds); default 300 (revision-timeout-seconds). */
  timeoutSeconds?: number;
}

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
  /** Where children's stdout/stderr lines go, prefixed `[name#n] `: a stream (default process.stderr) or 'log' (pino, info). */
  childOutput?: Writable | 'log';
  /**
   * Instances one function may run at once on this host, whatever its max-scale (see
   * desiredScale); default unbounded. The plane sets it from the host's cores.
   */
  hostInstanceLimit?: number;
}

export interface FunctionStats {
  /** Instances running or starting now. */
  instances: number;
  /** Most instances live at once since the activator started. */
  peakInstances: number;
  /** Instances started since the activator started. */
  started: number;
  /** Requests proxied through the activator. */
  proxied: number;
  /** Requests sent by the broker straight to an instance (warm path). */
  direct: number;
}

/** Knative Serving's revision-timeout-seconds default. */
export const DEFAULT_TIMEOUT_SECONDS = 300;

/** What a Knative Service's revision says about running a function: scaling and request timeout. */
export interface FunctionConfiguration {
  scaling: Scaling;
  timeoutSeconds?: number;
}

/** Throws unless `scaling` and `timeoutSeconds` are usable; returns the timeout (default applied). */
export function checkScaling(name: string, s: Scaling, timeoutSeconds = DEFAULT_TIMEOUT_SECONDS): number {
  for (const k of ['minScale', 'maxScale', 'target', 'containerConcurrency'] as const) {
    if (!Number.isInteger(s[k]) || s[k] < 0) throw new Error(`function "${name}": scaling.${k} must be a non-negative integer, got ${String(s[k])}`);
  }
  if (s.maxScale > 0 && s.maxScale < s.minScale) throw new Error(`function "${name}": scaling.maxScale (${s.maxScale}) is below minScale (${s.minScale})`);
  if (!(timeoutSeconds >= 0)) throw new Error(`function "${name}": timeoutSeconds must be >= 0, got ${String(timeoutSeconds)}`);
  return timeoutSeconds;
}

interface FunctionState {
  spec: FunctionProcessSpec;
  target: number;
  timeoutMs: number;
  instances: Instance[];
  queue: Throttler<Instance>;
  seq: number;
  /** Consecutive failed starts: back-off for restarts that no request asked for. */
  failures: number;
  retryTimer?: NodeJS.Timeout;
  stats: Omit<FunctionStats, 'instances'>;
}

export class Activator {
  #log: Logger;
  #idleTimeoutMs: number;
  #maxQueue: number;
  #hostInstanceLimit: number | undefined;
  #fns = new Map<string, FunctionState>();
  #byInstance = new WeakMap<Instance, FunctionState>();
  #supervisor: InstanceSupervisor;
  #server?: http.Server;
  #base?: string;
  #closed = false;
  #closing?: Promise<void>;

  constructor(options: ActivatorOptions) {
    this.#log = options.log;
    this.#idleTimeoutMs = options.idleTimeoutMs ?? 30_000;
    this.#maxQueue = options.maxQueue ?? 1000;
    this.#hostInstanceLimit = options.hostInstanceLimit;
    this.#supervisor = new InstanceSupervisor({
      log: options.log,
      startTimeoutMs: options.startTimeoutMs ?? 20_000,
      stopGraceMs: options.stopGraceMs ?? 10_000,
      childOutput: options.childOutput ?? process.stderr,
      hooks: {
        ready: (inst) => this.#onReady(inst),
        startFailed: (inst, reason) => this.#startFailed(inst, reason),
        gone: (inst, info) => this.#onGone(inst, info),
      },
    });
    for (const spec of options.functions) {
      if (!spec.name || spec.name.includes('/')) throw new Error(`function name "${spec.name}" must be non-empty and contain no "/"`);
      if (this.#fns.has(spec.name)) throw new Error(`function "${spec.name}" is declared twice`);
      const timeoutSeconds = checkScaling(spec.name, spec.scaling, spec.timeoutSeconds);
      this.#fns.set(spec.name, {
        spec,
        target: effectiveTarget(spec.scaling),
        timeoutMs: timeoutSeconds * 1000,
        instances: [],
        queue: new Throttler<Instance>(spec.name, this.#maxQueue),
        seq: 0,
        failures: 0,
        stats: { peakInstances: 0, started: 0, proxied: 0, direct: 0 },
      });
    }
  }

  // ---- public API -------------------------------------------------------------------------

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
      if (socket.writable && err.code !== 'ECONNRESET') socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
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
    return this.#live(this.#fn(name));
  }

  stats(): Record<string, FunctionStats> {
    const out: Record<string, FunctionStats> = {};
    for (const [name, fn] of this.#fns) out[name] = { instances: this.#live(fn), ...fn.stats };
    return out;
  }

  /** The scaling and request timeout a function runs with now. */
  configurationOf(name: string): FunctionConfiguration {
    const fn = this.#fn(name);
    return { scaling: { ...fn.spec.scaling }, timeoutSeconds: fn.timeoutMs / 1000 };
  }

  /**
   * Applies a new scaling and request timeout to a running function (a Knative Service edited
   * live: Serving rolls a new revision; here the same processes carry on). New requests and
   * every later decision follow the new values at once; no instance is stopped for it except
   * idle ones above a lowered max-scale (busy ones stop when their last request is answered),
   * and instances held only by a lowered min-scale fall back to the idle timeout. Throws on an
   * invalid configuration, leaving the old one in force. Returns whether anything changed.
   */
  configure(name: string, next: FunctionConfiguration): boolean {
    const fn = this.#fn(name);
    const timeoutSeconds = checkScaling(name, next.scaling, next.timeoutSeconds);
    const before = this.configurationOf(name);
    const scaling = { minScale: next.scaling.minScale, maxScale: next.scaling.maxScale, target: next.scaling.target, containerConcurrency: next.scaling.containerConcurrency };
    if (JSON.stringify(before) === JSON.stringify({ scaling, timeoutSeconds })) return false;
    fn.spec = { ...fn.spec, scaling, timeoutSeconds };
    fn.target = effectiveTarget(scaling);
    fn.timeoutMs = timeoutSeconds * 1000;
    this.#log.info({ fn: name, from: before, to: { scaling, timeoutSeconds } }, `${name} reconfigured: ${JSON.stringify(scaling)}, timeout ${timeoutSeconds}s`);
    if (this.#closed) return true;
    for (const inst of fn.instances) this.#armIdle(inst);
    this.#trimToMaxScale(fn);
    this.#scale(fn);
    this.#dispatch(fn);
    return true;
  }

  /**
   * A direct route for the broker to `subscriber` (one of this activator's URLs, no sub-path)
   * when an instance has room and no request is buffered; undefined otherwise.
   */
  lease(subscriber: string, partitionKey?: string): Lease | undefined {
    if (this.#closed || !this.#base || !subscriber.startsWith(`${this.#base}/`)) return undefined;
    const fn = this.#fns.get(subscriber.slice(this.#base.length + 1));
    if (!fn || fn.queue.waiting > 0) return undefined;
    const inst = pick(fn.instances, fn.spec.scaling.containerConcurrency, fn.target, partitionKey);
    if (!inst) return undefined;
    this.#take(inst);
    fn.stats.direct++;
    this.#scale(fn);
    let released = false;
    return {
      url: `http://127.0.0.1:${inst.port}/`,
      timeoutMs: fn.timeoutMs,
      release: (outcome) => {
        if (released) return;
        released = true;
        if (outcome === 'unreachable') void this.#supervisor.check(inst, () => this.#backInRotation(inst));
        this.#release(inst);
      },
    };
  }

  /** Starts minScale instances of each function; rejects if any of them does not become ready. */
  async start(): Promise<void> {
    for (const fn of this.#fns.values()) this.#scale(fn);
    const waits: Promise<string | undefined>[] = [];
    for (const fn of this.#fns.values()) {
      for (const inst of fn.instances) waits.push(inst.ready.then((ok) => (ok ? undefined : `${fn.spec.name}#${inst.n}: ${inst.startError ?? 'did not start'}`)));
    }
    const failed = (await Promise.all(waits)).filter((x): x is string => x !== undefined);
    if (failed.length > 0) throw new Error(`activator: function instances failed to start: ${failed.join('; ')}`);
  }

  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  // ---- request path -----------------------------------------------------------------------

  #fn(name: string): FunctionState {
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
    const route = routeOf(req.url ?? '/', this.#fns);
    if ('status' in route) {
      sendError(res, route.status, route.message);
      return;
    }
    const { name, path } = route;
    const fn = this.#fns.get(name)!;
    let inst: Instance;
    try {
      inst = await this.#acquire(fn, res, partitionKeyOf(req.headers['ce-partitionkey']));
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
        release: () => this.#release(inst),
        failed: async () => {
          await this.#supervisor.check(inst, () => this.#backInRotation(inst));
          return { gone: inst.state === 'exited' || inst.state === 'stopping' };
        },
      },
      this.#log,
    );
  }

  /** A slot on a ready instance: immediately, or once one frees up or starts. */
  #acquire(fn: FunctionState, res: http.ServerResponse, partitionKey?: string): Promise<Instance> {
    const inst = pick(fn.instances, fn.spec.scaling.containerConcurrency, fn.target, partitionKey);
    if (inst) {
      this.#take(inst);
      this.#scale(fn);
      return Promise.resolve(inst);
    }
    const waiting = fn.queue.wait(res);
    this.#scale(fn);
    return waiting;
  }

  #take(inst: Instance): void {
    inst.inFlight++;
    inst.served++;
    if (inst.idleTimer) {
      clearTimeout(inst.idleTimer);
      inst.idleTimer = undefined;
    }
  }

  #release(inst: Instance): void {
    inst.inFlight--;
    if (inst.state === 'ready') {
      const fn = this.#byInstance.get(inst)!;
      this.#dispatch(fn);
      this.#trimToMaxScale(fn);
      this.#armIdle(inst);
    } else if (inst.state === 'stopping' && inst.inFlight === 0) {
      // Drained: drop the kept-alive connections so the child's server.close() completes now
      // instead of after its keep-alive timeout.
      setImmediate(() => inst.agent.destroy());
    }
  }

  #backInRotation(inst: Instance): void {
    this.#dispatch(this.#byInstance.get(inst)!);
    if (inst.inFlight === 0) this.#armIdle(inst);
  }

  /** Hands buffered requests to instances with room. */
  #dispatch(fn: FunctionState): void {
    fn.queue.hand(() => {
      const inst = pick(fn.instances, fn.spec.scaling.containerConcurrency, fn.target);
      if (inst) this.#take(inst);
      return inst;
    });
  }

  // ---- scaling ----------------------------------------------------------------------------

  #live(fn: FunctionState): number {
    return fn.instances.filter((i) => i.live).length;
  }

  #scaleEvent(fn: FunctionState, from: number, to: number, reason: string): void {
    this.#log.info({ fn: fn.spec.name, from, to, reason }, `scale ${fn.spec.name} ${from} -> ${to}: ${reason}`);
  }

  /** Evaluated on every arrival and removal. */
  #scale(fn: FunctionState, afterBackoff = false): void {
    if (this.#closed) return;
    const live = this.#live(fn);
    let demand = fn.queue.waiting;
    for (const i of fn.instances) demand += i.inFlight;
    const { want, reason } = desiredScale(demand, fn.spec.scaling, live, this.#hostInstanceLimit);
    if (want <= live) return;
    const coldStartForRequests = live === 0 && fn.queue.waiting > 0;
    if (fn.failures > 0 && !afterBackoff && !coldStartForRequests) {
      // The last start failed: further starts back off (100 ms doubling, at most 10 s) like a
      // crash loop. A request arriving when nothing runs still starts one at once (the broker's
      // retries pace those).
      if (!fn.retryTimer) {
        fn.retryTimer = setTimeout(() => {
          fn.retryTimer = undefined;
          this.#scale(fn, true);
        }, Math.min(100 * 2 ** (fn.failures - 1), 10_000));
        fn.retryTimer.unref();
      }
      return;
    }
    this.#scaleEvent(fn, live, want, reason);
    for (let k = live; k < want; k++) this.#startInstance(fn);
    fn.stats.peakInstances = Math.max(fn.stats.peakInstances, this.#live(fn));
  }

  /** Stops idle instances beyond max-scale (after it was lowered), newest first. */
  #trimToMaxScale(fn: FunctionState): void {
    const max = fn.spec.scaling.maxScale;
    if (max <= 0) return;
    for (const inst of [...fn.instances].reverse()) {
      if (this.#live(fn) <= max) return;
      if (inst.state === 'ready' && inst.inFlight === 0) this.#stop(inst, `above max-scale ${max}`);
    }
  }

  #armIdle(inst: Instance): void {
    if (inst.idleTimer || inst.inFlight > 0 || inst.state !== 'ready' || this.#closed) return;
    inst.idleTimer = setTimeout(() => {
      inst.idleTimer = undefined;
      const fn = this.#byInstance.get(inst)!;
      if (inst.state !== 'ready' || inst.inFlight > 0 || fn.queue.waiting > 0) return;
      if (this.#live(fn) <= fn.spec.scaling.minScale) return;
      this.#stop(inst, `idle ${formatDuration(this.#idleTimeoutMs)}`);
    }, this.#idleTimeoutMs);
    inst.idleTimer.unref();
  }

  #startInstance(fn: FunctionState): void {
    const inst = new Instance(fn.spec.name, ++fn.seq);
    this.#byInstance.set(inst, fn);
    fn.instances.push(inst);
    fn.stats.started++;
    void this.#supervisor.boot(inst, fn.spec);
  }

  #stop(inst: Instance, reason?: string): Promise<void> {
    const fn = this.#byInstance.get(inst)!;
    if (inst.live && reason) {
      const live = this.#live(fn);
      this.#scaleEvent(fn, live, live - 1, reason);
    }
    return this.#supervisor.stop(inst);
  }

  #onReady(inst: Instance): void {
    const fn = this.#byInstance.get(inst)!;
    fn.failures = 0;
    this.#dispatch(fn);
    this.#armIdle(inst);
  }

  /** A start that will not produce a ready instance. */
  #startFailed(inst: Instance, reason: string): void {
    const fn = this.#byInstance.get(inst)!;
    inst.startError ??= reason;
    fn.failures++;
    if (inst.state === 'starting') {
      const live = this.#live(fn);
      inst.transition('stopping');
      this.#scaleEvent(fn, live, live - 1, reason);
    }
    this.#log.error({ fn: fn.spec.name, instance: inst.n, pid: inst.pid, reason }, `function ${fn.spec.name}#${inst.n} failed to start: ${reason}`);
    // Nothing else will serve the buffered requests: fail them (503, the broker retries).
    if (this.#live(fn) === 0) fn.queue.rejectAll(503, `function "${fn.spec.name}" ${reason}`);
    this.#scale(fn);
    // Requests held for this instance (soft target) may now go to the ready ones.
    this.#dispatch(fn);
  }

  #onGone(inst: Instance, info: ExitInfo): void {
    const fn = this.#byInstance.get(inst)!;
    const i = fn.instances.indexOf(inst);
    if (i >= 0) fn.instances.splice(i, 1);
    const name = fn.spec.name;
    if (info.wasStarting) {
      const live = this.#live(fn);
      this.#scaleEvent(fn, live + 1, live, `exited before ready (${info.description})`);
      this.#startFailed(inst, `exited before it was ready (${info.description})`);
    } else if (info.wasServing) {
      const live = this.#live(fn);
      if (info.clean && !inst.killedAs) {
        // Exit 0 or SIGTERM/SIGINT: the process shut down on purpose (e.g. a Ctrl-C that reached it).
        this.#log.info({ fn: name, instance: inst.n, pid: inst.pid, code: info.code, signal: info.signal, inFlight: inst.inFlight }, `function instance ${name}#${inst.n} exited (${info.description})`);
        this.#scaleEvent(fn, live + 1, live, `exited (${info.description})`);
      } else {
        const reason = inst.killedAs ?? `crashed (${info.description})`;
        this.#log.error({ fn: name, instance: inst.n, pid: inst.pid, code: info.code, signal: info.signal, inFlight: inst.inFlight }, `function instance ${name}#${inst.n} ${reason}`);
        this.#scaleEvent(fn, live + 1, live, reason);
      }
      // Buffered requests (or minScale) need a replacement.
      this.#scale(fn);
      this.#dispatch(fn);
    } else {
      this.#log.debug({ fn: name, instance: inst.n, pid: inst.pid, code: info.code, signal: info.signal }, `function instance ${name}#${inst.n} stopped (${info.description})`);
    }
    this.#supervisor.release();
  }

  // ---- shutdown ---------------------------------------------------------------------------

  async #close(): Promise<void> {
    this.#closed = true;
    const server = this.#server;
    const serverClosed = server ? new Promise<void>((r) => server.close(() => r())) : Promise.resolve();
    server?.closeIdleConnections();
    const stops: Promise<void>[] = [];
    let count = 0;
    for (const fn of this.#fns.values()) {
      if (fn.retryTimer) clearTimeout(fn.retryTimer);
      fn.retryTimer = undefined;
      fn.queue.rejectAll(503, 'activator is shutting down');
      for (const inst of [...fn.instances]) {
        count++;
        stops.push(this.#supervisor.stop(inst));
      }
    }
    if (count > 0) this.#log.info({ instances: count }, 'activator: stopping function instances');
    // Children drain their in-flight requests on SIGTERM; their answers still reach the clients.
    await Promise.all(stops);
    server?.closeAllConnections();
    await serverClosed;
    this.#supervisor.release();
    this.#log.info('activator closed');
  }
}
