// A direct route the broker waits for (the activator's lease while a function starts from zero,
// eventing/broker/attempts.ts): the event goes to the route once it is given, never to the
// subscriber's URL as well; the wait is part of the attempt, so the attempt's timeout covers it.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { Broker, type DirectRoute } from '../../eventing/broker/index.ts';
import { serversClosedAfter } from '../support/http.ts';
import { tempDir } from '../support/temp.ts';

const dir = tempDir('broker-route-wait-');
const servers = serversClosedAfter();

/** A subscriber answering 202; `ids` are the event ids it received. */
async function subscriber() {
  const ids: string[] = [];
  const server = createServer((req, res) => {
    ids.push(String(req.headers['ce-id']));
    req.resume();
    req.on('end', () => res.writeHead(202).end());
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, ids };
}

const event = (id: string) => ({ specversion: '1.0' as const, id, source: '/s', type: 't', datacontenttype: 'application/json', data: {} });

test('a route waited for: the event goes to it once given; a wait past the attempt timeout fails the attempt, which is retried', async () => {
  const front = await subscriber();
  const instance = await subscriber();
  const waits: number[] = [];
  let released = 0;
  let attempt = 0;
  const route: DirectRoute = (url, _key, wait) => {
    if (url !== front.url) return undefined;
    waits.push(wait.maxWaitMs);
    attempt += 1;
    const lease = { url: instance.url, timeoutMs: 0, release: () => void released++ };
    // The first attempt's route comes only after the sender's time has passed (the activator resolves undefined then).
    if (attempt === 1) return sleep(wait.maxWaitMs + 50).then(() => undefined);
    return sleep(50).then(() => lease);
  };
  const broker = new Broker({
    deadLetterFile: join(dir, 'dead-letters.jsonl'),
    log: pino({ level: 'silent' }),
    route,
    triggers: [{ name: 'fn', subscriber: front.url, delivery: { retry: 1, backoffDelay: 'PT0.01S', timeout: 'PT0.2S' } }],
  });
  try {
    await broker.publish(event('e-1'));
    const deadline = Date.now() + 15_000;
    while (broker.stats().fn?.delivered !== 1 && Date.now() < deadline) await sleep(10);
    await broker.idle();
    assert.deepEqual(waits, [200, 200], 'the route is told how long the attempt may wait');
    assert.equal(broker.stats().fn?.retried, 1, 'the attempt whose wait outlasted its timeout failed and was retried');
    assert.deepEqual(instance.ids, ['e-1'], 'delivered to the route given');
    assert.deepEqual(front.ids, [], 'never to the URL as well');
    assert.equal(broker.stats().fn?.delivered, 1);
    assert.equal(released, 1, 'the lease released once');
  } finally {
    await broker.close();
  }
});

test('closing the broker ends a wait for a route', async () => {
  const front = await subscriber();
  let aborted = false;
  const route: DirectRoute = (_url, _key, wait) =>
    new Promise((resolve) =>
      wait.abort.addEventListener('abort', () => {
        aborted = true;
        resolve(undefined);
      }),
    );
  const broker = new Broker({
    deadLetterFile: join(dir, 'dead-letters-close.jsonl'),
    log: pino({ level: 'silent' }),
    route,
    triggers: [{ name: 'fn', subscriber: front.url, delivery: { retry: 0 } }],
  });
  await broker.publish(event('e-2'));
  await sleep(50);
  await broker.close({ drainTimeoutMs: 100 });
  assert.ok(aborted, 'the wait was told the broker gave up');
  assert.deepEqual(front.ids, [], 'nothing sent after the deadline');
});
