// The local activator: what Knative Serving's activator + autoscaler + queue-proxy do for a
// revision, done for function processes on this machine.
//
// - A request for a function with no ready instance is buffered while one instance starts (one
//   spawn for any number of concurrent requests), and proxied once `GET /health/readiness`
//   answers 200. No readiness within startTimeoutMs → 503 (the broker retries).
// - Scale up as Knative's decider does: want = ceil(concurrency / target), where concurrency
//   counts in-flight plus buffered requests and target is min(target, containerConcurrency)
//   when both are set (knative/serving pkg/reconciler/autoscaling/resources/target.go), clamped
//   to [minScale, maxScale] (maxScale 0 = unbounded, as in Knative).
// - containerConcurrency > 0 is a hard limit per instance (queue-proxy's breaker): surplus
//   requests wait in the activator, in a bounded queue (full → 503 "pending request queue full",
//   as Knative's activator answers). With containerConcurrency 0 the target is a soft limit: an
//   instance takes more than `target` only when no other instance is on its way.
// - Requests go to the least-loaded ready instance, ties to the oldest one, so surplus instances
//   fall idle when load drops; an instance with no request for idleTimeoutMs is stopped
//   (SIGTERM, SIGKILL after stopGraceMs), never below minScale; minScale 0 scales to zero.
// - A child that dies: its in-flight requests get 502 (retried by the broker), it is removed and
//   the next request (or a buffered one) starts a new instance.
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import type { Readable, Writable } from 'node:stream';
import type { Logger } from 'pino';
import type { Scaling } from '../functions/runtime/declaration.ts';

export type { Scaling };

export interface FunctionProcessSpec {
  name: string;
  command: string;
  args: string[];
  /** Merged over process.env; the activator sets PORT (and K_SERVICE unless given) per instance. */
  env?: Record<string, string>;
  scaling: Scaling;
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
}

const DEFAULT_TARGET = 100; // Knative's container-concurrency-target-default
const READINESS_PATH = '/health/readiness';
const PROBE_INTERVAL_MS = 25;
const PROBE_TIMEOUT_MS = 2000;

// RFC 9110 §7.6.1 connection-specific fields, plus the legacy ones proxies drop.
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

type InstanceState = 'starting' | 'ready' | 'suspect' | 'stopping' | 'exited';

interface Instance {
  fn: FunctionState;
  n: number;
  state: InstanceState;
  port: number;
  child?: ChildProcess;
  pid?: number;
  agent: http.Agent;
  inFlight: number;
  idleTimer?: NodeJS.Timeout;
  killTimer?: NodeJS.Timeout;
  /** Resolves true when the instance became ready, false when it never did. */
  ready: Promise<boolean>;
  resolveReady: (ok: boolean) => void;
  /** Resolves when the process has exited (or was never spawned). */
  exited: Promise<void>;
  resolveExited: () => void;
  /** Why the instance failed to start, for the 503 of the requests waiting on it. */
  startError?: string;
  /** Set while a connection failure is being checked, shared by all requests that hit it. */
  checking?: Promise<void>;
  /** Reason logged when the activator itself killed an unresponsive instance. */
  killedAs?: string;
}

interface Waiter {
  resolve: (inst: Instance) => void;
  reject: (err: ActivatorError) => void;
}

interface FunctionState {
  spec: FunctionProcessSpec;
  target: number;
  instances: Instance[];
  queue: Waiter[];
  seq: number;
  /** Consecutive failed starts: back-off for restarts that no request asked for. */
  failures: number;
  retryTimer?: NodeJS.Timeout;
}

