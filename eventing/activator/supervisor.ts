// Function processes: spawn, readiness probe, stop (SIGTERM, then SIGKILL after the grace
// period), and what their exit means — the local share of what the kubelet and Knative's
// revisionWatcher do (pkg/activator/net/revision_backends.go). Decisions about how many
// instances to run stay in the activator (decider.ts); this file only carries them out.
//
// - Instances listen on 127.0.0.1 (HOST): they hold the admin kubeconfig of `npm start`.
// - They run in their own process group, so a terminal's Ctrl-C reaches the plane only; the
//   plane stops them after the broker has drained (an exit hook SIGKILLs them if the plane's
//   process exits without close()).
// - An exit with code 0 or by SIGTERM/SIGINT of an instance that was serving is a clean exit
//   (logged at info), not a crash.
import { spawn, type ChildProcess } from 'node:child_process';
import type { Writable } from 'node:stream';
import type { Logger } from 'pino';
import { lineSink, pipeLines } from './child-output.ts';
import { atExit, freePort } from '../../processes/index.ts';
import { LISTENING_MESSAGE } from '../../functions/runtime/host/index.ts';
import { Instance } from './instance.ts';

/** Between readiness probes of a starting process that has not said it listens (LISTENING_MESSAGE). */
export const PROBE_INTERVAL_MS = 25;

const saysListening = (message: unknown): boolean =>
  typeof message === 'object' && message !== null && (message as { opfn?: unknown }).opfn === LISTENING_MESSAGE.opfn;

export interface ProcessSpec {
  name: string;
  command: string;
  args: string[];
  env?: Record<string, string | undefined>;
}

export interface ExitInfo {
  wasServing: boolean;
  wasStarting: boolean;
  code: number | null;
  signal: NodeJS.Signals | null;
  description: string;
  clean: boolean;
}

export interface SupervisorHooks {
  ready(inst: Instance): void;
  startFailed(inst: Instance, reason: string): void;
  /** The process is gone and the instance removed; `unexpected` = it was serving (or starting) when it went. */
  gone(inst: Instance, info: ExitInfo): void;
}

