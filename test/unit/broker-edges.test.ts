// Broker behaviour added for issue 7: bodies (byte-exact binary data, 1.5 MiB objects, 413),
// timeouts, drain on close, requeue holding (opfnnotbefore), the dead-letter file's mode and cap,
// and direct routes (the activator's warm path).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { CloudEventV1 } from 'cloudevents';
import { pino, type Logger } from 'pino';
import { Dispatcher } from '../../eventing/broker/dispatcher.ts';
import {
  appendJsonLine,
  Broker,
  clearDeadLetterFile,
  readDeadLetterFile,
  replayDeadLetterFile,
  type BrokerOptions,
  type Lease,
  type Trigger,
} from '../../eventing/broker/index.ts';
import { serversClosedAfter } from '../support/http.ts';
import { exitedPid } from '../support/processes.ts';
import { tempDir } from '../support/temp.ts';

interface Received {
  headers: IncomingHttpHeaders;
  body: Buffer;
  at: number;
}

const servers = serversClosedAfter();
async function subscriber(
  handler: (req: Received, res: ServerResponse, n: number) => unknown,
): Promise<{ url: string; requests: Received[] }> {
  const requests: Received[] = [];
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const received = { headers: req.headers, body: Buffer.concat(chunks), at: Date.now() };
    requests.push(received);
    await handler(received, res, requests.length);
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, requests };
}

