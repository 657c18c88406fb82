// One function process and the only way its state changes: `transition`. The states follow a
// pod's life as Knative's revisionWatcher sees it (pkg/activator/net/revision_backends.go keeps
// a healthy set): starting → ready ⇄ suspect → stopping → exited, with exited reachable from
// every state (a process may die at any time) and nothing leaving exited.
import http from 'node:http';
import type { ChildProcess } from 'node:child_process';

export type InstanceState = 'starting' | 'ready' | 'suspect' | 'stopping' | 'exited';

const ALLOWED: Record<InstanceState, readonly InstanceState[]> = {
  starting: ['ready', 'stopping', 'exited'],
  ready: ['suspect', 'stopping', 'exited'],
  suspect: ['ready', 'stopping', 'exited'],
  stopping: ['exited'],
  exited: [],
};

export function canTransition(from: InstanceState, to: InstanceState): boolean {
  return ALLOWED[from].includes(to);
}

const READINESS_PATH = '/health/readiness';
const PROBE_TIMEOUT_MS = 2000;
/**
 * Connections the activator opens to one instance, as many as the broker's direct path
 * (eventing/broker INSTANCE_CONNECTIONS) and the function's own Kubernetes client: the requests
 * buffered while an instance starts (a whole burst, when it meets a function at zero) reach it
 * 32 at a time instead of each on a connection of its own, so the new process works through
 * them with the few dozen reconciles at once it serves best; the others wait in the agent, in
 * order.
 */
export const PROXY_CONNECTIONS = 32;

export class Instance {
  readonly fn: string;
  readonly n: number;
  port = 0;
  child?: ChildProcess;
  pid?: number;
  /** Proxied requests' connections (at most PROXY_CONNECTIONS; the rest queue in it). */
  readonly agent = new http.Agent({ keepAlive: true, keepAliveMsecs: 1000, scheduling: 'lifo', maxSockets: PROXY_CONNECTIONS });
  /** The readiness probe's own connection: never queued behind proxied requests. */
  readonly #probeAgent = new http.Agent({ keepAlive: true, keepAliveMsecs: 1000, maxSockets: 1 });
  inFlight = 0;
  /** Requests this instance served (for stats). */
  served = 0;
  idleTimer?: NodeJS.Timeout;
  killTimer?: NodeJS.Timeout;
  /** Why the instance failed to start, for the 503 of the requests waiting on it. */
  startError?: string;
  /** Set while a connection failure is being checked, shared by all requests that hit it. */
  checking?: Promise<void>;
  /** Reason logged when the activator itself killed an unresponsive instance. */
  killedAs?: string;
  /** Resolves true when the instance became ready, false when it never did. */
  readonly ready: Promise<boolean>;
  /** Resolves when the process has exited (or was never spawned). */
  readonly exited: Promise<void>;
  #state: InstanceState = 'starting';
  readonly #resolveReady: (ok: boolean) => void;
  readonly #resolveExited: () => void;

  constructor(fn: string, n: number) {
    this.fn = fn;
    this.n = n;
    const ready = Promise.withResolvers<boolean>();
    const exited = Promise.withResolvers<void>();
    this.ready = ready.promise;
    this.exited = exited.promise;
    this.#resolveReady = ready.resolve;
    this.#resolveExited = exited.resolve;
  }

  get state(): InstanceState {
    return this.#state;
  }

  get live(): boolean {
    return this.#state === 'starting' || this.#state === 'ready' || this.#state === 'suspect';
  }

  /** Moves to `to` when the state machine allows it; false (and no change) otherwise. */
  transition(to: InstanceState): boolean {
    if (!canTransition(this.#state, to)) return false;
    this.#state = to;
    if (to === 'ready') this.#resolveReady(true);
    else if (to !== 'suspect') this.#resolveReady(false);
    if (to === 'exited') {
      if (this.idleTimer) clearTimeout(this.idleTimer);
      if (this.killTimer) clearTimeout(this.killTimer);
      this.idleTimer = this.killTimer = undefined;
      this.closeConnections(new Error('function instance exited')); // its requests fail now → 502
      this.#resolveExited();
    }
    return true;
  }

  /**
   * Closes every connection to the process, kept-alive or busy, and fails the requests still
   * queued for one with `reason` (an agent's destroy() leaves those waiting).
   */
  closeConnections(reason = new Error('connections to the function instance closed')): void {
    for (const queued of Object.values(this.agent.requests)) for (const request of queued ?? []) request.destroy(reason);
    this.agent.destroy();
    this.#probeAgent.destroy();
  }

  /** One GET of the readiness path: the status code, or an Error. */
  probe(): Promise<number | Error> {
    return new Promise((resolve) => {
      const req = http.request(
        { host: '127.0.0.1', port: this.port, method: 'GET', path: READINESS_PATH, agent: this.#probeAgent, timeout: PROBE_TIMEOUT_MS },
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
}
