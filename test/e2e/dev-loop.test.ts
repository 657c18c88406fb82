// The dev loop as a person runs it, in a project folder: `opfn cluster up`, then `opfn dev`
// against it. The plane honours a Knative Service edited with kubectl (a new environment rolls
// the function's instances; another image is refused on the Service), runs the function as its
// generated ServiceAccount (a request its declaration has no rule for is refused with 403),
// `opfn status` and `opfn reload` find the plane from a subfolder, and a restarted `opfn dev`
// finds the control plane and every object where they were.
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { KnativeService } from '../../eventing/knative/index.ts';
import { DEFAULT_OPTIONS } from '../../eventing/manifests/index.ts';
import { ImmortalContainerKind } from '../../functions/immortal-container/desired.ts';
import { type ApiError, collectionPath, type KubeObject, type KubeClient, Pod, Secret } from '../../functions/runtime/index.ts';
import { eventually, kubeFor } from '../support/cluster.ts';
import { tempDir } from '../support/temp.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const OPFN = join(ROOT, 'bin/opfn.ts');
const NS = DEFAULT_OPTIONS.namespace;
const FN = 'immortal-container';
const PACKAGE_VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

// A project of its own: `opfn` finds its .opfn from any folder below it, without OPFN_STATE_DIR.
const project = tempDir('opfn-dev-loop-');
writeFileSync(join(project, 'package.json'), '{"name":"my-operator","private":true}');
const subfolder = join(project, 'src', 'deep');
mkdirSync(subfolder, { recursive: true });
const { OPFN_STATE_DIR: _ignored, KUBECONFIG: _none, ...inherited } = process.env;
const env = { ...inherited, LOG_LEVEL: 'info' };
const opfn = (cwd: string, ...args: string[]) => promisify(execFile)(process.execPath, [OPFN, ...args], { env, cwd });

const children: ChildProcess[] = [];
after(async () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  await opfn(project, 'cluster', 'down').catch(() => {});
});

