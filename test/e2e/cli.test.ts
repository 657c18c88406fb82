// The opfn command line as a person uses it: help, a local cluster up/env/down, and one
// function served and invoked by hand.
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { freePort, processArguments } from '../../processes/index.ts';
import { readDeadLetterFile } from '../../eventing/broker/index.ts';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { ImmortalContainerKind } from '../../functions/immortal-container/desired.ts';
import { Pod } from '../../functions/runtime/index.ts';
import { eventually, kubeFor } from '../support/cluster.ts';
import { exitedPid } from '../support/processes.ts';
import { tempDir } from '../support/temp.ts';

const OPFN = join(dirname(fileURLToPath(import.meta.url)), '../../bin/opfn.ts');
const stateDir = tempDir('opfn-cli-');
const env = { ...process.env, OPFN_STATE_DIR: stateDir, LOG_LEVEL: 'warn' };
const opfn = (...args: string[]) => promisify(execFile)(process.execPath, [OPFN, ...args], { env });

// `npm start` without a cluster leaves its control plane running for the next start: a test that
// fails before its own `cluster down` must not leave it behind.
after(() => opfn('cluster', 'down').catch(() => {}));

/** Starts a long-running opfn command and resolves with its first stdout line matching `pattern`. */
/**
 * Starts opfn and resolves once its output matches `pattern`. `ownGroup`: as a shell starts a job,
 * leading a process group of its own, so that a test can send a terminal's Ctrl-C (SIGINT to the
 * whole foreground group, every child included) with process.kill(-pid).
 */
function startOpfn(
  args: string[],
  pattern: RegExp,
  extraEnv: Record<string, string> = {},
  ownGroup = false,
): Promise<{ child: ChildProcess; match: RegExpMatchArray }> {
  const child = spawn(process.execPath, [OPFN, ...args], {
    env: { ...env, ...extraEnv },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: ownGroup,
  });
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

/** A kubeconfig file in the state folder for one cluster (`cluster`'s fields) and a token user; JSON is YAML too. */
function writeKubeconfig(name: string, cluster: Record<string, string | boolean>): string {
  const path = join(stateDir, name);
  writeFileSync(
    path,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'c', cluster }],
      users: [{ name: 'u', user: { token: 't' } }],
      contexts: [{ name: 'c', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'c',
    }),
  );
  return path;
}

const exited = (child: ChildProcess) =>
  new Promise<number | null>((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once('exit', resolve)));

test('opfn --help lists every command', async () => {
  const { stdout } = await opfn('--help');
  for (const command of ['dev', 'cluster', 'invoke', 'serve']) assert.match(stdout, new RegExp(`^\\s+${command}\\b`, 'm'), command);
  const cluster = await opfn('cluster', '--help');
  for (const command of ['up', 'down', 'env']) assert.match(cluster.stdout, new RegExp(`^\\s+${command}\\b`, 'm'), `cluster ${command}`);
});

