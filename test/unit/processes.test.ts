// Whether a recorded process still runs (processes/identity.ts), with real processes.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { isRunning, isSameProcess, processStart } from '../../processes/identity.ts';
import { exitedPid } from '../support/processes.ts';

test('a running process runs; an exited one does not; nor does a zombie, which has ended though nobody collected its exit', async () => {
  assert.equal(isRunning(process.pid), true);
  assert.equal(isSameProcess({ pid: process.pid, startTime: processStart(process.pid) }), true);
  assert.equal(isRunning(await exitedPid()), false);

  // `sleep 0.1` ends while its parent, now `sleep 30` (exec replaced the shell), never waits for it:
  // a zombie, as every killed process is in a container whose init does not reap.
  const parent = spawn('sh', ['-c', 'sleep 0.1 & echo $!; exec sleep 30'], { stdio: ['ignore', 'pipe', 'ignore'] });
  try {
    const [line] = await once(parent.stdout!, 'data');
    const zombie = Number(String(line).trim());
    await sleep(500);
    assert.equal(process.kill(zombie, 0), true, 'signal 0 alone would call it running');
    assert.equal(isRunning(zombie), false);
    assert.equal(isSameProcess({ pid: zombie }), false);
  } finally {
    parent.kill();
  }
});
