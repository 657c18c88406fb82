// Child processes that must not outlive the process that started them, and stopping one gently.
import type { ChildProcess } from 'node:child_process';
import { atExit } from './exit-cleanup.ts';

/**
 * Kills `child` when this process ends, however it ends (exit-cleanup.ts), unless the child has
 * exited first: children must not outlive the process that started them, even one that ends
 * without calling stop() (a second Ctrl-C, a failed test, a Ctrl-C of the test runner).
 */
export function killOnExit(child: ChildProcess): ChildProcess {
  const cancel = atExit(() => child.kill('SIGKILL'));
  child.on('exit', cancel);
  return child;
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
export async function stopProcess(child: ChildProcess | undefined, graceMs = 5000): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}
