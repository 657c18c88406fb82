// The opfn command line as a person uses it: help, a local cluster up/env/down, and one
// function served and invoked by hand.
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { ImmortalContainerKind } from '../../functions/immortal-container/desired.ts';
import { Pod } from '../../functions/runtime/kinds.ts';
import { eventually, kubeFor } from '../support/cluster.ts';

const OPFN = join(dirname(fileURLToPath(import.meta.url)), '../../bin/opfn.ts');
const stateDir = mkdtempSync(join(tmpdir(), 'opfn-cli-'));
const env = { ...process.env, OPFN_STATE_DIR: stateDir, LOG_LEVEL: 'warn' };
const opfn = (...args: string[]) => promisify(execFile)(process.execPath, [OPFN, ...args], { env });

/** Starts a long-running opfn command and resolves with its first stdout line matching `pattern`. */
function startOpfn(args: string[], pattern: RegExp, extraEnv: Record<string, string> = {}): Promise<{ child: ChildProcess; match: RegExpMatchArray }> {
  const child = spawn(process.execPath, [OPFN, ...args], { env: { ...env, ...extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = output.match(pattern);
      if (match) resolve({ child, match });
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.on('exit', (code) => reject(new Error(`opfn ${args.join(' ')} exited (${code}) before printing ${pattern}:\n${output}`)));
  });
}

const exited = (child: ChildProcess) => new Promise<number | null>((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once('exit', resolve)));

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

test('opfn --help lists every command', async () => {
  const { stdout } = await opfn('--help');
  for (const command of ['dev', 'cluster', 'invoke', 'serve']) assert.match(stdout, new RegExp(`^\\s+${command}\\b`, 'm'), command);
  const cluster = await opfn('cluster', '--help');
  for (const command of ['up', 'down', 'env']) assert.match(cluster.stdout, new RegExp(`^\\s+${command}\\b`, 'm'), `cluster ${command}`);
});

test('cluster up → env → serve + invoke → down', async () => {
  const { child: cluster, match } = await startOpfn(['cluster', 'up'], /^export KUBECONFIG=(\S+)$/m);
  const kubeconfig = match[1];
  try {
    assert.equal((await opfn('cluster', 'env')).stdout.trim(), `export KUBECONFIG=${kubeconfig}`);
    const kube = kubeFor(kubeconfig);
    await kube.create(ImmortalContainerKind, { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: { name: 'by-hand', namespace: 'default' }, spec: { image: 'nginx' } });

    const port = await freePort();
    const { child: fn } = await startOpfn(['serve', 'immortal-container'], /immortal-container ready/, { KUBECONFIG: kubeconfig, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'info' });
    try {
      const invoked = await opfn('invoke', 'immortal-container', '--name', 'by-hand', '--url', `http://127.0.0.1:${port}/`);
      assert.match(invoked.stdout, /^200 .*default\/by-hand/);
      assert.ok(await kube.get(Pod, { namespace: 'default', name: 'by-hand-immortalpod' }), 'the invoked reconcile created the pod');
      const resync = await opfn('invoke', 'immortal-container', '--resync', '--url', `http://127.0.0.1:${port}/`);
      assert.match(resync.stdout, /^200 /);
      await assert.rejects(opfn('invoke', 'immortal-container', '--url', `http://127.0.0.1:${port}/`), /--name is required/);
    } finally {
      fn.kill('SIGTERM');
      assert.equal(await exited(fn), 0, 'the function drains and exits 0 on SIGTERM');
    }

    await opfn('cluster', 'down');
    await exited(cluster);
    await assert.rejects(opfn('cluster', 'env'), /no local cluster is running/);
  } finally {
    cluster.kill('SIGTERM');
    await exited(cluster);
  }
});

test('a second `cluster up` while one runs refuses and points at the running one', async () => {
  const { child: cluster, match } = await startOpfn(['cluster', 'up'], /^export KUBECONFIG=(\S+)$/m);
  try {
    await assert.rejects(opfn('cluster', 'up'), (error: Error & { stderr?: string }) => {
      assert.match(error.stderr ?? '', new RegExp(`already running .*${match[1].replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
      return true;
    });
  } finally {
    await opfn('cluster', 'down');
    await eventually(async () => cluster.exitCode !== null, 20_000, 'cluster process exit');
  }
});
