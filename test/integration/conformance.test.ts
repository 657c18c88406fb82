// The contract kit (conformance/, `opfn conformance`) against real endpoints on one control plane:
// every built-in function, served as its own ServiceAccount with its generated rights, passes;
// the Python ImmortalContainer function of examples/ (standard library only) passes with the same
// rights; its deliberately broken variant fails, each failure with a reason a person can act on.
// Runs of one kind go one after another: a resync reconciles every object of its kind.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { formatTable, runConformance, type CheckRow } from '../../conformance/index.ts';
import { commandFunctions } from '../../bin/function-set.ts';
import { applyCrds, readManifestFile } from '../../eventing/crds.ts';
import { loadFunction } from '../../functions/index.ts';
import { Pod, type FunctionDeclaration, type KubeObject } from '../../functions/runtime/index.ts';
import { DEFAULT_OPTIONS, serviceAccountName } from '../../eventing/manifests/index.ts';
import { freePort } from '../../processes/index.ts';
import { eventually, quietLog, serveFunction, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { startRateProvider, type StandInProvider } from '../support/rate-provider.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

const EXAMPLE = join(import.meta.dirname, '..', '..', 'examples', 'python-immortal-container');
const RUNTIME_FACE = join(import.meta.dirname, '..', '..', 'functions', 'runtime', 'index.ts');

let cluster: TestCluster;
let provider: StandInProvider;
let immortalContainer: FunctionDeclaration;
let immortalKubeconfig: string;

before(async () => {
  const python = spawnSync('python3', ['--version'], { encoding: 'utf8' });
  if (python.status !== 0)
    throw new Error(`python3 is needed to run examples/python-immortal-container (${python.error?.message ?? python.stderr})`);
  [cluster, provider, immortalContainer] = await Promise.all([startTestCluster(), startRateProvider(), loadFunction('immortal-container')]);
  immortalKubeconfig = await kubeconfigWithDeclaredRbac(cluster.cp, immortalContainer);
});

after(async () => {
  await provider?.close();
  await cluster?.stop();
});

const failures = (rows: CheckRow[]) => rows.filter((row) => row.result === 'fail');

async function check(url: string, declaration: FunctionDeclaration, convergeTimeoutMs = 15_000): Promise<CheckRow[]> {
  return runConformance({ url, declaration, kube: cluster.kube, answerTimeoutMs: 30_000, convergeTimeoutMs });
}

/** Runs a built-in function as its ServiceAccount and the kit against it. */
async function builtIn(name: string): Promise<CheckRow[]> {
  const declaration = await loadFunction(name);
  const kubeconfig = name === 'immortal-container' ? immortalKubeconfig : await kubeconfigWithDeclaredRbac(cluster.cp, declaration);
  const config: Record<string, Record<string, string>> = {
    'exchange-rate': { EXCHANGE_RATE_PROVIDER_URL: provider.url },
    // The kit plays the event sources, so the composite function writes none (as on the local plane).
    composite: { COMPOSITE_EVENT_SOURCES: 'plane' },
  };
  const served = await serveFunction(declaration, kubeconfig, config[name] ? { config: config[name] } : {});
  try {
    return await check(served.url, declaration);
  } finally {
    await served.close();
  }
}

/** Starts one of the example's Python programs with the kubeconfig given, until `listening` is printed. */
async function python(
  program: string,
  kubeconfig: string,
  port?: number,
): Promise<{ url: string; child: ChildProcess; stop(): Promise<void> }> {
  port ??= await freePort();
  const child = spawn('python3', [join(EXAMPLE, program)], {
    env: { ...process.env, KUBECONFIG: kubeconfig, PORT: String(port), PYTHONDONTWRITEBYTECODE: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk) => (stderr = (stderr + chunk).slice(-4000)));
  const [first] = (await Promise.race([once(child.stdout!, 'data'), once(child, 'exit')])) as [Buffer | number];
  if (!Buffer.isBuffer(first)) throw new Error(`${program} exited with ${first}: ${stderr}`);
  return {
    url: `http://127.0.0.1:${port}/`,
    child,
    stop: async () => {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
    },
  };
}

test('every built-in function conforms to its contract', async () => {
  const [immortal, ...others] = await Promise.all(['immortal-container', 'copyrator', 'exchange-rate', 'composite'].map(builtIn));
  for (const rows of [immortal, ...others]) assert.deepEqual(failures(rows), [], formatTable(rows));
  // The object checks ran where a contract defines them; the composite function's parents converge through the kit's hook.
  const ran = (rows: CheckRow[], check: RegExp) => rows.find((row) => check.test(row.check))?.result;
  for (const rows of [immortal, others[1], others[2]]) {
    for (const name of [/^converges/, /^duplicate/, /^a deleted child/, /^forged body:/, /^reordered/, /^Reference mode/])
      assert.equal(ran(rows, name), 'pass', formatTable(rows));
  }
  assert.equal(ran(others[0], /^converges/), 'pass', formatTable(others[0]));
});

test('an endpoint slower than the delivery timeout fails the timeout row, naming what went unanswered', async () => {
  // Healthy, and takes every event, but only after the timeout: what the broker counts as a failed attempt.
  const slow = createServer((request, response) => {
    request.resume();
    if (request.url?.startsWith('/health/')) return void response.writeHead(200).end();
    const timer = setTimeout(() => response.writeHead(200).end(), 2000);
    response.on('close', () => clearTimeout(timer));
  });
  await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve));
  try {
    // As the composite function: the kit's own hook is never called, and the row says so.
    const rows = await runConformance({
      url: `http://127.0.0.1:${(slow.address() as AddressInfo).port}/`,
      declaration: await loadFunction('composite'),
      kube: cluster.kube,
      answerTimeoutMs: 300,
      convergeTimeoutMs: 1000,
    });
    const reasonOf = (check: RegExp) => {
      const row = rows.find((candidate) => check.test(candidate.check));
      assert.equal(row?.result, 'fail', `${check} should fail:\n${formatTable(rows)}`);
      return row!.reason!;
    };
    assert.match(reasonOf(/^every answer within 0\.3 s/), /^\d+ request\(s\) unanswered: malformed: /);
    assert.match(reasonOf(/^resync ping/), /no answer within 0\.3 s/);
    assert.match(
      reasonOf(/^converges/),
      /add CompositeController \/conformance-\w+: no answer within 0\.3 s; the kit's sync hook \(http:\/\/127\.0\.0\.1:\d+\/sync\) was never called/,
    );
  } finally {
    slow.closeAllConnections();
    slow.close();
  }
});

