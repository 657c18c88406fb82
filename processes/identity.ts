// Telling whether a process recorded earlier (in a state file) is still the same process. A pid
// alone is not enough: a process that ended without cleaning up (SIGKILL, a crash, a reboot)
// leaves its record behind, and its pid may since belong to any process.
import { readFileSync } from 'node:fs';

/**
 * Is there a process `pid` (one of another user counts: EPERM)? A zombie does not: it has ended,
 * and only its parent has not collected its exit status yet (under a container init that never
 * does, for good), though it still answers signal 0.
 */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  return statFields(pid)?.[0] !== 'Z';
}

/** The fields of /proc/<pid>/stat from field 3 (the state) on; undefined where there is no /proc or no such process. */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name before them is in parentheses and may hold spaces.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/**
 * When process `pid` started (clock ticks after boot: /proc/<pid>/stat, field 22), which tells it
 * apart from a later process given the same pid; undefined where there is no /proc or no such process.
 */
export const processStart = (pid: number): string | undefined => statFields(pid)?.[19];

/** The arguments process `pid` runs with; undefined where there is no /proc or no such process. */
export function processArguments(pid: number): string[] | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return undefined;
  }
}

/** Is the process a record names (its pid, and its start time where one was recorded) still running? False for a record without a pid. */
export function isSameProcess(record: { pid?: number; startTime?: string } | undefined): boolean {
  const { pid, startTime } = record ?? {};
  if (pid === undefined || !isRunning(pid)) return false;
  const started = processStart(pid);
  return startTime === undefined || started === undefined || started === startTime;
}
