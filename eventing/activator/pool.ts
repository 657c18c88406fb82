// One function's instances: the slots requests take on them, the scaling loop that starts and
// stops them, and what their lifecycle events mean. Knative splits this between the activator's
// revisionThrottler (pkg/activator/net/throttler.go: capacity, waiting requests), the autoscaler
// (decider.ts: how many) and the revision's pods; the local plane keeps one pool per function.
//
// - Scaling is evaluated on every arrival and removal (decider.ts). A start that failed makes
//   further starts back off (100 ms doubling, at most 10 s) like a crash loop, except a cold
//   start for waiting requests, which the broker's retries pace.
// - An instance with no request for idleTimeoutMs is stopped, never below minScale.
// - Buffered requests always go before a new one takes a slot (see lease()).
import type http from 'node:http';
import type { Logger } from 'pino';
import type { CheckedConfiguration, FunctionProcessSpec, FunctionStats } from './configuration.ts';
import { DELIVERY_BUDGET_ENV } from '../../functions/runtime/host/index.ts';
import { desiredScale, effectiveTarget } from './decider.ts';
import { Instance } from './instance.ts';
import { pick } from './lb-policy.ts';
import { formatDuration, type ExitInfo, type InstanceSupervisor } from './supervisor.ts';
import { ActivatorError, type LeaseWait, Throttler } from './throttler.ts';

export interface PoolOptions {
  log: Logger;
  supervisor: InstanceSupervisor;
  idleTimeoutMs: number;
  maxQueue: number;
  hostInstanceLimit?: number;
}

export class FunctionPool {
  spec: FunctionProcessSpec & CheckedConfiguration;
  target: number;
  timeoutMs: number;
  readonly instances: Instance[] = [];
  readonly stats: Omit<FunctionStats, 'instances'> = { peakInstances: 0, started: 0, proxied: 0, direct: 0 };
  readonly #queue: Throttler<Instance>;
  readonly #log: Logger;
  readonly #supervisor: InstanceSupervisor;
  readonly #idleTimeoutMs: number;
  readonly #hostInstanceLimit: number | undefined;
  #seq = 0;
  /** Consecutive failed starts: back-off for restarts that no request asked for. */
  #failures = 0;
  #retryTimer?: NodeJS.Timeout;
  #closed = false;
  /** Why the function takes no requests now (its Knative Service was deleted); undefined while it does. */
  #withdrawn?: string;

  /** `configuration` is the spec's, checked and with its defaults applied (checkConfiguration). */
  constructor(spec: FunctionProcessSpec, configuration: CheckedConfiguration, options: PoolOptions) {
    this.spec = { ...spec, ...configuration };
    this.target = effectiveTarget(configuration.scaling);
    this.timeoutMs = configuration.timeoutSeconds * 1000;
    this.#queue = new Throttler<Instance>(spec.name, options.maxQueue);
    this.#log = options.log;
    this.#supervisor = options.supervisor;
    this.#idleTimeoutMs = options.idleTimeoutMs;
    this.#hostInstanceLimit = options.hostInstanceLimit;
  }

  get name(): string {
    return this.spec.name;
  }

  /** Requests buffered for a slot. */
  get waiting(): number {
    return this.#queue.waiting;
  }

  /** Instances running (ready or starting), not counting those being stopped. */
  live(): number {
    return this.instances.filter((i) => i.live).length;
  }

  /** Whether the function was withdrawn (withdraw) and no configuration brought it back since. */
  get withdrawn(): boolean {
    return this.#withdrawn !== undefined;
  }

