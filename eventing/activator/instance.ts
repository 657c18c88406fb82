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

export class Instance {
  readonly fn: string;
  readonly n: number;
  port = 0;
  child?: ChildProcess;
  pid?: number;
  readonly agent = new http.Agent({ keepAlive: true, keepAliveMsecs: 1000, scheduling: 'lifo' });
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
      this.agent.destroy(); // in-flight requests on its sockets fail now → 502
      this.#resolveExited();
    }
    return true;
  }

  /** One GET of the readiness path: the status code, or an Error. */
  probe(): Promise<number | Error> {
    return new Promise((resolve) => {
      const req = http.request(
        { host: '127.0.0.1', port: this.port, method: 'GET', path: READINESS_PATH, agent: this.agent, timeout: PROBE_TIMEOUT_MS },
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
