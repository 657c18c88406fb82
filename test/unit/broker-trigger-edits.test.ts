// A Trigger edited (added again under its name) while its events are queued or being retried: a
// raised maxInFlight starts queued events at once, and each retry goes to the subscriber the
// Trigger has at that attempt, as Knative's broker filter looks the Trigger up per request.
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { Broker, readDeadLetterFile } from '../../eventing/broker/index.ts';
import { serversClosedAfter } from '../support/http.ts';
import { tempDir } from '../support/temp.ts';

const servers = serversClosedAfter();
/** A subscriber that counts requests and answers each with `answer`. */
async function subscriber(answer: (res: ServerResponse) => unknown): Promise<{ url: string; hits: () => number }> {
  let hits = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      hits += 1;
      answer(res);
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, hits: () => hits };
}

const dir = tempDir('broker-trigger-edits-');

const event = (id: string) => ({ specversion: '1.0' as const, id, source: '/test', type: 't' });

async function waitFor(check: () => boolean, what: string, ms = 2000): Promise<void> {
  for (const end = Date.now() + ms; !check(); await sleep(10)) if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
}

describe('Broker: a Trigger edited while it holds events', () => {
  it('a raised maxInFlight starts the queued events at once, not when a delivery in flight settles', async () => {
    const held: ServerResponse[] = [];
    const fn = await subscriber((res) => held.push(res));
    const broker = new Broker({
      triggers: [{ name: 't', subscriber: fn.url, maxInFlight: 1 }],
      deadLetterFile: join(dir, 'raise.jsonl'),
      log: pino({ level: 'silent' }),
    });
    try {
      for (let i = 0; i < 3; i++) await broker.publish(event(`e${i}`));
      await waitFor(() => fn.hits() === 1, 'the first delivery');
      broker.addTrigger({ name: 't', subscriber: fn.url, maxInFlight: 3 });
      await waitFor(() => fn.hits() === 3, 'the two queued events to start', 1000);
      assert.deepEqual(
        { ...broker.stats().t, delivered: undefined },
        { queued: 0, inFlight: 3, delivered: undefined, retried: 0, deadLettered: 0, direct: 0, maxInFlight: 3 },
      );
    } finally {
      for (const res of held) res.writeHead(202).end();
      await broker.close();
    }
  });

  it('a retry goes to the subscriber the Trigger has then; the retry policy is the one the delivery began with', async () => {
    const old = await subscriber((res) => res.writeHead(503).end());
    const current = await subscriber((res) => res.writeHead(202).end());
    const file = join(dir, 'edit.jsonl');
    const delivery = { retry: 3, backoffPolicy: 'exponential' as const, backoffDelay: 'PT0.2S' };
    const broker = new Broker({
      triggers: [{ name: 't', subscriber: old.url, delivery }],
      deadLetterFile: file,
      log: pino({ level: 'silent' }),
    });
    try {
      await broker.publish(event('e1'));
      await waitFor(() => old.hits() >= 1, 'the first attempt');
      broker.addTrigger({ name: 't', subscriber: current.url, delivery: { ...delivery, retry: 0 } });
      await broker.idle();
      assert.equal(old.hits(), 1, 'no retry to the old subscriber');
      assert.equal(current.hits(), 1, 'the retry went to the current subscriber, although the edit asks for no retries');
      assert.deepEqual(await readDeadLetterFile(file), []);
      assert.equal(broker.stats().t?.delivered, 1);
    } finally {
      await broker.close();
    }
  });
});
