// The npm package as a user gets it: `npm pack`, the tarball installed into a project of its own
// (its own package.json, outside this repository), two functions written there importing
// 'operator-functions', one of them run by the package's `opfn dev --functions ./functions --only`
// against a real control plane until its object converges, and `opfn manifests --only` writing
// that function alone.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { ConfigMap, CoreEvent, type KubeObject, type ResourceKind } from '../../functions/runtime/index.ts';
import { eventually, startTestCluster } from '../support/cluster.ts';
import { tempDir } from '../support/temp.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const run = promisify(execFile);

const GreetingKind: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Greeting', plural: 'greetings', namespaced: true };

/** A CRD with a status subresource, for a kind of example.com/v1. */
const crd = (kind: string, plural: string) => `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ${plural}.example.com
spec:
  group: example.com
  scope: Namespaced
  names: { kind: ${kind}, plural: ${plural}, singular: ${kind.toLowerCase()}, listKind: ${kind}List }
  versions:
    - name: v1
      served: true
      storage: true
      subresources: { status: {} }
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: { type: object, properties: { name: { type: string } } }
            status: { type: object, properties: { message: { type: string } } }
`;

/** The user's project: its functions folder, one folder per function, the CRDs beside them or in crds/. */
const PROJECT_FILES: Record<string, string> = {
  'package.json': '', // written with the tarball's path
  'functions/greeting/index.ts': `import { applyChild, ConfigMap, controllerReference, defineFunction, isControlledBy, TerminalError, updateStatus, type KubeObject, type ResourceKind } from 'operator-functions';

const GreetingKind: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Greeting', plural: 'greetings', namespaced: true };
interface Greeting extends KubeObject {
  spec: { name: string };
  status?: { message?: string };
}

export default defineFunction({
  name: 'greeting',
  description: 'Keeps a ConfigMap <name>-greeting greeting spec.name, and says the greeting in status.',
  reconciles: GreetingKind,
  owns: [{ kind: ConfigMap }],
  rbac: [
    { apiGroups: ['example.com'], resources: ['greetings/status'], verbs: ['update'] },
    { apiGroups: [''], resources: ['configmaps'], verbs: ['create', 'update'] },
  ],
  reconcile: async (key, { kube }) => {
    const greeting = await kube.get<Greeting>(GreetingKind, key);
    if (!greeting || greeting.metadata.deletionTimestamp) return;
    if (!greeting.spec.name) throw new TerminalError('spec.name is empty: nobody to greet', { reason: 'NobodyToGreet' });
    const message = \`Hello, \${greeting.spec.name}!\`;
    const configMap = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: \`\${key.name}-greeting\`, namespace: key.namespace, ownerReferences: [controllerReference(greeting, GreetingKind)] },
      data: { message },
    };
    await applyChild(kube, ConfigMap, configMap, { isManaged: (existing) => isControlledBy(existing, greeting) });
    await updateStatus<Greeting>(kube, GreetingKind, key, () => ({ message }), greeting);
  },
});
`,
  'functions/greeting/crd.yaml': crd('Greeting', 'greetings'),
  'functions/farewell/index.ts': `import { defineFunction, type ResourceKind } from 'operator-functions';

const FarewellKind: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Farewell', plural: 'farewells', namespaced: true };

export default defineFunction({ name: 'farewell', description: 'Does nothing yet.', reconciles: FarewellKind, rbac: [], reconcile: async () => {} });
`,
  'crds/farewell.yaml': crd('Farewell', 'farewells'),
};

/** npm's own variables of a surrounding `npm test` describe this repository, not the user's project. */
const npmEnv = (): NodeJS.ProcessEnv =>
  Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !/^(npm_package_|npm_lifecycle_|npm_config_local_prefix$|INIT_CWD$)/.test(name)),
  );

