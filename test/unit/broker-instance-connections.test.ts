// The broker's direct path to a function instance (a lease) uses at most INSTANCE_CONNECTIONS
// connections at once, the rest waiting in the pool, so an instance's concurrency (and the API
// requests it makes at once) stays bounded; a subscriber reached by its URL is not held to it
// (eventing/broker/dispatcher.ts).
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { Broker, type Lease } from '../../eventing/broker/index.ts';
import { INSTANCE_CONNECTIONS } from '../../eventing/broker/dispatcher.ts';
import { serversClosedAfter } from '../support/http.ts';
import { tempDir } from '../support/temp.ts';

const dir = tempDir('broker-instance-connections-');
const servers = serversClosedAfter();

/** A subscriber that holds every request until `release()`; `open` counts requests held now. */
async function holdingSubscriber() {
  const held: ServerResponse[] = [];
  let holding = true;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => (holding ? held.push(res) : res.writeHead(202).end()));
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    open: () => held.length,
    release: () => {
      holding = false;
      for (const res of held.splice(0)) res.writeHead(202).end();
    },
  };
}

const waitFor = async (condition: () => boolean, what: string): Promise<void> => {
  const deadline = Date.now() + 15_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
};

let n = 0;
const event = () => ({
  specversion: '1.0' as const,
  id: `e-${++n}`,
  source: '/s',
  type: 't',
  datacontenttype: 'application/json',
  data: {},
});

test(`a leased instance gets at most ${INSTANCE_CONNECTIONS} deliveries at once; a subscriber URL more`, async () => {
  const count = INSTANCE_CONNECTIONS + 36;
  const front = await holdingSubscriber();
  const instance = await holdingSubscriber();
  let lease = true;
  const route = (url: string): Lease | undefined =>
    lease && url === front.url ? { url: instance.url, timeoutMs: 0, release: () => {} } : undefined;
  const broker = new Broker({
    deadLetterFile: join(dir, 'dead-letters.jsonl'),
    log: pino({ level: 'silent' }),
    route,
    triggers: [{ name: 'fn', subscriber: front.url, maxInFlight: count }],
  });
  try {
    for (let i = 0; i < count; i++) await broker.publish(event());
    await waitFor(() => instance.open() === INSTANCE_CONNECTIONS, `${INSTANCE_CONNECTIONS} deliveries held by the instance`);
    await sleep(200);
    assert.equal(instance.open(), INSTANCE_CONNECTIONS, 'no more than that, although the trigger allows more in flight');
    assert.equal(broker.stats().fn?.inFlight, count, 'the rest wait in the pool, in flight for the broker');
    instance.release();
    await broker.idle();
    assert.equal(broker.stats().fn?.delivered, count, 'every event delivered once the instance answered');

    lease = false;
    for (let i = 0; i < count; i++) await broker.publish(event());
    await waitFor(() => front.open() === count, `all ${count} deliveries held by the subscriber's URL`);
    front.release();
    await broker.idle();
    assert.equal(broker.stats().fn?.delivered, 2 * count);
  } finally {
    instance.release();
    front.release();
    await broker.close();
  }
});
