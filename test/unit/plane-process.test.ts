// The plane's own process, killed or paused. Killed outright (SIGKILL, the out-of-memory killer),
// it runs no exit hook: its function processes, each in a process group of its own, learn of it
// from their IPC channel closing and stop themselves instead of serving on, holding their
// credentials and port, forever. Paused past a new instance's start deadline (SIGSTOP, a
// suspended laptop), it asks the instance once more instead of stopping one that is ready.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { tempDir } from '../support/temp.ts';

const ACTIVATOR = fileURLToPath(new URL('../../eventing/activator/index.ts', import.meta.url));
const TINY_FUNCTION = fileURLToPath(new URL('../fixtures/tiny-function.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const FUNCTION_MAIN = fileURLToPath(new URL('../../functions/main.ts', import.meta.url));

/** Running: not gone and not a zombie (a process whose parent died waits for init to reap it). */
const alive = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
};

test('a function process started by a plane that is then SIGKILLed stops itself', async () => {
  const dir = tempDir('opfn-plane-killed-');
  // Never reached: the function starts without asking the API anything.
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'c', cluster: { server: 'http://127.0.0.1:9' } }],
      users: [{ name: 'u', user: { token: 't' } }],
      contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'x',
    }),
  );
  const plane = `
    import { pino } from 'pino';
    import { Activator } from ${JSON.stringify(ACTIVATOR)};
    const activator = new Activator({
      log: pino({ level: 'info' }),
      childOutput: 'log',
      functions: [{ name: 'immortal-container', command: process.execPath, args: [${JSON.stringify(FUNCTION_MAIN)}, 'immortal-container'], env: { KUBECONFIG: ${JSON.stringify(kubeconfig)} }, scaling: { minScale: 1, maxScale: 1, target: 10, containerConcurrency: 0 } }],
    });
    await activator.listen();
    await activator.start();`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', plane], { stdio: ['ignore', 'pipe', 'inherit'], cwd: ROOT });
  let output = '';
  // Whatever happens below, the plane does not outlive the test (it would keep the runner waiting).
  after(() => child.kill('SIGKILL'));
  const functionPid = await new Promise<number>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
      for (const line of output.split('\n')) {
        const record = line.startsWith('{') ? (JSON.parse(line) as { msg?: string; pid?: number }) : undefined;
        if (record?.pid && /ready$/.test(record.msg ?? '')) resolve(record.pid);
      }
    });
    child.once('exit', () => reject(new Error(`the plane ended before its function was ready:\n${output}`)));
    setTimeout(() => reject(new Error(`no function ready within 20 s:\n${output}`)), 20_000).unref();
  });
  assert.ok(alive(functionPid), 'the function runs');
  child.kill('SIGKILL');
  const deadline = Date.now() + 10_000;
  while (alive(functionPid) && Date.now() < deadline) await sleep(100);
  const survived = alive(functionPid);
  if (survived) process.kill(functionPid, 'SIGKILL');
  assert.equal(survived, false, `function process ${functionPid} outlived the plane by 10 s`);
});

test("a plane paused past a new instance's start deadline asks it once more: the instance that became ready meanwhile is kept", async () => {
  const plane = `
    import { pino } from 'pino';
    import { Activator } from ${JSON.stringify(ACTIVATOR)};
    const activator = new Activator({
      log: pino({ level: 'debug' }),
      childOutput: 'log',
      startTimeoutMs: 5000,
      functions: [{ name: 'slow', command: process.execPath, args: [${JSON.stringify(TINY_FUNCTION)}], env: { READY_DELAY_MS: '300' }, scaling: { minScale: 1, maxScale: 1, target: 10, containerConcurrency: 0 } }],
    });
    await activator.listen();
    await activator.start().catch(() => {});`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', plane], { stdio: ['ignore', 'pipe', 'inherit'], cwd: ROOT });
  after(() => child.kill('SIGKILL'));
  let output = '';
  let paused = false;
  const outcome = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
      const spawned = /"port":(\d+)[^\n]*function instance spawned/.exec(output);
      if (!paused && spawned) {
        paused = true;
        const pausedAt = Date.now();
        child.kill('SIGSTOP');
        // Resumed once the instance is ready (asked here, while the plane sleeps) and its deadline has passed.
        void (async () => {
          while (
            !(await fetch(`http://127.0.0.1:${spawned[1]}/health/readiness`).then(
              (r) => r.ok,
              () => false,
            ))
          )
            await sleep(100);
          await sleep(Math.max(0, pausedAt + 5500 - Date.now()));
          child.kill('SIGCONT');
        })();
      }
      const settled = /function instance slow#1 ready|failed to start[^"]*/.exec(output);
      if (settled) resolve(settled[0]);
    });
    child.once('exit', () => reject(new Error(`the plane ended first:\n${output}`)));
    setTimeout(() => reject(new Error(`no outcome within 30 s:\n${output}`)), 30_000).unref();
  });
  assert.ok(paused, 'the plane was paused while its instance started');
  assert.equal(outcome, 'function instance slow#1 ready');
});
