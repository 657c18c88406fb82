// The webhook client against real HTTP servers on loopback (functions/composite/metacontroller/hook-client.ts).
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { MAX_TIMER_MS } from '../../../functions/runtime/index.ts';
import {
  callCompositeHook,
  DEFAULT_TIMEOUT_MS,
  jsonPieces,
  postJson,
  retryAfterSeconds,
  webhookTarget,
  webhookTimeoutMs,
  type HookFailure,
} from '../../../functions/composite/metacontroller/hook-client.ts';

interface Seen {
  method?: string;
  url?: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A hook whose behaviour each test sets; records what it received. */
let behaviour: (request: http.IncomingMessage, response: http.ServerResponse, body: string) => void = () => {};
const seen: Seen[] = [];
let server: http.Server;
let base: string;

before(async () => {
  server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      seen.push({ method: request.method, url: request.url, headers: request.headers, body });
      behaviour(request, response, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

const answer =
  (status: number, body: string, headers: Record<string, string> = {}) =>
  (_: http.IncomingMessage, response: http.ServerResponse) => {
    response.writeHead(status, { 'Content-Type': 'application/json', ...headers });
    response.end(body);
  };
const call = (webhook: { url?: string; timeout?: string } = {}, request: unknown = { parent: { metadata: { name: 'p' } } }) =>
  callCompositeHook({ webhook: { url: `${base}/sync`, ...webhook }, version: 'v1', strict: false, hookType: 'sync', request });
const failureOf = (result: { ok: boolean; failure?: HookFailure }): HookFailure => {
  assert.equal(result.ok, false);
  return result.failure!;
};

describe('hook client', () => {
  test('POSTs the JSON request with exactly Content-Type application/json and a Content-Length', async () => {
    behaviour = answer(200, '{"status":{"ok":true},"children":[]}');
    seen.length = 0;
    const payload = { parent: { metadata: { name: 'p', labels: { ü: 'ñ' } } } };
    const result = await call({}, payload);
    assert.ok(result.ok);
    assert.deepEqual(result.value.status, { ok: true });
    const [request] = seen;
    assert.equal(request?.method, 'POST');
    assert.equal(request?.url, '/sync');
    assert.equal(request?.headers['content-type'], 'application/json');
    assert.equal(request?.headers['content-length'], String(Buffer.byteLength(request!.body)));
    assert.equal(request?.headers['transfer-encoding'], undefined);
    assert.deepEqual(JSON.parse(request!.body), payload);
  });

  test("the answer's content type is not checked (upstream reads any 200 body as JSON)", async () => {
    behaviour = answer(200, '{"children":[]}', { 'Content-Type': 'text/plain' });
    assert.ok((await call()).ok);
  });

  test('500 is a SyncError carrying the status and body', async () => {
    behaviour = answer(500, 'database on fire');
    const failure = failureOf(await call());
    assert.deepEqual([failure.type, 'cause' in failure && failure.cause], ['SyncError', 'status']);
    assert.equal(failure.reason, 'unsupported status code: 500 body: database on fire');
  });

  test('only 200 is success: 201 and 204 are SyncErrors too', async () => {
    for (const status of [201, 204]) {
      behaviour = answer(status, status === 204 ? '' : '{}');
      assert.match(failureOf(await call()).reason, new RegExp(`unsupported status code: ${status}`));
    }
  });

  test('a hook slower than the webhook timeout is a SyncError (timeout)', async () => {
    behaviour = () => {}; // never answers
    const started = Date.now();
    const failure = failureOf(await call({ timeout: '200ms' }));
    assert.equal('cause' in failure && failure.cause, 'timeout');
    assert.match(failure.reason, /timed out after 200 ms/);
    assert.ok(Date.now() - started < 5000);
  });

  test('a timeout beyond the largest Node timer (600h) waits for the answer, not 1 ms', async () => {
    behaviour = (request, response, body) => setTimeout(() => answer(200, '{"children":[]}')(request, response), 50);
    const result = await call({ timeout: '600h' });
    assert.ok(result.ok, JSON.stringify(result));
  });

  test('a body that stalls after the headers still hits the timeout', async () => {
    behaviour = (_, response) => {
      response.writeHead(200, { 'Content-Type': 'application/json' });
      response.write('{"children":');
    };
    const failure = failureOf(await call({ timeout: '200ms' }));
    assert.equal('cause' in failure && failure.cause, 'timeout');
  });

  test('malformed JSON in a 200 is a SyncError (malformed) with the decoder message', async () => {
    behaviour = answer(200, '{"children": [');
    const failure = failureOf(await call());
    assert.equal('cause' in failure && failure.cause, 'malformed');
    assert.match(failure.reason, /can't unmarshal webhookResponse \(version: v1, type: sync\): malformed JSON/);
  });

  test('a schema-violating 200 is a SyncError (malformed)', async () => {
    behaviour = answer(200, '{"children": {"not": "a list"}}');
    assert.match(failureOf(await call()).reason, /"children" must be a list/);
  });

  test('429 with Retry-After seconds is TooManyRequests with that delay, not a SyncError', async () => {
    behaviour = answer(429, 'slow down', { 'Retry-After': '7' });
    const failure = failureOf(await call());
    assert.deepEqual([failure.type, failure.type === 'TooManyRequests' && failure.retryAfterSeconds], ['TooManyRequests', 7]);
  });

  test('429 with an HTTP date waits until then; without a usable header, 0', async () => {
    const inNineSeconds = new Date(Date.now() + 8_500).toUTCString();
    behaviour = answer(429, '', { 'Retry-After': inNineSeconds });
    const dated = failureOf(await call());
    assert.ok(dated.type === 'TooManyRequests' && dated.retryAfterSeconds >= 8 && dated.retryAfterSeconds <= 9, JSON.stringify(dated));
    behaviour = answer(429, '');
    const bare = failureOf(await call());
    assert.equal(bare.type === 'TooManyRequests' && bare.retryAfterSeconds, 0);
  });

  test('an unreachable hook is a SyncError (unreachable)', async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const failure = failureOf(
      await callCompositeHook({
        webhook: { url: `http://127.0.0.1:${port}/sync` },
        version: 'v1',
        strict: false,
        hookType: 'sync',
        request: {},
      }),
    );
    assert.equal('cause' in failure && failure.cause, 'unreachable');
    assert.match(failure.reason, /ECONNREFUSED/);
  });

  test('bad webhook configuration is a SyncError (config)', async () => {
    for (const webhook of [
      {},
      { service: { name: 's', namespace: 'n' } },
      { service: { name: '', namespace: 'n' }, path: '/x' },
      { url: 'ftp://x/y' },
      { url: 'not a url' },
    ]) {
      const failure = failureOf(await callCompositeHook({ webhook, version: 'v1', strict: false, hookType: 'sync', request: {} }));
      assert.equal('cause' in failure && failure.cause, 'config', JSON.stringify(webhook));
    }
  });

  test('many calls in parallel each get their own answer', async () => {
    behaviour = (_, response, body) => answer(200, JSON.stringify({ status: { echo: JSON.parse(body).n } }))(_, response);
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, n) =>
        callCompositeHook({ webhook: { url: `${base}/sync` }, version: 'v1', strict: false, hookType: 'sync', request: { n } }),
      ),
    );
    results.forEach((result, n) => assert.deepEqual(result.ok && result.value.status, { echo: n }));
  });

  test('an answer over the size limit is refused, not buffered', async () => {
    behaviour = answer(200, JSON.stringify({ status: { big: 'x'.repeat(10_000) } }));
    const result = await postJson({ url: `${base}/sync`, timeoutMs: 1000 }, {}, { maxResponseBytes: 1000 });
    const failure = failureOf(result);
    assert.equal('cause' in failure && failure.cause, 'too-large');
  });

  test('a 307 or 308 is followed with the same POST, as Go follows it; a loop stops after 10; a 302 is an answer', async () => {
    behaviour = (request, response, body) => {
      if (request.url === '/sync') answer(308, '', { Location: '/sync/' })(request, response);
      else if (request.url === '/sync/') answer(307, '', { Location: `${base}/final` })(request, response);
      else if (request.url === '/final') answer(200, JSON.stringify({ status: { got: JSON.parse(body) } }))(request, response);
      else if (request.url === '/loop') answer(307, '', { Location: '/loop' })(request, response);
      else answer(302, 'moved', { Location: '/final' })(request, response);
    };
    seen.length = 0;
    const followed = await call({}, { parent: { n: 1 } });
    assert.ok(followed.ok, JSON.stringify(followed));
    assert.deepEqual(followed.value.status, { got: { parent: { n: 1 } } });
    assert.deepEqual(
      seen.map((request) => `${request.method} ${request.url} ${request.body}`),
      ['/sync', '/sync/', '/final'].map((path) => `POST ${path} {"parent":{"n":1}}`),
    );
    const loop = failureOf(await call({ url: `${base}/loop` }));
    assert.match(loop.reason, /stopped after 10 redirects/);
    const found = failureOf(await call({ url: `${base}/found` }));
    assert.match(found.reason, /unsupported status code: 302/);
  });

  test('postJson returns the raw 200 body', async () => {
    behaviour = answer(200, '{"relatedResources":[]}');
    const result = await postJson({ url: `${base}/customize`, timeoutMs: 1000 }, {});
    assert.deepEqual(result, { ok: true, value: '{"relatedResources":[]}' });
  });

  test('an answer whose characters are split between its chunks is read whole', async () => {
    const text = JSON.stringify({ status: { note: 'é€😀'.repeat(3) } });
    const bytes = Buffer.from(text);
    behaviour = (_, response) => {
      response.writeHead(200, { 'Content-Type': 'application/json' });
      // One byte at a time: every multi-byte character is cut between writes.
      const next = (at: number) => (at < bytes.length ? response.write(bytes.subarray(at, at + 1), () => next(at + 1)) : response.end());
      next(0);
    };
    const result = await postJson({ url: `${base}/sync`, timeoutMs: 5000 }, {});
    assert.deepEqual(result, { ok: true, value: text });
  });
});

describe('webhook configuration', () => {
  test('url overrides service and path', () => {
    const target = webhookTarget({ url: 'http://a/b', service: { name: 's', namespace: 'n' }, path: '/p' });
    assert.deepEqual(target, { ok: true, value: { url: 'http://a/b', timeoutMs: DEFAULT_TIMEOUT_MS } });
  });

  test('service → <protocol>://<name>.<namespace>:<port><path>, port 80 and http by default', () => {
    assert.deepEqual(webhookTarget({ service: { name: 'hook', namespace: 'ops' }, path: '/sync' }), {
      ok: true,
      value: { url: 'http://hook.ops:80/sync', timeoutMs: DEFAULT_TIMEOUT_MS },
    });
    const custom = webhookTarget({ service: { name: 'hook', namespace: 'ops', port: 8443, protocol: 'https' }, path: '/s', timeout: '2s' });
    assert.deepEqual(custom, { ok: true, value: { url: 'https://hook.ops:8443/s', timeoutMs: 2000 } });
  });

  test('timeouts are Go durations; absent, zero or invalid mean 10 s', () => {
    assert.equal(webhookTimeoutMs('1m30s'), 90_000);
    assert.equal(webhookTimeoutMs('1.5s'), 1500);
    assert.equal(webhookTimeoutMs('500ms'), 500);
    assert.equal(webhookTimeoutMs('1h'), 3_600_000);
    // Forms time.ParseDuration takes too.
    assert.equal(webhookTimeoutMs('.5s'), 500);
    assert.equal(webhookTimeoutMs('2.s'), 2000);
    assert.equal(webhookTimeoutMs('+3s'), 3000);
    for (const value of [undefined, '', '0s', '10', 'ten seconds', '-1s', '.s', '1..5s'])
      assert.equal(webhookTimeoutMs(value), DEFAULT_TIMEOUT_MS, String(value));
    // Longer than a Node timer can wait: the longest it can (about 24.8 days).
    assert.equal(webhookTimeoutMs('596h'), 596 * 3_600_000);
    assert.equal(webhookTimeoutMs('600h'), MAX_TIMER_MS);
  });

  test('Retry-After: integer, HTTP date rounded up, anything else 0', () => {
    const now = new Date('2026-01-01T00:00:00Z');
    assert.equal(retryAfterSeconds('120', now), 120);
    assert.equal(retryAfterSeconds('Thu, 01 Jan 2026 00:00:10 GMT', now), 10);
    assert.equal(retryAfterSeconds('1.5', now), 0);
    assert.equal(retryAfterSeconds('soon', now), 0);
    assert.equal(retryAfterSeconds(undefined, now), 0);
  });
});

describe('jsonPieces: a request written in pieces', () => {
  test('joined, they are exactly JSON.stringify of the payload (omitted values, nulls in arrays, toJSON, nested maps)', () => {
    const payload = {
      controller: { metadata: { name: 'c' }, spec: { hooks: undefined, list: [1, undefined, () => 0, 'x'] } },
      parent: { metadata: { name: 'p', creationTimestamp: new Date(0) }, skipped: Symbol('s') },
      children: { 'ConfigMap.v1': { a: { data: { k: 'v"\\' } }, b: { data: null } }, 'Pod.v1': {} },
      related: {},
      finalizing: false,
      gone: undefined,
      unicode: 'é ☃',
      empty: [],
      deep: { a: { b: { c: { d: [undefined] } } } },
    };
    assert.equal([...jsonPieces(payload)].join(''), JSON.stringify(payload));
    for (const value of [null, 1, 'text', [undefined], [[1, [2]]], { toJSON: () => ({ x: 1 }) }])
      assert.equal([...jsonPieces(value)].join(''), JSON.stringify(value));
  });

  test('a map of many children comes as many pieces, none holding more than one child', () => {
    const children = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`c-${i}`, { metadata: { name: `c-${i}` } }]));
    const pieces = [...jsonPieces({ children: { 'ConfigMap.v1': children } })];
    assert.ok(pieces.length > 2000, `${pieces.length} pieces`);
    assert.ok(Math.max(...pieces.map((piece) => piece.length)) < 100);
  });

  test('postJson sends that text with its byte length', async () => {
    behaviour = (_request, response) => response.writeHead(200).end('{}');
    const payload = { children: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`é-${i}`, { data: 'x'.repeat(100) }])) };
    const answer = await postJson({ url: `${base}/big`, timeoutMs: 5000 }, payload);
    assert.equal(answer.ok, true);
    const last = seen.at(-1)!;
    assert.equal(last.body, JSON.stringify(payload));
    assert.equal(Number(last.headers['content-length']), Buffer.byteLength(JSON.stringify(payload)));
    // A payload of a few objects, made as one string, is the same text.
    const few = { controller: { metadata: { name: 'c' } }, parent: { metadata: { name: 'p', labels: { ü: 'ñ' } } }, omitted: undefined };
    assert.equal((await postJson({ url: `${base}/few`, timeoutMs: 5000 }, few, { whole: true })).ok, true);
    assert.equal(seen.at(-1)!.body, JSON.stringify(few));
    assert.equal(Number(seen.at(-1)!.headers['content-length']), Buffer.byteLength(JSON.stringify(few)));
  });
});