/** Starts a long-running opfn command; `output()` is everything it printed so far; `printed()` waits for a line (failing if it exits first). */
function startOpfn(
  args: string[],
  extraEnv: Record<string, string> = {},
): { child: ChildProcess; output(): string; printed(pattern: RegExp, timeoutMs?: number): Promise<RegExpExecArray> } {
  const child = spawn(process.execPath, [OPFN, ...args], { env: { ...env, ...extraEnv }, cwd: project, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const printed = (pattern: RegExp, timeoutMs = 120_000) =>
    eventually(
      async () => {
        const match = pattern.exec(output);
        if (match) return match;
        if (child.exitCode !== null)
          throw new Error(`opfn ${args.join(' ')} exited (${child.exitCode}) before printing ${pattern}:\n${output}`);
        return undefined;
      },
      timeoutMs,
      `opfn ${args.join(' ')} to print ${pattern}`,
      async () => output.slice(-3000),
    );
  return { child, output: () => output, printed };
}

const exited = (child: ChildProcess) =>
  new Promise<number | null>((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once('exit', resolve)));

/** The pids of the function's instances that became ready, in order, from the plane's JSON log. */
const readyPids = (output: string): number[] =>
  output
    .split('\n')
    .filter((line) => line.startsWith('{') && line.includes(`function instance ${FN}#`) && line.includes('ready'))
    .map((line) => (JSON.parse(line) as { pid: number }).pid);

/** The environment a process runs with. */
const environmentOf = (pid: number): Record<string, string> =>
  Object.fromEntries(
    readFileSync(`/proc/${pid}/environ`, 'utf8')
      .split('\0')
      .filter(Boolean)
      .map((entry) => [entry.slice(0, entry.indexOf('=')), entry.slice(entry.indexOf('=') + 1)]),
  );

const serviceReady = async (kube: KubeClient) => {
  const service = await kube.get<KubeObject & { status?: { conditions?: { type: string; status: string; reason?: string }[] } }>(
    KnativeService,
    { namespace: NS, name: FN },
  );
  const ready = service?.status?.conditions?.find((condition) => condition.type === 'Ready');
  return `${ready?.status} ${ready?.reason}`;
};

/** `kubectl patch ksvc --type json`. */
const patchService = (kube: KubeClient, patch: unknown[]) =>
  kube.request('PATCH', `${collectionPath(KnativeService, NS)}/${FN}`, { body: patch, contentType: 'application/json-patch+json' });

const createImmortal = (kube: KubeClient, name: string) =>
  kube.create(ImmortalContainerKind, {
    apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
    kind: 'ImmortalContainer',
    metadata: { name, namespace: 'default' },
    spec: { image: 'nginx' },
  });

const podOf = (kube: KubeClient, name: string) =>
  eventually(() => kube.get(Pod, { namespace: 'default', name: `${name}-immortalpod` }), 30_000, `the pod of ${name}`);

test('opfn --version prints the package version; opfn status without a plane says so', async () => {
  assert.equal((await opfn(subfolder, '--version')).stdout.trim(), PACKAGE_VERSION);
  await assert.rejects(opfn(subfolder, 'status'), (error: Error & { stderr?: string }) => {
    assert.match(error.stderr ?? '', new RegExp(`no plane is running from ${join(project, '.opfn')}`));
    return true;
  });
});

test('cluster up, then opfn dev: a ksvc edit is honoured, the function runs as its ServiceAccount, status and reload find the plane, a restart keeps every object', async () => {
  const cluster = startOpfn(['cluster', 'up']);
  const kubeconfig = (await cluster.printed(/^export KUBECONFIG=(\S+)$/m))[1]!;
  const kube = kubeFor(kubeconfig);
  const devArgs = ['dev', '--only', FN, '--idle', '60', '--resync', '0', '--log-format', 'json'];
  let dev = startOpfn(devArgs, { KUBECONFIG: kubeconfig });
  await dev.printed(/kubectl for this plane:\n.*\n/);
  // The KUBECONFIG line is printed again at the end of start-up, where it is seen.
  const tail = dev.output().slice(dev.output().indexOf('Running immortal-container'));
  assert.match(tail, new RegExp(`export KUBECONFIG=${kubeconfig.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
  assert.match(dev.output(), /Using the local control plane of `opfn cluster up`/);

  // The function runs as its generated ServiceAccount: what its declaration lacks is refused.
  await createImmortal(kube, 'first');
  await podOf(kube, 'first');
  const [firstPid] = await eventually(async () => readyPids(dev.output()).length > 0 && readyPids(dev.output()), 30_000, 'an instance');
  const functionEnv = environmentOf(firstPid!);
  assert.match(functionEnv.KUBECONFIG ?? '', /sa-operator-functions-opfn-immortal-container\.kubeconfig$/);
  const asFunction = kubeFor(functionEnv.KUBECONFIG!);
  assert.ok(await asFunction.get(ImmortalContainerKind, { namespace: 'default', name: 'first' }), 'its declared kind: allowed');
  await assert.rejects(asFunction.list(Secret, { namespace: 'kube-system' }), (error: ApiError) => error.code === 403);

  // A new environment on the Service rolls the function: the next instance has it.
  assert.equal(functionEnv.GREETING, undefined);
  await patchService(kube, [{ op: 'add', path: '/spec/template/spec/containers/0/env/-', value: { name: 'GREETING', value: 'hello' } }]);
  await eventually(async () => /immortal-container rolled/.test(dev.output()), 15_000, 'the roll');
  assert.equal(await serviceReady(kube), 'True Ready');
  await createImmortal(kube, 'second');
  await podOf(kube, 'second');
  const rolledPid = (
    await eventually(async () => readyPids(dev.output()).length > 1 && readyPids(dev.output()), 30_000, 'a new instance')
  ).at(-1)!;
  assert.notEqual(rolledPid, firstPid);
  assert.equal(environmentOf(rolledPid).GREETING, 'hello', 'the new instance runs with the edited environment');

  // An image the plane cannot run is refused on the Service, not reported Ready.
  await patchService(kube, [{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'example.com/other:1' }]);
  await eventually(async () => (await serviceReady(kube)) === 'False ImageNotRunLocally', 15_000, 'the image refused');

  assert.equal(dev.child.exitCode, null, `opfn dev still runs:\n${dev.output().slice(-4000)}`);
  // From a subfolder of the project: status, then reload (rebuilt bundles, instances rolled).
  const status = (await opfn(subfolder, 'status')).stdout;
  assert.match(status, new RegExp(`^${FN}\\s+\\d+\\s+\\d+`, 'm'), status);
  assert.match(status, /^TRIGGER\s+DELIVERED/m, status);
  assert.match(status, /^dead letters: \d+/m, status);
  const reload = await opfn(subfolder, 'reload');
  assert.match(reload.stderr, /immortal-container: rebuilt, \d+ instance\(s\) replaced/, reload.stderr);

  // A restart of the plane: the control plane and the objects are where they were.
  dev.child.kill('SIGINT');
  assert.equal(await exited(dev.child), 0);
  assert.match(dev.output(), /The local control plane keeps running with its objects/);
  // From the TypeScript sources this time: nothing to bundle again.
  dev = startOpfn([...devArgs, '--no-bundle'], { KUBECONFIG: kubeconfig });
  await dev.printed(/kubectl for this plane:\n.*\n/);
  for (const name of ['first', 'second']) assert.ok(await kube.get(ImmortalContainerKind, { namespace: 'default', name }), `${name} kept`);
  assert.equal(await serviceReady(kube), 'True Ready', 'the Service applied as generated again');
  dev.child.kill('SIGINT');
  assert.equal(await exited(dev.child), 0);
  cluster.child.kill('SIGINT');
  assert.equal(await exited(cluster.child), 0);
});