test('the packed package installs into a project of its own, runs a function written there against a real control plane, and generates only that function', async (t) => {
  const started = performance.now();
  const elapsed = () => `${((performance.now() - started) / 1000).toFixed(1)} s`;
  const project = tempDir('opfn-package-project-');
  const packDir = tempDir('opfn-package-tarball-');
  // The control plane starts while npm packs and installs.
  const clusterStarting = startTestCluster();
  try {
    const { stdout: packed } = await run('npm', ['pack', '--json', '--pack-destination', packDir], { cwd: ROOT, env: npmEnv() });
    const [{ filename, files }] = JSON.parse(packed) as { filename: string; files: { path: string }[] }[];
    const paths = files.map((file) => file.path);
    for (const shipped of ['bin/opfn.mjs', 'lib/bin/opfn.js', 'lib/functions/runtime/index.js', 'lib/functions/runtime/index.d.ts'])
      assert.ok(paths.includes(shipped), `the tarball holds ${shipped}`);
    assert.ok(paths.includes('lib/cluster/provision.sh') && paths.some((path) => path.startsWith('lib/crds/')), 'and the files it reads');
    assert.ok(
      !paths.some((path) => path.endsWith('.ts') && !path.endsWith('.d.ts')),
      'and no TypeScript source, which Node would refuse to run',
    );
    t.diagnostic(`packed ${filename} (${files.length} files) at ${elapsed()}`);

    PROJECT_FILES['package.json'] = JSON.stringify({
      name: 'my-operators',
      private: true,
      type: 'module',
      dependencies: { 'operator-functions': `file:${join(packDir, filename)}` },
    });
    for (const [path, text] of Object.entries(PROJECT_FILES)) {
      mkdirSync(dirname(join(project, path)), { recursive: true });
      writeFileSync(join(project, path), text);
    }
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund'], { cwd: project, env: npmEnv() });
    t.diagnostic(`installed into ${project} at ${elapsed()}`);

    const cluster = await clusterStarting;
    // The package's `opfn` as `npx opfn` runs it: its bin link, under this Node (24, which strips the function's types).
    const env = { ...npmEnv(), PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH}`, KUBECONFIG: cluster.cp.kubeconfigPath };
    const opfn = join(project, 'node_modules', '.bin', 'opfn');

    const dev = spawn(opfn, ['dev', '--functions', './functions', '--only', 'greeting', '--log-format', 'json'], {
      cwd: project,
      env: { ...env, LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    dev.stdout.on('data', (chunk: Buffer) => (output += chunk));
    dev.stderr.on('data', (chunk: Buffer) => (output += chunk));
    const exited = new Promise<number | null>((resolve) => dev.once('exit', resolve));
    try {
      await eventually(
        async () => {
          if (dev.exitCode !== null) throw new Error(`opfn dev exited (${dev.exitCode})`);
          return /Running greeting \(/.test(output);
        },
        90_000,
        'opfn dev to run greeting',
        async () => output,
      );
      assert.match(output, /Functions bundled \(esbuild\)/, 'the user function is bundled with the package runtime');
      assert.doesNotMatch(output, /farewell|immortal-container/, 'only the function --only names runs');

      await cluster.kube.create(GreetingKind, {
        apiVersion: 'example.com/v1',
        kind: 'Greeting',
        metadata: { name: 'hello', namespace: 'default' },
        spec: { name: 'world' },
      } as KubeObject);
      const configMap = await eventually(
        () => cluster.kube.get<KubeObject & { data?: Record<string, string> }>(ConfigMap, { namespace: 'default', name: 'hello-greeting' }),
        30_000,
        'the ConfigMap of Greeting hello',
        async () => output,
      );
      assert.equal(configMap.data?.message, 'Hello, world!');
      await eventually(
        async () =>
          (await cluster.kube.get<KubeObject & { status?: { message?: string } }>(GreetingKind, { namespace: 'default', name: 'hello' }))
            ?.status?.message === 'Hello, world!',
        30_000,
        'the status of Greeting hello',
        async () => output,
      );
      t.diagnostic(`Greeting hello converged through opfn dev at ${elapsed()}`);

      // The user's TerminalError is the host's (one runtime in the bundle): a Warning Event, not a retried 500.
      await cluster.kube.create(GreetingKind, {
        apiVersion: 'example.com/v1',
        kind: 'Greeting',
        metadata: { name: 'nameless', namespace: 'default' },
        spec: {},
      } as KubeObject);
      await eventually(
        async () =>
          (
            await cluster.kube.list<KubeObject & { reason?: string }>(CoreEvent, {
              namespace: 'default',
              fieldSelector: 'involvedObject.name=nameless',
            })
          ).items.some((event) => event.reason === 'NobodyToGreet'),
        30_000,
        'the Warning Event of Greeting nameless',
        async () => output,
      );
      assert.doesNotMatch(output, /reconcile failed; it will be retried/);
    } finally {
      // opfn dev stops its function processes on SIGTERM, as on Ctrl-C.
      dev.kill('SIGTERM');
      const forced = setTimeout(() => dev.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(forced);
    }

    const deploy = join(project, 'deploy');
    await run(opfn, ['manifests', '--functions', './functions', '--only', 'greeting', '--out', deploy], { cwd: project, env });
    assert.deepEqual(readdirSync(deploy).sort(), ['broker.yaml', 'crds.yaml', 'greeting.yaml', 'kustomization.yaml', 'namespace.yaml']);
    const crds = readFileSync(join(deploy, 'crds.yaml'), 'utf8');
    assert.match(crds, /name: greetings\.example\.com/, 'the CRD found beside the function');
    const everything = readdirSync(deploy)
      .map((file) => readFileSync(join(deploy, file), 'utf8'))
      .join('\n');
    assert.doesNotMatch(everything, /farewell|immortal|copyrator|exchange-rate|composite/, 'nothing of the other functions');
    t.diagnostic(`manifests generated at ${elapsed()}`);
  } finally {
    await (await clusterStarting).stop();
  }
});