export function formatDuration(ms: number): string {
  if (ms < 1000) return `${ms}ms`;
  const s = ms / 1000;
  return Number.isInteger(s) ? `${s}s` : `${s.toFixed(1)}s`;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export class InstanceSupervisor {
  readonly #log: Logger;
  readonly #hooks: SupervisorHooks;
  readonly #startTimeoutMs: number;
  readonly #stopGraceMs: number;
  readonly #childOutput: Writable | 'log';
  readonly #probeIntervalMs: number;

  constructor(options: {
    log: Logger;
    hooks: SupervisorHooks;
    startTimeoutMs: number;
    stopGraceMs: number;
    childOutput: Writable | 'log';
    probeIntervalMs?: number;
  }) {
    this.#log = options.log;
    this.#probeIntervalMs = options.probeIntervalMs ?? PROBE_INTERVAL_MS;
    this.#hooks = options.hooks;
    this.#startTimeoutMs = options.startTimeoutMs;
    this.#stopGraceMs = options.stopGraceMs;
    this.#childOutput = options.childOutput;
  }

  /** Spawns the process and polls readiness; the hooks hear how it went. */
  async boot(inst: Instance, spec: ProcessSpec): Promise<void> {
    const deadline = Date.now() + this.#startTimeoutMs;
    try {
      inst.port = await freePort();
    } catch (err) {
      this.#hooks.startFailed(inst, `no free port: ${String(err)}`);
      return;
    }
    if (inst.state !== 'starting') {
      // Stopped (close()) before it was spawned.
      this.#gone(inst, null, null);
      return;
    }
    let child: ChildProcess;
    try {
      child = spawn(spec.command, spec.args, {
        env: { ...process.env, K_SERVICE: spec.name, ...spec.env, PORT: String(inst.port), HOST: '127.0.0.1' },
        // The IPC channel is never used to send: its closing tells the function the plane is gone.
        stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
        detached: true,
      });
    } catch (err) {
      this.#hooks.startFailed(inst, `cannot start "${spec.command}": ${String(err)}`);
      this.#gone(inst, null, null);
      return;
    }
    inst.child = child;
    inst.pid = child.pid;
    // The plane's process may end without close() (a second Ctrl-C, a test stopped by Ctrl-C):
    // a function process, in a process group of its own, must not outlive it. Killed outright,
    // the plane runs no hook: then the function sees its IPC channel close and stops itself.
    child.once(
      'exit',
      atExit(() => child.kill('SIGKILL')),
    );
    if (child.stdout) pipeLines(child.stdout, lineSink(this.#childOutput, this.#log, spec.name, inst.n, 'stdout'));
    if (child.stderr) pipeLines(child.stderr, lineSink(this.#childOutput, this.#log, spec.name, inst.n, 'stderr'));
    child.on('error', (err) => {
      // Spawn failures (ENOENT, EACCES) may come without an 'exit' event.
      if (child.pid === undefined) this.#gone(inst, null, null, err);
    });
    child.on('exit', (code, signal) => this.#gone(inst, code, signal));
    // The function says when it listens: the next probe goes then, not at the next poll (once:
    // a probe that still fails waits for the poll again). Heard only while it starts: a listener
    // keeps the IPC channel, and with it this process, alive.
    let listening = false;
    let wake: (() => void) | undefined;
    const heard = (message: unknown): void => {
      if (!saysListening(message)) return;
      if (wake) wake();
      else listening = true;
    };
    child.on('message', heard);
    const pause = (): Promise<void> => {
      if (listening) {
        listening = false;
        return Promise.resolve();
      }
      return new Promise((resolve) => {
        const timer = setTimeout(() => {
          wake = undefined;
          resolve();
        }, this.#probeIntervalMs);
        wake = () => {
          clearTimeout(timer);
          wake = undefined;
          resolve();
        };
      });
    };

    this.#log.debug({ fn: spec.name, instance: inst.n, pid: child.pid, port: inst.port }, 'function instance spawned');

    try {
      await this.#probeUntilReady(inst, spec, deadline, pause);
    } finally {
      child.off('message', heard);
    }
  }

  /** Probes a starting instance until it answers 200, stops starting, or misses its deadline. */
  async #probeUntilReady(inst: Instance, spec: ProcessSpec, deadline: number, pause: () => Promise<void>): Promise<void> {
    let askedAfterDeadline = false;
    while (inst.state === 'starting') {
      const r = await inst.probe();
      if (inst.state !== 'starting') break;
      if (r === 200) {
        inst.transition('ready');
        this.#log.info(
          { fn: spec.name, instance: inst.n, pid: inst.pid, port: inst.port },
          `function instance ${spec.name}#${inst.n} ready`,
        );
        this.#hooks.ready(inst);
        return;
      }
      // Past the deadline, one more probe begun now decides: a plane that was itself paused
      // (SIGSTOP, a suspended laptop) finds its probe timed out by the clock it slept through,
      // and must not stop an instance that became ready meanwhile.
      if (Date.now() >= deadline) {
        if (!askedAfterDeadline) {
          askedAfterDeadline = true;
          continue;
        }
        this.#hooks.startFailed(inst, `did not become ready within ${formatDuration(this.#startTimeoutMs)}`);
        void this.stop(inst);
        return;
      }
      await pause();
    }
  }

  /** SIGTERM, SIGKILL after the grace period; resolves when the process is gone. */
  stop(inst: Instance): Promise<void> {
    if (inst.state === 'exited') return Promise.resolve();
    inst.transition('stopping');
    if (inst.idleTimer) {
      clearTimeout(inst.idleTimer);
      inst.idleTimer = undefined;
    }
    if (inst.inFlight === 0) inst.closeConnections(); // idle keep-alive sockets would hold the child's server open
    const child = inst.child;
    if (child && child.exitCode === null && child.signalCode === null && !inst.killTimer) {
      child.kill('SIGTERM');
      inst.killTimer = setTimeout(() => {
        if (child.exitCode === null && child.signalCode === null) {
          this.#log.warn(
            { fn: inst.fn, instance: inst.n, pid: inst.pid },
            `function ${inst.fn}#${inst.n} ignored SIGTERM for ${formatDuration(this.#stopGraceMs)}: SIGKILL`,
          );
          child.kill('SIGKILL');
        }
      }, this.#stopGraceMs);
      inst.killTimer.unref();
    }
    return inst.exited;
  }

  /**
   * After a connection-level failure: keep the instance out of rotation until we know whether it
   * still serves (readiness probe answers) or is gone (exit, or refuses connections — then it is
   * killed). Concurrent failures on one instance share one check; `back` hears when it serves again.
   */
  check(inst: Instance, back: () => void): Promise<void> {
    if (inst.checking) return inst.checking;
    if (!inst.transition('suspect')) return Promise.resolve();
    const run = async (): Promise<void> => {
      const result = await Promise.race([inst.probe(), inst.exited.then(() => 'exited' as const)]);
      if (result === 'exited' || inst.state !== 'suspect') return;
      if (typeof result === 'number' || (result as NodeJS.ErrnoException).code === 'ETIMEDOUT') {
        inst.transition('ready');
        back();
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

  #gone(inst: Instance, code: number | null, signal: NodeJS.Signals | null, err?: Error): void {
    const prev = inst.state;
    if (!inst.transition('exited')) return;
    const description = err ? `spawn error: ${err.message}` : code !== null ? `exit ${code}` : signal ? `signal ${signal}` : 'not spawned';
    const clean = !err && (code === 0 || signal === 'SIGTERM' || signal === 'SIGINT');
    this.#hooks.gone(inst, {
      wasServing: prev === 'ready' || prev === 'suspect',
      wasStarting: prev === 'starting',
      code,
      signal,
      description,
      clean,
    });
  }
}
