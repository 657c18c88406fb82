// The shared outbound HTTP client's body bound, against a loopback server: a body past the bound
// fails with ResponseTooLargeError (default 1 MiB, overridable per call) and the rest of it is
// never transferred; and the one Retry-After reader.
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { DEFAULT_MAX_RESPONSE_BYTES, httpClient, ResponseTooLargeError, retryAfterMs } from '../../functions/runtime/index.ts';

describe('http: response bodies are read with a bound', () => {
  let base: string;
  /** The endless answer's response, to see when the client hung up on it. */
  let endless: ServerResponse | undefined;
  const server = createServer((req, res) => {
    const size = Number(new URL(req.url!, 'http://x').searchParams.get('size'));
    if (req.url!.startsWith('/endless')) {
      // 64 KiB every 10 ms until the client goes away: only cancelling the body ends it.
      endless = res;
      res.writeHead(502, { 'content-type': 'text/html' });
      const chunk = Buffer.alloc(64 * 1024, 'x');
      const timer = setInterval(() => res.write(chunk), 10);
      res.on('close', () => clearInterval(timer));
      return;
    }
    res.end('x'.repeat(size));
  });
  before(async () => {
    server.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  test('a body up to the bound is returned whole; one byte more fails, naming status and bound', async () => {
    const http = httpClient();
    assert.equal((await (await http.fetch(`${base}/?size=${DEFAULT_MAX_RESPONSE_BYTES}`)).text()).length, DEFAULT_MAX_RESPONSE_BYTES);
    await assert.rejects(
      http.fetch(`${base}/?size=${DEFAULT_MAX_RESPONSE_BYTES + 1}`),
      (error: unknown) =>
        error instanceof ResponseTooLargeError &&
        error.status === 200 &&
        /^GET http:\/\/127\.0\.0\.1:\d+\/: answered 200 with a body over 1048576 bytes; not read$/.test(error.message),
    );
  });

  test('the bound is overridable per call and per client', async () => {
    assert.equal(await (await httpClient().fetch(`${base}/?size=100`, { maxBodyBytes: 100 })).text(), 'x'.repeat(100));
    await assert.rejects(httpClient().fetch(`${base}/?size=101`, { maxBodyBytes: 100 }), ResponseTooLargeError);
    await assert.rejects(httpClient({ maxBodyBytes: 10 }).fetch(`${base}/?size=11`), ResponseTooLargeError);
    assert.equal(await (await httpClient({ maxBodyBytes: 10 }).fetch(`${base}/?size=50`, { maxBodyBytes: 50 })).text(), 'x'.repeat(50));
  });

  test('an endless body fails at the bound (not at the timeout) and the rest of it is cancelled', async () => {
    await assert.rejects(
      httpClient({ timeoutMs: 60_000 }).fetch(`${base}/endless`),
      (error: unknown) => error instanceof ResponseTooLargeError && error.status === 502,
    );
    // The client hung up: the server sees its response closed, and stops writing.
    if (!endless!.closed) await new Promise((resolve) => endless!.once('close', resolve));
    assert.ok(endless!.closed);
  });
});

describe('http: retryAfterMs', () => {
  test('delta-seconds or an HTTP date; an elapsed date is negative; anything else undefined', () => {
    const now = Date.parse('2025-05-01T00:00:00Z');
    assert.equal(retryAfterMs(' 30 ', now), 30_000);
    assert.equal(retryAfterMs('Thu, 01 May 2025 00:00:45 GMT', now), 45_000);
    assert.equal(retryAfterMs('Wed, 30 Apr 2025 23:59:50 GMT', now), -10_000);
    for (const unreadable of [undefined, '', 'soon', 'in a minute'])
      assert.equal(retryAfterMs(unreadable, now), undefined, String(unreadable));
  });
});
