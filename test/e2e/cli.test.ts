// The opfn command line as a person uses it: help, a local cluster up/env/down, and one
// function served and invoked by hand.
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { freePort } from '../../cluster/control-plane.ts';
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

test('npm start (opfn dev): a local cluster, the operator, a configured extra Trigger, and Ctrl-C stops everything', async () => {
  // An extra subscriber, routed by a Knative Trigger manifest given on the command line.
  const received: Record<string, string>[] = [];
  const audit = createHttpServer((req, res) => {
    received.push(Object.fromEntries(Object.entries(req.headers).filter(([name]) => name.startsWith('ce-')).map(([name, value]) => [name, String(value)])));
    req.resume();
    res.writeHead(202).end();
  }).listen(0, '127.0.0.1');
  await new Promise((resolve) => audit.once('listening', resolve));
  const triggers = join(stateDir, 'triggers.yaml');
  writeFileSync(triggers, `apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: audit-adds}
spec:
  broker: default
  filter: {attributes: {type: dev.knative.apiserver.ref.add, kind: ImmortalContainer}}
  subscriber: {uri: "http://127.0.0.1:${(audit.address() as { port: number }).port}/"}
`);
  const { child: dev, match } = await startOpfn(['dev', '--idle', '5', '--triggers', triggers], /export KUBECONFIG=(\S+)[\s\S]*Running immortal-container/, { KUBECONFIG: join(stateDir, 'no-such-kubeconfig') });
  const kubeconfig = match[1];
  try {
    const kube = kubeFor(kubeconfig);
    await kube.create(ImmortalContainerKind, { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: { name: 'from-dev', namespace: 'default' }, spec: { image: 'nginx' } });
    await eventually(() => kube.get(Pod, { namespace: 'default', name: 'from-dev-immortalpod' }), 30_000, 'pod made by the operator under opfn dev');
    await eventually(async () => received.some((headers) => headers['ce-name'] === 'from-dev'), 10_000, 'the extra Trigger delivered the add event');
    assert.ok(received.every((headers) => headers['ce-type'] === 'dev.knative.apiserver.ref.add' && headers['ce-kind'] === 'ImmortalContainer'), 'only what the filter selects');
  } finally {
    dev.kill('SIGINT');
    assert.equal(await exited(dev), 0, 'Ctrl-C stops cleanly');
    audit.close();
  }
  assert.equal(existsSync(kubeconfig), false, 'the local control plane was stopped and removed');
  const leftovers = await promisify(execFile)('pgrep', ['-f', dirname(kubeconfig)]).then((r) => r.stdout.trim(), () => '');
  assert.equal(leftovers, '', 'no process of the plane or the control plane is left');
});