class ActivatorError extends Error {
  status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

/** Knative's effective concurrency target: the annotation, never above containerConcurrency. */
export function effectiveTarget(s: Scaling): number {
  let total = s.target > 0 ? s.target : s.containerConcurrency > 0 ? s.containerConcurrency : DEFAULT_TARGET;
  if (s.containerConcurrency > 0) total = Math.min(total, s.containerConcurrency);
  return Math.max(1, total);
}

function formatDuration(ms: number): string {
  if (ms < 1000) return `${ms}ms`;
  const s = ms / 1000;
  return Number.isInteger(s) ? `${s}s` : `${s.toFixed(1)}s`;
}

function exitDescription(code: number | null, signal: NodeJS.Signals | null): string {
  return code !== null ? `exit ${code}` : `signal ${signal ?? 'unknown'}`;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One GET of the readiness path: the status code, or an Error. */
function probe(inst: Instance): Promise<number | Error> {
  return new Promise((resolve) => {
    const req = http.request(
      { host: '127.0.0.1', port: inst.port, method: 'GET', path: READINESS_PATH, agent: inst.agent, timeout: PROBE_TIMEOUT_MS },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', (e) => resolve(e));
      },
    );
    req.on('timeout', () => req.destroy(Object.assign(new Error('readiness probe timed out'), { code: 'ETIMEDOUT' })));
    req.on('error', (e) => resolve(e));
    req.end();
  });
}

/** Request headers for the instance: hop-by-hop fields (and those named in Connection) removed, X-Forwarded-* added. */
function upstreamHeaders(req: http.IncomingMessage, frontHost: string): http.OutgoingHttpHeaders {
  const drop = new Set(HOP_BY_HOP);
  drop.add('expect'); // the front server already answered 100-continue
  for (const token of String(req.headers.connection ?? '').split(',')) {
    const t = token.trim().toLowerCase();
    if (t) drop.add(t);
  }
  const out: http.OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v !== undefined && !drop.has(k)) out[k] = v;
  }
  // The body is re-framed on the upstream connection: keep chunked framing when there is no length.
  if (req.headers['transfer-encoding'] && req.headers['content-length'] === undefined) {
    out['transfer-encoding'] = 'chunked';
  }
  const remote = req.socket.remoteAddress;
  if (remote) {
    const prior = req.headers['x-forwarded-for'];
    out['x-forwarded-for'] = prior ? `${String(prior)}, ${remote}` : remote;
  }
  if (!req.headers['x-forwarded-host'] && req.headers.host) out['x-forwarded-host'] = req.headers.host;
  if (!req.headers['x-forwarded-proto']) out['x-forwarded-proto'] = 'http';
  out.via = req.headers.via ? `${String(req.headers.via)}, 1.1 ${frontHost}` : `1.1 ${frontHost}`;
  return out;
}

/** Response headers for the client: hop-by-hop fields (and those named in Connection) removed. */
function downstreamHeaders(res: http.IncomingMessage): http.OutgoingHttpHeaders {
  const drop = new Set(HOP_BY_HOP);
  for (const token of String(res.headers.connection ?? '').split(',')) {
    const t = token.trim().toLowerCase();
    if (t) drop.add(t);
  }
  const out: http.OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(res.headers)) {
    if (v !== undefined && !drop.has(k)) out[k] = v;
  }
  return out;
}

function sendError(res: http.ServerResponse, status: number, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = `${message}\n`;
  res.writeHead(status, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'x-activator-reason': message.replace(/[^\x20-\x7e]/g, '?'),
  });
  res.end(body);
}

export class Activator {
  #log: Logger;
  #idleTimeoutMs: number;
  #startTimeoutMs: number;
  #stopGraceMs: number;
  #maxQueue: number;
  #childOutput: Writable | 'log';
  #fns = new Map<string, FunctionState>();
  #server?: http.Server;
  #base?: string;
  #closed = false;
  #closing?: Promise<void>;
  #exitHookInstalled = false;