test('opfn manifests --retry-after-max puts the cap on every delivery and says what Knative needs for it; a bad duration is one line', async () => {
  const { stdout } = await opfn('manifests', '--retry-after-max', 'PT2M');
  const deliveries = [...stdout.matchAll(/^ +retryAfterMax: (.*)$/gm)].map((match) => match[1]);
  const triggers = [...stdout.matchAll(/^kind: Trigger$/gm)].length;
  assert.ok(triggers > 0);
  assert.deepEqual(deliveries, Array(triggers + 1).fill('PT2M'), 'the Broker and every Trigger');
  assert.match(stdout, /^# note: Knative accepts delivery.retryAfterMax only with its delivery-retryafter feature enabled/m);
  await assert.rejects(opfn('manifests', '--retry-after-max', 'two minutes'), (error: Error & { stderr: string }) => {
    assert.match(error.stderr, /^opfn manifests: --retry-after-max: /);
    assert.equal(error.stderr.trim().split('\n').length, 1);
    return true;
  });
});

test('cluster up → env → serve + invoke → down', async () => {
  const { child: cluster, match } = await startOpfn(['cluster', 'up'], /^export KUBECONFIG=(\S+)$/m);
  const kubeconfig = match[1];
  let later = '';
  cluster.stderr!.on('data', (chunk: Buffer) => (later += chunk.toString()));
  try {
    const env = (await opfn('cluster', 'env')).stdout.trim().split('\n');
    assert.equal(env[0], `export KUBECONFIG=${kubeconfig}`);
    const binDir = env[1]?.match(/^export PATH=(\S+):\$PATH$/)?.[1];
    assert.ok(binDir, `the second line puts the cluster's kubectl on PATH: ${env[1]}`);
    const kubectl = JSON.parse(
      (await promisify(execFile)(join(binDir, 'kubectl'), ['version', '-o', 'json', '--kubeconfig', kubeconfig])).stdout,
    );
    assert.equal(kubectl.clientVersion.gitVersion, kubectl.serverVersion.gitVersion, "that kubectl is of the cluster's release");
    const kube = kubeFor(kubeconfig);
    await kube.create(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name: 'by-hand', namespace: 'default' },
      spec: { image: 'nginx' },
    });

    const port = await freePort();
    const { child: fn } = await startOpfn(['serve', 'immortal-container'], /immortal-container ready/, {
      KUBECONFIG: kubeconfig,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
    });
    try {
      const invoked = await opfn('invoke', 'immortal-container', '--name', 'by-hand', '--url', `http://127.0.0.1:${port}/`);
      // The answer names the key, or (runtime of issue 7: answers stay small) counts it.
      assert.match(invoked.stdout, /^200 .*(default\/by-hand|"reconciled":1)/);
      assert.ok(await kube.get(Pod, { namespace: 'default', name: 'by-hand-immortalpod' }), 'the invoked reconcile created the pod');
      const resync = await opfn('invoke', 'immortal-container', '--resync', '--url', `http://127.0.0.1:${port}/`);
      assert.match(resync.stdout, /^200 /);
      await assert.rejects(opfn('invoke', 'immortal-container', '--url', `http://127.0.0.1:${port}/`), /--name is required/);
    } finally {
      fn.kill('SIGTERM');
      assert.equal(await exited(fn), 0, 'the function drains and exits 0 on SIGTERM');
    }

    assert.match((await opfn('cluster', 'down')).stderr, /local cluster stopped/);
    assert.equal(existsSync(dirname(kubeconfig)), false, 'down returns once the control plane has stopped (its folder is removed)');
    assert.equal(await exited(cluster), 0);
    assert.match(later, /SIGTERM: stopping \(kube-controller-manager and kube-apiserver first, then etcd; Ctrl-C again to force\)/);
    await assert.rejects(opfn('cluster', 'env'), /no local cluster is running/);
  } finally {
    cluster.kill('SIGTERM');
    await exited(cluster);
  }
});

test('a `cluster up` killed with SIGKILL: `cluster down` stops the control plane it left running and removes its folder', async () => {
  // Its own folder for control planes: another test file starting one would reclaim this one first.
  const isolated = { OPFN_CONTROL_PLANE_DIR: tempDir('opfn-cp-base-') };
  const { child, match } = await startOpfn(['cluster', 'up'], /^export KUBECONFIG=(\S+)$/m, isolated);
  const dir = dirname(match[1]);
  const { children } = JSON.parse(readFileSync(join(dir, 'owner.json'), 'utf8')) as { children: number[] };
  const alive = () => children.filter((pid) => processArguments(pid)?.some((arg) => arg.includes(dir)));
  child.kill('SIGKILL');
  await exited(child);
  assert.equal(alive().length, 3, 'etcd, kube-apiserver and kube-controller-manager run on');
  const down = await promisify(execFile)(process.execPath, [OPFN, 'cluster', 'down'], { env: { ...env, ...isolated } });
  assert.match(
    down.stderr,
    /stopped the control plane in .* that process \d+ left running when it was killed \(3 of its processes killed, folder removed\)/,
  );
  assert.match(down.stderr, /was already gone; state cleared/);
  assert.deepEqual(alive(), []);
  assert.equal(existsSync(dir), false);
});

