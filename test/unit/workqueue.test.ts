// Per-key coalescing (functions/runtime/host/workqueue.ts): a follow-up run knows whether it answers
// one request (which may then use its own event object) or several (which may use none).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KeyedWorkQueue } from '../../functions/runtime/host/index.ts';

test('a follow-up joined by one request is not shared; one joined by several is, and runs once', async () => {
  const queue = new KeyedWorkQueue();
  let release!: () => void;
  const first = queue.run('k', (shared) => new Promise<boolean>((resolve) => (release = () => resolve(shared))));
  const single = queue.run('k', async (shared) => shared);
  release();
  assert.deepEqual(await Promise.all([first, single]), [false, false]);

  const again = queue.run('k', (shared) => new Promise<boolean>((resolve) => (release = () => resolve(shared))));
  let runs = 0;
  const joined = [1, 2, 3].map(() => queue.run('k', async (shared) => (runs++, shared)));
  release();
  assert.equal(await again, false);
  assert.deepEqual(await Promise.all(joined), [true, true, true]);
  assert.equal(runs, 1, 'three requests, one follow-up run');

  // The count starts again for the next follow-up.
  const third = queue.run('k', (shared) => new Promise<boolean>((resolve) => (release = () => resolve(shared))));
  const alone = queue.run('k', async (shared) => shared);
  release();
  assert.deepEqual(await Promise.all([third, alone]), [false, false]);
});
