// processes/exit-cleanup.ts, in real Node processes: the clean-up runs however the process ends,
// and a signal the process does not handle itself still ends it as that signal would.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { tempDir } from '../support/temp.ts';

const MODULE = fileURLToPath(new URL('../../processes/exit-cleanup.ts', import.meta.url));

/**
 * Runs `body` in a fresh Node process after it registered two clean-up tasks, which append their
 * names to `<dir>/log` (the first registered is "first"); `ready` is printed once they are.
 */
async function run(body: string, signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null; log: string }> {
  const dir = tempDir('opfn-exit-cleanup-');
  const log = join(dir, 'log');
  const script = `
    import { appendFileSync } from 'node:fs';
    import { atExit } from ${JSON.stringify(MODULE)};
    const LOG = ${JSON.stringify(log)};
    atExit(() => appendFileSync(LOG, 'first\\n'));
    const cancel = atExit(() => appendFileSync(LOG, 'cancelled\\n'));
    atExit(() => appendFileSync(LOG, 'second\\n'));
    cancel();
    console.log('ready');
    ${body}`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve) => child.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('ready') && resolve()));
  if (signal) child.kill(signal);
  const [code, endedBy] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    child.on('exit', (c, s) => resolve([c, s])),
  );
  return { code, signal: endedBy, log: existsSync(log) ? readFileSync(log, 'utf8') : '' };
}

test('a normal exit runs the tasks, last registered first, without the cancelled one', async () => {
  const ended = await run('');
  assert.deepEqual(ended, { code: 0, signal: null, log: 'second\nfirst\n' });
});

test('process.exit() from anywhere runs them', async () => {
  const ended = await run('setTimeout(() => process.exit(3), 10);');
  assert.deepEqual(ended, { code: 3, signal: null, log: 'second\nfirst\n' });
});

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  test(`${signal} that the process does not handle runs them, then ends the process by ${signal} as before`, async () => {
    const ended = await run('setInterval(() => {}, 1000);', signal);
    assert.deepEqual(ended, { code: null, signal, log: 'second\nfirst\n' });
  });
}

test('a process with its own SIGINT handler decides: the tasks wait for the exit it chooses', async () => {
  // As opfn dev: the first Ctrl-C drains (here 50 ms), then exits.
  const ended = await run(
    `
    process.on('SIGINT', () => { appendFileSync(LOG, 'handler\\n'); setTimeout(() => process.exit(0), 50); });
    setInterval(() => {}, 1000);`,
    'SIGINT',
  );
  assert.deepEqual(ended, { code: 0, signal: null, log: 'handler\nsecond\nfirst\n' });
});