test('a second `cluster up` while one runs refuses and points at the running one; a closed terminal (SIGHUP) stops the first cleanly', async () => {
  const { child: cluster, match } = await startOpfn(['cluster', 'up'], /^export KUBECONFIG=(\S+)$/m);
  let later = '';
  cluster.stderr!.on('data', (chunk: Buffer) => (later += chunk.toString()));
  try {
    await assert.rejects(opfn('cluster', 'up'), (error: Error & { stderr?: string }) => {
      assert.match(error.stderr ?? '', new RegExp(`already running .*${match[1].replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
      return true;
    });
  } finally {
    cluster.kill('SIGHUP');
    assert.equal(await exited(cluster), 0);
  }
  assert.match(later, /SIGHUP: stopping \(kube-controller-manager and kube-apiserver first, then etcd/);
  assert.equal(existsSync(dirname(match[1])), false, 'its control plane was stopped and removed');
  await assert.rejects(opfn('cluster', 'env'), /no local cluster is running/);
});

test('npm start (opfn dev): a local cluster kept across restarts, the operator, a configured extra Trigger; Ctrl-C stops the plane, `cluster down` the rest', async () => {
  // An extra subscriber, routed by a Knative Trigger manifest given on the command line.
  const received: Record<string, string>[] = [];
  const audit = createHttpServer((req, res) => {
    received.push(
      Object.fromEntries(
        Object.entries(req.headers)
          .filter(([name]) => name.startsWith('ce-'))
          .map(([name, value]) => [name, String(value)]),
      ),
    );
    req.resume();
    res.writeHead(202).end();
  }).listen(0, '127.0.0.1');
  await new Promise((resolve) => audit.once('listening', resolve));
  const triggers = join(stateDir, 'triggers.yaml');
  writeFileSync(
    triggers,
    `apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: audit-adds}
spec:
  broker: default
  filter: {attributes: {type: dev.knative.apiserver.resource.add, kind: ImmortalContainer}}
  subscriber: {uri: "http://127.0.0.1:${(audit.address() as { port: number }).port}/"}
`,
  );
  // Another plane runs from the same folder (this test process stands in for it): its record, which
  // `opfn dead-letters replay` reads, is neither overwritten nor removed when this one stops.
  const planeRecord = join(stateDir, 'plane.json');
  writeFileSync(planeRecord, JSON.stringify({ pid: process.pid, brokerUrl: 'http://127.0.0.1:9/' }));
  const { child: dev, match } = await startOpfn(
    ['dev', '--idle', '5', '--triggers', triggers, '--log-format', 'pretty'],
    /export KUBECONFIG=(\S+)[\s\S]*Running immortal-container/,
    { KUBECONFIG: '', LOG_LEVEL: 'info' },
  );
  const kubeconfig = match[1];
  assert.match(match[0], new RegExp(`Another plane \\(pid ${process.pid}\\) runs from .*--broker http://127\\.0\\.0\\.1:\\d+`));
  let later = '';
  for (const stream of [dev.stdout!, dev.stderr!]) stream.on('data', (chunk: Buffer) => (later += chunk.toString()));
  try {
    const kube = kubeFor(kubeconfig);
    await kube.create(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name: 'from-dev', namespace: 'default' },
      spec: { image: 'nginx' },
    });
    await eventually(
      () => kube.get(Pod, { namespace: 'default', name: 'from-dev-immortalpod' }),
      30_000,
      'pod made by the operator under opfn dev',
    );
    await eventually(
      async () => received.some((headers) => headers['ce-name'] === 'from-dev'),
      10_000,
      'the extra Trigger delivered the add event',
    );
    assert.ok(
      received.every(
        (headers) => headers['ce-type'] === 'dev.knative.apiserver.resource.add' && headers['ce-kind'] === 'ImmortalContainer',
      ),
      'only what the filter selects (the primary kind comes in Resource mode)',
    );
    // --log-format reaches the function processes too (their environment is the plane's and the bundle's).
    await eventually(
      async () => /\[immortal-container#\d+\] \d\d:\d\d:\d\d\.\d{3} INFO +immortal-container +immortal-container ready/.test(later),
      10_000,
      `a function line in the pretty format:\n${later.slice(-2000)}`,
    );
  } finally {
    dev.kill('SIGINT');
    assert.equal(await exited(dev), 0, 'Ctrl-C stops cleanly');
    audit.close();
  }
  // The control plane it started in the background keeps running, with its objects, for the next start.
  assert.ok(existsSync(kubeconfig), 'the local control plane outlives the plane');
  assert.match(later, /The local control plane keeps running with its objects/);
  assert.match((await opfn('cluster', 'down')).stderr, /local cluster stopped/);
  assert.equal(existsSync(kubeconfig), false, 'the local control plane was stopped and removed');
  const leftovers = await promisify(execFile)('pgrep', ['-f', dirname(kubeconfig)]).then(
    (r) => r.stdout.trim(),
    () => '',
  );
  assert.equal(leftovers, '', 'no process of the plane or the control plane is left');
  assert.equal(JSON.parse(readFileSync(planeRecord, 'utf8')).pid, process.pid, "the other plane's record is left as it was");
  rmSync(planeRecord);
});

test('opfn dev with a configured cluster that does not answer fails with the reason and the --local hint', async () => {
  const kubeconfig = writeKubeconfig('unreachable-kubeconfig', { server: 'https://127.0.0.1:1', 'insecure-skip-tls-verify': true });
  await assert.rejects(
    promisify(execFile)(process.execPath, [OPFN, 'dev'], { env: { ...env, KUBECONFIG: kubeconfig } }),
    (error: Error & { stderr?: string; code?: number }) => {
      assert.equal(error.code, 1);
      const lines = (error.stderr ?? '').trim().split('\n');
      assert.equal(lines.length, 1, `one line: ${error.stderr}`);
      assert.match(lines[0]!, /configured cluster .*unreachable-kubeconfig.* does not answer: .*https:\/\/127\.0\.0\.1:1.*--local/);
      return true;
    },
  );
});

test('opfn dev with a kubeconfig naming a CA file that is missing says which file, not that the cluster does not answer', async () => {
  const ca = join(stateDir, 'no-such-ca.crt');
  const kubeconfig = writeKubeconfig('missing-ca-kubeconfig', { server: 'https://127.0.0.1:1', 'certificate-authority': ca });
  await assert.rejects(
    promisify(execFile)(process.execPath, [OPFN, 'dev'], { env: { ...env, KUBECONFIG: kubeconfig } }),
    (error: Error & { stderr?: string; code?: number }) => {
      assert.equal(error.code, 1);
      const line = (error.stderr ?? '').trim();
      assert.match(
        line,
        new RegExp(
          `configured cluster .*missing-ca-kubeconfig.* names a file that cannot be read: ${ca.replaceAll('.', '\\.')} \\(ENOENT\\)\\. Fix the kubeconfig, or run with --local`,
        ),
      );
      assert.doesNotMatch(line, /does not answer/);
      return true;
    },
  );
});

test('opfn dev with a KUBECONFIG naming no file that exists fails with the path and the --local hint, and starts no control plane', async () => {
  const missing = join(stateDir, 'no-such-kubeconfig');
  await assert.rejects(
    promisify(execFile)(process.execPath, [OPFN, 'dev'], { env: { ...env, KUBECONFIG: missing } }),
    (error: Error & { stderr?: string; stdout?: string; code?: number }) => {
      assert.equal(error.code, 1);
      assert.match(error.stderr ?? '', new RegExp(`KUBECONFIG names no file that exists \\(${missing.replaceAll('.', '\\.')}\\).*--local`));
      assert.doesNotMatch(`${error.stdout}${error.stderr}`, /control plane at|Starting a local control plane/i);
      return true;
    },
  );
});

test('opfn dev refuses a mistyped function before it touches any cluster', async () => {
  // The configured cluster does not answer: the function's name is checked first.
  const kubeconfig = writeKubeconfig('unreachable-for-typo-kubeconfig', { server: 'https://127.0.0.1:1' });
  await assert.rejects(
    promisify(execFile)(process.execPath, [OPFN, 'dev', '--only', 'immortal-containr'], { env: { ...env, KUBECONFIG: kubeconfig } }),
    (error: Error & { stderr?: string; code?: number }) => {
      assert.equal(error.code, 1);
      assert.match(error.stderr ?? '', /unknown function "immortal-containr"; known: .*immortal-container/);
      assert.doesNotMatch(error.stderr ?? '', /does not answer/);
      return true;
    },
  );
  // --functions once took names: it now takes a folder or module, and says where names go.
  await assert.rejects(
    promisify(execFile)(process.execPath, [OPFN, 'dev', '--functions', 'immortal-container'], { env: { ...env, KUBECONFIG: kubeconfig } }),
    (error: Error & { stderr?: string; code?: number }) => {
      assert.equal(error.code, 1);
      assert.match(error.stderr ?? '', /--functions takes a folder or a module of functions.*use --only immortal-container/);
      return true;
    },
  );
  // A wait no Node timer can hold (it would fire at once: scale to zero after 1 ms) is refused too.
  await assert.rejects(
    opfn('dev', '--idle', '2200000'),
    /--idle <seconds>' argument '2200000' is invalid\. must be a number of seconds from 0 to 2147483/,
  );
});

test('opfn invoke names the URL and the cause when nothing answers', async () => {
  const port = await freePort();
  await assert.rejects(
    opfn('invoke', 'immortal-container', '--name', 'x', '--url', `http://127.0.0.1:${port}/`),
    (error: Error & { stderr?: string }) => {
      assert.match(error.stderr ?? '', new RegExp(`nothing answers at http://127\\.0\\.0\\.1:${port}/ \\(ECONNREFUSED\\)`));
      return true;
    },
  );
});

test('opfn invoke gives up on a function that never answers, after --timeout', async () => {
  const silent = createHttpServer(() => {}).listen(0, '127.0.0.1');
  await new Promise((resolve) => silent.once('listening', resolve));
  const url = `http://127.0.0.1:${(silent.address() as { port: number }).port}/`;
  try {
    await assert.rejects(
      opfn('invoke', 'immortal-container', '--name', 'x', '--url', url, '--timeout', '1'),
      (error: Error & { stderr?: string }) => {
        assert.match(error.stderr ?? '', new RegExp(`no answer from ${url.replaceAll('.', '\\.')} within 1 s \\(--timeout\\)`));
        return true;
      },
    );
  } finally {
    silent.closeAllConnections();
    silent.close();
  }
});

test('opfn dead-letters list, replay (through a broker ingress) and clear', async () => {
  const { Broker } = await import('../../eventing/broker/index.ts');
  const { pino } = await import('pino');
  const received: string[] = [];
  const subscriber = createHttpServer((req, res) => {
    received.push(String(req.headers['ce-id']));
    req.resume();
    res.writeHead(202).end();
  }).listen(0, '127.0.0.1');
  await new Promise((resolve) => subscriber.once('listening', resolve));
  const dir = tempDir('opfn-dl-');
  const file = join(dir, 'dead-letters.jsonl');
  const letter = (id: string, answer = 'overloaded') =>
    JSON.stringify({
      specversion: '1.0',
      id,
      source: '/s',
      type: 'dev.knative.apiserver.resource.update',
      subject: `/apis/v1/namespaces/default/configmaps/${id}`,
      datacontenttype: 'application/json',
      data: { a: 1 },
      knativeerrordest: 'http://x/',
      knativeerrorcode: 503,
      knativeerrordata: Buffer.from(answer).toString('base64'),
      knativebrokerttl: 254,
    });
  // A function's answer is JSON: the list shows its error.
  writeFileSync(
    file,
    `${letter('dl-1')}\n${letter('dl-2', '{"error":"GET /api/v1/namespaces/default/configmaps/dl-2: etcdserver: request timed out"}')}\n`,
    { mode: 0o600 },
  );
  const broker = new Broker({
    deadLetterFile: join(dir, 'broker-dl.jsonl'),
    log: pino({ level: 'silent' }),
    triggers: [{ name: 'all', subscriber: `http://127.0.0.1:${(subscriber.address() as { port: number }).port}/` }],
  });
  const brokerUrl = await broker.listen();
  try {
    const listed = await opfn('dead-letters', 'list', '--file', file);
    assert.match(
      listed.stdout,
      /^dl-1 {2}dev\.knative\.apiserver\.resource\.update {2}\/apis\/v1\/namespaces\/default\/configmaps\/dl-1 {2}503 {2}overloaded$/m,
    );
    assert.match(
      listed.stdout,
      /^dl-2 {2}.* {2}503 {2}GET \/api\/v1\/namespaces\/default\/configmaps\/dl-2: etcdserver: request timed out$/m,
    );
    assert.match(listed.stderr, /2 dead letter\(s\)/);
    const replayed = await opfn('dead-letters', 'replay', '--file', file, '--broker', brokerUrl);
    assert.match(replayed.stderr, /2 dead letter\(s\) replayed/);
    await broker.idle();
    assert.deepEqual(received.sort(), ['dl-1', 'dl-2']);
    assert.equal(existsSync(file), false, 'replayed letters leave the file');
    writeFileSync(file, `${letter('dl-3')}\n`);
    assert.match((await opfn('dead-letters', 'clear', '--file', file)).stderr, /1 dead letter\(s\) removed/);
    assert.equal(existsSync(file), false);
    await assert.rejects(opfn('dead-letters', 'replay', '--file', file), /no running plane found/);
    // A plane killed without cleaning up left its record: its broker's port may be anyone's now.
    const record = join(stateDir, 'plane.json');
    writeFileSync(record, JSON.stringify({ pid: await exitedPid(), brokerUrl }));
    try {
      await assert.rejects(
        opfn('dead-letters', 'replay', '--file', file),
        /no running plane found in .* \(.*plane\.json names process \d+, which has ended\)/,
      );
    } finally {
      rmSync(record);
    }
  } finally {
    await broker.close();
    subscriber.close();
  }
});

test('Ctrl-C during a burst under opfn dev: intake stops, deliveries finish, nothing is dead-lettered or called a crash', async () => {
  // Resync pings every half second: one refused while the plane stops must not become an unhandled rejection.
  const { child: dev, match } = await startOpfn(
    ['dev', '--local', '--idle', '30', '--resync', '0.5'],
    /export KUBECONFIG=(\S+)[\s\S]*Running immortal-container/,
    { LOG_LEVEL: 'info' },
    true,
  );
  let output = '';
  dev.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  dev.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const kubeconfig = match[1];
  const kube = kubeFor(kubeconfig);
  const names = Array.from({ length: 60 }, (_, i) => `burst-${i}`);
  let created = 0;
  const creating = Promise.all(
    Array.from({ length: 6 }, async (_, w) => {
      for (let i = w; i < names.length; i += 6) {
        await kube
          .create(ImmortalContainerKind, {
            apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
            kind: 'ImmortalContainer',
            metadata: { name: names[i]!, namespace: 'default' },
            spec: { image: 'nginx' },
          })
          .catch(() => undefined);
        created++;
      }
    }),
  );
  await eventually(
    async () => created >= 30 && (await kube.get(Pod, { namespace: 'default', name: 'burst-0-immortalpod' })),
    60_000,
    'the burst under way',
  );
  // Ctrl-C in a terminal: SIGINT to opfn and every process of its group at once. The local
  // control plane must not die with it before the deliveries in flight are done.
  process.kill(-dev.pid!, 'SIGINT');
  const code = await exited(dev);
  await creating;
  assert.equal(code, 0, `Ctrl-C stops cleanly:\n${output.slice(-3000)}`);
  assert.equal(existsSync(dirname(kubeconfig)), false, `the local control plane's folder is removed: ${dirname(kubeconfig)}`);
  assert.doesNotMatch(output, /crashed/, 'a function that exits on shutdown is not a crash');
  assert.doesNotMatch(output, /unhandled|Unhandled/);
  const deadLetters = join(stateDir, 'dead-letters.jsonl');
  const letters = await readDeadLetterFile(deadLetters);
  assert.deepEqual(letters, [], `nothing dead-lettered by the shutdown:\n${JSON.stringify(letters).slice(0, 2000)}`);
  assert.match(
    output,
    /immortal-container: \d+ requests \(\d+ direct\), up to \d+ instance/,
    'the plane reports what the functions served',
  );
});

test('a second Ctrl-C forces the exit at once and leaves no process behind', async () => {
  // A subscriber that never answers keeps a delivery in flight, so the first Ctrl-C waits for it.
  const hanging = createHttpServer(() => undefined).listen(0, '127.0.0.1');
  await new Promise((resolve) => hanging.once('listening', resolve));
  const triggers = join(stateDir, 'hanging-trigger.yaml');
  writeFileSync(
    triggers,
    `apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: hangs}
spec:
  broker: default
  filter: {attributes: {type: dev.knative.apiserver.resource.add, kind: ImmortalContainer}}
  subscriber: {uri: "http://127.0.0.1:${(hanging.address() as { port: number }).port}/"}
`,
  );
  const { child: dev, match } = await startOpfn(
    ['dev', '--local', '--triggers', triggers],
    /export KUBECONFIG=(\S+)[\s\S]*Running immortal-container/,
  );
  let output = '';
  dev.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const kubeconfig = match[1];
  try {
    // A function instance is running too (its process must not outlive the forced exit).
    await kubeFor(kubeconfig).create(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name: 'forced', namespace: 'default' },
      spec: { image: 'nginx' },
    });
    await eventually(() => kubeFor(kubeconfig).get(Pod, { namespace: 'default', name: 'forced-immortalpod' }), 30_000, 'the function ran');
    dev.kill('SIGINT');
    await eventually(async () => /stopping/.test(output), 10_000, 'the first Ctrl-C is acknowledged');
    dev.kill('SIGINT'); // within a second: the same Ctrl-C forwarded by npm, ignored
    await sleep(1200);
    assert.equal(dev.exitCode, null, 'a signal right after the first is the same Ctrl-C (npm forwards it), not a second one');
    dev.kill('SIGINT');
    assert.equal(await exited(dev), 130, output);
    assert.match(output, /again: exiting now/);
    await eventually(
      async () => {
        const pgrep = (pattern: string) =>
          promisify(execFile)('pgrep', ['-f', pattern]).then(
            (r) => r.stdout.trim(),
            () => '',
          );
        return (await pgrep(dirname(kubeconfig))) === '' && (await pgrep(join(stateDir, 'dist'))) === '';
      },
      15_000,
      'no control-plane or function process left',
    );
    assert.equal(
      existsSync(dirname(kubeconfig)),
      false,
      `the local control plane's folder (its keys, its etcd's data) is removed too: ${dirname(kubeconfig)}`,
    );
  } finally {
    hanging.closeAllConnections();
    hanging.close();
  }
});
