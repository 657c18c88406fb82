// The requeue hold's memory bound under forged replies: a reply's `opfnfunction` is the
// subscriber's say, so keys are held only for a function a Trigger routes to, and in all at most
// `maxKeys` whatever names the replies use.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { CloudEventV1 } from 'cloudevents';
import { pino } from 'pino';
import { Broker } from '../../eventing/broker/index.ts';
import { RequeueHold } from '../../eventing/broker/requeue-hold.ts';
import { serversClosedAfter } from '../support/http.ts';
import { tempDir } from '../support/temp.ts';

function captureLog() {
  const lines: Array<Record<string, unknown>> = [];
  return {
    log: pino(
      { level: 'debug' },
      {
        write: (c: string) =>
          c
            .split('\n')
            .filter((l) => l.trim())
            .forEach((l) => lines.push(JSON.parse(l))),
      },
    ),
    lines,
  };
}

const dir = tempDir('hold-bounds-');
const servers = serversClosedAfter();

describe('RequeueHold: one count of keys for all functions', () => {
  it('beyond maxKeys a key of any function is dropped with a log line, whatever room its function has', () => {
    const { log, lines } = captureLog();
    const released: CloudEventV1<unknown>[] = [];
    const hold = new RequeueHold({ maxKeysPerFunction: 3, maxKeys: 5, log, release: (event) => released.push(event) });
    const at = Date.now() + 60_000;
    for (const fn of ['a', 'b', 'c']) hold.add(['k1', 'k2', 'k3'].map((key) => ({ function: fn, key, at, source: '/fn' })));
    assert.equal(hold.size, 5);
    assert.ok(lines.some((line) => /5 requeued keys of all functions already held; 1 more dropped/.test(String(line.msg))));
    assert.ok(lines.some((line) => /3 more dropped/.test(String(line.msg)) && line.function === 'c'));
    assert.equal(hold.dropAll(), 5);
    assert.equal(hold.size, 0);
  });
});

describe('Broker: requeues under a function no Trigger routes to', () => {
  it('are not held; the keys due now still go on; the function a Trigger routes to keeps its room', async () => {
    let pokes = 0;
    const later = new Date(Date.now() + 3_600_000).toISOString();
    const fn = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.headers['ce-type'] !== 'poke') return res.writeHead(202).end();
        // Each reply names another function; the last names the function itself.
        const n = ++pokes;
        const name = n === 4 ? 'fn' : `forged-${n}`;
        res.writeHead(200, {
          'ce-specversion': '1.0',
          'ce-id': `r${n}`,
          'ce-source': '/fn',
          'ce-type': 'dev.opfn.reconcile',
          'ce-opfnfunction': name,
          'content-type': 'application/json',
        });
        res.end(JSON.stringify({ keys: ['ns/now', 'ns/a', 'ns/b'], notBefore: { 'ns/a': later, 'ns/b': later } }));
      });
    });
    servers.push(fn);
    await new Promise<void>((resolve) => fn.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(fn.address() as AddressInfo).port}/`;
    const seen: CloudEventV1<unknown>[] = [];
    const recorder = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        seen.push({
          specversion: '1.0',
          id: String(req.headers['ce-id']),
          source: '',
          type: String(req.headers['ce-type']),
          opfnfunction: req.headers['ce-opfnfunction'],
        });
        res.writeHead(202).end();
      });
    });
    servers.push(recorder);
    await new Promise<void>((resolve) => recorder.listen(0, '127.0.0.1', resolve));
    const { log, lines } = captureLog();
    const broker = new Broker({
      triggers: [
        // As the plane wires a function: its Trigger filters on its exact name (and pokes, here).
        { name: 'fn', subscriber: url, filters: [{ any: [{ exact: { opfnfunction: 'fn' } }, { exact: { type: 'poke' } }] }] },
        // Something that takes reconcile events due now of forged-2 only.
        {
          name: 'rec',
          subscriber: `http://127.0.0.1:${(recorder.address() as AddressInfo).port}/`,
          filter: { attributes: { opfnfunction: 'forged-2', type: 'dev.opfn.reconcile' } },
        },
      ],
      deadLetterFile: join(dir, 'dl.jsonl'),
      log,
    });
    try {
      for (let i = 0; i < 4; i++) await broker.publish({ specversion: '1.0', id: `p${i}`, source: '/test', type: 'poke' });
      await broker.idle();
      await sleep(20);
      await broker.idle();
      assert.equal(broker.heldRequeues, 4, 'forged-2 (routed to rec) and fn hold their two keys each; forged-1 and forged-3, none');
      assert.equal(lines.filter((line) => /requeue for later not held: no Trigger routes/.test(String(line.msg))).length, 2);
      assert.deepEqual(
        seen.map((event) => event.opfnfunction),
        ['forged-2'],
        'the due-now part goes on as any reply',
      );
    } finally {
      await broker.close();
    }
  });
});
