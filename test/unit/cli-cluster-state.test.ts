// `opfn cluster down` / `env` with a cluster.json left behind by a `cluster up` that ended without
// cleaning up: the recorded pid may belong to another process by now, which must not be signalled.
// No control plane is needed: a `sleep` plays the process that has the pid.
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const OPFN = join(dirname(fileURLToPath(import.meta.url)), '../../bin/opfn.ts');
const stateDir = mkdtempSync(join(tmpdir(), 'opfn-cluster-state-'));
const clusterJson = join(stateDir, 'cluster.json');
/** Runs opfn; a `down` that waits for a process it should not have signalled fails by the timeout. */
const opfn = (...args: string[]) =>
  promisify(execFile)(process.execPath, [OPFN, ...args], { env: { ...process.env, OPFN_STATE_DIR: stateDir }, timeout: 10_000 });
const children: ChildProcess[] = [];
after(() => {
  for (const child of children) child.kill('SIGKILL');
  rmSync(stateDir, { recursive: true, force: true });
});

function sleeper(): ChildProcess {
  const child = spawn('sleep', ['300'], { stdio: 'ignore' });
  children.push(child);
  return child;
}
const startTime = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
};

describe('opfn cluster down/env with a stale cluster.json', { skip: !existsSync('/proc/self/stat') && 'needs /proc' }, () => {
  it('a pid that now belongs to another process: nothing signalled, the file cleared with the reason; env does not trust it', async () => {
    const other = sleeper();
    writeFileSync(clusterJson, JSON.stringify({ pid: other.pid, kubeconfig: '/x' }));
    await assert.rejects(opfn('cluster', 'env'), (error: Error & { stderr?: string }) => {
      assert.match(error.stderr ?? '', new RegExp(`no local cluster is running \\(process ${other.pid} is not the control plane`));
      return true;
    });
    const { stderr } = await opfn('cluster', 'down');
    assert.match(stderr, new RegExp(`process ${other.pid} is not the control plane .*nothing signalled, stale .*cluster\\.json cleared`));
    assert.equal(other.exitCode, null);
    assert.equal(other.signalCode, null, 'the other process was not signalled');
    assert.equal(existsSync(clusterJson), false);
  });

  it('the recorded process (its start time matches) is stopped; one that ends without removing the file has it cleared, no 30 s wait', async () => {
    const plane = sleeper();
    writeFileSync(clusterJson, JSON.stringify({ pid: plane.pid, startTime: startTime(plane.pid!), kubeconfig: '/x' }));
    const exited = new Promise((resolve) => plane.once('exit', (_code, signal) => resolve(signal)));
    const { stderr } = await opfn('cluster', 'down');
    assert.equal(await exited, 'SIGTERM');
    assert.match(stderr, /local cluster stopped/);
    assert.equal(existsSync(clusterJson), false);
  });
});