  /**
   * No Service runs the function any more (Knative removes the revision's pods and its route):
   * buffered and new requests are refused with 404 and `reason`, every instance stops (each
   * answers what it serves first), none starts until a configuration brings it back.
   */
  withdraw(reason: string): void {
    if (this.#withdrawn !== undefined || this.#closed) return;
    this.#withdrawn = reason;
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    this.#queue.rejectAll(404, reason);
    for (const inst of [...this.instances]) if (inst.live) this.#stop(inst, reason);
  }

  /**
   * A new configuration (checked, defaults applied): later decisions and instances follow it,
   * running instances stay (roll() replaces them); a withdrawn function runs again.
   */
  reconfigure(configuration: CheckedConfiguration & { containerEnv?: Record<string, string> }): void {
    this.#withdrawn = undefined;
    this.spec = { ...this.spec, ...configuration };
    this.target = effectiveTarget(configuration.scaling);
    this.timeoutMs = configuration.timeoutSeconds * 1000;
    if (this.#closed) return;
    for (const inst of this.instances) this.#armIdle(inst);
    this.#trimToMaxScale();
    this.scale();
    this.#dispatch();
  }

  /**
   * Replaces every instance, as Knative rolls a new revision: the running ones stop taking
   * requests and drain what they serve (SIGTERM), and new ones start from the current spec (its
   * container environment, a rebuilt bundle) as demand or min-scale asks. Requests arriving
   * meanwhile wait for a new instance.
   */
  roll(reason: string): number {
    if (this.#closed || this.#withdrawn !== undefined) return 0;
    const old = this.instances.filter((inst) => inst.live);
    for (const inst of old) this.#stop(inst, reason);
    this.#failures = 0;
    this.scale();
    this.#dispatch();
    return old.length;
  }

  // ---- slots ------------------------------------------------------------------------------

  /** A slot on a ready instance: immediately, or once one frees up or starts. */
  acquire(res: http.ServerResponse, partitionKey?: string): Promise<Instance> {
    if (this.#withdrawn !== undefined) return Promise.reject(new ActivatorError(404, this.#withdrawn));
    const inst = this.#pick(partitionKey);
    if (inst) {
      this.#take(inst);
      this.scale();
      return Promise.resolve(inst);
    }
    const waiting = this.#queue.wait(res);
    this.scale();
    return waiting;
  }

  /** A slot taken at once for the warm path, or undefined when none has room or requests are buffered. */
  lease(partitionKey?: string): Instance | undefined {
    if (this.#closed || this.#withdrawn !== undefined || this.#queue.waiting > 0) return undefined;
    const inst = this.#pick(partitionKey);
    if (!inst) return undefined;
    this.#take(inst);
    this.stats.direct++;
    this.scale();
    return inst;
  }

  /**
   * While the function starts from zero (no instance serves yet, and the last start did not
   * fail): a slot for the warm path once an instance is ready, waited for in the same queue as
   * the requests buffered here (in arrival order, counted by the scaling decision), so the
   * sender delivers straight to the instance instead of through this front door. Undefined
   * otherwise: the sender goes through the front door, as before.
   */
  leaseWhenStarted(wait: LeaseWait): Promise<Instance> | undefined {
    if (this.#closed || this.#withdrawn !== undefined || this.#failures > 0) return undefined;
    if (this.instances.some((inst) => inst.state === 'ready' || inst.state === 'suspect')) return undefined;
    const waiting = this.#queue.waitFor(wait).then((inst) => {
      this.stats.direct++;
      return inst;
    });
    this.scale();
    return waiting;
  }

  release(inst: Instance): void {
    inst.inFlight--;
    if (inst.state === 'ready') {
      this.#dispatch();
      this.#trimToMaxScale();
      this.#armIdle(inst);
    } else if (inst.state === 'stopping' && inst.inFlight === 0) {
      // Drained: drop the kept-alive connections so the child's server.close() completes now
      // instead of after its keep-alive timeout.
      setImmediate(() => inst.closeConnections());
    }
  }

  /** After a connection-level failure: out of rotation until the supervisor knows whether it still serves. */
  check(inst: Instance): Promise<void> {
    return this.#supervisor.check(inst, () => {
      this.#dispatch();
      if (inst.inFlight === 0) this.#armIdle(inst);
    });
  }

  #pick(partitionKey?: string): Instance | undefined {
    return pick(this.instances, this.spec.scaling.containerConcurrency, this.target, partitionKey);
  }

  #take(inst: Instance): void {
    inst.inFlight++;
    inst.served++;
    if (inst.idleTimer) {
      clearTimeout(inst.idleTimer);
      inst.idleTimer = undefined;
    }
  }

