// The local activator against REAL child processes (test/fixtures/tiny-function.ts).
// Timing is never asserted tightly (shared, noisy machines): counts, ordering and pids are.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { Writable } from 'node:stream';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import {
  Activator,
  effectiveTarget,
  type ActivatorOptions,
  type FunctionProcessSpec,
  type Scaling,
} from '../../eventing/activator/index.ts';

const FIXTURE = fileURLToPath(new URL('../fixtures/tiny-function.ts', import.meta.url));

interface Captured {
  lines: Record<string, unknown>[];
  childOutput: string[];
}

function capture(): { log: ActivatorOptions['log']; out: Writable; cap: Captured } {
  const cap: Captured = { lines: [], childOutput: [] };
  const log = pino(
    { level: 'debug' },
    {
      write(line: string) {
        cap.lines.push(JSON.parse(line) as Record<string, unknown>);
      },
    },
  );
  const out = new Writable({
    write(chunk: Buffer, _enc, cb) {
      cap.childOutput.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      cb();
    },
  });
  return { log, out, cap };
}

const scaleEvents = (cap: Captured, fn: string) =>
  cap.lines.filter((l) => l.fn === fn && typeof l.reason === 'string' && 'from' in l && 'to' in l) as {
    fn: string;
    from: number;
    to: number;
    reason: string;
  }[];

function tiny(name: string, scaling: Partial<Scaling> = {}, env: Record<string, string> = {}): FunctionProcessSpec {
  return {
    name,
    command: process.execPath,
    args: [FIXTURE],
    env,
    scaling: { minScale: 0, maxScale: 4, target: 10, containerConcurrency: 0, ...scaling },
  };
}

const open: Activator[] = [];
async function activator(functions: FunctionProcessSpec[], opts: Partial<ActivatorOptions> = {}) {
  const { log, out, cap } = capture();
  const a = new Activator({ functions, log, childOutput: out, ...opts });
  open.push(a);
  const base = await a.listen();
  return { a, base, cap };
}
after(async () => {
  await Promise.all(open.map((a) => a.close()));
});

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  json: () => Record<string, any>;
}

function request(
  url: string,
  opts: { method?: string; headers?: http.OutgoingHttpHeaders; body?: string | Buffer; agent?: http.Agent | false } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: opts.method ?? 'GET', headers: opts.headers, agent: opts.agent ?? false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: () => JSON.parse(text) });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