  constructor(options: ActivatorOptions) {
    this.#log = options.log;
    this.#idleTimeoutMs = options.idleTimeoutMs ?? 30_000;
    this.#startTimeoutMs = options.startTimeoutMs ?? 20_000;
    this.#stopGraceMs = options.stopGraceMs ?? 10_000;
    this.#maxQueue = options.maxQueue ?? 1000;
    this.#childOutput = options.childOutput ?? process.stderr;
    for (const spec of options.functions) {
      if (!spec.name || spec.name.includes('/')) throw new Error(`function name "${spec.name}" must be non-empty and contain no "/"`);
      if (this.#fns.has(spec.name)) throw new Error(`function "${spec.name}" is declared twice`);
      const s = spec.scaling;
      for (const k of ['minScale', 'maxScale', 'target', 'containerConcurrency'] as const) {
        if (!Number.isInteger(s[k]) || s[k] < 0) {
          throw new Error(`function "${spec.name}": scaling.${k} must be a non-negative integer, got ${String(s[k])}`);
        }
      }
      if (s.maxScale > 0 && s.maxScale < s.minScale) {
        throw new Error(`function "${spec.name}": scaling.maxScale (${s.maxScale}) is below minScale (${s.minScale})`);
      }
      this.#fns.set(spec.name, { spec, target: effectiveTarget(s), instances: [], queue: [], seq: 0, failures: 0 });
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
      if (socket.writable && err.code !== 'ECONNRESET') {
        socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      } else {
        socket.destroy();
      }
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
    const fn = this.#fns.get(name);
    if (!fn) throw new Error(`no function named "${name}"`);
    return this.#live(fn);
  }

  /** Starts minScale instances of each function; rejects if any of them does not become ready. */
  async start(): Promise<void> {
    for (const fn of this.#fns.values()) this.#scale(fn);
    const waits: Promise<string | undefined>[] = [];
    for (const fn of this.#fns.values()) {
      for (const inst of fn.instances) {
        waits.push(inst.ready.then((ok) => (ok ? undefined : `${fn.spec.name}#${inst.n}: ${inst.startError ?? 'did not start'}`)));
      }
    }
    const failed = (await Promise.all(waits)).filter((x): x is string => x !== undefined);
    if (failed.length > 0) throw new Error(`activator: function instances failed to start: ${failed.join('; ')}`);
  }

  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  // ---- request path -----------------------------------------------------------------------

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    req.on('error', () => {}); // a client that goes away mid-upload is handled via res 'close'
    res.on('error', () => {});
    if (this.#closed) {
      res.setHeader('connection', 'close');
      sendError(res, 503, 'activator is shutting down');
      return;
    }
    let raw = req.url ?? '/';
    if (!raw.startsWith('/')) {
      try {
        const u = new URL(raw); // absolute-form request target
        raw = u.pathname + u.search;
      } catch {
        sendError(res, 400, `bad request target "${raw.slice(0, 200)}"`);
        return;
      }
    }
    const m = /^\/([^/?#]*)([^#]*)/.exec(raw);
    const name = m?.[1] ?? '';
    const fn = this.#fns.get(name);
    if (!fn) {
      sendError(res, 404, name ? `no function named "${name}" (known: ${[...this.#fns.keys()].join(', ')})` : 'request path must start with a function name');
      return;
    }
    let path = m?.[2] ?? '';
    if (!path.startsWith('/')) path = `/${path}`;

    let inst: Instance;
    try {
      inst = await this.#acquire(fn, res);
    } catch (err) {
      const e = err instanceof ActivatorError ? err : new ActivatorError(500, String(err));
      if (e.status >= 500) this.#log.warn({ fn: name, status: e.status, reason: e.message }, 'activator: request not proxied');
      if (!res.destroyed) sendError(res, e.status, e.message);
      return;
    }
    this.#proxy(inst, req, res, path);
  }

  /** A slot on a ready instance: immediately, or once one frees up or starts. */
  #acquire(fn: FunctionState, res: http.ServerResponse): Promise<Instance> {
    const inst = this.#pick(fn);
    if (inst) {
      this.#take(inst);
      this.#scale(fn);
      return Promise.resolve(inst);
    }
    if (fn.queue.length >= this.#maxQueue) {
      return Promise.reject(new ActivatorError(503, `pending request queue full (${this.#maxQueue} requests buffered for "${fn.spec.name}")`));
    }
    return new Promise<Instance>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject };
      fn.queue.push(waiter);
      res.once('close', () => {
        const i = fn.queue.indexOf(waiter);
        if (i >= 0) {
          fn.queue.splice(i, 1); // client went away while buffered
          reject(new ActivatorError(499, 'client closed the request'));
        }
      });
      this.#scale(fn);
    });
  }

