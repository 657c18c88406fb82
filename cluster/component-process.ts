// Starting one control-plane component (etcd, kube-apiserver, kube-controller-manager) as a child
// process logging to a file of the folder, and waiting until it is ready.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { killOnExit } from '../processes/index.ts';

/** Starts the component `name` (its log: `<dir>/<name>.log`). */
export type StartComponent = (name: string, binary: string, args: string[]) => ChildProcess;

/** Why a child could not be started at all (spawn's 'error': a binary missing or not executable). */
const spawnErrors = new WeakMap<ChildProcess, Error>();

export function startComponentProcess(dir: string, name: string, binary: string, args: string[], ownProcessGroup: boolean): ChildProcess {
  const logFd = openSync(join(dir, `${name}.log`), 'a');
  const child = spawn(binary, args, { stdio: ['ignore', logFd, logFd], detached: ownProcessGroup });
  closeSync(logFd);
  // Unhandled, the 'error' would end this process with a stack trace; waitFor names it instead.
  child.once('error', (error) => spawnErrors.set(child, error));
  return killOnExit(child);
}

function tail(file: string, lines = 15): string {
  if (!existsSync(file)) return '';
  return readFileSync(file, 'utf8').trim().split('\n').slice(-lines).join('\n');
}

/** Resolves once `check` holds; rejects, with the end of the component's log, if it exits, cannot start or is not ready in time. */
export async function waitFor(
  what: string,
  child: ChildProcess,
  logFile: string,
  timeoutMs: number,
  check: () => Promise<boolean>,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const spawnError = spawnErrors.get(child);
    if (spawnError) throw new Error(`${what} could not be started: ${spawnError.message}`);
    if (child.exitCode !== null)
      throw new Error(`${what} exited with code ${child.exitCode}; its log (${logFile}) ends:\n${tail(logFile)}`);
    if (await check().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what} was not ready after ${timeoutMs / 1000}s; its log (${logFile}) ends:\n${tail(logFile)}`);
}
