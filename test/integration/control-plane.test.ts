// The control-plane harness itself: provisioning reuses the cache, starts and stops cleanly
// twice in a row, leaves nothing behind, and fails with one clear line when it cannot work.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { provisionBinaries, startControlPlane } from '../../cluster/index.ts';
import { tempDir } from '../support/temp.ts';

const run = promisify(execFile);
const PROVISION_SCRIPT = new URL('../../cluster/provision.sh', import.meta.url).pathname;

const alive = (pid: number | undefined): boolean => {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** The processes whose command line names `dir`: a control plane's etcd, kube-apiserver and kube-controller-manager. */
const processesOf = async (dir: string): Promise<number[]> =>
  (await run('pgrep', ['-f', dir]).catch(() => ({ stdout: '' }))).stdout.trim().split('\n').filter(Boolean).map(Number);

test('provisioning reuses the cached binaries without building', async () => {
  const progress: string[] = [];
  const binDir = await provisionBinaries((line) => progress.push(line));
  for (const binary of ['kube-apiserver', 'kube-controller-manager', 'kubectl', 'etcd'])
    assert.ok(existsSync(join(binDir, binary)), `${binary} in ${binDir}`);
  assert.deepEqual(
    progress.filter((line) => /build|install|download/.test(line)),
    [],
    'nothing was built, installed or downloaded',
  );
});

test('the binaries report the release they were built from', async () => {
  const binDir = await provisionBinaries(() => {});
  const cp = await startControlPlane({ binDir, controllerManager: false, progress: () => {} });
  try {
    const version = await cp.request('GET', '/version');
    assert.match(version.body.gitVersion, /^v1\.(3[5-9]|[4-9][0-9])\.\d+$/, 'kube-apiserver /version names a current release');
    assert.equal(`v${version.body.major}.${version.body.minor}`, version.body.gitVersion.replace(/\.\d+$/, ''));
    const kubectl = JSON.parse((await run(join(binDir, 'kubectl'), ['version', '--kubeconfig', cp.kubeconfigPath, '-o', 'json'])).stdout);
    assert.equal(kubectl.clientVersion.gitVersion, version.body.gitVersion, 'kubectl is of the same build');
    assert.equal(kubectl.serverVersion.gitVersion, version.body.gitVersion);
    assert.match((await run(join(binDir, 'etcd'), ['--version'])).stdout, /etcd Version: 3\.6\./);
  } finally {
    await cp.stop();
  }
});

test('without Go and without a cache, provisioning fails with one line that names the alternatives', async () => {
  const withoutGo = (process.env.PATH ?? '')
    .split(':')
    .filter((dir) => dir && !existsSync(join(dir, 'go')))
    .join(':');
  const failed = await run('bash', [PROVISION_SCRIPT], {
    env: { ...process.env, PATH: withoutGo, OPFN_CACHE_DIR: tempDir('opfn-no-cache-'), KUBEBUILDER_ASSETS: '' },
  }).then(
    () => undefined,
    (error: { code: number; stderr: string }) => error,
  );
  assert.ok(failed, 'provisioning failed');
  assert.equal(failed.stderr.trim().split('\n').length, 1, `one line: ${failed.stderr}`);
  assert.match(failed.stderr, /^\[provision\] error: no Go on this machine.*KUBEBUILDER_ASSETS.*KUBECONFIG/);
});

test('a K8S_VERSION that is not a release is refused with one line', async () => {
  const failed = await run('bash', [PROVISION_SCRIPT], { env: { ...process.env, K8S_VERSION: '1.35', KUBEBUILDER_ASSETS: '' } }).then(
    () => undefined,
    (error: { stderr: string }) => error,
  );
  assert.equal(failed?.stderr.trim(), '[provision] error: K8S_VERSION=1.35 is not a release such as 1.35.4');
});

test('starts and stops cleanly twice in a row', async () => {
  for (let round = 1; round <= 2; round++) {
    const cp = await startControlPlane({ progress: () => {} });
    const namespaces = await cp.request('GET', '/api/v1/namespaces');
    assert.equal(namespaces.status, 200, `round ${round}: the API answers`);
    // RBAC is on: an unknown token is refused, so service-account tests mean something.
    const anonymous = await fetch(`${cp.server}/api/v1/namespaces`).catch((error: Error) => error);
    assert.ok(
      anonymous instanceof Error || anonymous.status === 401 || anonymous.status === 403,
      `round ${round}: unauthenticated requests are refused`,
    );
    const token = await cp.serviceAccountKubeconfig('default', `probe-${round}`);
    assert.ok(existsSync(token), `round ${round}: a ServiceAccount kubeconfig was written`);

    const pids = await processesOf(cp.dir);
    assert.ok(pids.length >= 3, `round ${round}: etcd, kube-apiserver and kube-controller-manager run (${pids.length} processes)`);
    await cp.stop();
    assert.equal(existsSync(cp.dir), false, `round ${round}: the folder is removed`);
    assert.deepEqual(pids.filter(alive), [], `round ${round}: no process is left behind`);
    await assert.rejects(fetch(`${cp.server}/readyz`), `round ${round}: the port is closed`);
  }
});

test('two control planes at once do not collide', async () => {
  const [a, b] = await Promise.all([startControlPlane({ progress: () => {} }), startControlPlane({ progress: () => {} })]);
  try {
    assert.notEqual(a.server, b.server);
    await a.request('POST', '/api/v1/namespaces', { metadata: { name: 'only-in-a' } });
    assert.equal((await b.request('GET', '/api/v1/namespaces/only-in-a')).status, 404, 'separate etcd data');
  } finally {
    await Promise.all([a.stop(), b.stop()]);
  }
});

test('a process ended by a Ctrl-C it does not handle (a test runner, a benchmark) leaves no control-plane process or folder behind', async () => {
  const module = new URL('../../cluster/index.ts', import.meta.url).pathname;
  const owner = spawn(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `
    import { startControlPlane } from ${JSON.stringify(module)};
    const cp = await startControlPlane({ progress: () => {} });
    console.log(cp.dir);
    setInterval(() => {}, 1000);`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const dir = await new Promise<string>((resolve) => owner.stdout!.on('data', (chunk: Buffer) => resolve(chunk.toString().trim())));
  const pids = await processesOf(dir);
  assert.ok(pids.length >= 3, `etcd, kube-apiserver and kube-controller-manager run (${pids.length} processes)`);
  owner.kill('SIGINT');
  const endedBy = await new Promise((resolve) => owner.on('exit', (_code, signal) => resolve(signal)));
  assert.equal(endedBy, 'SIGINT', 'the process still ends by the signal, as it would have');
  assert.equal(existsSync(dir), false, `the folder is removed: ${dir}`);
  const deadline = Date.now() + 5000;
  while (pids.some(alive) && Date.now() < deadline) await sleep(50);
  assert.deepEqual(pids.filter(alive), [], 'no process is left behind');
});

test('a KUBEBUILDER_ASSETS folder without binaries fails with one clear line', async () => {
  const empty = tempDir('opfn-empty-assets-');
  const previous = process.env.KUBEBUILDER_ASSETS;
  process.env.KUBEBUILDER_ASSETS = empty;
  try {
    await assert.rejects(
      provisionBinaries(() => {}),
      (error: Error) => {
        assert.match(error.message, /KUBEBUILDER_ASSETS=.* has no etcd and kube-apiserver/);
        assert.equal(error.message.split('\n').length, 1, 'one line');
        return true;
      },
    );
  } finally {
    if (previous === undefined) delete process.env.KUBEBUILDER_ASSETS;
    else process.env.KUBEBUILDER_ASSETS = previous;
  }
});