function captureLog(): { log: Logger; lines: Array<Record<string, unknown>> } {
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

const dir = tempDir('broker-edges-');

let n = 0;
function newBroker(options: Partial<BrokerOptions> & { triggers: Trigger[] }): {
  broker: Broker;
  lines: Array<Record<string, unknown>>;
  file: string;
} {
  const { log, lines } = captureLog();
  const file = join(dir, `dl-${++n}.jsonl`);
  return { broker: new Broker({ deadLetterFile: file, log, ...options }), lines, file };
}

function event(overrides: Record<string, unknown> = {}): CloudEventV1<unknown> {
  return { specversion: '1.0', id: `e-${++n}`, source: '/s', type: 't', datacontenttype: 'application/json', data: { a: 1 }, ...overrides };
}

const waitFor = async (condition: () => boolean, what: string, ms = 15_000): Promise<void> => {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
};

/** A raw POST that reports a connection reset as such instead of throwing. */
function rawPost(
  url: string,
  headers: Record<string, string>,
  body: Buffer,
): Promise<{ status: number; text: string } | { error: string }> {
  return new Promise((resolve) => {
    const req = httpRequest(url, { method: 'POST', headers: { ...headers, 'content-length': String(body.length) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      res.on('error', (e) => resolve({ error: e.message }));
    });
    req.on('error', (e: NodeJS.ErrnoException) => resolve({ error: e.code ?? e.message }));
    req.end(body);
  });
}

describe('Broker bodies', () => {
  it('binary-mode data passes byte for byte: application/json "hello" arrives as "hello"', async () => {
    const sub = await subscriber((_req, res) => res.writeHead(202).end());
    const { broker } = newBroker({ triggers: [{ name: 'all', subscriber: sub.url }] });
    try {
      const base = await broker.listen();
      const ce = { 'ce-specversion': '1.0', 'ce-id': 'h-1', 'ce-source': '/s', 'ce-type': 't', 'content-type': 'application/json' };
      for (const body of ['"hello"', '{ "spaced" :  [1, 2.50] }', '42']) {
        const res = await fetch(base, { method: 'POST', headers: ce, body });
        assert.equal(res.status, 202);
      }
      await broker.idle();
      assert.deepEqual(
        sub.requests.map((r) => r.body.toString('utf8')),
        ['"hello"', '{ "spaced" :  [1, 2.50] }', '42'],
      );
      assert.equal(sub.requests[0]?.headers['content-type'], 'application/json');
    } finally {
      await broker.close();
    }
  });

  it('a published event whose JSON data is a string stays a JSON string', async () => {
    const sub = await subscriber((_req, res) => res.writeHead(202).end());
    const { broker } = newBroker({ triggers: [{ name: 'all', subscriber: sub.url }] });
    try {
      await broker.publish(event({ data: 'hello' }));
      await broker.idle();
      assert.equal(sub.requests[0]?.body.toString('utf8'), '"hello"');
    } finally {
      await broker.close();
    }
  });

  it('a Resource-mode event with a 1.5 MiB object passes ingress and delivery; 20 MB gets 413 with a reason, not a reset', async () => {
    const sub = await subscriber((_req, res) => res.writeHead(202).end());
    const { broker } = newBroker({ triggers: [{ name: 'all', subscriber: sub.url }] });
    try {
      const base = await broker.listen();
      const object = {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: 'big', namespace: 'default' },
        data: { blob: 'x'.repeat(1_572_864) },
      };
      const body = Buffer.from(JSON.stringify(object));
      const ce = {
        'ce-specversion': '1.0',
        'ce-id': 'big-1',
        'ce-source': '/s',
        'ce-type': 'dev.knative.apiserver.resource.update',
        'content-type': 'application/json',
      };
      const ok = await rawPost(base, ce, body);
      assert.deepEqual('status' in ok ? ok.status : ok, 202);
      await broker.idle();
      assert.equal(sub.requests.length, 1);
      assert.ok(sub.requests[0]?.body.equals(body), 'the object arrives intact');

      const huge = await rawPost(base, { ...ce, 'ce-id': 'huge' }, Buffer.alloc(20 * 1024 * 1024, 0x61));
      assert.ok('status' in huge, `an answer, not a connection error: ${JSON.stringify(huge)}`);
      assert.equal(huge.status, 413);
      assert.match(huge.text, /larger than \d+ bytes/);
    } finally {
      await broker.close();
    }
  });
});

describe('Broker timeouts', () => {
  it('delivery.timeout cuts a hung attempt and retries; the slot is freed for the next event', async () => {
    const sub = await subscriber((_req, res, count) => {
      if (count === 1) return; // hangs forever
      res.writeHead(202).end();
    });
    const { broker, file } = newBroker({
      maxInFlight: 1,
      triggers: [{ name: 't', subscriber: sub.url, delivery: { retry: 2, timeout: 'PT0.3S' } }],
    });
    try {
      await broker.publish(event({ id: 'first' }));
      await broker.publish(event({ id: 'second' }));
      await broker.idle();
      assert.equal(broker.stats().t?.delivered, 2);
      assert.equal(broker.stats().t?.retried, 1);
      assert.deepEqual(await readDeadLetterFile(file), []);
    } finally {
      await broker.close();
    }
  });
});

describe('Broker shutdown', () => {
  it('close() stops intake, lets queued and in-flight deliveries finish, and dead-letters nothing that succeeded', async () => {
    const sub = await subscriber(async (_req, res) => {
      await sleep(100);
      res.writeHead(202).end();
    });
    const { broker, file } = newBroker({ maxInFlight: 4, triggers: [{ name: 'slow', subscriber: sub.url }] });
    const base = await broker.listen();
    for (let i = 0; i < 20; i++) await broker.publish(event({ id: `burst-${i}` }));
    const closing = broker.close({ drainTimeoutMs: 20_000 });
    await assert.rejects(broker.publish(event()), /closed/);
    const refused = await fetch(base, {
      method: 'POST',
      headers: { 'ce-specversion': '1.0', 'ce-id': 'x', 'ce-source': '/s', 'ce-type': 't' },
    }).then(
      (r) => r.status,
      () => 'refused',
    );
    assert.ok(refused === 503 || refused === 'refused', `ingress answers 503 or is gone while draining, got ${refused}`);
    await closing;
    assert.equal(sub.requests.length, 20, 'every accepted event was delivered');
    assert.deepEqual(await readDeadLetterFile(file), []);
  });

  it('past the drain deadline, what is left is dead-lettered with the reason', async () => {
    const sub = await subscriber(() => undefined); // never answers
    const { broker, file } = newBroker({ maxInFlight: 1, triggers: [{ name: 'hung', subscriber: sub.url }] });
    await broker.publish(event({ id: 'in-flight' }));
    await broker.publish(event({ id: 'queued' }));
    const started = Date.now();
    await broker.close({ drainTimeoutMs: 300 });
    assert.ok(Date.now() - started < 10_000);
    const letters = (await readDeadLetterFile(file)).map((l) => l.letter);
    assert.deepEqual(letters.map((l) => l?.id).sort(), ['in-flight', 'queued']);
  });
});

describe('Broker requeue holding (opfnnotbefore)', () => {
  const requeueReply = (res: ServerResponse, due: string, data: unknown) => {
    res.writeHead(200, {
      'ce-specversion': '1.0',
      'ce-id': `r-${Math.random()}`,
      'ce-source': '/fn',
      'ce-type': 'dev.opfn.reconcile',
      'ce-opfnfunction': 'fn',
      'ce-opfnnotbefore': due,
      'content-type': 'application/json',
    });
    res.end(JSON.stringify(data));
  };
  const keysOf = (received: Received) => JSON.parse(received.body.toString()).keys;

  it("holds a reply's keys until they are due, then routes them like any reply", async () => {
    const due = () => new Date(Date.now() + 600).toISOString();
    const fn = await subscriber((_req, res, count) => {
      if (count === 1) return requeueReply(res, due(), { keys: ['default/a'] });
      res.writeHead(202).end();
    });
    const { broker } = newBroker({ triggers: [{ name: 'fn', subscriber: fn.url, filter: { attributes: { opfnfunction: 'fn' } } }] });
    try {
      const sent = Date.now();
      await broker.publish(event({ opfnfunction: 'fn' }));
      await waitFor(() => broker.heldRequeues === 1, 'the key to be held');
      assert.equal(fn.requests.length, 1, 'not delivered before it is due');
      await waitFor(() => fn.requests.length === 2, 'the held key to be delivered');
      assert.ok((fn.requests[1]?.at ?? 0) - sent >= 550, 'delivered at its due time');
      assert.equal(fn.requests[1]?.headers['ce-type'], 'dev.opfn.reconcile');
      assert.equal(fn.requests[1]?.headers['ce-opfnnotbefore'], undefined);
      assert.equal(fn.requests[1]?.headers['ce-knativebrokerttl'], undefined, 'the filter strips the TTL');
      assert.deepEqual(keysOf(fn.requests[1]!), ['default/a']);
      assert.equal(broker.heldRequeues, 0);
    } finally {
      await broker.close();
    }
  });

  it('each key of a reply comes back alone at its own time, never early; keys due now go on at once', async () => {
    const start = Date.now();
    const at = (ms: number) => new Date(start + ms).toISOString();
    const fn = await subscriber((_req, res, count) => {
      if (count === 1) return requeueReply(res, at(-1), { keys: ['now', 'soon', 'later'], notBefore: { soon: at(300), later: at(700) } });
      res.writeHead(202).end();
    });
    const { broker } = newBroker({ triggers: [{ name: 'fn', subscriber: fn.url, filter: { attributes: { opfnfunction: 'fn' } } }] });
    try {
      await broker.publish(event({ opfnfunction: 'fn' }));
      await waitFor(() => fn.requests.length === 4, 'the three keys');
      assert.deepEqual(fn.requests.slice(1).map(keysOf), [['now'], ['soon'], ['later']]);
      assert.ok(fn.requests[2]!.at >= start + 300, 'soon: not before its time');
      assert.ok(fn.requests[3]!.at >= start + 700, 'later: not before its time');
    } finally {
      await broker.close();
    }
  });

  it('keys for later replied while the broker drains are dropped and counted in its closing line, not logged reply by reply', async () => {
    let answer: () => void = () => undefined;
    const answered = new Promise<void>((resolve) => {
      answer = resolve;
    });
    const fn = await subscriber(async (_req, res) => {
      await answered;
      requeueReply(res, new Date(Date.now() + 60_000).toISOString(), { keys: ['default/a', 'default/b'] });
    });
    const { broker, lines } = newBroker({ triggers: [{ name: 'fn', subscriber: fn.url, filter: { attributes: { opfnfunction: 'fn' } } }] });
    await broker.publish(event({ opfnfunction: 'fn' }));
    await waitFor(() => fn.requests.length === 1, 'the delivery');
    const closed = broker.close();
    answer();
    await closed;
    assert.equal(lines.filter((l) => /requeue dropped/.test(String(l.msg)) && l.level === 30).length, 0, 'no info line per reply');
    assert.equal(lines.find((l) => l.msg === 'broker closed')?.dropped, 2);
  });

  it('a key asked for at several times is held once; close drops what is held with a log line', async () => {
    const fn = await subscriber((_req, res, count) =>
      requeueReply(res, new Date(Date.now() + 60_000 - count * 1000).toISOString(), { keys: ['default/a'] }),
    );
    const { broker, lines } = newBroker({ triggers: [{ name: 'fn', subscriber: fn.url, filter: { attributes: { opfnfunction: 'fn' } } }] });
    for (let i = 0; i < 3; i++) await broker.publish(event({ opfnfunction: 'fn' }));
    await broker.idle();
    await waitFor(() => fn.requests.length === 3, 'three deliveries');
    assert.equal(broker.heldRequeues, 1);
    await broker.close();
    assert.ok(
      lines.some((l) => /dropped because the plane stopped/.test(String(l.msg)) && l.dropped === 1),
      'a log line for the dropped requeue',
    );
  });
});

describe('Dispatcher.sleep', () => {
  it("a wait beyond a timer's range (a Retry-After under a long retryAfterMax) is capped, not cut to 1 ms", async () => {
    const abort = new AbortController();
    const dispatcher = new Dispatcher({ abort: abort.signal, maxResponseBytes: 1024 });
    let resolved = false;
    const waiting = dispatcher.sleep(2 ** 31 + 5000).then(() => (resolved = true));
    await sleep(50);
    assert.equal(resolved, false, 'still waiting');
    abort.abort();
    await waiting;
  });
});

describe('Broker dead-letter file', () => {
  it('is created 0600 and rotated at its cap (the oldest letters go, with a log line)', async () => {
    const sub = await subscriber((_req, res) => res.writeHead(500).end('failing'));
    const { broker, file, lines } = newBroker({
      deadLetterMaxBytes: 2000,
      triggers: [{ name: 'bad', subscriber: sub.url, delivery: { retry: 0 } }],
    });
    try {
      for (let i = 0; i < 10; i++) await broker.publish(event({ id: `bad-${i}`, data: { pad: 'p'.repeat(300) } }));
      await broker.idle();
      assert.equal((await stat(file)).mode & 0o777, 0o600);
      assert.ok((await stat(file)).size <= 2000);
      const ids = (await readDeadLetterFile(file)).map((l) => l.letter?.id);
      assert.equal(ids.at(-1), 'bad-9', 'the newest letter is kept');
      assert.ok(!ids.includes('bad-0'), 'the oldest letters were rotated out');
      assert.ok(lines.some((l) => /rotated/.test(String(l.msg))));
    } finally {
      await broker.close();
    }
  });

  it('letters refused for good (400) go to <file>.refused: a flood of forged ones cannot rotate away the letters of real work', async () => {
    const sub = await subscriber((req, res) => res.writeHead(req.headers['ce-id'] === 'real' ? 500 : 400).end('no'));
    const { broker, file, lines } = newBroker({
      deadLetterMaxBytes: 16000,
      triggers: [{ name: 'fn', subscriber: sub.url, delivery: { retry: 0 } }],
    });
    try {
      await broker.publish(event({ id: 'real' }));
      for (let i = 0; i < 40; i++) await broker.publish(event({ id: `forged-${i}`, data: { pad: 'p'.repeat(300) } }));
      await broker.idle();
      const letters = await readDeadLetterFile(file);
      assert.deepEqual(
        letters.filter((l) => l.file === file).map((l) => l.letter?.id),
        ['real'],
        'the letter of real work is still there',
      );
      const refused = letters.filter((l) => l.file.startsWith(`${file}.refused`)).map((l) => l.letter?.id);
      assert.ok(refused.includes('forged-39') && !refused.includes('forged-0'), 'the refused letters rotated among themselves');
      assert.ok((await stat(`${file}.refused`)).size <= 2000, 'within an eighth of the cap');
      assert.equal((await stat(`${file}.refused`)).mode & 0o777, 0o600);
      assert.ok(lines.some((l) => /rotated to .*\.refused\.1/.test(String(l.msg))));
      assert.equal(await clearDeadLetterFile(file), letters.length, 'clear removes both');
      assert.deepEqual(await readDeadLetterFile(file), []);
    } finally {
      await broker.close();
    }
  });

  it('appendJsonLine tightens an existing world-readable file to 0600', async () => {
    const file = join(dir, 'loose.jsonl');
    await import('node:fs/promises').then((fs) => fs.writeFile(file, '', { mode: 0o644 }));
    await appendJsonLine(file, '{"id":"x"}');
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    assert.equal(await readFile(file, 'utf8'), '{"id":"x"}\n');
  });

  it('a replayed letter refused again while the replay runs stays for the next one, not replayed twice', async () => {
    const file = join(dir, 'refused-again.jsonl');
    const letter = (id: string) => `${JSON.stringify({ specversion: '1.0', id, type: 't', source: '/s' })}\n`;
    await writeFile(file, letter('main'));
    await writeFile(`${file}.refused`, letter('refused'));
    // The broker takes each letter, and the function refuses it again: the broker writes it to `.refused` meanwhile.
    const ingress = await subscriber(async (req, res) => {
      await appendJsonLine(`${file}.refused`, letter(JSON.parse(req.body.toString()).id));
      res.writeHead(202).end();
    });
    assert.deepEqual(await replayDeadLetterFile(file, ingress.url), { replayed: 2, failed: [] });
    assert.deepEqual(
      ingress.requests.map((r) => JSON.parse(r.body.toString()).id),
      ['main', 'refused'],
    );
    assert.deepEqual(
      (await readDeadLetterFile(file)).map((l) => l.letter?.id),
      ['main', 'refused'],
      'both are letters again, for the next replay',
    );
  });

  it("what a replay killed midway left aside is listed, replayed and cleared; a running replay's is left alone", async () => {
    const file = join(dir, 'stranded.jsonl');
    const deadPid = await exitedPid();
    const letter = (id: string) => `${JSON.stringify({ specversion: '1.0', id, type: 't', source: '/s' })}\n`;
    await writeFile(file, letter('current'));
    await writeFile(`${file}.replaying-${deadPid}`, letter('stranded'));
    await writeFile(`${file}.replaying-${deadPid}.1`, letter('stranded-rotated'));
    await writeFile(`${file}.refused.replaying-${deadPid}`, letter('stranded-refused'));
    await writeFile(`${file}.replaying-${process.ppid}`, letter('in-flight'));
    const ids = async () => (await readDeadLetterFile(file)).map((l) => l.letter?.id).sort();
    assert.deepEqual(await ids(), ['current', 'stranded', 'stranded-refused', 'stranded-rotated']);

    const ingress = await subscriber((_req, res) => res.writeHead(202).end());
    const result = await replayDeadLetterFile(file, ingress.url);
    assert.deepEqual(result, { replayed: 4, failed: [] });
    assert.deepEqual(ingress.requests.map((r) => JSON.parse(r.body.toString()).id).sort(), [
      'current',
      'stranded',
      'stranded-refused',
      'stranded-rotated',
    ]);
    assert.deepEqual(await ids(), []);
    assert.equal(await readFile(`${file}.replaying-${process.ppid}`, 'utf8'), letter('in-flight'), 'a live replay keeps its letters');

    await writeFile(`${file}.replaying-${deadPid}`, letter('stranded-again'));
    assert.equal(await clearDeadLetterFile(file), 1);
    assert.equal(existsSync(`${file}.replaying-${deadPid}`), false);
    assert.equal(existsSync(`${file}.replaying-${process.ppid}`), true);
  });
});

describe('Broker direct routes (warm path)', () => {
  it('sends to the leased URL when a route offers one, and releases the lease exactly once', async () => {
    const front = await subscriber((_req, res) => res.writeHead(202).end());
    const instance = await subscriber((_req, res) => res.writeHead(202).end());
    const released: string[] = [];
    let offer = true;
    const route = (url: string): Lease | undefined =>
      url === front.url && offer ? { url: instance.url, timeoutMs: 0, release: (outcome) => released.push(outcome) } : undefined;
    const { broker } = newBroker({ route, triggers: [{ name: 'fn', subscriber: front.url }] });
    try {
      await broker.publish(event());
      await broker.idle();
      offer = false;
      await broker.publish(event());
      await broker.idle();
      assert.equal(instance.requests.length, 1);
      assert.equal(front.requests.length, 1);
      assert.deepEqual(released, ['answered']);
      assert.equal(broker.stats().fn?.direct, 1);
    } finally {
      await broker.close();
    }
  });

  it("hands the route the event's partitionkey, and none when the event has none", async () => {
    const front = await subscriber((_req, res) => res.writeHead(202).end());
    const keys: Array<string | undefined> = [];
    const route = (_url: string, partitionKey?: string): Lease | undefined => {
      keys.push(partitionKey);
      return undefined;
    };
    const { broker } = newBroker({ route, triggers: [{ name: 'fn', subscriber: front.url }] });
    try {
      await broker.publish(event({ partitionkey: 'default/web' }));
      await broker.idle();
      await broker.publish(event());
      await broker.idle();
      assert.deepEqual(keys, ['default/web', undefined]);
      assert.equal(front.requests[0].headers['ce-partitionkey'], 'default/web', 'the extension travels on to the subscriber');
    } finally {
      await broker.close();
    }
  });
});
