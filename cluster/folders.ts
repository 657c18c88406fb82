// Each control plane's folder (certificates, kubeconfigs, etcd data, component logs) and the
// record in it of the process that owns it, so that a later start can reclaim what a killed
// owner left running.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { atExit, isSameProcess, processArguments, processStart } from '../processes/index.ts';

// etcd fsyncs on every write; on tmpfs that costs nothing, and test data need not survive.
// OPFN_CONTROL_PLANE_DIR puts the folders elsewhere (a test that kills a control plane's owner
// keeps it out of reach of the other tests' reclaimAbandonedControlPlanes).
const FOLDERS = process.env.OPFN_CONTROL_PLANE_DIR ?? (existsSync('/dev/shm') ? '/dev/shm' : tmpdir());
const FOLDER_PREFIX = 'opfn-cp-';
/** In each control plane's folder: the process that runs it and the processes it started. */
const OWNER_FILE = 'owner.json';

interface Owner {
  pid: number;
  startTime?: string;
  children: number[];
}

/**
 * Stops the control planes whose owner was killed (SIGKILL, the OOM killer, a CI timeout run no
 * exit handler: their etcd, kube-apiserver and kube-controller-manager would run on for good,
 * and the folder holding the CA key and admin token would stay) and removes their folders; returns
 * one line for each. A process is killed only if its command line names that folder. Only where
 * /proc tells a process from a later one given the same pid.
 */
export function reclaimAbandonedControlPlanes(folders = FOLDERS): string[] {
  if (!existsSync('/proc/self/stat')) return [];
  const reclaimed: string[] = [];
  for (const name of readdirSync(folders).filter((entry) => entry.startsWith(FOLDER_PREFIX))) {
    const dir = join(folders, name);
    let owner: Owner;
    try {
      owner = JSON.parse(readFileSync(join(dir, OWNER_FILE), 'utf8')) as Owner;
    } catch {
      continue; // being created, or made by a version that kept no record
    }
    if (owner.pid === process.pid || isSameProcess(owner)) continue;
    let killed = 0;
    for (const pid of owner.children) {
      if (!processArguments(pid)?.some((arg) => arg.includes(dir))) continue;
      try {
        process.kill(pid, 'SIGKILL');
        killed++;
      } catch {
        // ended meanwhile
      }
    }
    rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    reclaimed.push(
      `stopped the control plane in ${dir} that process ${owner.pid} left running when it was killed (${killed} of its processes killed, folder removed)`,
    );
  }
  return reclaimed;
}

/** A new control plane's folder, owned by this process. */
export interface ControlPlaneFolder {
  dir: string;
  /** Records a process the control plane started, for reclaimAbandonedControlPlanes. */
  addChild(pid: number | undefined): void;
  /** Removes the folder (`keep`: leaves it, the user's now, no longer one to reclaim); from then on this process's exit leaves it alone. */
  release(options?: { keep?: boolean }): void;
}

export function createControlPlaneFolder(): ControlPlaneFolder {
  const dir = mkdtempSync(join(FOLDERS, FOLDER_PREFIX));
  const owner: Owner = { pid: process.pid, startTime: processStart(process.pid), children: [] };
  const recordOwner = () => writeFileSync(join(dir, OWNER_FILE), JSON.stringify(owner));
  recordOwner();
  // Removed however this process ends unless released first: the folder holds the cluster's CA
  // key and admin token, and on /dev/shm its etcd's 64 MiB of preallocated WAL is memory until
  // the next reboot. Registered before any process starts, so that those are killed first.
  const forgetDir = atExit(() => rmSync(dir, { recursive: true, force: true, maxRetries: 3 }));
  return {
    dir,
    addChild(pid) {
      if (pid !== undefined) owner.children.push(pid);
      recordOwner();
    },
    release({ keep = false } = {}) {
      forgetDir();
      // A kept folder (its logs explain a failed start) is the user's now, not one to reclaim.
      if (keep) rmSync(join(dir, OWNER_FILE), { force: true });
      else rmSync(dir, { recursive: true, force: true });
    },
  };
}
