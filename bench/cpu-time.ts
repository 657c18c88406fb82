// CPU time of the processes a benchmark run involves, read from /proc (Linux; elsewhere none is
// reported): this process (the writer, the watch and, for the plane, its source, broker and
// activator), the function processes it started, and the control plane's kube-apiserver and
// etcd (found by their data folder on the command line). On a machine shared with other work,
// wall-clock ratios swing with the neighbours' load; CPU seconds per object do much less, and
// they say where the work goes.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

export interface CpuSeconds {
  /** This process: writer and watcher, and for the plane its source, broker and activator. */
  bench: number;
  functions: number;
  apiServer: number;
  etcd: number;
  total: number;
  /**
   * The machine in the same window, not part of `total`: `others` is the CPU every other process
   * used (process time in /proc/stat minus the four above), `steal` the time the hypervisor ran
   * someone else while a CPU of this machine wanted to run. Either one high says the neighbours,
   * not the code, moved that run's numbers.
   */
  others?: number;
  steal?: number;
}

type Role = Exclude<keyof CpuSeconds, 'total' | 'bench' | 'others' | 'steal'>;
type Snapshot = Map<number, { role: Role; seconds: number }> & { bench?: number; machine?: MachineTimes };

interface MachineTimes {
  /** Seconds every CPU spent running processes (user, nice, system; not interrupts, which /proc/<pid>/stat charges to no process). */
  busy: number;
  steal: number;
}

/** The machine's CPU times from the first line of /proc/stat; undefined where there is none. */
function machineTimes(): MachineTimes | undefined {
  try {
    const [user, nice, system, , , , , steal] = readFileSync('/proc/stat', 'utf8')
      .split('\n', 1)[0]
      .trim()
      .split(/\s+/)
      .slice(1)
      .map(Number);
    return { busy: (user + nice + system) / clockTicks(), steal: (steal ?? 0) / clockTicks() };
  } catch {
    return undefined;
  }
}

let ticksPerSecond: number | undefined;
const clockTicks = (): number => {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
};

/** utime + stime of `pid` in seconds and its parent pid, or undefined when it is gone. */
function stat(pid: number): { seconds: number; ppid: number } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: fields count from its end.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { ppid: Number(fields[1]), seconds: (Number(fields[11]) + Number(fields[12])) / clockTicks() };
  } catch {
    return undefined;
  }
}

/** CPU seconds so far of every process of interest; undefined where /proc is not there. */
export function cpuSnapshot(controlPlaneDir: string): Snapshot | undefined {
  let pids: number[];
  try {
    pids = readdirSync('/proc')
      .filter((name) => /^\d+$/.test(name))
      .map(Number);
  } catch {
    return undefined;
  }
  const snapshot: Snapshot = new Map();
  const usage = process.cpuUsage();
  snapshot.bench = (usage.user + usage.system) / 1e6;
  snapshot.machine = machineTimes();
  for (const pid of pids) {
    let command: string;
    try {
      command = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
    } catch {
      continue;
    }
    const role: Role | undefined = command.includes(controlPlaneDir)
      ? command.includes('kube-apiserver')
        ? 'apiServer'
        : command.includes('etcd')
          ? 'etcd'
          : undefined
      : /functions\/main\.[jt]s |main\.mjs /.test(command)
        ? 'functions'
        : undefined;
    if (!role) continue;
    const info = stat(pid);
    // Function processes count only when this process started them.
    if (!info || (role === 'functions' && info.ppid !== process.pid)) continue;
    snapshot.set(pid, { role, seconds: info.seconds });
  }
  return snapshot;
}

/** What each role used between two snapshots (a process that started in between counts from zero). */
export function cpuBetween(before: Snapshot | undefined, after: Snapshot | undefined): CpuSeconds | undefined {
  if (!before || !after || before.bench === undefined || after.bench === undefined) return undefined;
  const out: CpuSeconds = { bench: after.bench - before.bench, functions: 0, apiServer: 0, etcd: 0, total: 0 };
  for (const [pid, { role, seconds }] of after) out[role] += seconds - (before.get(pid)?.seconds ?? 0);
  out.total = out.bench + out.functions + out.apiServer + out.etcd;
  if (before.machine && after.machine) {
    out.others = Math.max(0, after.machine.busy - before.machine.busy - out.total);
    out.steal = after.machine.steal - before.machine.steal;
  }
  return out;
}
