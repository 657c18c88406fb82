// afterFirstAnswer (runtime/host/serve.ts): the work a function starts once it listens (the check of
// its declared kinds, which opens the first API connection) waits for the first answer, so a cold
// start's first readiness probe is not answered behind it; with no request it runs anyway.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterFirstAnswer } from '../../functions/runtime/host/serve.ts';

let server: Server | undefined;
afterEach(() => {
  server?.closeAllConnections();
  server?.close();
});

/** A server whose answers take `delayMs`, listening on loopback. */
async function listening(delayMs: number): Promise<{ server: Server; url: string }> {
  const started = createServer((_request, response) => setTimeout(() => response.end('ok'), delayMs));
  started.listen(0, '127.0.0.1');
  await once(started, 'listening');
  server = started;
  return { server: started, url: `http://127.0.0.1:${(started.address() as AddressInfo).port}/health/readiness` };
}

test('runs once, after the first answer is sent, not while it is being made', async () => {
  const { server, url } = await listening(200);
  let runs = 0;
  afterFirstAnswer(server, 60_000, () => runs++);
  const first = fetch(url).then((response) => response.text());
  await sleep(100);
  assert.equal(runs, 0, 'the first request is still being answered');
  assert.equal(await first, 'ok');
  await sleep(20);
  assert.equal(runs, 1);
  await Promise.all([fetch(url), fetch(url)].map(async (answer) => (await answer).text()));
  assert.equal(runs, 1, 'later answers do not run it again');
});

test('runs once after atLatestMs when no request comes, and not again on a later answer', async () => {
  const { server, url } = await listening(0);
  let runs = 0;
  afterFirstAnswer(server, 150, () => runs++);
  await sleep(50);
  assert.equal(runs, 0);
  await sleep(300);
  assert.equal(runs, 1);
  await (await fetch(url)).text();
  await sleep(20);
  assert.equal(runs, 1);
});