/** A function of a project of its own: its declaration, CRD and example object in one folder. */
const OUTSIDE_FUNCTION = {
  'greeter/index.ts': `import { defineFunction, updateStatus, type KubeObject, type ResourceKind } from '${RUNTIME_FACE}';
const GreeterKind: ResourceKind = { group: 'conformance.example.com', version: 'v1', kind: 'Greeter', plural: 'greeters', namespaced: true };
export default defineFunction({
  name: 'greeter',
  description: 'Says hello in status.',
  reconciles: GreeterKind,
  rbac: [{ apiGroups: ['conformance.example.com'], resources: ['greeters/status'], verbs: ['update'] }],
  reconcile: async (key, { kube }) => {
    const greeter = await kube.get<KubeObject & { spec: { name?: string } }>(GreeterKind, key);
    if (!greeter || greeter.metadata.deletionTimestamp) return;
    await updateStatus(kube, GreeterKind, key, () => ({ message: \`Hello, \${greeter.spec.name}!\`, observedGeneration: greeter.metadata.generation }), greeter);
  },
});
`,
  'greeter/greeter.yaml': `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: { name: greeters.conformance.example.com }
spec:
  group: conformance.example.com
  scope: Namespaced
  names: { kind: Greeter, plural: greeters, singular: greeter, listKind: GreeterList }
  versions:
    - name: v1
      served: true
      storage: true
      subresources: { status: {} }
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
---
apiVersion: conformance.example.com/v1
kind: Greeter
metadata: { name: hello }
spec: { name: world }
`,
};