  /** Hands buffered requests to instances with room. */
  #dispatch(): void {
    this.#queue.hand(() => {
      const inst = this.#pick();
      if (inst) this.#take(inst);
      return inst;
    });
  }

  // ---- scaling loop -----------------------------------------------------------------------

  #scaleEvent(from: number, to: number, reason: string): void {
    this.#log.info({ fn: this.name, from, to, reason }, `scale ${this.name} ${from} -> ${to}: ${reason}`);
  }

  /** Starts the instances the decider wants (never stops any: idle timers and trims do). */
  scale(afterBackoff = false): void {
    if (this.#closed || this.#withdrawn !== undefined) return;
    const live = this.live();
    let demand = this.#queue.waiting;
    for (const i of this.instances) demand += i.inFlight;
    const { want, reason } = desiredScale(demand, this.spec.scaling, live, this.#hostInstanceLimit);
    if (want <= live) return;
    const coldStartForRequests = live === 0 && this.#queue.waiting > 0;
    if (this.#failures > 0 && !afterBackoff && !coldStartForRequests) {
      if (!this.#retryTimer) {
        this.#retryTimer = setTimeout(
          () => {
            this.#retryTimer = undefined;
            this.scale(true);
          },
          Math.min(100 * 2 ** (this.#failures - 1), 10_000),
        );
        this.#retryTimer.unref();
      }
      return;
    }
    this.#scaleEvent(live, want, reason);
    for (let k = live; k < want; k++) this.#startInstance();
    this.stats.peakInstances = Math.max(this.stats.peakInstances, this.live());
  }

  /** Stops idle instances beyond max-scale (after it was lowered), newest first. */
  #trimToMaxScale(): void {
    const max = this.spec.scaling.maxScale;
    if (max <= 0) return;
    for (const inst of [...this.instances].reverse()) {
      if (this.live() <= max) return;
      if (inst.state === 'ready' && inst.inFlight === 0) this.#stop(inst, `above max-scale ${max}`);
    }
  }

  #armIdle(inst: Instance): void {
    if (inst.idleTimer || inst.inFlight > 0 || inst.state !== 'ready' || this.#closed) return;
    inst.idleTimer = setTimeout(() => {
      inst.idleTimer = undefined;
      if (inst.state !== 'ready' || inst.inFlight > 0 || this.#queue.waiting > 0) return;
      if (this.live() <= this.spec.scaling.minScale) return;
      this.#stop(inst, `idle ${formatDuration(this.#idleTimeoutMs)}`);
    }, this.#idleTimeoutMs);
    inst.idleTimer.unref();
  }

  #startInstance(): void {
    const inst = new Instance(this.name, ++this.#seq);
    this.instances.push(inst);
    this.stats.started++;
    // The function cannot see its timeout; its delivery budget tells it how long to start work.
    void this.#supervisor.boot(inst, {
      ...this.spec,
      env: { ...this.spec.containerEnv, [DELIVERY_BUDGET_ENV]: String(this.spec.deliveryBudgetSeconds), ...this.spec.env },
    });
  }

  #stop(inst: Instance, reason: string): void {
    if (inst.live) {
      const live = this.live();
      this.#scaleEvent(live, live - 1, reason);
    }
    void this.#supervisor.stop(inst);
  }

  // ---- lifecycle (the supervisor's hooks) -------------------------------------------------

  onReady(inst: Instance): void {
    this.#failures = 0;
    this.#dispatch();
    this.#armIdle(inst);
  }

  /** A start that will not produce a ready instance. */
  startFailed(inst: Instance, reason: string): void {
    inst.startError ??= reason;
    this.#failures++;
    if (inst.state === 'starting') {
      const live = this.live();
      inst.transition('stopping');
      this.#scaleEvent(live, live - 1, reason);
    }
    this.#log.error(
      { fn: this.name, instance: inst.n, pid: inst.pid, reason },
      `function ${this.name}#${inst.n} failed to start: ${reason}`,
    );
    // Nothing else will serve the buffered requests: fail them (503, the broker retries).
    if (this.live() === 0) this.#queue.rejectAll(503, `function "${this.name}" ${reason}`);
    this.scale();
    // Requests held for this instance (soft target) may now go to the ready ones.
    this.#dispatch();
  }

  onGone(inst: Instance, info: ExitInfo): void {
    const i = this.instances.indexOf(inst);
    if (i >= 0) this.instances.splice(i, 1);
    const name = this.name;
    const fields = { fn: name, instance: inst.n, pid: inst.pid, code: info.code, signal: info.signal };
    if (info.wasStarting) {
      const live = this.live();
      this.#scaleEvent(live + 1, live, `exited before ready (${info.description})`);
      this.startFailed(inst, `exited before it was ready (${info.description})`);
    } else if (info.wasServing) {
      const live = this.live();
      if (info.clean && !inst.killedAs) {
        // Exit 0 or SIGTERM/SIGINT: the process shut down on purpose (e.g. a Ctrl-C that reached it).
        this.#log.info({ ...fields, inFlight: inst.inFlight }, `function instance ${name}#${inst.n} exited (${info.description})`);
        this.#scaleEvent(live + 1, live, `exited (${info.description})`);
      } else {
        const reason = inst.killedAs ?? `crashed (${info.description})`;
        this.#log.error({ ...fields, inFlight: inst.inFlight }, `function instance ${name}#${inst.n} ${reason}`);
        this.#scaleEvent(live + 1, live, reason);
      }
      // Buffered requests (or minScale) need a replacement.
      this.scale();
      this.#dispatch();
    } else {
      this.#log.debug(fields, `function instance ${name}#${inst.n} stopped (${info.description})`);
    }
  }

  /** Stops intake and every instance (they drain in-flight requests); resolves when all are gone. */
  close(): Promise<void>[] {
    this.#closed = true;
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    this.#queue.rejectAll(503, 'activator is shutting down');
    return [...this.instances].map((inst) => this.#supervisor.stop(inst));
  }
}
