// The local broker against real HTTP subscribers on 127.0.0.1 (node:http servers started here).
// Timing assertions are lower bounds only; the machine is noisy.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { CloudEventV1 } from 'cloudevents';
import { pino, type Logger } from 'pino';
import {
  backoffDelayMs,
  Broker,
  encodeErrorData,
  isRetryableStatus,
  parseDeliverySpec,
  parseIsoDuration,
  readDeadLetterFile,
  retryAfterDelayMs,
  type BrokerOptions,
  type Trigger,
} from '../../eventing/broker/index.ts';
import { serversClosedAfter } from '../support/http.ts';
import { tempDir } from '../support/temp.ts';

// ---- helpers --------------------------------------------------------------------------------------

interface Received {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  at: number;
}

type Handler = (req: Received, res: ServerResponse, n: number) => void | Promise<void>;

interface Subscriber {
  url: string;
  requests: Received[];
  connections: () => number;
  close: () => Promise<void>;
}

const servers = serversClosedAfter();

async function startSubscriber(handler: Handler): Promise<Subscriber> {
  const requests: Received[] = [];
  let connections = 0;
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const received: Received = {
      method: req.method ?? '',
      url: req.url ?? '',
      headers: req.headers,
      body: Buffer.concat(chunks),
      at: performance.now(),
    };
    requests.push(received);
    try {
      await handler(received, res, requests.length);
    } catch {
      if (!res.headersSent) res.writeHead(500).end();
    }
  });
  server.on('connection', () => {
    connections += 1;
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    requests,
    connections: () => connections,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function answer(status: number, body = '', headers: Record<string, string> = {}): Handler {
  return (_req, res) => {
    res.writeHead(status, headers).end(body);
  };
}

function captureLog(): { log: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const stream = {
    write(chunk: string): void {
      for (const line of chunk.split('\n')) if (line.trim()) lines.push(JSON.parse(line) as Record<string, unknown>);
    },
  };
  return { log: pino({ level: 'debug' }, stream), lines };
}

async function waitFor(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await delay(5);
  }
}

/** A subscriber stalled on `gate` until `release()` (safe to call more than once). */
function blocker(): { gate: Promise<void>; release: () => void } {
  let release: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  return { gate, release };
}

const dir = tempDir('broker-test-');

let counter = 0;
function newBroker(options: Partial<BrokerOptions> & { triggers: Trigger[] }): {
  broker: Broker;
  lines: Array<Record<string, unknown>>;
  deadLetterFile: string;
} {
  const { log, lines } = captureLog();
  counter += 1;
  const deadLetterFile = join(dir, `dead-letters-${counter}.jsonl`);
  const broker = new Broker({ deadLetterFile, log, ...options });
  return { broker, lines, deadLetterFile };
}

/** The letters of `file` and of its refused letters' file (the broker keeps 4xx refusals apart). */
async function readDeadLetters(file: string): Promise<Array<Record<string, unknown>>> {
  return (await readDeadLetterFile(file)).map((entry) => entry.letter as unknown as Record<string, unknown>);
}

function event(overrides: Record<string, unknown> = {}): CloudEventV1<unknown> {
  counter += 1;
  return {
    specversion: '1.0',
    id: `evt-${counter}`,
    source: 'https://10.96.0.1:443',
    type: 'dev.knative.apiserver.ref.add',
    datacontenttype: 'application/json',
    data: { kind: 'Pod', namespace: 'default', name: 'web-0', apiVersion: 'v1' },
    ...overrides,
  };
}

// ---- pure delivery rules ------------------------------------------------------------------------

describe('delivery rules', () => {
  it('parses ISO-8601 durations', () => {
    const table: Array<[string, number]> = [
      ['PT0.2S', 200],
      ['PT1S', 1000],
      ['PT0,5S', 500],
      ['PT1M30S', 90_000],
      ['PT2H', 7_200_000],
      ['P1D', 86_400_000],
      ['P1W', 604_800_000],
      ['P1DT1S', 86_401_000],
      ['PT0S', 0],
    ];
    for (const [text, ms] of table) assert.equal(parseIsoDuration(text), ms, text);
  });

  it('rejects malformed durations with a clear error', () => {
    for (const bad of ['', 'P', 'PT', '1S', 'PT1', 'P1DT', '-PT1S', 'PT1.S', 'soon', '200ms']) {
      assert.throws(() => parseIsoDuration(bad), /invalid ISO-8601 duration .*PT0\.2S/, bad);
    }
    assert.throws(() => parseIsoDuration(5 as unknown as string), /invalid ISO-8601 duration/);
  });

  it('backoff: exponential d, 2d, 4d; linear 0, d, 2d (go-retryablehttp numbers the first retry 0)', () => {
    const exp = { backoffPolicy: 'exponential', backoffDelayMs: 200 } as const;
    const lin = { backoffPolicy: 'linear', backoffDelayMs: 200 } as const;
    assert.deepEqual(
      [1, 2, 3, 4].map((n) => backoffDelayMs(exp, n)),
      [200, 400, 800, 1600],
    );
    assert.deepEqual(
      [1, 2, 3, 4].map((n) => backoffDelayMs(lin, n)),
      [0, 200, 400, 600],
    );
    // Knative only waits when both policy and delay are set.
    assert.equal(backoffDelayMs({ backoffDelayMs: 200 }, 2), 0);
    assert.equal(backoffDelayMs({ backoffPolicy: 'exponential' }, 2), 0);
  });

  it('Retry-After of a 429/503 (seconds or an HTTP date) is a wait, capped by retryAfterMax (PT0S or unset: ignored, as Knative 1.23 reads it)', () => {
    const now = Date.parse('2025-05-01T00:00:00Z');
    const max = parseIsoDuration('PT10M');
    assert.equal(retryAfterDelayMs(429, '30', max, now), 30_000);
    assert.equal(retryAfterDelayMs(503, ' 2 ', max, now), 2000);
    assert.equal(retryAfterDelayMs(429, 'Thu, 01 May 2025 00:00:45 GMT', max, now), 45_000);
    assert.equal(retryAfterDelayMs(429, '30', parseIsoDuration('PT5S'), now), 5000, 'retryAfterMax caps it');
    assert.equal(retryAfterDelayMs(429, '30', 0, now), 0, 'retryAfterMax PT0S: ignored');
    assert.equal(
      retryAfterDelayMs(429, '30', undefined, now),
      0,
      'retryAfterMax unset: ignored (delivery-retryafter is alpha in 1.23: opt-in)',
    );
    for (const [status, header] of [
      [500, '30'],
      [404, '30'],
      [429, undefined],
      [429, 'soon'],
      [429, '-5'],
      [429, 'Wed, 30 Apr 2025 00:00:00 GMT'],
    ] as const) {
      assert.equal(retryAfterDelayMs(status, header, max, now), 0, `${status} ${header}`);
    }
    assert.equal(parseDeliverySpec({ retryAfterMax: 'PT30S' }, 'd').retryAfterMaxMs, 30_000);
    assert.throws(() => parseDeliverySpec({ retryAfterMax: '30s' }, 'd'), /d\.retryAfterMax: invalid ISO-8601 duration/);
  });

  it('delivery fields Knative 1.23 has: a zero timeout is refused (the webhook does), format binary is what the broker does, json is refused', () => {
    assert.equal(parseDeliverySpec({ timeout: 'PT300S' }, 'd').timeoutMs, 300_000);
    assert.throws(() => parseDeliverySpec({ timeout: 'PT0S' }, 'd'), /d\.timeout must be above zero/);
    assert.equal(parseDeliverySpec({ format: 'binary' }, 'd').retry, 0);
    assert.throws(() => parseDeliverySpec({ format: 'json' }, 'd'), /d\.format "json": the local broker sends events in binary mode only/);
    assert.throws(() => parseDeliverySpec({ timeOut: 'PT1S' } as never, 'd'), /d\.timeOut is not a delivery field/);
  });

  it('retries 5xx, 404, 408, 409, 429 and nothing else', () => {
    const retried = [404, 408, 409, 429, 500, 502, 503, 504, 599];
    const notRetried = [300, 301, 400, 401, 403, 405, 410, 413, 422];
    for (const s of retried) assert.equal(isRetryableStatus(s), true, String(s));
    for (const s of notRetried) assert.equal(isRetryableStatus(s), false, String(s));
  });

  it('knativeerrordata is standard base64 cut to 1024 characters', () => {
    assert.equal(encodeErrorData('bad input'), Buffer.from('bad input').toString('base64'));
    const long = encodeErrorData(Buffer.alloc(3000, 0xfb));
    assert.equal(long.length, 1024);
    assert.equal(long, Buffer.alloc(3000, 0xfb).toString('base64').slice(0, 1024));
    assert.equal(encodeErrorData(undefined), '');
  });
});

// ---- delivery -----------------------------------------------------------------------------------

describe('Broker delivery', () => {
  it('POSTs in binary mode with attributes intact, Prefer: reply, and no knativebrokerttl', async () => {
    const sub = await startSubscriber(answer(202));
    const { broker } = newBroker({ triggers: [{ name: 'pods', subscriber: sub.url, filter: { attributes: { kind: 'Pod' } } }] });
    try {
      const e = event({
        subject: '/apis/v1/namespaces/default/pods/web-0',
        time: '2024-05-01T10:00:00Z',
        dataschema: 'https://example.com/schema',
        kind: 'Pod',
        apiversion: 'v1',
        name: 'web-0',
        namespace: 'default',
      });
      await broker.publish(e);
      await broker.publish(event({ kind: 'Secret', id: 'not-for-pods' }));
      await broker.idle();
      assert.equal(sub.requests.length, 1);
      const [req] = sub.requests;
      assert.ok(req);
      assert.equal(req.method, 'POST');
      const h = req.headers;
      assert.equal(h['ce-specversion'], '1.0');
      assert.equal(h['ce-id'], e.id);
      assert.equal(h['ce-source'], 'https://10.96.0.1:443');
      assert.equal(h['ce-type'], 'dev.knative.apiserver.ref.add');
      assert.equal(h['ce-subject'], '/apis/v1/namespaces/default/pods/web-0');
      assert.equal(h['ce-time'], '2024-05-01T10:00:00Z');
      assert.equal(h['ce-dataschema'], 'https://example.com/schema');
      assert.equal(h['ce-kind'], 'Pod');
      assert.equal(h['ce-apiversion'], 'v1');
      assert.equal(h['ce-name'], 'web-0');
      assert.equal(h['ce-namespace'], 'default');
      assert.equal(h['content-type'], 'application/json');
      assert.equal(h.prefer, 'reply');
      assert.equal(h['ce-knativebrokerttl'], undefined, 'Knative strips the TTL before delivery');
      assert.deepEqual(JSON.parse(req.body.toString('utf8')), e.data);
      assert.deepEqual(broker.stats().pods, {
        queued: 0,
        inFlight: 0,
        delivered: 1,
        retried: 0,
        deadLettered: 0,
        direct: 0,
        maxInFlight: 64,
      });
    } finally {
      await broker.close();
      await sub.close();
    }
  });

  it('passes binary data through byte for byte', async () => {
    const sub = await startSubscriber(answer(202));
    const { broker } = newBroker({ triggers: [{ name: 'bin', subscriber: sub.url }] });
    try {
      const bytes = Buffer.from([0, 1, 2, 250, 251, 252, 253, 254, 255]);
      await broker.publish(event({ datacontenttype: 'application/octet-stream', data: bytes }));
      await broker.idle();
      assert.equal(sub.requests[0]?.headers['content-type'], 'application/octet-stream');
      assert.deepEqual(sub.requests[0]?.body, bytes);
    } finally {
      await broker.close();
      await sub.close();
    }
  });

  it('500 twice then 200: delivered after 2 retries, exponential waits d then 2d', async () => {
    const sub = await startSubscriber((_req, res, n) => {
      res.writeHead(n <= 2 ? 500 : 200).end();
    });
    const d = 50;
    const { broker, deadLetterFile } = newBroker({
      triggers: [{ name: 't', subscriber: sub.url }],
      delivery: { retry: 5, backoffPolicy: 'exponential', backoffDelay: 'PT0.05S' },
    });
    try {
      const e = event();
      await broker.publish(e);
      await broker.idle();
      assert.equal(sub.requests.length, 3);
      assert.deepEqual(
        sub.requests.map((r) => r.headers['ce-id']),
        [e.id, e.id, e.id],
      );
      const [a, b, c] = sub.requests.map((r) => r.at) as [number, number, number];
      assert.ok(b - a >= d - 2, `first wait ${b - a} ms should be >= ${d} ms`);
      assert.ok(c - b >= 2 * d - 2, `second wait ${c - b} ms should be >= ${2 * d} ms (exponential)`);
      assert.deepEqual(broker.stats().t, { queued: 0, inFlight: 0, delivered: 1, retried: 2, deadLettered: 0, direct: 0, maxInFlight: 64 });
      assert.deepEqual(await readDeadLetters(deadLetterFile), []);
    } finally {
      await broker.close();
      await sub.close();
    }
  });

  it('exponential backoff keeps doubling: the third wait is at least 4d', async () => {
    const sub = await startSubscriber((_req, res, n) => {
      res.writeHead(n <= 3 ? 429 : 202).end();
    });
    const d = 40;
    const { broker } = newBroker({
      triggers: [{ name: 't', subscriber: sub.url, delivery: { retry: 3, backoffPolicy: 'exponential', backoffDelay: 'PT0.04S' } }],
    });
    try {
      await broker.publish(event());
      await broker.idle();
      assert.equal(sub.requests.length, 4);
      const at = sub.requests.map((r) => r.at);
      const third = (at[3] ?? 0) - (at[2] ?? 0);
      assert.ok(third >= 4 * d - 2, `third wait ${third} ms should be >= ${4 * d} ms`);
      assert.equal(broker.stats().t?.retried, 3);
    } finally {
      await broker.close();
      await sub.close();
    }
  });

  it('a 429 with Retry-After: 1 waits at least 1 s before the next attempt under retryAfterMax, though the backoff is 10 ms; without retryAfterMax only the backoff', async () => {
    for (const [retryAfterMax, atLeast, below] of [
      ['PT5S', 998, Infinity],
      [undefined, 0, 500],
    ] as const) {
      const sub = await startSubscriber((_req, res, n) => {
        if (n === 1) res.writeHead(429, { 'retry-after': '1' }).end();
        else res.writeHead(202).end();
      });
      const { broker } = newBroker({
        triggers: [
          {
            name: 't',
            subscriber: sub.url,
            delivery: { retry: 3, backoffPolicy: 'exponential', backoffDelay: 'PT0.01S', ...(retryAfterMax ? { retryAfterMax } : {}) },
          },
        ],
      });
      try {
        await broker.publish(event());
        await broker.idle();
        assert.equal(sub.requests.length, 2);
        const wait = (sub.requests[1]?.at ?? 0) - (sub.requests[0]?.at ?? 0);
        assert.ok(wait >= atLeast && wait < below, `retryAfterMax ${retryAfterMax}: waited ${wait} ms`);
        assert.equal(broker.stats().t?.delivered, 1);
      } finally {
        await broker.close();
        await sub.close();
      }
    }
  });

  it('linear backoff: the wait before retry n is d*(n-1)', async () => {
    const sub = await startSubscriber((_req, res, n) => {
      res.writeHead(n <= 3 ? 503 : 202).end();
    });
    const d = 60;
    const { broker } = newBroker({
      triggers: [{ name: 't', subscriber: sub.url, delivery: { retry: 3, backoffPolicy: 'linear', backoffDelay: 'PT0.06S' } }],
    });
    try {
      await broker.publish(event());
      await broker.idle();
      assert.equal(sub.requests.length, 4);
      const at = sub.requests.map((r) => r.at);
      const waits = [1, 2, 3].map((i) => (at[i] ?? 0) - (at[i - 1] ?? 0));
      assert.ok((waits[1] ?? 0) >= d - 2, `second wait ${waits[1]} ms should be >= ${d}`);
      assert.ok((waits[2] ?? 0) >= 2 * d - 2, `third wait ${waits[2]} ms should be >= ${2 * d}`);
      assert.equal(broker.stats().t?.retried, 3);
      assert.equal(broker.stats().t?.delivered, 1);
    } finally {
      await broker.close();
      await sub.close();
    }
  });

  it('400: no retry, dead-lettered to the file with knativeerrordest/code/data', async () => {
    const sub = await startSubscriber(answer(400, 'spec.image is required'));
    const { broker, deadLetterFile, lines } = newBroker({
      triggers: [{ name: 'bad', subscriber: sub.url }],
      delivery: { retry: 5, backoffPolicy: 'exponential', backoffDelay: 'PT0.01S' },
    });
    try {
      const e = event({ kind: 'Pod' });
      await broker.publish(e);
      await broker.idle();
      assert.equal(sub.requests.length, 1, '400 is never retried');
      const letters = await readDeadLetters(deadLetterFile);
      assert.equal(letters.length, 1);
      const letter = letters[0] ?? {};
      assert.equal(letter.id, e.id);
      assert.equal(letter.type, e.type);
      assert.equal(letter.kind, 'Pod');
      assert.deepEqual(letter.data, e.data);
      assert.equal(letter.knativeerrordest, sub.url);
      assert.equal(letter.knativeerrorcode, 400);
      assert.equal(Buffer.from(String(letter.knativeerrordata), 'base64').toString('utf8'), 'spec.image is required');
      assert.equal(letter.knativebrokerttl, 255, 'dead letters keep the broker TTL, as on Knative');
      assert.deepEqual(broker.stats().bad, {
        queued: 0,
        inFlight: 0,
        delivered: 0,
        retried: 0,
        deadLettered: 1,
        direct: 0,
        maxInFlight: 64,
      });
      const warn = lines.find((l) => l.msg === 'event dead-lettered');
      assert.ok(warn, 'every dead-lettering is logged');
      assert.equal(warn.level, 40);
      assert.equal(warn.id, e.id);
      assert.equal(warn.status, 400);
    } finally {
      await broker.close();
      await sub.close();
    }
  });

  it('404 is retried; the last status goes into knativeerrorcode; long bodies are cut', async () => {
    const sub = await startSubscriber(answer(404, 'x'.repeat(3000)));
    const { broker, deadLetterFile } = newBroker({
      triggers: [{ name: 'gone', subscriber: sub.url, delivery: { retry: 2, backoffPolicy: 'exponential', backoffDelay: 'PT0.01S' } }],
    });
    try {
      await broker.publish(event());
      await broker.idle();
      assert.equal(sub.requests.length, 3);
      const [letter] = await readDeadLetters(deadLetterFile);
      assert.equal(letter?.knativeerrorcode, 404);
      assert.equal(String(letter?.knativeerrordata).length, 1024);
      assert.equal(broker.stats().gone?.retried, 2);
    } finally {
      await broker.close();
      await sub.close();
    }
  });

  it('network errors are retried, then dead-lettered without a status code', async () => {
    const gone = await startSubscriber(answer(202));
    const url = gone.url;
    await gone.close();
    const { broker, deadLetterFile } = newBroker({
      triggers: [{ name: 'down', subscriber: url, delivery: { retry: 2, backoffPolicy: 'linear', backoffDelay: 'PT0.01S' } }],
    });
    try {
      await broker.publish(event());
      await broker.idle();
      const [letter] = await readDeadLetters(deadLetterFile);
      assert.ok(letter);
      assert.equal(letter.knativeerrordest, url);
      assert.equal(letter.knativeerrorcode, undefined);
      assert.match(Buffer.from(String(letter.knativeerrordata), 'base64').toString('utf8'), /^dispatch error: .*ECONNREFUSED/);
      assert.equal(broker.stats().down?.retried, 2);
    } finally {
      await broker.close();
    }
  });

  it('a per-attempt timeout counts as a retryable failure', async () => {
    const sub = await startSubscriber(async (_req, res) => {
      await delay(1000);
      res.writeHead(202).end();
    });
    const { broker, deadLetterFile } = newBroker({
      triggers: [{ name: 'slow', subscriber: sub.url, delivery: { retry: 1, timeout: 'PT0.1S' } }],
    });
    try {
      await broker.publish(event());
      await broker.idle();
      assert.equal(sub.requests.length, 2);
      const [letter] = await readDeadLetters(deadLetterFile);
      assert.match(Buffer.from(String(letter?.knativeerrordata), 'base64').toString('utf8'), /within 100 ms/);
    } finally {
      await broker.close();
      await sub.close();
    }
  });

  it('2xx with a non-empty body that is not a CloudEvent fails like on Knative (502, retried)', async () => {
    const sub = await startSubscriber(answer(200, '{"ok":true}', { 'content-type': 'application/json' }));
    const { broker, deadLetterFile, lines } = newBroker({ triggers: [{ name: 'chatty', subscriber: sub.url, delivery: { retry: 1 } }] });
    try {
      await broker.publish(event());
      await broker.idle();
      assert.equal(sub.requests.length, 2);
      const [letter] = await readDeadLetters(deadLetterFile);
      assert.equal(letter?.knativeerrorcode, 502);
      assert.equal(Buffer.from(String(letter?.knativeerrordata), 'base64').toString('utf8'), '{"ok":true}');
      assert.ok(lines.some((l) => String(l.reason).includes('not a CloudEvent')));
    } finally {
      await broker.close();
      await sub.close();
    }
  });

  it('dead-letters to an HTTP sink (binary mode, error extensions as ce- headers)', async () => {
    const sink = await startSubscriber(answer(202));
    const sub = await startSubscriber(answer(503, 'overloaded'));
    const { broker, deadLetterFile } = newBroker({
      triggers: [
        {
          name: 'withsink',
          subscriber: sub.url,
          delivery: { retry: 1, backoffPolicy: 'exponential', backoffDelay: 'PT0.01S', deadLetterSink: sink.url },
        },
      ],
    });
    try {
      const e = event({ kind: 'Pod' });
      await broker.publish(e);
      await broker.idle();
      assert.equal(sub.requests.length, 2);
      assert.equal(sink.requests.length, 1);
      const h = sink.requests[0]?.headers ?? {};
      assert.equal(h['ce-id'], e.id);
      assert.equal(h['ce-kind'], 'Pod');
      assert.equal(h['ce-knativeerrordest'], sub.url);
      assert.equal(h['ce-knativeerrorcode'], '503');
      assert.equal(Buffer.from(String(h['ce-knativeerrordata']), 'base64').toString('utf8'), 'overloaded');
      assert.deepEqual(JSON.parse(sink.requests[0]?.body.toString('utf8') ?? 'null'), e.data);
      assert.deepEqual(await readDeadLetters(deadLetterFile), [], 'the file is only for events without a sink');
    } finally {
      await broker.close();
      await sub.close();
      await sink.close();
    }
  });

  it("a trigger's delivery replaces the broker's, but the broker's sink is the fallback", async () => {
    const sink = await startSubscriber(answer(202));
    const sub = await startSubscriber(answer(500));
    const { broker } = newBroker({
      triggers: [{ name: 'own', subscriber: sub.url, delivery: { retry: 0 } }],
      delivery: { retry: 4, backoffPolicy: 'exponential', backoffDelay: 'PT0.01S', deadLetterSink: sink.url },
    });
    try {
      await broker.publish(event());
      await broker.idle();
      assert.equal(sub.requests.length, 1, 'retry 0 from the trigger, not 4 from the broker');
      assert.equal(sink.requests.length, 1);
      assert.equal(sink.requests[0]?.headers['ce-knativeerrorcode'], '500');
    } finally {
      await broker.close();
      await sub.close();
      await sink.close();
    }
  });

  it('a failing HTTP sink falls back to the dead-letter file', async () => {
    const sink = await startSubscriber(answer(500));
    const sub = await startSubscriber(answer(400));
    const { broker, deadLetterFile } = newBroker({
      triggers: [{ name: 't', subscriber: sub.url, delivery: { retry: 1, deadLetterSink: sink.url } }],
    });
    try {
      const e = event();
      await broker.publish(e);
      await broker.idle();
      assert.equal(sink.requests.length, 2, 'the sink gets the same retry policy');
      const letters = await readDeadLetters(deadLetterFile);
      assert.equal(letters.length, 1);
      assert.equal(letters[0]?.id, e.id);
      assert.equal(letters[0]?.knativeerrorcode, 400);
    } finally {
      await broker.close();
      await sub.close();
      await sink.close();
    }
  });

  it("an HTTP sink's 503 with Retry-After: 1 is waited for as a subscriber's is, and a 2xx with a body is taken", async () => {
    const sink = await startSubscriber((_req, res, n) => {
      if (n === 1) res.writeHead(503, { 'retry-after': '1' }).end();
      else res.writeHead(200, { 'content-type': 'text/plain' }).end('stored');
    });
    const sub = await startSubscriber(answer(400));
    const { broker, deadLetterFile } = newBroker({
      triggers: [
        {
          name: 't',
          subscriber: sub.url,
          delivery: { retry: 2, backoffPolicy: 'exponential', backoffDelay: 'PT0.01S', retryAfterMax: 'PT5S', deadLetterSink: sink.url },
        },
      ],
    });
    try {
      await broker.publish(event());
      await broker.idle();
      assert.equal(sink.requests.length, 2);
      const wait = (sink.requests[1]?.at ?? 0) - (sink.requests[0]?.at ?? 0);
      assert.ok(wait >= 998, `waited ${wait} ms`);
      assert.deepEqual(await readDeadLetters(deadLetterFile), [], 'the sink took it: nothing in the file');
    } finally {
      await broker.close();
      await sub.close();
      await sink.close();
    }
  });

  it('reuses keep-alive connections', async () => {
    const sub = await startSubscriber(answer(202));
    const { broker } = newBroker({ triggers: [{ name: 't', subscriber: sub.url }], maxInFlight: 1 });
    try {
      for (let i = 0; i < 30; i += 1) await broker.publish(event());
      await broker.idle();
      assert.equal(sub.requests.length, 30);
      assert.ok(sub.connections() <= 2, `30 deliveries used ${sub.connections()} connections`);
    } finally {
      await broker.close();
      await sub.close();
    }
  });
});

// ---- replies and TTL ----------------------------------------------------------------------------

describe('Broker replies', () => {
  it('a reply re-enters the broker and reaches a second trigger with knativebrokerttl 254', async () => {
    const replier = await startSubscriber((req, res) => {
      // Structured-mode reply.
      res.writeHead(200, { 'content-type': 'application/cloudevents+json' }).end(
        JSON.stringify({
          specversion: '1.0',
          id: `reply-of-${String(req.headers['ce-id'])}`,
          source: '/replier',
          type: 'com.example.reply',
          data: { ok: true },
        }),
      );
    });
    const second = await startSubscriber(answer(202));
    const rejecting = await startSubscriber(answer(400, 'no thanks'));
    const { broker, deadLetterFile } = newBroker({
      triggers: [
        { name: 'requests', subscriber: replier.url, filter: { attributes: { type: 'com.example.request' } } },
        { name: 'replies', subscriber: second.url, filters: [{ exact: { type: 'com.example.reply' } }] },
        // Dead letters keep the broker TTL, which makes the TTL of the re-entered reply visible.
        { name: 'replies-rejected', subscriber: rejecting.url, filters: [{ suffix: { type: '.reply' } }] },
      ],
    });
    try {
      const e = event({ type: 'com.example.request' });
      await broker.publish(e);
      await broker.idle();
      assert.equal(replier.requests.length, 1);
      assert.equal(second.requests.length, 1);
      const h = second.requests[0]?.headers ?? {};
      assert.equal(h['ce-id'], `reply-of-${e.id}`);
      assert.equal(h['ce-type'], 'com.example.reply');
      assert.equal(h['ce-source'], '/replier');
      assert.equal(h['ce-knativebrokerttl'], undefined);
      assert.deepEqual(JSON.parse(second.requests[0]?.body.toString('utf8') ?? 'null'), { ok: true });
      const [letter] = await readDeadLetters(deadLetterFile);
      assert.equal(letter?.id, `reply-of-${e.id}`);
      assert.equal(letter?.knativebrokerttl, 254);
      assert.equal(broker.stats().requests?.delivered, 1);
      assert.equal(broker.stats().replies?.delivered, 1);
    } finally {
      await broker.close();
      await replier.close();
      await second.close();
      await rejecting.close();
    }
  });

  it('a reply loop stops when knativebrokerttl runs out, with a log line', async () => {
    const looper = await startSubscriber((req, res, n) => {
      // Binary-mode reply of the same type: the trigger matches its own replies.
      res
        .writeHead(200, {
          'ce-specversion': '1.0',
          'ce-id': `loop-${n}`,
          'ce-source': '/loop',
          'ce-type': String(req.headers['ce-type']),
          'content-type': 'application/json',
        })
        .end('{}');
    });
    const { broker, lines } = newBroker({ triggers: [{ name: 'loop', subscriber: looper.url }] });
    try {
      await broker.publish(event({ type: 'com.example.loop', knativebrokerttl: '3' }));
      await broker.idle();
      // Enters with 3 → 2: delivered; reply 2 → 1: delivered; reply 1 → 0: dropped.
      assert.equal(looper.requests.length, 2);
      const drop = lines.find((l) => String(l.msg).includes('knativebrokerttl exhausted'));
      assert.ok(drop, 'the drop is logged');
      assert.equal(drop.id, 'loop-2');
    } finally {
      await broker.close();
      await looper.close();
    }
  });

  it('an event without TTL loops at most 255 times', async () => {
    const looper = await startSubscriber((_req, res, n) => {
      res.writeHead(200, { 'ce-specversion': '1.0', 'ce-id': `l-${n}`, 'ce-source': '/loop', 'ce-type': 'com.example.loop' }).end();
    });
    const { broker } = newBroker({ triggers: [{ name: 'loop', subscriber: looper.url }] });
    try {
      await broker.publish(event({ type: 'com.example.loop' }));
      await broker.idle();
      assert.equal(looper.requests.length, 255);
    } finally {
      await broker.close();
      await looper.close();
    }
  });
});

// ---- back-pressure ------------------------------------------------------------------------------

describe('Broker back-pressure', () => {
  it('with queueLimit 5 and a blocked subscriber, the 6th+ publish waits until it unblocks', async () => {
    const { gate, release } = blocker();
    const sub = await startSubscriber(async (_req, res) => {
      await gate;
      res.writeHead(202).end();
    });
    const { broker } = newBroker({ triggers: [{ name: 'blocked', subscriber: sub.url }], queueLimit: 5, maxInFlight: 1 });
    try {
      const events = Array.from({ length: 40 }, () => event());
      const resolved: boolean[] = events.map(() => false);
      const publishes = events.map((e, i) =>
        broker.publish(e).then(() => {
          resolved[i] = true;
        }),
      );
      await waitFor(() => sub.requests.length === 1, 'the first delivery');
      let maxHeld = 0;
      for (let i = 0; i < 20; i += 1) {
        const s = broker.stats().blocked;
        maxHeld = Math.max(maxHeld, (s?.queued ?? 0) + (s?.inFlight ?? 0));
        await delay(10);
      }
      assert.deepEqual(resolved.slice(0, 5), [true, true, true, true, true], 'the first 5 are accepted');
      assert.equal(resolved.filter(Boolean).length, 5, 'the 6th+ publish has not resolved');
      assert.ok(maxHeld <= 5, `the broker held ${maxHeld} events for the trigger (limit 5)`);
      assert.equal(sub.requests.length, 1, 'maxInFlight 1');

      release();
      await Promise.all(publishes);
      await broker.idle();
      assert.equal(sub.requests.length, 40);
      assert.deepEqual(
        sub.requests.map((r) => r.headers['ce-id']),
        events.map((e) => e.id),
        'FIFO order',
      );
      assert.deepEqual(broker.stats().blocked, {
        queued: 0,
        inFlight: 0,
        delivered: 40,
        retried: 0,
        deadLettered: 0,
        direct: 0,
        maxInFlight: 1,
      });
    } finally {
      release();
      await broker.close();
      await sub.close();
    }
  });

  it('a slow trigger does not hold back events for another trigger whose queue has room', async () => {
    const { gate, release } = blocker();
    const slow = await startSubscriber(async (_req, res) => {
      await gate;
      res.writeHead(202).end();
    });
    const quick = await startSubscriber(answer(202));
    const { broker } = newBroker({
      triggers: [
        { name: 'slow', subscriber: slow.url, filter: { attributes: { kind: 'Slow' } } },
        { name: 'quick', subscriber: quick.url, filter: { attributes: { kind: 'Quick' } } },
      ],
      queueLimit: 2,
      maxInFlight: 1,
    });
    try {
      const blocked = [
        broker.publish(event({ kind: 'Slow' })),
        broker.publish(event({ kind: 'Slow' })),
        broker.publish(event({ kind: 'Slow' })),
      ];
      for (let i = 0; i < 10; i += 1) await broker.publish(event({ kind: 'Quick' }));
      await waitFor(() => quick.requests.length === 10, 'quick deliveries');
      release();
      await Promise.all(blocked);
      await broker.idle();
      assert.equal(slow.requests.length, 3);
    } finally {
      release();
      await broker.close();
      await slow.close();
      await quick.close();
    }
  });
});

// ---- ingress ------------------------------------------------------------------------------------

describe('Broker ingress', () => {
  it('accepts binary and structured CloudEvents with 202 and rejects malformed requests with 400', async () => {
    const sub = await startSubscriber(answer(202));
    const { broker } = newBroker({ triggers: [{ name: 'all', subscriber: sub.url }] });
    try {
      const base = await broker.listen();
      const post = (headers: Record<string, string>, body: string, method = 'POST', path = '/'): Promise<Response> =>
        fetch(new URL(path, base), { method, headers, body: method === 'GET' ? undefined : body });

      const binary = await post(
        {
          'ce-specversion': '1.0',
          'ce-id': 'b-1',
          'ce-source': '/src',
          'ce-type': 'com.example.binary',
          'ce-kind': 'Pod',
          'content-type': 'application/json',
        },
        '{"name":"web-0"}',
      );
      assert.equal(binary.status, 202);
      const structured = await post(
        { 'content-type': 'application/cloudevents+json' },
        JSON.stringify({
          specversion: '1.0',
          id: 's-1',
          source: '/src',
          type: 'com.example.structured',
          time: '2024-05-01T10:00:00.5+02:00',
          datacontenttype: 'application/json',
          data: { n: 1 },
        }),
      );
      assert.equal(structured.status, 202);

      const malformed: Array<[string, Promise<Response>, RegExp]> = [
        ['no CloudEvent at all', post({ 'content-type': 'text/plain' }, 'hello'), /no cloud event detected/],
        [
          'binary without ce-type',
          post({ 'ce-specversion': '1.0', 'ce-id': 'x', 'ce-source': '/s', 'content-type': 'application/json' }, '{}'),
          /type/,
        ],
        [
          'binary with a bad ce-time',
          post({ 'ce-specversion': '1.0', 'ce-id': 'x', 'ce-source': '/s', 'ce-type': 't', 'ce-time': 'yesterday' }, ''),
          /RFC 3339/,
        ],
        [
          'binary with broken JSON data',
          post({ 'ce-specversion': '1.0', 'ce-id': 'x', 'ce-source': '/s', 'ce-type': 't', 'content-type': 'application/json' }, '{"a":'),
          /JSON/,
        ],
        ['structured, not JSON', post({ 'content-type': 'application/cloudevents+json' }, '{nope'), /JSON/],
        [
          'structured without source',
          post({ 'content-type': 'application/cloudevents+json' }, JSON.stringify({ specversion: '1.0', id: 'x', type: 't' })),
          /source/,
        ],
        [
          'structured with a non-string subject (SDK schema)',
          post(
            { 'content-type': 'application/cloudevents+json' },
            JSON.stringify({ specversion: '1.0', id: 'x', source: '/s', type: 't', subject: 42 }),
          ),
          /subject/,
        ],
        ['structured, empty', post({ 'content-type': 'application/cloudevents+json' }, ''), /without a body/],
        [
          'batch',
          post(
            { 'content-type': 'application/cloudevents-batch+json' },
            JSON.stringify([{ specversion: '1.0', id: 'x', source: '/s', type: 't' }]),
          ),
          /batch/,
        ],
        // Delivered in binary mode, every attribute becomes a header: accepted, these would fail every attempt.
        [
          'structured with a line break in an extension',
          post(
            { 'content-type': 'application/cloudevents+json' },
            JSON.stringify({ specversion: '1.0', id: 'x', source: '/s', type: 't', team: 'a\r\nx-injected: 1' }),
          ),
          /attribute team has a control character/,
        ],
        [
          'structured with a character beyond Latin-1 in its subject',
          post(
            { 'content-type': 'application/cloudevents+json' },
            JSON.stringify({ specversion: '1.0', id: 'x', source: '/s', type: 't', subject: 'caf\u20ac' }),
          ),
          /attribute subject .*beyond Latin-1/,
        ],
        [
          'TTL exhausted',
          post({ 'ce-specversion': '1.0', 'ce-id': 'x', 'ce-source': '/s', 'ce-type': 't', 'ce-knativebrokerttl': '1' }, ''),
          /knativebrokerttl/,
        ],
      ];
      for (const [what, pending, reason] of malformed) {
        const res = await pending;
        const text = await res.text();
        assert.equal(res.status, 400, `${what}: ${text}`);
        assert.match(text, reason, what);
      }
      const get = await post({}, '', 'GET');
      assert.equal(get.status, 405);
      assert.equal(get.headers.get('allow'), 'POST');
      const elsewhere = await post(
        { 'ce-specversion': '1.0', 'ce-id': 'x', 'ce-source': '/s', 'ce-type': 't' },
        '',
        'POST',
        '/default/other',
      );
      assert.equal(elsewhere.status, 404);

      await broker.idle();
      assert.deepEqual(
        sub.requests.map((r) => r.headers['ce-id']),
        ['b-1', 's-1'],
        'only the valid events are delivered',
      );
      const [b, s] = sub.requests;
      assert.equal(b?.headers['ce-kind'], 'Pod');
      assert.equal(b?.headers['ce-time'], undefined, 'no time invented for an event without one');
      assert.deepEqual(JSON.parse(b?.body.toString('utf8') ?? 'null'), { name: 'web-0' });
      assert.equal(s?.headers['ce-type'], 'com.example.structured', 'structured in, binary out');
      assert.equal(s?.headers['ce-time'], '2024-05-01T10:00:00.5+02:00');
      assert.equal(s?.headers['content-type'], 'application/json');
      assert.deepEqual(JSON.parse(s?.body.toString('utf8') ?? 'null'), { n: 1 });
    } finally {
      await broker.close();
      await sub.close();
    }
  });
});

describe('Broker ingress: ce-* header values as the CloudEvents HTTP binding allows them', () => {
  /** One POST written byte for byte, so a header carries exactly the bytes given; resolves to the status and body. */
  const rawPost = (base: string, headerLines: Buffer[]): Promise<{ status: number; text: string }> =>
    new Promise((resolve, reject) => {
      const { hostname, port } = new URL(base);
      const socket = connect(Number(port), hostname, () => {
        socket.end(
          Buffer.concat([
            Buffer.from('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n'),
            ...headerLines.map((line) => Buffer.concat([line, Buffer.from('\r\n')])),
            Buffer.from('\r\n'),
          ]),
        );
      });
      const chunks: Buffer[] = [];
      socket
        .on('data', (chunk: Buffer) => chunks.push(chunk))
        .on('error', reject)
        .on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]), text: text.slice(text.indexOf('\r\n\r\n') + 4) });
        });
    });
  const required = ['ce-specversion: 1.0', 'ce-id: n-1', 'ce-source: /s', 'ce-type: t'].map((line) => Buffer.from(line));

  it('raw UTF-8 (or any byte beyond printable ASCII) in a ce-* header: 400 naming the header; percent-encoded: 202, passed on as received', async () => {
    const sub = await startSubscriber(answer(202));
    const { broker } = newBroker({ triggers: [{ name: 'all', subscriber: sub.url }] });
    try {
      const base = await broker.listen();
      const raw = await rawPost(base, [...required, Buffer.concat([Buffer.from('ce-name: caf'), Buffer.from('é', 'utf8')])]);
      assert.equal(raw.status, 400, raw.text);
      assert.match(
        raw.text,
        /header ce-name holds a character outside printable ASCII: the CloudEvents HTTP binding carries such characters percent-encoded/,
      );
      const latin1 = await rawPost(base, [...required, Buffer.from([...Buffer.from('ce-subject: caf'), 0xe9])]);
      assert.equal(latin1.status, 400, latin1.text);
      const tab = await rawPost(base, [...required, Buffer.from('ce-team: a\tb')]);
      assert.equal(tab.status, 400, tab.text);
      const encoded = await rawPost(base, [...required, Buffer.from('ce-name: caf%C3%A9')]);
      assert.equal(encoded.status, 202, encoded.text);
      // A header that is not an attribute is not the binding's to judge.
      const other = await rawPost(base, [
        ...required.map((line) => Buffer.from(line.toString().replace('n-1', 'n-2'))),
        Buffer.concat([Buffer.from('x-note: caf'), Buffer.from('é', 'utf8')]),
      ]);
      assert.equal(other.status, 202, other.text);
      await broker.idle();
      assert.deepEqual(
        sub.requests.map((request) => [request.headers['ce-id'], request.headers['ce-name']]),
        [
          ['n-1', 'caf%C3%A9'],
          ['n-2', undefined],
        ],
      );
    } finally {
      await broker.close();
      await sub.close();
    }
  });
});