test('a function of a project of its own (opfn conformance --functions) is held to the contract every function owes', async () => {
  const folder = mkdtempSync(join(tmpdir(), 'opfn-conformance-functions-'));
  try {
    for (const [path, text] of Object.entries(OUTSIDE_FUNCTION)) {
      mkdirSync(join(folder, path, '..'), { recursive: true });
      writeFileSync(join(folder, path), text);
    }
    // As bin/conformance.ts loads it.
    const set = await commandFunctions({ functions: folder, only: ['greeter'] });
    const declaration = set.declarations[0]!;
    await applyCrds(cluster.kube, set.crds);
    const served = await serveFunction(declaration, await kubeconfigWithDeclaredRbac(cluster.cp, declaration));
    try {
      const examples = set.manifestFiles.flatMap(readManifestFile);
      const rows = await runConformance({ url: served.url, declaration, examples, kube: cluster.kube, answerTimeoutMs: 30_000 });
      assert.deepEqual(failures(rows), [], formatTable(rows));
      const converged = rows.find((row) => /converge/i.test(row.check));
      assert.equal(converged?.result, 'pass', `the example object converges through the function:\n${formatTable(rows)}`);
    } finally {
      await served.close();
    }
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
});

test('the Python ImmortalContainer function (standard library only) conforms with the same rights', async () => {
  const fn = await python('function.py', immortalKubeconfig);
  try {
    const rows = await check(fn.url, immortalContainer);
    assert.deepEqual(failures(rows), [], formatTable(rows));
    assert.equal(rows.filter((row) => row.result === 'not checked').length, 0, formatTable(rows));
  } finally {
    await fn.stop();
  }
});

test('the broken Python variant (trusts the body, answers 200 to everything) fails, each failure with its reason', async () => {
  const fn = await python('broken.py', cluster.cp.kubeconfigPath);
  try {
    // What never converges is waited for: a shorter wait keeps the test short.
    const rows = await check(fn.url, immortalContainer, 5000);
    const reasonOf = (check: RegExp) => {
      const row = rows.find((candidate) => check.test(candidate.check));
      assert.equal(row?.result, 'fail', `${check} should fail:\n${formatTable(rows)}`);
      return row!.reason!;
    };
    assert.match(reasonOf(/^malformed: missing ce-id/), /answered 200 \(accepted an event that cannot mean anything\)/);
    assert.match(reasonOf(/^large body/), /answered 200/);
    assert.match(reasonOf(/^forged body of an object/), /written for it: Pod ghost-\w+-immortalpod \(added/);
    assert.match(reasonOf(/^duplicate delivery/), /the converged state was written again: before .*@\d+; after .*@\d+/);
    assert.match(reasonOf(/^a deleted child/), /not converged after 5 s: no Pod example-immortalcontainer-immortalpod/);
    assert.match(
      reasonOf(/^forged body:/),
      /Pod example-immortalcontainer-immortalpod was written from the forged event body .*forged\.invalid/,
    );
    assert.match(reasonOf(/^reordered/), /runs image nginx:latest, the object asks for busybox:conformance/);
    // Nothing in a Reference-mode body to act on: it does nothing, and the status stays behind.
    assert.match(reasonOf(/^Reference mode/), /not converged after 5 s: status\.observedGeneration is \d+, metadata\.generation 3/);
    // What it gets right still passes: it is told exactly what is wrong, not everything.
    assert.equal(rows.find((row) => /^converges/.test(row.check))?.result, 'pass', formatTable(rows));
    assert.equal(rows.find((row) => /^health: GET \/health\/readiness/.test(row.check))?.result, 'pass', formatTable(rows));
    assert.match(formatTable(rows), /\d+ failed: does NOT conform\./);
  } finally {
    await fn.stop();
  }
});

test('swapped in with a Trigger on the local plane (opfn dev --replace), objects converge through the Python function', async () => {
  const { runDev } = await import('../../bin/dev.ts');
  const port = await freePort();
  const previous = process.env.KUBECONFIG;
  process.env.KUBECONFIG = cluster.cp.kubeconfigPath;
  const stateDir = mkdtempSync(join(tmpdir(), 'opfn-conformance-'));
  const lines: string[] = [];
  const running = await runDev({
    only: [immortalContainer.name],
    replace: { [immortalContainer.name]: `http://127.0.0.1:${port}/` },
    bundle: false,
    idleSeconds: 30,
    stateDir,
    log: quietLog,
    say: (line) => lines.push(line),
  });
  let fn: Awaited<ReturnType<typeof python>> | undefined;
  try {
    // The plane installs the function's identity in its own namespace, binding the function's roles there: the Python function runs as it.
    fn = await python(
      'function.py',
      await cluster.cp.serviceAccountKubeconfig(DEFAULT_OPTIONS.namespace, serviceAccountName(immortalContainer)),
      port,
    );
    const { kube } = cluster;
    const kind = immortalContainer.reconciles;
    const key = { namespace: 'default', name: 'through-python' };
    const podKey = { namespace: 'default', name: 'through-python-immortalpod' };
    await kube.create(kind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: key,
      spec: { image: 'nginx:1.27' },
    });
    type Status = { currentPod?: string; startTimes?: number };
    const status = async () => ((await kube.get(kind, key)) as (KubeObject & { status?: Status }) | undefined)?.status;
    const first = await eventually(
      () => kube.get(Pod, podKey),
      20_000,
      'the pod, made by the Python function',
      async () => lines.join('\n'),
    );
    await eventually(async () => (await status())?.currentPod === podKey.name, 20_000, 'status written by the Python function');
    // The plane's source tells it the pod is gone; it comes back, and is counted once more.
    await kube.delete(Pod, podKey);
    await eventually(
      async () => {
        const again = await kube.get(Pod, podKey);
        return again !== undefined && again.metadata.uid !== first.metadata.uid;
      },
      20_000,
      'the deleted pod back',
    );
    await eventually(
      async () => (await status())?.startTimes === 2,
      20_000,
      'startTimes 2',
      async () => JSON.stringify(await status()),
    );
    assert.equal(running.plane.activator.instances(immortalContainer.name), 0, 'the built-in function never started');
  } finally {
    await running.stop();
    if (previous === undefined) delete process.env.KUBECONFIG;
    else process.env.KUBECONFIG = previous;
    rmSync(stateDir, { recursive: true, force: true });
    await fn?.stop();
  }
});
