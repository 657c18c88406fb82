// The container image, checked without Docker: the Dockerfile is parsed, its build command run,
// its runtime stage laid out in a scratch folder exactly as its COPY lines say (so no
// node_modules), its warm-up RUN executed, and its ENTRYPOINT/CMD started there against a real
// control plane. If the Dockerfile drifts (another entry, a COPY of something the build does
// not produce, a source folder the bundles need but the build stage does not copy), this fails.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { Agent as HttpAgent, get as httpGet } from 'node:http';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { freePort } from '../../processes/index.ts';
import { tmpdir } from 'node:os';
import { basename, dirname, join, posix, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { HTTP } from 'cloudevents';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind, type ImmortalContainer, type PodObject } from '../../functions/immortal-container/desired.ts';
import { Pod } from '../../functions/runtime/index.ts';
import { DELIVERY_BUDGET_ENV, reconcileReply, KEEP_ALIVE_TIMEOUT_MS, OUTCOME_HEADER } from '../../functions/runtime/host/index.ts';
import { deliver, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';
import { DEFAULT_OPTIONS, knativeService, READINESS_PATH } from '../../eventing/manifests/index.ts';
import { IMAGE_NODE_FLAGS } from '../../build/index.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

// ---------------------------------------------------------------------------------------------
// A Dockerfile reader for the forms this project uses (exec-form ENTRYPOINT/CMD, key=value ENV).

interface Copy {
  from?: string;
  sources: string[];
  dest: string;
  line: number;
}
interface Stage {
  name?: string;
  base: string;
  workdir: string;
  env: Record<string, string>;
  copies: Copy[];
  runs: string[];
  /** The USER in effect for each RUN (undefined: root). */
  runUsers: (string | undefined)[];
  entrypoint?: string[];
  cmd?: string[];
  user?: string;
  expose: number[];
}

/** Splits on whitespace, keeping "quoted strings" together (quotes removed). */
function words(text: string): string[] {
  return [...text.matchAll(/(?:[^\s"']+|"[^"]*"|'[^']*')+/g)].map((match) => match[0].replace(/["']/g, ''));
}

function parseDockerfile(text: string): Stage[] {
  const stages: Stage[] = [];
  const lines = text.replace(/\\\r?\n/g, ' ').split(/\r?\n/);
  lines.forEach((raw, index) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) return;
    const [, keyword, rest = ''] = /^(\w+)\s*(.*)$/.exec(line) ?? [];
    const instruction = keyword.toUpperCase();
    if (instruction === 'FROM') {
      const [base, as, name] = words(rest).filter((word) => !word.startsWith('--'));
      stages.push({
        base,
        name: as?.toUpperCase() === 'AS' ? name : undefined,
        workdir: '/',
        env: {},
        copies: [],
        runs: [],
        runUsers: [],
        expose: [],
      });
      return;
    }
    const stage = stages.at(-1);
    assert.ok(stage, `Dockerfile line ${index + 1}: ${instruction} before FROM`);
    const execForm = () => {
      assert.ok(
        rest.startsWith('['),
        `Dockerfile line ${index + 1}: ${instruction} must use the exec form ["node", …] (signals reach node as PID 1)`,
      );
      return JSON.parse(rest) as string[];
    };
    switch (instruction) {
      case 'WORKDIR':
        stage.workdir = posix.resolve(stage.workdir, rest);
        break;
      case 'ENV':
        for (const word of words(rest)) {
          const equals = word.indexOf('=');
          assert.ok(equals > 0, `Dockerfile line ${index + 1}: write ENV as KEY=value`);
          stage.env[word.slice(0, equals)] = word.slice(equals + 1);
        }
        break;
      case 'COPY':
      case 'ADD': {
        const all = rest.startsWith('[') ? (JSON.parse(rest) as string[]) : words(rest);
        const from = all.find((word) => word.startsWith('--from='))?.slice('--from='.length);
        const paths = all.filter((word) => !word.startsWith('--'));
        stage.copies.push({ from, sources: paths.slice(0, -1), dest: paths.at(-1)!, line: index + 1 });
        break;
      }
      case 'RUN':
        stage.runs.push(rest);
        stage.runUsers.push(stage.user);
        break;
      case 'EXPOSE':
        stage.expose.push(...words(rest).map((port) => Number.parseInt(port, 10)));
        break;
      case 'ENTRYPOINT':
        stage.entrypoint = execForm();
        stage.cmd = undefined;
        break;
      case 'CMD':
        stage.cmd = execForm();
        break;
      case 'USER':
        stage.user = rest;
        break;
      default:
        break;
    }
  });
  return stages;
}