  /** Least-loaded ready instance with room, ties to the oldest. */
  #pick(fn: FunctionState): Instance | undefined {
    const cc = fn.spec.scaling.containerConcurrency;
    const starting = fn.instances.some((i) => i.state === 'starting');
    let best: Instance | undefined;
    for (const inst of fn.instances) {
      if (inst.state !== 'ready') continue;
      // Hard limit: containerConcurrency. Soft limit: the target, held only while more capacity is on its way.
      const room = cc > 0 ? inst.inFlight < cc : !starting || inst.inFlight < fn.target;
      if (room && (!best || inst.inFlight < best.inFlight)) best = inst;
    }
    return best;
  }

  #take(inst: Instance): void {
    inst.inFlight++;
    if (inst.idleTimer) {
      clearTimeout(inst.idleTimer);
      inst.idleTimer = undefined;
    }
  }

  #release(inst: Instance): void {
    inst.inFlight--;
    if (inst.state === 'ready') {
      this.#dispatch(inst.fn);
      this.#armIdle(inst);
    } else if (inst.state === 'stopping' && inst.inFlight === 0) {
      // Drained: drop the kept-alive connections so the child's server.close() completes now
      // instead of after its keep-alive timeout.
      setImmediate(() => inst.agent.destroy());
    }
  }

  /** Hands buffered requests to instances with room. */
  #dispatch(fn: FunctionState): void {
    while (fn.queue.length > 0) {
      const inst = this.#pick(fn);
      if (!inst) return;
      const waiter = fn.queue.shift()!;
      this.#take(inst);
      waiter.resolve(inst);
    }
  }

  #rejectQueue(fn: FunctionState, status: number, message: string): void {
    const waiters = fn.queue.splice(0);
    for (const w of waiters) w.reject(new ActivatorError(status, message));
  }

  #proxy(inst: Instance, req: http.IncomingMessage, res: http.ServerResponse, path: string): void {
    const fn = inst.fn;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.#release(inst);
    };
    let clientGone = false;
    const upstream = http.request({
      host: '127.0.0.1',
      port: inst.port,
      method: req.method,
      path,
      headers: upstreamHeaders(req, 'operator-functions-activator'),
      agent: inst.agent,
    });
    upstream.on('response', (ures) => {
      if (clientGone) {
        ures.resume();
        return;
      }
      try {
        res.writeHead(ures.statusCode ?? 502, ures.statusMessage || undefined, downstreamHeaders(ures));
      } catch (err) {
        // The function sent a header Node will not forward (invalid characters): report, do not crash.
        this.#log.warn({ fn: fn.spec.name, instance: inst.n, err: String(err) }, 'activator: invalid response header from function');
        ures.resume();
        release();
        sendError(res, 502, `function "${fn.spec.name}" sent an invalid response header`);
        return;
      }
      ures.on('end', release);
      ures.on('error', () => {
        release();
        res.destroy();
      });
      ures.pipe(res);
    });
    upstream.on('error', (err: NodeJS.ErrnoException) => {
      if (clientGone) {
        release();
        return;
      }
      if (res.headersSent) {
        // Failed mid-response: all we can do is cut the client connection too.
        release();
        res.destroy();
        void this.#check(inst);
        return;
      }
      // Nothing answered: find out whether the instance is gone before telling the client, so
      // that a retry does not land on a dead instance again.
      const checked = this.#check(inst);
      release();
      void checked.then(() => {
        const gone = inst.state === 'exited' || inst.state === 'stopping';
        const reason = `function "${fn.spec.name}" instance #${inst.n} failed: ${err.code ?? err.message}${gone ? ' (instance exited)' : ''}`;
        this.#log.warn({ fn: fn.spec.name, instance: inst.n, pid: inst.pid, err: err.message }, 'activator: upstream request failed');
        if (!res.destroyed) sendError(res, 502, reason);
      });
    });
    res.on('close', () => {
      if (!res.writableFinished) {
        clientGone = true;
        upstream.destroy();
        release();
      }
    });
    req.pipe(upstream);
  }

  /**
   * After a connection-level failure: keep the instance out of rotation until we know whether it
   * still serves (readiness probe answers) or is gone (exit, or refuses connections — then it is
   * killed). Concurrent failures on one instance share one check.
   */
  #check(inst: Instance): Promise<void> {
    if (inst.checking) return inst.checking;
    if (inst.state !== 'ready') return Promise.resolve();
    inst.state = 'suspect';
    const run = async (): Promise<void> => {
      const result = await Promise.race([probe(inst), inst.exited.then(() => 'exited' as const)]);
      if (result === 'exited' || inst.state !== 'suspect') return;
      if (typeof result === 'number' || (result as NodeJS.ErrnoException).code === 'ETIMEDOUT') {
        // It answers (or is merely slow): back into rotation.
        inst.state = 'ready';
        this.#dispatch(inst.fn);
        if (inst.inFlight === 0) this.#armIdle(inst);
        return;
      }
      // Refuses connections: give the exit event a moment, then kill it.
      const exitedSoon = await Promise.race([inst.exited.then(() => true), sleep(500).then(() => false)]);
      if (!exitedSoon && inst.state === 'suspect') {
        inst.killedAs = `unreachable (${(result as NodeJS.ErrnoException).code ?? result.message}), killed`;
        inst.child?.kill('SIGKILL');
        await inst.exited;
      }
    };
    inst.checking = run().finally(() => {
      inst.checking = undefined;
    });
    return inst.checking;
  }

  // ---- scaling ----------------------------------------------------------------------------

  #live(fn: FunctionState): number {
    let n = 0;
    for (const i of fn.instances) if (i.state === 'starting' || i.state === 'ready' || i.state === 'suspect') n++;
    return n;
  }

  #scaleEvent(fn: FunctionState, from: number, to: number, reason: string): void {
    this.#log.info({ fn: fn.spec.name, from, to, reason }, `scale ${fn.spec.name} ${from} -> ${to}: ${reason}`);
  }

  /** Knative's decider, evaluated on every arrival and removal: want = ceil(concurrency / target). */
  #scale(fn: FunctionState, afterBackoff = false): void {
    if (this.#closed) return;
    const { minScale, maxScale } = fn.spec.scaling;
    const live = this.#live(fn);
    let demand = fn.queue.length;
    for (const i of fn.instances) demand += i.inFlight;
    let want = Math.max(minScale, Math.ceil(demand / fn.target));
    if (maxScale > 0) want = Math.min(want, maxScale);
    if (want <= live) return;
    const coldStartForRequests = live === 0 && fn.queue.length > 0;
    if (fn.failures > 0 && !afterBackoff && !coldStartForRequests) {
      // The last start failed: further starts back off (100 ms doubling, at most 10 s) like a
      // crash loop. A request arriving when nothing runs still starts one at once (the broker's
      // retries pace those).
      if (!fn.retryTimer) {
        const delay = Math.min(100 * 2 ** (fn.failures - 1), 10_000);
        fn.retryTimer = setTimeout(() => {
          fn.retryTimer = undefined;
          this.#scale(fn, true);
        }, delay);
        fn.retryTimer.unref();
      }
      return;
    }
    const reason =
      live === 0 && demand > 0
        ? 'cold start'
        : demand > fn.target * live
          ? `concurrency ${demand} > target ${fn.target} x ${live}`
          : `min-scale ${minScale}`;
    this.#scaleEvent(fn, live, want, reason);
    for (let k = live; k < want; k++) this.#startInstance(fn);
  }

  #armIdle(inst: Instance): void {
    if (inst.idleTimer || inst.inFlight > 0 || inst.state !== 'ready' || this.#closed) return;
    inst.idleTimer = setTimeout(() => {
      inst.idleTimer = undefined;
      const fn = inst.fn;
      if (inst.state !== 'ready' || inst.inFlight > 0 || fn.queue.length > 0) return;
      if (this.#live(fn) <= fn.spec.scaling.minScale) return;
      this.#stopInstance(inst, `idle ${formatDuration(this.#idleTimeoutMs)}`);
    }, this.#idleTimeoutMs);
    inst.idleTimer.unref();
  }

  #startInstance(fn: FunctionState): Instance {
    let resolveReady!: (ok: boolean) => void;
    let resolveExited!: () => void;
    const inst: Instance = {
      fn,
      n: ++fn.seq,
      state: 'starting',
      port: 0,
      agent: new http.Agent({ keepAlive: true, keepAliveMsecs: 1000, scheduling: 'lifo' }),
      inFlight: 0,
      ready: new Promise<boolean>((r) => (resolveReady = r)),
      resolveReady: () => {},
      exited: new Promise<void>((r) => (resolveExited = r)),
      resolveExited: () => {},
    };
    inst.resolveReady = resolveReady;
    inst.resolveExited = resolveExited;
    fn.instances.push(inst);
    void this.#boot(inst);
    return inst;
  }

  async #boot(inst: Instance): Promise<void> {
    const fn = inst.fn;
    const name = fn.spec.name;
    const deadline = Date.now() + this.#startTimeoutMs;
    try {
      inst.port = await freePort();
    } catch (err) {
      this.#startFailed(inst, `no free port: ${String(err)}`);
      return;
    }
    if (inst.state !== 'starting') {
      // Stopped (close()) before it was spawned.
      this.#removed(inst);
      return;
    }
    let child: ChildProcess;
    try {
      child = spawn(fn.spec.command, fn.spec.args, {
        env: { ...process.env, K_SERVICE: name, ...fn.spec.env, PORT: String(inst.port) },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (err) {
      this.#startFailed(inst, `cannot start "${fn.spec.command}": ${String(err)}`);
      this.#removed(inst);
      return;
    }
    inst.child = child;
    inst.pid = child.pid;
    this.#installExitHook();
    const prefix = `[${name}#${inst.n}] `;
    if (child.stdout) this.#pipeLines(child.stdout, prefix, inst, 'stdout');
    if (child.stderr) this.#pipeLines(child.stderr, prefix, inst, 'stderr');
    child.on('error', (err) => {
      // Spawn failures (ENOENT, EACCES) may come without an 'exit' event.
      if (child.pid === undefined) this.#onExit(inst, null, null, err);
    });
    child.on('exit', (code, signal) => this.#onExit(inst, code, signal));
    this.#log.debug({ fn: name, instance: inst.n, pid: child.pid, port: inst.port }, 'function instance spawned');

    // Poll readiness.
    while (inst.state === 'starting') {
      if (Date.now() >= deadline) {
        this.#startFailed(inst, `did not become ready within ${formatDuration(this.#startTimeoutMs)}`);
        this.#stopInstance(inst);
        return;
      }
      const r = await probe(inst);
      if (inst.state !== 'starting') break;
      if (r === 200) {
        inst.state = 'ready';
        fn.failures = 0;
        inst.resolveReady(true);
        this.#log.info({ fn: name, instance: inst.n, pid: inst.pid, port: inst.port }, `function instance ${name}#${inst.n} ready`);
        this.#dispatch(fn);
        this.#armIdle(inst);
        return;
      }
      await sleep(PROBE_INTERVAL_MS);
    }
  }

  /** A start that will not produce a ready instance. */
  #startFailed(inst: Instance, reason: string): void {
    const fn = inst.fn;
    inst.startError ??= reason;
    inst.resolveReady(false);
    fn.failures++;
    if (inst.state === 'starting') {
      const live = this.#live(fn);
      inst.state = 'stopping';
      this.#scaleEvent(fn, live, live - 1, reason);
    }
    this.#log.error({ fn: fn.spec.name, instance: inst.n, pid: inst.pid, reason }, `function ${fn.spec.name}#${inst.n} failed to start: ${reason}`);
    if (this.#live(fn) === 0) {
      // Nothing else will serve the buffered requests: fail them (503, the broker retries).
      this.#rejectQueue(fn, 503, `function "${fn.spec.name}" ${reason}`);
    }
    this.#scale(fn);
    // Requests held for this instance (soft target) may now go to the ready ones.
    this.#dispatch(fn);
  }

  #stopInstance(inst: Instance, reason?: string): Promise<void> {
    const fn = inst.fn;
    if (inst.state === 'exited') return Promise.resolve();
    if (inst.state !== 'stopping') {
      const live = this.#live(fn);
      inst.state = 'stopping';
      if (reason) this.#scaleEvent(fn, live, live - 1, reason);
      // Not spawned yet: #boot notices the state and removes it.
    }
    if (inst.idleTimer) {
      clearTimeout(inst.idleTimer);
      inst.idleTimer = undefined;
    }
    inst.resolveReady(false);
    if (inst.inFlight === 0) inst.agent.destroy(); // idle keep-alive sockets would hold the child's server open
    const child = inst.child;
    if (child && child.exitCode === null && child.signalCode === null && !inst.killTimer) {
      child.kill('SIGTERM');
      inst.killTimer = setTimeout(() => {
        if (child.exitCode === null && child.signalCode === null) {
          this.#log.warn({ fn: fn.spec.name, instance: inst.n, pid: inst.pid }, `function ${fn.spec.name}#${inst.n} ignored SIGTERM for ${formatDuration(this.#stopGraceMs)}: SIGKILL`);
          child.kill('SIGKILL');
        }
      }, this.#stopGraceMs);
      inst.killTimer.unref();
    }
    return inst.exited;
  }

  #onExit(inst: Instance, code: number | null, signal: NodeJS.Signals | null, err?: Error): void {
    if (inst.state === 'exited') return;
    const fn = inst.fn;
    const prev = inst.state;
    const live = this.#live(fn);
    inst.state = 'exited';
    const desc = err ? `spawn error: ${err.message}` : exitDescription(code, signal);
    if (prev === 'stopping') {
      this.#log.debug({ fn: fn.spec.name, instance: inst.n, pid: inst.pid, code, signal }, `function instance ${fn.spec.name}#${inst.n} stopped (${desc})`);
      this.#removed(inst);
      return;
    }
    if (prev === 'starting') {
      this.#removed(inst);
      this.#scaleEvent(fn, live, live - 1, `exited before ready (${desc})`);
      this.#startFailed(inst, `exited before it was ready (${desc})`);
      return;
    }
    // ready or suspect: a crash (or an unreachable instance the activator killed).
    const reason = inst.killedAs ?? `crashed (${desc})`;
    this.#log.error({ fn: fn.spec.name, instance: inst.n, pid: inst.pid, code, signal, inFlight: inst.inFlight }, `function instance ${fn.spec.name}#${inst.n} ${reason}`);
    this.#removed(inst);
    this.#scaleEvent(fn, live, live - 1, reason);
    // Buffered requests (or minScale) need a replacement.
    this.#scale(fn);
    this.#dispatch(fn);
  }

  #removed(inst: Instance): void {
    const fn = inst.fn;
    inst.state = 'exited';
    const i = fn.instances.indexOf(inst);
    if (i >= 0) fn.instances.splice(i, 1);
    if (inst.idleTimer) clearTimeout(inst.idleTimer);
    if (inst.killTimer) clearTimeout(inst.killTimer);
    inst.idleTimer = inst.killTimer = undefined;
    inst.agent.destroy(); // in-flight requests on its sockets fail now → 502
    inst.resolveReady(false);
    inst.resolveExited();
  }

  #pipeLines(stream: Readable, prefix: string, inst: Instance, which: 'stdout' | 'stderr'): void {
    let buf = '';
    const emit = (line: string): void => {
      if (this.#childOutput === 'log') {
        this.#log.info({ fn: inst.fn.spec.name, instance: inst.n, stream: which }, line);
      } else {
        this.#childOutput.write(`${prefix}${line}\n`);
      }
    };
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      buf += chunk;
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        emit(buf.slice(0, nl).replace(/\r$/, ''));
        buf = buf.slice(nl + 1);
      }
      if (buf.length > 64 * 1024) {
        emit(buf);
        buf = '';
      }
    });
    stream.on('end', () => {
      if (buf) emit(buf);
      buf = '';
    });
    stream.on('error', () => {});
  }

  // ---- shutdown ---------------------------------------------------------------------------

  #exitHook = (): void => {
    // The activator's process is exiting without close(): do not leave orphans behind.
    for (const fn of this.#fns.values()) {
      for (const inst of fn.instances) {
        try {
          inst.child?.kill('SIGKILL');
        } catch {
          // already gone
        }
      }
    }
  };

  #installExitHook(): void {
    if (this.#exitHookInstalled) return;
    this.#exitHookInstalled = true;
    process.on('exit', this.#exitHook);
  }

  async #close(): Promise<void> {
    this.#closed = true;
    const server = this.#server;
    const serverClosed = server ? new Promise<void>((r) => server.close(() => r())) : Promise.resolve();
    server?.closeIdleConnections();
    const stops: Promise<void>[] = [];
    for (const fn of this.#fns.values()) {
      if (fn.retryTimer) clearTimeout(fn.retryTimer);
      fn.retryTimer = undefined;
      this.#rejectQueue(fn, 503, 'activator is shutting down');
      for (const inst of [...fn.instances]) stops.push(this.#stopInstance(inst));
    }
    const counts = [...this.#fns.values()].map((fn) => fn.instances.length).reduce((a, b) => a + b, 0);
    if (counts > 0) this.#log.info({ instances: counts }, 'activator: stopping function instances');
    // Children drain their in-flight requests on SIGTERM; their answers still reach the clients.
    await Promise.all(stops);
    server?.closeAllConnections();
    await serverClosed;
    if (this.#exitHookInstalled) {
      process.off('exit', this.#exitHook);
      this.#exitHookInstalled = false;
    }
    this.#log.info('activator closed');
  }
}
