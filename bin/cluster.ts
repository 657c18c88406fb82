// `opfn cluster up | down | env`: a local control plane (etcd + kube-apiserver +
// kube-controller-manager) with the CRDs installed, recorded in the state folder's cluster.json
// so that `down` and `env` find it.
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { kubectlPathLine, reclaimAbandonedControlPlanes, startControlPlane } from '../cluster/index.ts';
import { applyCrds } from '../eventing/crds.ts';
import { CLUSTER_STATE_FILE, clusterRecord, planeRecord } from '../eventing/state-files.ts';
import { KubeClient } from '../functions/runtime/index.ts';
import { isRunning, isSameProcess, processArguments, processStart } from '../processes/index.ts';
import { say, untilSignal } from './terminal.ts';

/**
 * Is the process cluster.json names (`record`, as clusterRecord read it) still the control plane
 * `opfn cluster up` started? A `cluster up` that died without cleaning up (SIGKILL, a crash, a
 * reboot) leaves the file behind, and its pid may since belong to any process: signalling that
 * one would stop someone else's work. 'running': it is (the start time recorded by `up` matches;
 * a file from before start times were recorded: its command line is `... cluster up`; without
 * /proc, the pid is all there is); 'gone': nothing has the pid; 'other': another process has it now.
 */
function clusterProcess({ pid, startTime }: { pid: number; startTime?: string }): 'running' | 'gone' | 'other' {
  if (!isRunning(pid)) return 'gone';
  if (!existsSync('/proc/self/stat')) return 'running';
  const started = processStart(pid);
  if (started === undefined) return 'gone';
  if (startTime !== undefined) return startTime === started ? 'running' : 'other';
  const args = processArguments(pid);
  if (args === undefined) return 'gone';
  return args.some((arg, i) => arg === 'cluster' && args[i + 1] === 'up') ? 'running' : 'other';
}

/** The control plane a running `opfn cluster up` of `stateDir` keeps: its kubeconfig and kubectl folder; undefined when none runs. */
export function runningLocalCluster(stateDir: string): { pid: number; kubeconfig: string; binDir?: string } | undefined {
  const record = clusterRecord(stateDir);
  if (record?.pid === undefined || !record.kubeconfig || clusterProcess({ ...record, pid: record.pid }) !== 'running') return undefined;
  return { pid: record.pid, kubeconfig: record.kubeconfig, binDir: record.binDir };
}

/** The log of a `cluster up` started in the background by `opfn dev`. */
export const BACKGROUND_CLUSTER_LOG = 'cluster.log';

/**
 * Starts `opfn cluster up` for `stateDir` as a process of its own (its own session: a Ctrl-C of
 * `npm start` does not reach it; output to cluster.log) and resolves once it runs, so that the
 * control plane and its objects outlive the plane that started it: the next `opfn dev` uses it
 * again. `opfn cluster down` stops it.
 */