/** .dockerignore semantics: last matching pattern wins; a pattern also matches a file's parent folders. */
function dockerignore(text: string): (path: string) => boolean {
  const patterns = text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => {
      const negate = line.startsWith('!');
      const glob = (negate ? line.slice(1) : line).replace(/^\/+|\/+$/g, '');
      const source = glob
        .split(/(\*\*|\*|\?)/)
        .map((part) => (part === '**' ? '.*' : part === '*' ? '[^/]*' : part === '?' ? '[^/]' : part.replace(/[.+^${}()|[\]\\]/g, '\\$&')))
        .join('');
      return { negate, regex: new RegExp(`^${source}$`) };
    });
  return (path: string) => {
    const parts = path.split('/');
    let ignored = false;
    for (const pattern of patterns) {
      for (let length = 1; length <= parts.length; length++) {
        if (pattern.regex.test(parts.slice(0, length).join('/'))) {
          ignored = !pattern.negate;
          break;
        }
      }
    }
    return ignored;
  };
}

// ---------------------------------------------------------------------------------------------

const dockerfile = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
const runtime = dockerfile.at(-1)!;
const stageNamed = (name: string) => {
  const stage = dockerfile.find((candidate) => candidate.name === name) ?? dockerfile[Number(name)];
  assert.ok(stage, `COPY --from=${name}: no such stage`);
  return stage;
};
/** The build stage's working folder mirrors the repository (its COPY lines keep the layout). */
const repoPathIn = (stage: Stage, imagePath: string): string => {
  const absolute = posix.resolve(stage.workdir, imagePath);
  assert.ok(
    absolute === stage.workdir || absolute.startsWith(`${stage.workdir}/`),
    `${imagePath} is outside the stage's WORKDIR ${stage.workdir}`,
  );
  return join(ROOT, posix.relative(stage.workdir, absolute));
};
const buildStage = stageNamed(runtime.copies.find((copy) => copy.from)?.from ?? '0');
const ignored = dockerignore(existsSync(join(ROOT, '.dockerignore')) ? readFileSync(join(ROOT, '.dockerignore'), 'utf8') : '');

const scratch = mkdtempSync(join(tmpdir(), 'opfn-image-'));
/** The runtime stage's file system. */
const image = join(scratch, 'rootfs');
const imagePath = (path: string) => join(image, posix.resolve(runtime.workdir, path));
const metafile = join(scratch, 'meta.json');
let buildOutput = '';
let cluster: TestCluster;
let functionKubeconfig: string;
const children = new Set<ChildProcess>();

/** The runtime stage's ENV, paths moved into the scratch root file system. */
function imageEnv(extra: Record<string, string | undefined>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: join(image, 'home') };
  for (const [key, value] of Object.entries(runtime.env)) env[key] = value.startsWith('/') ? join(image, value) : value;
  for (const [key, value] of Object.entries(extra))
    if (value === undefined) delete env[key];
    else env[key] = value;
  return env;
}

/** ENTRYPOINT + CMD of the runtime stage, with `node` being this Node 24. */
function imageCommand(): { file: string; args: string[] } {
  assert.ok(
    runtime.entrypoint?.length,
    "the runtime stage has an ENTRYPOINT (the base image's docker-entrypoint.sh is not what Knative should run)",
  );
  const [program, ...args] = [...runtime.entrypoint!, ...(runtime.cmd ?? [])];
  assert.equal(program, 'node', 'the entry runs node directly');
  return { file: process.execPath, args };
}

