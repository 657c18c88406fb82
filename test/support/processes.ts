// Test support: processes as a test needs them.
import { spawn } from 'node:child_process';
import { once } from 'node:events';

/** The pid of a process that has exited and been reaped, as a killed one's would be after it: nothing runs under it. */
export async function exitedPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '']);
  await once(child, 'exit');
  return child.pid!;
}
