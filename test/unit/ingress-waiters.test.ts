// The broker ingress while a trigger queue is full: requests wait (back-pressure) up to a bound
// of requests and bytes, beyond it they are answered 503 "pending request queue full" (as
// Knative's activator answers), never kept; in-process publish() still waits.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { Broker } from '../../eventing/broker/index.ts';

let dir = '';
let server: Server;
let subscriberUrl = '';
/** Requests the subscriber holds unanswered (the trigger queue stays full). */
const held: ServerResponse[] = [];
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ingress-waiters-'));
  server = createServer((req, res) => {
    req.resume();
    req.on('end', () => held.push(res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  subscriberUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
});
after(async () => {
  server.closeAllConnections();
  server.close();
  await rm(dir, { recursive: true, force: true });
});

/** POSTs a structured CloudEvent; resolves with the status and text, or 'no answer' after 1.5 s. */
async function post(url: string, id: string, data = ''): Promise<{ status: number | 'no answer'; text: string }> {
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/cloudevents+json' },
      body: JSON.stringify({ specversion: '1.0', id, source: '/test', type: 't', datacontenttype: 'text/plain', data }),
      signal: AbortSignal.timeout(1500),
    });
    return { status: response.status, text: await response.text() };
  } catch {
    return { status: 'no answer', text: '' };
  }
}

async function waitFor(check: () => boolean, what: string): Promise<void> {
  for (const end = Date.now() + 2000; !check(); await sleep(10)) if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
}

describe('Broker ingress while a trigger queue is full', () => {
  it('lets a bounded number of requests (and bytes) wait; beyond that answers 503 at once; publish() still waits', async () => {
    const broker = new Broker({
      triggers: [{ name: 't', subscriber: subscriberUrl, maxInFlight: 1 }],
      queueLimit: 1,
      maxWaitingRequests: 3,
      maxWaitingBytes: 10_000,
      deadLetterFile: join(dir, 'dl.jsonl'),
      log: pino({ level: 'silent' }),
    });
    const url = await broker.listen();
    try {
      assert.equal((await post(url, 'first')).status, 202, 'the queue had room');
      await waitFor(() => held.length === 1, 'the first delivery');
      // The queue is full: a small request and a large one wait.
      const waiting = [post(url, 'w1'), post(url, 'w2', 'x'.repeat(6_000))];
      await sleep(100);
      // Beyond the bytes (6 KB waiting + 6 KB > 10 KB): refused, though a request would still fit.
      const bytesRefused = await post(url, 'big', 'x'.repeat(6_000));
      assert.equal(bytesRefused.status, 503);
      assert.match(
        bytesRefused.text,
        /^pending request queue full: 2 requests \(\d+ bytes\) already wait for room in a full trigger queue/,
      );
      // A small one still fits; the next is beyond the count, answered at once, not kept waiting.
      waiting.push(post(url, 'w3'));
      await sleep(100);
      const countRefused = await post(url, 'small');
      assert.equal(countRefused.status, 503);
      assert.match(countRefused.text, /pending request queue full: 3 requests/);
      // In process, the plane's own sources keep their back-pressure: publish waits, is not refused.
      let published = false;
      const publishing = broker.publish({ specversion: '1.0', id: 'p', source: '/test', type: 't' }).then(() => (published = true));
      await sleep(50);
      assert.equal(published, false, 'publish waits for room');
      // Room again: the waiting requests are accepted, then the publisher.
      for (let answered = 0; answered < 5; answered++) {
        await waitFor(() => held.length > answered, `delivery ${answered + 1}`);
        held[answered]!.writeHead(202).end();
      }
      assert.deepEqual(
        (await Promise.all(waiting)).map((r) => r.status),
        [202, 202, 202],
      );
      await publishing;
      await broker.idle();
      assert.equal(broker.stats().t?.delivered, 5);
    } finally {
      for (const res of held) if (!res.headersSent) res.writeHead(202).end();
      await broker.close({ drainTimeoutMs: 0 });
    }
  });
});