/**
 * A kubeconfig that only lets the function start (readable by the image's USER): nothing contacts
 * its address before an event arrives.
 */
function unreachableKubeconfig(name: string): string {
  const path = join(scratch, `${name}.kubeconfig`);
  writeFileSync(
    path,
    'apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: "https://127.0.0.1:9"}}]\nusers: [{name: x, user: {token: x}}]\ncontexts: [{name: x, context: {cluster: x, user: x}}]\ncurrent-context: x\n',
    { mode: 0o644 },
  );
  return path;
}

/** Root may run the image's steps as the image's USER, as Docker and the kubelet do; anyone else runs them as themselves. */
const isRoot = process.getuid?.() === 0;
function runAs(user: string | undefined): { uid?: number; gid?: number } {
  if (!user || !isRoot) return {};
  const [, uid, gid] = /^(\d+)(?::(\d+))?$/.exec(user) ?? [];
  assert.ok(uid, `USER ${user}: give a numeric uid:gid (Kubernetes verifies runAsNonRoot only for a numeric USER)`);
  return { uid: Number(uid), gid: Number(gid ?? uid) };
}

function startImage(
  env: Record<string, string | undefined>,
  as: { uid?: number; gid?: number } = {},
): { child: ChildProcess; output: () => { stdout: string; stderr: string }; exited: Promise<number | null> } {
  const { file, args } = imageCommand();
  const child = spawn(file, args, { cwd: join(image, runtime.workdir), env: imageEnv(env), stdio: ['ignore', 'pipe', 'pipe'], ...as });
  children.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      children.delete(child);
      resolve(code);
    }),
  );
  return { child, output: () => ({ stdout, stderr }), exited };
}

/** Waits until the started image answers its readiness probe at `base`; fails with its output if it exits or takes over 20 s. */
async function untilReady(running: ReturnType<typeof startImage>, base: string, readinessPath = READINESS_PATH): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    assert.equal(running.child.exitCode, null, `the function exited: ${running.output().stderr}${running.output().stdout}`);
    const status = await fetch(`${base}${readinessPath}`).then(
      (response) => response.status,
      () => 0,
    );
    if (status === 200) return;
    assert.ok(Date.now() < deadline, `not ready after 20 s: ${running.output().stdout}${running.output().stderr}`);
    await sleep(20);
  }
}

before(async () => {
  // Cluster start-up and the build run side by side.
  const clusterReady = startTestCluster();
  try {
    const command = buildStage.runs.find((run) => run.includes('build/build.ts'));
    assert.ok(command, 'the build stage runs build/build.ts');
    const [program, ...args] = words(command!);
    assert.equal(program, 'node', `the build command runs node: ${command}`);
    const built = spawnSync(process.execPath, [...args, '--metafile', metafile], { cwd: ROOT, encoding: 'utf8' });
    buildOutput = `${built.stdout}${built.stderr}`;
    assert.equal(built.status, 0, `node ${args.join(' ')} failed:\n${buildOutput}`);
  } finally {
    // Even when the build fails, so after() can stop it.
    cluster = await clusterReady;
  }
  functionKubeconfig = await kubeconfigWithDeclaredRbac(cluster.cp, immortalContainer);
});