// ---- robustness ---------------------------------------------------------------------------------

describe('Broker robustness', () => {
  it('rejects malformed publishes and triggers with clear errors and keeps working', async () => {
    const sub = await startSubscriber(answer(202));
    const { broker } = newBroker({ triggers: [] });
    try {
      for (const bad of [
        null,
        undefined,
        42,
        'x',
        [],
        {},
        { id: 1, source: '/s', type: 't', specversion: '1.0' },
        { id: 'a', source: '/s', type: 't', specversion: '1.0', 'Bad-Name': 1 },
        { id: 'a', source: '/s', type: 't\n', specversion: '1.0' },
      ]) {
        await assert.rejects(broker.publish(bad as unknown as CloudEventV1<unknown>), /not a CloudEvent/);
      }
      assert.throws(() => broker.addTrigger({ name: '', subscriber: sub.url }), /name/);
      assert.throws(() => broker.addTrigger({ name: 't', subscriber: 'ftp://x' }), /http\(s\) URL/);
      assert.throws(() => broker.addTrigger({ name: 't', subscriber: sub.url, filter: { attributes: { Type: 'x' } } }), /lowercase/);
      assert.throws(
        () => broker.addTrigger({ name: 't', subscriber: sub.url, filters: [{ exact: { a: 'b' }, prefix: { c: 'd' } } as never] }),
        /multiple dialects/,
      );
      assert.throws(
        () => broker.addTrigger({ name: 't', subscriber: sub.url, delivery: { backoffDelay: '200ms' } }),
        /backoffDelay: invalid ISO-8601 duration/,
      );
      assert.throws(() => broker.addTrigger({ name: 't', subscriber: sub.url, delivery: { retry: -1 } }), /retry must be an integer >= 0/);
      assert.throws(
        () => broker.addTrigger({ name: 't', subscriber: sub.url, delivery: { deadLetterSink: 'ftp://x/y' } }),
        /deadLetterSink/,
      );
      assert.deepEqual(broker.stats(), {});
      broker.addTrigger({ name: 'ok', subscriber: sub.url });
      await broker.publish(event());
      await broker.idle();
      assert.equal(sub.requests.length, 1);
    } finally {
      await broker.close();
      await sub.close();
    }
  });

  it('removeTrigger stops new events but still delivers what the trigger holds', async () => {
    const { gate, release } = blocker();
    const sub = await startSubscriber(async (_req, res) => {
      await gate;
      res.writeHead(202).end();
    });
    const { broker } = newBroker({ triggers: [{ name: 'r', subscriber: sub.url }], maxInFlight: 1 });
    try {
      await broker.publish(event());
      await broker.publish(event());
      await waitFor(() => sub.requests.length === 1, 'first delivery');
      broker.removeTrigger('r');
      assert.deepEqual(broker.stats(), {});
      await broker.publish(event());
      release();
      await broker.idle();
      assert.equal(sub.requests.length, 2);
    } finally {
      release();
      await broker.close();
      await sub.close();
    }
  });

  it('close() writes undelivered events to the dead-letter file, rejects waiting publishers, and lets the process exit', async () => {
    // A subscriber that never answers, and one that fails with a long backoff pending.
    const hanging = await startSubscriber(() => new Promise<void>(() => undefined));
    const failing = await startSubscriber(answer(500));
    const deadLetterFile = join(dir, 'close.jsonl');
    const script = join(dir, 'close-child.ts');
    const brokerModule = fileURLToPath(new URL('../../eventing/broker/index.ts', import.meta.url));
    await writeFile(
      script,
      `
import { pino } from ${JSON.stringify(import.meta.resolve('pino'))};
import { Broker } from ${JSON.stringify(brokerModule)};
const broker = new Broker({
  deadLetterFile: ${JSON.stringify(deadLetterFile)},
  log: pino({ level: 'silent' }),
  queueLimit: 2,
  maxInFlight: 1,
  triggers: [
    { name: 'hang', subscriber: ${JSON.stringify(hanging.url)}, filter: { attributes: { kind: 'Hang' } } },
    { name: 'fail', subscriber: ${JSON.stringify(failing.url)}, filter: { attributes: { kind: 'Fail' } }, delivery: { retry: 5, backoffPolicy: 'exponential', backoffDelay: 'PT60S' } },
  ],
});
await broker.listen();
const ev = (id, kind) => ({ specversion: '1.0', id, source: '/s', type: 't', kind });
await broker.publish(ev('h1', 'Hang'));
await broker.publish(ev('h2', 'Hang'));
const waiting = broker.publish(ev('h3', 'Hang')).then(() => 'accepted', (e) => 'rejected: ' + e.message);
await broker.publish(ev('f1', 'Fail'));
await new Promise((r) => setTimeout(r, 300));
await broker.close({ drainTimeoutMs: 300 });
console.log(JSON.stringify({ waiting: await waiting }));
`,
    );
    try {
      const child = spawn(process.execPath, [script], {
        cwd: fileURLToPath(new URL('../..', import.meta.url)),
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      const exit = await new Promise<number | null | 'timeout'>((resolve) => {
        const timer = setTimeout(() => {
          child.kill('SIGKILL');
          resolve('timeout');
        }, 30_000);
        child.on('exit', (code) => {
          clearTimeout(timer);
          resolve(code);
        });
      });
      assert.equal(exit, 0, `the process should exit by itself after close(); stderr: ${stderr}`);
      assert.match(stdout, /"waiting":"rejected: Broker closed/);
      const letters = await readDeadLetters(deadLetterFile);
      assert.deepEqual(letters.map((l) => l.id).sort(), ['f1', 'h1', 'h2']);
      for (const l of letters) assert.ok(l.knativeerrordest, 'error extensions present');
      assert.equal(letters.find((l) => l.id === 'f1')?.knativeerrorcode, 500, 'the last status before the broker closed');
      assert.equal(letters.find((l) => l.id === 'h1')?.knativeerrorcode, undefined, 'in flight when closed: no answer');
    } finally {
      await hanging.close();
      await failing.close();
    }
  });
});