async function waitFor(what: string, cond: () => boolean, timeoutMs = 15_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

describe('activator', () => {
  test('effective target follows Knative: min(target, containerConcurrency), default 100', () => {
    assert.equal(effectiveTarget({ minScale: 0, maxScale: 1, target: 10, containerConcurrency: 0 }), 10);
    assert.equal(effectiveTarget({ minScale: 0, maxScale: 1, target: 10, containerConcurrency: 3 }), 3);
    assert.equal(effectiveTarget({ minScale: 0, maxScale: 1, target: 0, containerConcurrency: 5 }), 5);
    assert.equal(effectiveTarget({ minScale: 0, maxScale: 1, target: 0, containerConcurrency: 0 }), 100);
  });

  test('cold start 0 -> 1: concurrent requests share one start, then are answered', async () => {
    const { a, base, cap } = await activator([tiny('cold', {}, { READY_DELAY_MS: '300' })]);
    assert.equal(a.urlFor('cold'), `${base}/cold`);
    assert.equal(a.instances('cold'), 0);
    const replies = await Promise.all(Array.from({ length: 5 }, (_, i) => request(`${a.urlFor('cold')}/hello/${i}?x=${i}`)));
    for (const [i, r] of replies.entries()) {
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json().url, `/hello/${i}?x=${i}`);
    }
    assert.equal(new Set(replies.map((r) => r.json().pid)).size, 1, 'one instance served them all');
    assert.equal(a.instances('cold'), 1);
    const events = scaleEvents(cap, 'cold');
    assert.deepEqual(
      events.map((e) => [e.from, e.to, e.reason]),
      [[0, 1, 'cold start']],
    );
    assert.ok(
      cap.childOutput.some((l) => l.startsWith('[cold#1] listening on')),
      `child output is prefixed: ${cap.childOutput.join(' | ')}`,
    );
    // A request to the bare function URL goes to "/".
    const root = await request(a.urlFor('cold'));
    assert.equal(root.json().url, '/');
  });

  test('proxy streams bodies both ways, forwards headers minus hop-by-hop ones, reuses connections', async () => {
    const { a } = await activator([tiny('echo')]);
    const big = 'x'.repeat(3 * 1024 * 1024) + 'end';
    const r = await request(`${a.urlFor('echo')}/post/here`, {
      method: 'POST',
      headers: {
        'content-type': 'text/plain',
        'ce-id': 'abc-1',
        'x-hop': 'must not pass',
        connection: 'keep-alive, x-hop',
        'proxy-authorization': 'secret',
      },
      body: big,
    });
    assert.equal(r.status, 200);
    const echoed = r.json();
    assert.equal(echoed.method, 'POST');
    assert.equal(echoed.body.length, big.length);
    assert.ok(echoed.body.endsWith('end'));
    assert.equal(echoed.headers['ce-id'], 'abc-1');
    assert.equal(echoed.headers['content-type'], 'text/plain');
    assert.equal(echoed.headers['x-hop'], undefined, 'header named in Connection is dropped');
    assert.equal(echoed.headers['proxy-authorization'], undefined);
    assert.ok(echoed.headers['x-forwarded-for']);
    assert.equal(r.headers['content-type'], 'application/json');

    // Chunked upload without a length.
    const chunked = await new Promise<Record<string, any>>((resolve, reject) => {
      const req = http.request(`${a.urlFor('echo')}/chunked`, { method: 'PUT', agent: false }, (res) => {
        let t = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (t += c));
        res.on('end', () => resolve(JSON.parse(t)));
      });
      req.on('error', reject);
      req.write('part1-');
      setTimeout(() => req.end('part2'), 50);
    });
    assert.equal(chunked.body, 'part1-part2');

    // Sequential requests reuse the activator's connection to the instance.
    const ports = [];
    for (let i = 0; i < 5; i++) ports.push((await request(`${a.urlFor('echo')}/seq`)).json().remotePort);
    assert.equal(new Set(ports).size, 1, `one upstream connection reused, saw ports ${ports.join(',')}`);
  });

  test('a process that says it listens is probed then, not at the next poll', async () => {
    // Polled once a minute, an instance is ready within the test's time only by its message.
    const { a } = await activator([tiny('says', {}, { SAY_LISTENING: '1' }), tiny('silent')], { probeIntervalMs: 60_000 });
    const said = await Promise.race([
      request(`${a.urlFor('says')}/x`).then((r) => r.status),
      sleep(15_000).then(() => 'no answer in 15 s'),
    ]);
    assert.equal(said, 200);
    const silent = request(`${a.urlFor('silent')}/x`).then((r) => r.status);
    const first = await Promise.race([silent, sleep(2000).then(() => 'still waiting')]);
    assert.equal(first, 'still waiting', 'without the message, the next probe waits for the poll');
  });

  test('unknown function is 404 and a malformed request is 400, without harming the activator', async () => {
    const { a, base } = await activator([tiny('sturdy')]);
    const r = await request(`${base}/nope/x`);
    assert.equal(r.status, 404);
    assert.match(r.text, /no function named "nope"/);
    const raw = await new Promise<string>((resolve, reject) => {
      const u = new URL(base);
      const s = net.connect(Number(u.port), u.hostname, () => s.write('THIS IS NOT HTTP\r\n\r\n'));
      let t = '';
      s.setEncoding('utf8');
      s.on('data', (c: string) => (t += c));
      s.on('end', () => resolve(t));
      s.on('error', reject);
    });
    assert.match(raw, /^HTTP\/1\.1 400/);
    assert.equal((await request(`${a.urlFor('sturdy')}/ok`)).status, 200);
  });

  test('idle instance scales to zero, the next request scales from zero again (new pid)', async () => {
    const { a, cap } = await activator([tiny('idler')], { idleTimeoutMs: 300 });
    const first = await request(`${a.urlFor('idler')}/one`);
    assert.equal(first.status, 200);
    const pid1 = first.json().pid as number;
    assert.equal(a.instances('idler'), 1);
    await waitFor('scale to zero', () => a.instances('idler') === 0);
    await waitFor('old process gone', () => !alive(pid1));
    const second = await request(`${a.urlFor('idler')}/two`);
    assert.equal(second.status, 200);
    assert.notEqual(second.json().pid, pid1);
    const events = scaleEvents(cap, 'idler').map((e) => [e.from, e.to, e.reason]);
    assert.deepEqual(events, [
      [0, 1, 'cold start'],
      [1, 0, 'idle 300ms'],
      [0, 1, 'cold start'],
    ]);
  });

  test('concurrency over target scales up, spreads requests, never beyond maxScale', async () => {
    const { a, cap } = await activator([tiny('burst', { target: 1, maxScale: 2 })]);
    let maxSeen = 0;
    const sampler = setInterval(() => (maxSeen = Math.max(maxSeen, a.instances('burst'))), 5);
    const replies = await Promise.all(Array.from({ length: 6 }, () => request(`${a.urlFor('burst')}/slow?ms=600`)));
    clearInterval(sampler);
    for (const r of replies) assert.equal(r.status, 200, r.text);
    const pids = new Set(replies.map((r) => r.json().pid));
    assert.equal(pids.size, 2, `two instances served the burst, got pids ${[...pids].join(',')}`);
    assert.ok(maxSeen <= 2, `never more than maxScale instances (saw ${maxSeen})`);
    assert.equal(a.instances('burst'), 2);
    const events = scaleEvents(cap, 'burst');
    assert.ok(events.every((e) => e.to <= 2));
    assert.ok(
      events.some((e) => /^concurrency \d+ > target 1 x 1$/.test(e.reason)),
      `a scale-up event names the concurrency: ${JSON.stringify(events)}`,
    );
  });

  test('containerConcurrency 1 with one instance serializes requests', async () => {
    const { a } = await activator([tiny('serial', { containerConcurrency: 1, maxScale: 1 })]);
    const replies = await Promise.all(Array.from({ length: 5 }, () => request(`${a.urlFor('serial')}/slow?ms=150`)));
    for (const r of replies) assert.equal(r.status, 200, r.text);
    assert.equal(new Set(replies.map((r) => r.json().pid)).size, 1);
    for (const r of replies) assert.equal(r.json().maxActive, 1, 'the function never saw two requests at once');
    assert.equal(a.instances('serial'), 1);
  });

  test('buffered requests beyond the queue bound get 503', async () => {
    const { a } = await activator([tiny('bounded', { containerConcurrency: 1, maxScale: 1 }, { READY_DELAY_MS: '300' })], { maxQueue: 2 });
    const replies = await Promise.all(Array.from({ length: 6 }, () => request(`${a.urlFor('bounded')}/slow?ms=300`)));
    const ok = replies.filter((r) => r.status === 200);
    const full = replies.filter((r) => r.status === 503);
    assert.equal(ok.length + full.length, 6, replies.map((r) => r.status).join(','));
    assert.ok(ok.length >= 2, `the buffered requests were served (${ok.length})`);
    assert.ok(full.length >= 1, 'requests over the bound were refused');
    for (const r of full) assert.match(r.text, /pending request queue full/);
  });

  test('a crash answers 502 for its in-flight requests; the next request gets a new instance', async () => {
    const { a, cap } = await activator([tiny('crashy')]);
    const warm = await request(`${a.urlFor('crashy')}/warm`);
    const pid1 = warm.json().pid as number;
    const slow = Array.from({ length: 5 }, () => request(`${a.urlFor('crashy')}/slow?ms=5000`));
    await sleep(200); // the slow requests are in flight on the same instance
    const crash = await request(`${a.urlFor('crashy')}/crash`);
    assert.equal(crash.status, 502, crash.text);
    for (const r of await Promise.all(slow)) assert.equal(r.status, 502, 'every in-flight request on the crashed instance failed with 502');
    assert.equal(alive(pid1), false);
    const next = await request(`${a.urlFor('crashy')}/after`);
    assert.equal(next.status, 200, next.text);
    assert.notEqual(next.json().pid, pid1);
    const reasons = scaleEvents(cap, 'crashy').map((e) => e.reason);
    assert.deepEqual(reasons, ['cold start', 'crashed (exit 1)', 'cold start']);
    assert.ok(
      cap.lines.some((l) => l.level === 50 && l.code === 1 && l.pid === pid1),
      'the crash is logged with its exit code',
    );
    // One line for the crash, not one more per request it held.
    const loud = cap.lines.filter((l) => (l.level as number) >= 40 && l.fn === 'crashy');
    assert.equal(loud.length, 1, JSON.stringify(loud));
  });

  test('readiness that never comes answers 503 after startTimeoutMs and stops the child', async () => {
    const { a, cap } = await activator([tiny('stuck', {}, { READY_DELAY_MS: 'never' })], { startTimeoutMs: 600, stopGraceMs: 2000 });
    const t0 = Date.now();
    const replies = await Promise.all([request(`${a.urlFor('stuck')}/x`), request(`${a.urlFor('stuck')}/y`)]);
    const elapsed = Date.now() - t0;
    for (const r of replies) {
      assert.equal(r.status, 503);
      assert.match(r.text, /did not become ready within 600ms/);
    }
    assert.ok(elapsed >= 550, `waited for the deadline (${elapsed} ms)`);
    assert.equal(scaleEvents(cap, 'stuck').filter((e) => e.reason === 'cold start').length, 1, 'one start for both requests');
    assert.equal(a.instances('stuck'), 0);
    const failed = cap.lines.find((l) => l.fn === 'stuck' && typeof l.pid === 'number' && /failed to start/.test(String(l.msg)));
    assert.ok(failed, 'the failed start is logged');
    await waitFor('stuck child gone', () => !alive(failed.pid as number));
  });

  test('a child that cannot start answers 503 with the reason, and the next request tries again', async () => {
    const { a, cap } = await activator([
      { ...tiny('missing'), command: '/nonexistent/binary' },
      { ...tiny('dies'), args: ['-e', 'process.exit(3)'] },
    ]);
    const missing = await request(`${a.urlFor('missing')}/x`);
    assert.equal(missing.status, 503);
    assert.match(missing.text, /exited before it was ready \(spawn error: .*ENOENT/);
    const dies = await request(`${a.urlFor('dies')}/x`);
    assert.equal(dies.status, 503);
    assert.match(dies.text, /exited before it was ready \(exit 3\)/);
    const again = await request(`${a.urlFor('dies')}/x`);
    assert.equal(again.status, 503);
    assert.deepEqual(
      scaleEvents(cap, 'dies').map((e) => [e.from, e.to, e.reason]),
      [
        [0, 1, 'cold start'],
        [1, 0, 'exited before ready (exit 3)'],
        [0, 1, 'cold start'],
        [1, 0, 'exited before ready (exit 3)'],
      ],
    );
    assert.equal(a.instances('dies'), 0);
  });

  test('minScale instances start with start(), survive idling, and close() leaves no child behind', async () => {
    const { a, cap } = await activator([tiny('kept', { minScale: 2 }), tiny('other')], { idleTimeoutMs: 200 });
    await a.start();
    assert.equal(a.instances('kept'), 2);
    assert.equal(a.instances('other'), 0);
    const other = await request(`${a.urlFor('other')}/x`);
    assert.equal(other.status, 200);
    // The idle reaper ran: the function without minScale went back to zero meanwhile.
    await waitFor('other idled to zero', () => a.instances('other') === 0);
    await sleep(300);
    assert.equal(a.instances('kept'), 2, 'never below minScale');
    const pids = cap.lines.filter((l) => /ready$/.test(String(l.msg)) && typeof l.pid === 'number').map((l) => l.pid as number);
    assert.ok(pids.length >= 2);
    for (const pid of pids.slice(0, 2)) assert.ok(alive(pid));
    // A request in flight when close() begins still gets its answer (the child drains on SIGTERM).
    const inflight = request(`${a.urlFor('kept')}/slow?ms=400`);
    await sleep(100);
    await a.close();
    assert.equal((await inflight).status, 200);
    for (const pid of pids) assert.equal(alive(pid), false, `pid ${pid} is gone after close()`);
    assert.equal(a.instances('kept'), 0);
  });
});