after(async () => {
  for (const child of children) child.kill('SIGKILL');
  await cluster?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

test('a rebuild keeps the bundles a running plane starts its instances from in place until the new ones are there', async () => {
  const { buildFunctions } = await import('../../build/index.ts');
  const outdir = mkdtempSync(join(tmpdir(), 'opfn-rebuild-'));
  await buildFunctions({ outdir });
  const entry = join(outdir, 'main.mjs');
  let missing = 0;
  let looked = 0;
  let building = true;
  const watcher = (async () => {
    while (building) {
      looked++;
      if (!existsSync(entry)) missing++;
      await new Promise((resolve) => setImmediate(resolve));
    }
  })();
  // A killed build's leftover beside it is removed by the next one.
  mkdirSync(`${outdir}.building-999999999`);
  try {
    await buildFunctions({ outdir });
  } finally {
    building = false;
    await watcher;
  }
  assert.ok(looked > 10, `looked ${looked} times during the build`);
  assert.equal(missing, 0, `${entry} was missing ${missing} of ${looked} times`);
  assert.equal(existsSync(`${outdir}.building-999999999`), false);
  assert.deepEqual(
    readdirSync(dirname(outdir)).filter((name) => name.startsWith(`${basename(outdir)}.`)),
    [],
    'nothing left beside it',
  );
  rmSync(outdir, { recursive: true, force: true });
});

describe('the Dockerfile', () => {
  test('the build prints each bundle and builds one per registered function', async () => {
    const { functionNames } = await import('../../functions/index.ts');
    for (const name of functionNames) {
      assert.ok(existsSync(join(ROOT, 'dist', `${name}.cjs`)), `dist/${name}.cjs`);
      assert.ok(existsSync(join(ROOT, 'dist', `${name}.cjs.map`)), `dist/${name}.cjs.map (linked source map)`);
      assert.match(buildOutput, new RegExp(`dist/${name}\\.cjs\\s+[\\d.]+ KiB`));
    }
    assert.ok(existsSync(join(ROOT, 'dist', 'main.mjs')));
  });

  test('every COPY source exists after the build, and none is left out of the build context', () => {
    for (const stage of dockerfile) {
      for (const copy of stage.copies) {
        for (const source of copy.sources) {
          if (copy.from) {
            const path = repoPathIn(stageNamed(copy.from), source);
            assert.ok(
              existsSync(path),
              `Dockerfile line ${copy.line}: COPY --from=${copy.from} ${source}: ${path} does not exist after the build`,
            );
          } else {
            assert.ok(existsSync(join(ROOT, source)), `Dockerfile line ${copy.line}: COPY ${source}: not in the repository`);
            assert.ok(
              source === '.' || !ignored(posix.normalize(source)),
              `Dockerfile line ${copy.line}: COPY ${source}: excluded by .dockerignore`,
            );
            // The build stage keeps the repository's layout (repoPathIn relies on it).
            if (stage === buildStage) {
              const dest = posix.resolve(stage.workdir, copy.dest);
              const expected = copy.dest.endsWith('/') || copy.sources.length > 1 ? posix.join(dest, basename(source)) : dest;
              assert.equal(
                expected,
                posix.join(stage.workdir, source),
                `Dockerfile line ${copy.line}: COPY ${source} should land at the same path under ${stage.workdir}`,
              );
            }
          }
        }
      }
    }
  });

  test('the build stage copies every source file the bundles are built from', () => {
    const copied = buildStage.copies
      .filter((copy) => !copy.from)
      .flatMap((copy) => copy.sources)
      .map((source) => posix.normalize(source));
    const covered = (path: string) => copied.some((source) => source === '.' || path === source || path.startsWith(`${source}/`));
    const metafiles = JSON.parse(readFileSync(metafile, 'utf8')) as Record<string, { inputs: Record<string, unknown> }>;
    const sources = new Set(['build/build.ts', 'build/programs/main.ts', 'build/programs/warm-cache.ts', 'build/node-flags.ts']);
    for (const meta of Object.values(metafiles)) {
      // A worktree's node_modules may be a symlink elsewhere (../…/node_modules/…); `<…>` and
      // `namespace:…` inputs are generated by build/build.ts, not files.
      for (const input of Object.keys(meta.inputs))
        if (!input.split('/').includes('node_modules') && !/^(<|[\w-]+:)/.test(input)) sources.add(input);
    }
    assert.ok(sources.size > 5, `the metafile lists the sources (${[...sources].join(', ')})`);
    const missing = [...sources].filter((path) => !covered(path) || ignored(path));
    assert.deepEqual(missing, [], 'sources the Docker build would not have (add a COPY, or allow them in .dockerignore)');
  });

  test("the runtime stage is laid out from its COPY lines alone, and its warm-up RUN writes every function's code cache", async () => {
    for (const copy of runtime.copies) {
      const from = copy.from ? stageNamed(copy.from) : undefined;
      for (const source of copy.sources) {
        const origin = from ? repoPathIn(from, source) : join(ROOT, source);
        const dest = imagePath(copy.dest);
        const target =
          statSync(origin).isDirectory() || !(copy.dest.endsWith('/') || copy.sources.length > 1) ? dest : join(dest, basename(origin));
        mkdirSync(dirname(target), { recursive: true });
        cpSync(origin, target, { recursive: true });
      }
    }
    mkdirSync(join(image, 'home'), { recursive: true });
    // RUN lines of the runtime stage, as the USER in effect (when this test runs as root):
    // mkdir, node, and chown/chmod on paths of the image.
    if (isRoot) chmodSync(scratch, 0o755);
    runtime.runs.forEach((run, index) => {
      const as = runAs(runtime.runUsers[index]);
      for (const part of run.split('&&').map((segment) => words(segment.trim()))) {
        const [program, ...args] = part;
        if (program === 'mkdir')
          for (const path of args.filter((arg) => !arg.startsWith('-'))) mkdirSync(imagePath(path), { recursive: true });
        else if (program === 'node') {
          const result = spawnSync(process.execPath, args, {
            cwd: join(image, runtime.workdir),
            env: imageEnv({}),
            encoding: 'utf8',
            timeout: 60_000,
            ...as,
          });
          assert.equal(result.status, 0, `RUN node ${args.join(' ')} failed:\n${result.stdout}${result.stderr}`);
        } else if (program === 'chown' || program === 'chmod') {
          // Only root may give files away; chmod applies to one's own files.
          if (program === 'chown' && !isRoot) continue;
          const result = spawnSync(
            program,
            args.map((arg) => (arg.startsWith('/') ? imagePath(arg) : arg)),
            { encoding: 'utf8', ...(program === 'chmod' ? as : {}) },
          );
          assert.equal(result.status, 0, `RUN ${part.join(' ')} failed: ${result.stderr}`);
        } else assert.fail(`RUN ${program} in the runtime stage: teach test/integration/bundle.test.ts what it means outside Docker`);
      }
    });
    const { functionNames } = await import('../../functions/index.ts');
    for (const name of functionNames) {
      const cache = imagePath(`dist/${name}.code-cache`);
      assert.ok(existsSync(cache) && statSync(cache).size > 0, `the warm-up wrote ${cache}`);
    }
    // V8 accepts the cache only in a process with the flags it was made with.
    const warmRun = runtime.runs.map((run) => words(run)).find((parts) => parts.some((part) => part.endsWith('warm-cache.mjs')));
    const entry = imageCommand().args;
    assert.deepEqual(
      warmRun?.slice(
        1,
        warmRun.findIndex((part) => part.endsWith('warm-cache.mjs')),
      ),
      IMAGE_NODE_FLAGS,
      'the warm-up RUN uses IMAGE_NODE_FLAGS (build/node-flags.ts)',
    );
    assert.deepEqual(
      entry.slice(
        0,
        entry.findIndex((part) => part.endsWith('main.mjs')),
      ),
      IMAGE_NODE_FLAGS,
      'the ENTRYPOINT uses IMAGE_NODE_FLAGS (build/node-flags.ts)',
    );
    assert.ok(!existsSync(imagePath('node_modules')), 'no node_modules in the runtime stage');
    assert.ok(runtime.user && runtime.user !== 'root' && runtime.user !== '0', 'the runtime stage runs as a non-root USER');
    assert.equal(runtime.env.NODE_ENV, 'production');
  });
});

/** Every file of the image's file system with its size, for the report and the read-only check. */
function imageFiles(): { path: string; bytes: number; mtimeMs: number }[] {
  return readdirSync(image, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => {
      const path = join(entry.parentPath, entry.name);
      const stat = statSync(path);
      return { path: posix.join('/', path.slice(image.length + 1)), bytes: stat.size, mtimeMs: stat.mtimeMs };
    })
    .sort((a, b) => a.path.localeCompare(b.path));
}

describe('the image and the generated Knative Service agree', () => {
  const container = (knativeService(immortalContainer, DEFAULT_OPTIONS).spec as any).template.spec.containers[0];

  test("the image's contents (files and sizes)", () => {
    const files = imageFiles();
    const total = files.reduce((sum, file) => sum + file.bytes, 0);
    console.log(
      [
        `# image contents on top of ${runtime.base} (${files.length} files, ${(total / 1024).toFixed(1)} KiB):`,
        ...files.map((file) => `#   ${(file.bytes / 1024).toFixed(1).padStart(8)} KiB  ${file.path}`),
      ].join('\n'),
    );
    assert.ok(
      !files.some((file) => file.path.includes('/node_modules/') || file.path.endsWith('.ts')),
      'no node_modules and no TypeScript sources in the image',
    );
    assert.ok(files.some((file) => file.path === posix.join(runtime.workdir, 'dist', 'main.mjs')));
  });

  test('port, user and environment: the Service runs the image as its Dockerfile says', () => {
    assert.deepEqual(runtime.expose, [container.ports[0].containerPort], "EXPOSE = the Service's containerPort");
    assert.equal(Number(runtime.env.PORT), container.ports[0].containerPort, 'PORT = the containerPort (Knative sets PORT to it)');
    const [uid, gid] = (runtime.user ?? '').split(':').map(Number);
    assert.equal(uid, container.securityContext.runAsUser, "USER = the Service's runAsUser");
    assert.equal(gid, container.securityContext.runAsGroup, "USER group = the Service's runAsGroup");
    assert.ok(uid > 0 && container.securityContext.runAsNonRoot);
    assert.deepEqual(
      container.env.map((e: { name: string }) => e.name),
      ['FUNCTION', DELIVERY_BUDGET_ENV],
      'the entry needs only FUNCTION (and the PORT Knative sets); the delivery budget goes with the timeout',
    );
    const budget = Number(container.env.find((e: { name: string }) => e.name === DELIVERY_BUDGET_ENV).value);
    const { timeoutSeconds } = (knativeService(immortalContainer, DEFAULT_OPTIONS).spec as any).template.spec;
    assert.ok(
      budget > 0 && budget <= timeoutSeconds / 2,
      `the delivery budget ${budget} s leaves the keys already started at least as long before timeoutSeconds ${timeoutSeconds}`,
    );
    // Written before USER (as root): the runtime USER must still be able to read it.
    const cache = statSync(imagePath(`dist/${immortalContainer.name}.code-cache`));
    assert.ok(
      (cache.mode & 0o004) !== 0 || (cache.uid === (isRoot ? uid : process.getuid!()) && (cache.mode & 0o400) !== 0),
      `the code cache is readable by USER ${runtime.user} (mode ${(cache.mode & 0o777).toString(8)})`,
    );
  });

  test('read-only root file system, as the Service runs it: starts, answers its probes, reads the code cache, writes nothing', async () => {
    const as = runAs(runtime.user);
    const kubeconfig = unreachableKubeconfig('unreachable');
    const before = imageFiles();
    assert.equal(spawnSync('chmod', ['-R', 'a-w', image]).status, 0);
    try {
      const port = await freePort();
      const running = startImage({ FUNCTION: immortalContainer.name, KUBECONFIG: kubeconfig, PORT: String(port), NODE_DEBUG: 'opfn' }, as);
      const base = `http://127.0.0.1:${port}`;
      await untilReady(running, base, container.readinessProbe.httpGet.path);
      assert.equal((await fetch(`${base}${container.livenessProbe.httpGet.path}`)).status, 200, 'liveness probe path');
      running.child.kill('SIGTERM');
      assert.equal(await running.exited, 0, 'drains and exits 0 on SIGTERM');
      const debug = running.output().stderr;
      assert.match(
        debug,
        new RegExp(`code cache \\S*/${immortalContainer.name}\\.code-cache accepted`),
        `the bundle was compiled from the cache:\n${debug}`,
      );
      assert.doesNotMatch(debug, /rejected|cannot write/, debug);
    } finally {
      spawnSync('chmod', ['-R', 'u+w', image]);
    }
    assert.deepEqual(imageFiles(), before, 'nothing in the image was written or changed');
  });
});

describe('the image entry', () => {
  test('FUNCTION=immortal-container: ready, an add event is reconciled (pod created), SIGTERM stops it cleanly', async () => {
    const port = await freePort();
    const running = startImage({ FUNCTION: 'immortal-container', KUBECONFIG: functionKubeconfig, PORT: String(port) });
    const base = `http://127.0.0.1:${port}/`;
    await untilReady(running, `http://127.0.0.1:${port}`);
    // The log line comes through a pipe, the probe's answer through a socket: either may be first.
    const logged = Date.now() + 5000;
    while (!running.output().stdout.includes('"msg":"immortal-container ready"') && Date.now() < logged) await sleep(20);
    assert.match(running.output().stdout, /"msg":"immortal-container ready"/);
    // Idle connections outlive the queue-proxy's (Go's 90 s), so it never reuses one being closed.
    const keepAlive = await new Promise<string | undefined>((resolve, reject) => {
      httpGet(`${base}health/readiness`, { agent: new HttpAgent({ keepAlive: true }) }, (response) => {
        response.resume();
        resolve(response.headers['keep-alive'] as string | undefined);
      }).on('error', reject);
    });
    assert.equal(keepAlive, `timeout=${KEEP_ALIVE_TIMEOUT_MS / 1000}`);

    const ic = await cluster.kube.create<ImmortalContainer>(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name: 'from-the-image', namespace: 'default' },
      spec: { image: 'nginx:1.27' },
    });
    const answer = await deliver(
      base,
      apiServerSourceEvent({ server: cluster.cp.server, kind: ImmortalContainerKind, object: ic, action: 'add', mode: 'Reference' }),
    );
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const pod = await cluster.kube.get<PodObject>(Pod, { namespace: 'default', name: 'from-the-image-immortalpod' });
    assert.equal(pod?.spec?.containers?.[0].image, 'nginx:1.27');
    const status = (await cluster.kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'default', name: 'from-the-image' }))
      ?.status;
    assert.equal(status?.startTimes, 1);

    // The body reaches the function as bytes whatever charset the request names: express.raw
    // never decodes, which is why the bundle can leave iconv-lite out (build/bundle-narrowing.ts).
    for (const charset of ['utf-8', 'koi8-r', 'no-such-charset']) {
      const message = HTTP.binary(
        apiServerSourceEvent({ server: cluster.cp.server, kind: ImmortalContainerKind, object: ic, action: 'update', mode: 'Reference' }),
      );
      const response = await fetch(base, {
        method: 'POST',
        headers: { ...(message.headers as Record<string, string>), 'content-type': `application/json; charset=${charset}` },
        body: message.body as string,
      });
      assert.equal(response.status, 200, `charset=${charset}: ${await response.text()}`);
    }

    running.child.kill('SIGTERM');
    assert.equal(await running.exited, 0, 'drains and exits 0 on SIGTERM');
  });

  for (const [what, value, mentions] of [
    ['unset', undefined, /FUNCTION/],
    ['unknown', 'no-such-function', /no-such-function/],
  ] as const) {
    test(`FUNCTION ${what}: exits non-zero with one line saying what to set`, async () => {
      const running = startImage({ FUNCTION: value, KUBECONFIG: functionKubeconfig, PORT: String(await freePort()) });
      const code = await running.exited;
      const { stdout, stderr } = running.output();
      assert.notEqual(code, 0);
      assert.equal(stdout, '');
      const lines = stderr.trim().split('\n');
      assert.equal(lines.length, 1, `one line, got:\n${stderr}`);
      assert.match(lines[0], mentions);
      assert.match(lines[0], /immortal-container/, 'names the functions the image has');
    });
  }

  test(`${DELIVERY_BUDGET_ENV} reaches the runtime: at 0 a delivery starts its first key and hands the others back in its reply`, async () => {
    const port = await freePort();
    const running = startImage({
      FUNCTION: immortalContainer.name,
      KUBECONFIG: functionKubeconfig,
      PORT: String(port),
      [DELIVERY_BUDGET_ENV]: '0',
    });
    const base = `http://127.0.0.1:${port}`;
    await untilReady(running, base);
    // Keys of objects that do not exist: each reconcile is one read and nothing to do.
    const keys = ['budget-a', 'budget-b', 'budget-c'].map((name) => `immortalcontainer.flugel.it/ImmortalContainer:default/${name}`);
    const event = reconcileReply(
      immortalContainer.name,
      keys.map((key) => ({ key })),
    );
    const response = await fetch(`${base}/`, { method: 'POST', headers: event.headers, body: event.body });
    assert.equal(response.status, 200);
    assert.deepEqual(JSON.parse(response.headers.get(OUTCOME_HEADER)!), { reconciled: 1, failed: 0, requeued: 0, deferred: 2 });
    assert.deepEqual((JSON.parse(await response.text()) as { keys: string[] }).keys, keys.slice(1), 'the keys not started, due at once');
    running.child.kill('SIGTERM');
    assert.equal(await running.exited, 0);
  });

  test(`${DELIVERY_BUDGET_ENV} that is not a number of seconds: exits 1 saying so`, { timeout: 20_000 }, async () => {
    const running = startImage({
      FUNCTION: immortalContainer.name,
      KUBECONFIG: functionKubeconfig,
      PORT: String(await freePort()),
      [DELIVERY_BUDGET_ENV]: '30s',
    });
    assert.equal(await running.exited, 1);
    const { stdout } = running.output();
    const fatal = stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { level: number; msg: string })
      .find((line) => line.level === 60);
    assert.match(fatal?.msg ?? stdout, /OPFN_DELIVERY_BUDGET_SECONDS "30s" is not a number of seconds/);
  });

  test('a code cache made with other node flags is refused in one line on stderr; the function still starts, and writes nothing on a read-only image', async () => {
    const { args } = imageCommand();
    const entry = args.slice(args.findIndex((arg) => arg.endsWith('main.mjs')));
    const kubeconfig = unreachableKubeconfig('other-flags');
    const before = imageFiles();
    assert.equal(spawnSync('chmod', ['-R', 'a-w', image]).status, 0);
    try {
      const port = await freePort();
      // The entry with a V8 flag the image does not use: V8 refuses the cache warm-cache.mjs made without it.
      const child = spawn(process.execPath, ['--no-opt', ...entry], {
        cwd: join(image, runtime.workdir),
        env: imageEnv({ FUNCTION: immortalContainer.name, KUBECONFIG: kubeconfig, PORT: String(port) }),
        stdio: ['ignore', 'ignore', 'pipe'],
        ...runAs(runtime.user),
      });
      children.add(child);
      let stderr = '';
      child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      const deadline = Date.now() + 20_000;
      while (
        (await fetch(`http://127.0.0.1:${port}/health/readiness`).then(
          (r) => r.status,
          () => 0,
        )) !== 200
      ) {
        assert.equal(child.exitCode, null, `the function exited: ${stderr}`);
        assert.ok(Date.now() < deadline, `not ready after 20 s: ${stderr}`);
        await sleep(20);
      }
      child.kill('SIGTERM');
      assert.equal(await exited, 0, 'drains and exits 0 on SIGTERM');
      const lines = stderr.trim().split('\n');
      assert.equal(lines.length, 1, `one line, got:\n${stderr}`);
      assert.match(lines[0], new RegExp(`code cache \\S*${immortalContainer.name}\\.code-cache rejected`));
    } finally {
      spawnSync('chmod', ['-R', 'u+w', image]);
    }
    assert.deepEqual(imageFiles(), before, 'the cache the image was built with is left as it was');
  });
});