export async function startLocalClusterInBackground(
  stateDir: string,
  progress: (line: string) => void,
): Promise<{ pid: number; kubeconfig: string; binDir?: string }> {
  mkdirSync(stateDir, { recursive: true });
  const logFile = join(stateDir, BACKGROUND_CLUSTER_LOG);
  const out = openSync(logFile, 'w', 0o600);
  const child = spawn(process.execPath, [join(dirname(fileURLToPath(import.meta.url)), 'opfn.ts'), 'cluster', 'up'], {
    env: { ...process.env, OPFN_STATE_DIR: stateDir },
    stdio: ['ignore', out, out],
    detached: true,
  });
  closeSync(out);
  child.unref();
  let exited: number | null | undefined;
  child.once('exit', (code) => (exited = code));
  let told = 0;
  for (let waited = 0; ; waited += 250) {
    const running = runningLocalCluster(stateDir);
    if (running && running.pid === child.pid) return running;
    if (exited !== undefined) {
      const tail = readFileSync(logFile, 'utf8').trim().split('\n').slice(-5).join('\n  ');
      throw new Error(`the local control plane did not start (\`opfn cluster up\` exited ${exited}); ${logFile} ends:\n  ${tail}`);
    }
    if (waited - told >= 15_000) {
      told = waited;
      progress(`still starting the local control plane (${waited / 1000}s; ${logFile} says what it does)...`);
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

const staleCluster = (pid: number) =>
  `process ${pid} is not the control plane \`opfn cluster up\` started (that one ended without cleaning up, and its pid now belongs to another process)`;

/** `opfn cluster up`: runs until Ctrl-C or `opfn cluster down`. */
export async function clusterUp(stateDir: string): Promise<void> {
  const clusterState = join(stateDir, CLUSTER_STATE_FILE);
  const running = clusterRecord(stateDir);
  if (running?.pid !== undefined && clusterProcess({ ...running, pid: running.pid }) === 'running') {
    say(`a local cluster is already running (pid ${running.pid}); export KUBECONFIG=${running.kubeconfig}`);
    process.exit(1);
  }
  try {
    const started = performance.now();
    // Stopped by untilSignal below, in order (apiserver before etcd), not by the terminal's Ctrl-C.
    const cp = await startControlPlane({ progress: say, ownProcessGroup: true });
    await applyCrds(KubeClient.fromFile(cp.kubeconfigPath));
    mkdirSync(stateDir, { recursive: true });
    // The start time tells this process apart from a later one given the same pid (clusterProcess).
    writeFileSync(
      clusterState,
      JSON.stringify(
        { pid: process.pid, startTime: processStart(process.pid), server: cp.server, kubeconfig: cp.kubeconfigPath, binDir: cp.binDir },
        null,
        2,
      ),
    );
    say(
      `control plane ready at ${cp.server} in ${((performance.now() - started) / 1000).toFixed(1)}s, CRDs installed; kubectl of the same release is in ${cp.binDir}`,
    );
    console.log(`export KUBECONFIG=${cp.kubeconfigPath}\n${kubectlPathLine(cp.binDir)}`);
    untilSignal(
      async () => {
        await cp.stop();
        // Only now: `cluster down` waits for this process, and `cluster env` must not name a
        // cluster that is still going. Only its own: a second `up` started at the same moment
        // may have written its record over this one's.
        if (clusterRecord(stateDir)?.pid === process.pid) rmSync(clusterState, { force: true });
      },
      { stopping: 'kube-controller-manager and kube-apiserver first, then etcd', forced: 'the control plane processes are killed' },
    );
  } catch (error) {
    say(`opfn cluster up: ${(error as Error).message}`);
    process.exit(1);
  }
}

/** `opfn cluster down`: stops the control plane `up` started, or clears what a killed one left. */
export async function clusterDown(stateDir: string): Promise<void> {
  const clusterState = join(stateDir, CLUSTER_STATE_FILE);
  const record = clusterRecord(stateDir);
  const pid = record?.pid;
  if (pid === undefined) {
    say('no local cluster is running');
    return;
  }
  // A process that ended without its own clean-up (SIGKILL) leaves its record, and may have
  // left its control plane running.
  const clearLeftovers = () => {
    rmSync(clusterState, { force: true });
    for (const line of reclaimAbandonedControlPlanes()) say(line);
  };
  const gone = () => {
    clearLeftovers();
    say(`the cluster process ${pid} was already gone; state cleared`);
  };
  const state = clusterProcess({ ...record, pid });
  if (state === 'other') {
    rmSync(clusterState, { force: true });
    say(`${staleCluster(pid)}; nothing signalled, stale ${clusterState} cleared`);
    return;
  }
  if (state === 'gone') return gone();
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return gone();
  }
  // It stops its control plane, removes the file and exits; one that ends without removing the file leaves it to us.
  for (let waited = 0; clusterProcess({ ...record, pid }) === 'running' && waited < 30_000; waited += 100)
    await new Promise((r) => setTimeout(r, 100));
  if (clusterProcess({ ...record, pid }) === 'running') {
    say(
      `process ${pid} did not stop within 30s; it may be stopped (SIGSTOP) or hung: kill -9 ${pid}, then run \`opfn cluster down\` again to stop what it left`,
    );
    process.exit(1);
  }
  if (existsSync(clusterState)) clearLeftovers();
  say('local cluster stopped');
}

/**
 * `opfn cluster env`: the KUBECONFIG and PATH lines of the running local cluster (`cluster up`'s,
 * else the one a running `opfn dev --local` started).
 */
export function clusterEnv(stateDir: string): void {
  const running = clusterRecord(stateDir);
  const state = running?.pid === undefined ? 'gone' : clusterProcess({ ...running, pid: running.pid });
  const plane = planeRecord(stateDir);
  if ((running?.pid === undefined || state === 'gone') && plane?.binDir && plane.kubeconfig && isSameProcess(plane)) {
    console.log(`export KUBECONFIG=${plane.kubeconfig}`);
    console.log(kubectlPathLine(plane.binDir));
    return;
  }
  if (running?.pid === undefined || !running.kubeconfig || state !== 'running') {
    const stale = state === 'other' ? ` (${staleCluster(running!.pid!)}; \`opfn cluster down\` clears its state)` : '';
    say(`no local cluster is running${stale}; start one with: npx opfn cluster up`);
    process.exit(1);
  }
  console.log(`export KUBECONFIG=${running.kubeconfig}`);
  if (running.binDir) console.log(kubectlPathLine(running.binDir));
}
