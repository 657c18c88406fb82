// Activator behaviour added for issue 7: the request timeout (Knative's timeoutSeconds → 504),
// loopback binding (HOST), a clean exit that is not a crash, the warm path (lease), stats, and
// the pure pieces (decider, lb-policy, instance state machine).
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import {
  Activator,
  canTransition,
  capacityAtMaxScale,
  desiredScale,
  pick,
  type FunctionProcessSpec,
} from '../../eventing/activator/index.ts';
import { routeOf } from '../../eventing/activator/handler.ts';

const CHILD = `
import http from 'node:http';
const server = http.createServer((req, res) => {
  if (req.url === '/health/readiness') return res.writeHead(200).end('ok');
  if (req.url === '/hang') return;
  if (req.url === '/exit') { res.writeHead(200).end('bye'); setTimeout(() => process.exit(0), 50); return; }
  if (req.url.startsWith('/slow')) { setTimeout(() => res.writeHead(200).end(JSON.stringify({ pid: process.pid })), 300); return; }
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ pid: process.pid, host: process.env.HOST, bound: server.address().address }));
});
server.listen(Number(process.env.PORT), process.env.HOST);
process.on('SIGTERM', () => server.close(() => process.exit(0)));
`;

let dir = '';
let script = '';
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'activator-edges-'));
  script = join(dir, 'child.mjs');
  await writeFile(script, CHILD);
});
const open: Activator[] = [];
after(async () => {
  await Promise.all(open.map((a) => a.close()));
  await rm(dir, { recursive: true, force: true });
});

function spec(name: string, extra: Partial<FunctionProcessSpec> = {}): FunctionProcessSpec {
  return {
    name,
    command: process.execPath,
    args: [script],
    scaling: { minScale: 0, maxScale: 3, target: 1, containerConcurrency: 0 },
    ...extra,
  };
}

async function start(functions: FunctionProcessSpec[]) {
  const lines: Array<Record<string, unknown>> = [];
  const log = pino({ level: 'debug' }, { write: (l: string) => void lines.push(JSON.parse(l)) });
  const out = new Writable({ write: (_c, _e, cb) => cb() });
  const a = new Activator({ functions, log, childOutput: out });
  open.push(a);
  await a.listen();
  return { a, lines };
}

describe('activator edges', () => {
  test('a request past timeoutSeconds gets 504 with the reason, and its slot is freed', async () => {
    const { a } = await start([
      spec('hung', { timeoutSeconds: 0.4, scaling: { minScale: 0, maxScale: 1, target: 1, containerConcurrency: 1 } }),
    ]);
    const hung = await fetch(`${a.urlFor('hung')}/hang`);
    assert.equal(hung.status, 504);
    assert.match(await hung.text(), /did not answer within 0.4s/);
    const next = await fetch(`${a.urlFor('hung')}/after`);
    assert.equal(next.status, 200, 'containerConcurrency 1: the hung request no longer holds the only slot');
  });

  test('instances get HOST=127.0.0.1 and bind loopback', async () => {
    const { a } = await start([spec('local')]);
    const body = (await (await fetch(`${a.urlFor('local')}/who`)).json()) as { host: string; bound: string };
    assert.equal(body.host, '127.0.0.1');
    assert.equal(body.bound, '127.0.0.1');
  });

  test('an instance that exits 0 is logged as exited, not as a crash', async () => {
    const { a, lines } = await start([spec('clean')]);
    assert.equal((await fetch(`${a.urlFor('clean')}/exit`)).status, 200);
    const deadline = Date.now() + 15_000;
    while (a.instances('clean') > 0 && Date.now() < deadline) await sleep(20);
    assert.equal(a.instances('clean'), 0);
    assert.ok(
      lines.some((l) => /exited \(exit 0\)/.test(String(l.msg)) && l.level === 30),
      'an info line for the clean exit',
    );
    assert.ok(!lines.some((l) => /crashed/.test(String(l.msg))), 'no crash line');
  });

  test('lease: a direct route to an instance with room, counted in stats; none without room or for unknown URLs', async () => {
    const { a } = await start([spec('warm', { scaling: { minScale: 0, maxScale: 1, target: 1, containerConcurrency: 1 } })]);
    const url = a.urlFor('warm');
    assert.equal(a.lease(url), undefined, 'no instance yet: the request must go through the activator (cold start)');
    assert.equal((await fetch(`${url}/first`)).status, 200);
    const lease = a.lease(url);
    assert.ok(lease, 'an instance with room');
    assert.equal(a.lease(url), undefined, 'containerConcurrency 1: the leased slot is taken');
    const direct = (await (await fetch(`${lease.url}direct`)).json()) as { pid: number };
    lease.release('answered');
    lease.release('answered'); // a second release is ignored
    assert.ok(direct.pid > 0);
    assert.ok(a.lease(url), 'room again after release');
    assert.equal(a.lease(`${url}/sub/path`), undefined);
    assert.equal(a.lease('http://127.0.0.1:1/warm'), undefined);
    const stats = a.stats().warm;
    assert.equal(stats?.direct, 2);
    assert.equal(stats?.proxied, 1);
    assert.equal(stats?.started, 1);
  });

  test('lease with a signal at zero: the route once the started instance is ready, the wait counted for scaling', async () => {
    const { a } = await start([spec('zero', { scaling: { minScale: 0, maxScale: 3, target: 1, containerConcurrency: 1 } })]);
    const url = a.urlFor('zero');
    const signal = { abort: new AbortController().signal };
    const waits = [a.lease(url, 'key-a', signal), a.lease(url, 'key-b', signal)];
    assert.ok(
      waits.every((wait) => wait instanceof Promise),
      'no instance serves yet: a promise of the route',
    );
    assert.equal(a.instances('zero'), 2, 'both waits count: two instances start for target 1');
    const leases = await Promise.all(waits);
    for (const lease of leases) {
      assert.ok(lease, 'a route once an instance is ready');
      const answer = await fetch(`${lease.url}direct`);
      assert.equal(answer.status, 200, 'straight to the instance');
      lease.release('answered');
    }
    assert.notEqual(leases[0]!.url, leases[1]!.url, 'containerConcurrency 1: one instance each');
    const stats = a.stats().zero;
    assert.equal(stats?.direct, 2);
    assert.equal(stats?.proxied, 0, 'nothing went through the front door');
    const warm = a.lease(url, undefined, signal);
    assert.ok(warm && !(warm instanceof Promise), 'an instance with room: the route at once');
    warm.release('answered');
  });

  test('lease with a signal: a failed start answers 503 through the route; a wait given up or past its time resolves undefined; a serving function is not waited for', async () => {
    const { a } = await start([
      spec('broken', { command: process.execPath, args: ['-e', 'process.exit(3)'] }),
      spec('busy', { scaling: { minScale: 0, maxScale: 1, target: 1, containerConcurrency: 1 } }),
      spec('late'),
    ]);
    const late = a.lease(a.urlFor('late'), undefined, { abort: new AbortController().signal, maxWaitMs: 1 });
    assert.ok(late instanceof Promise);
    assert.equal(await late, undefined, 'the sender may wait 1 ms: no instance is ready by then');
    const broken = a.urlFor('broken');
    const lease = await a.lease(broken, undefined, { abort: new AbortController().signal });
    assert.ok(lease, 'a route to the answer the front door would give');
    const answer = await fetch(lease.url, { method: 'POST', body: '{}' });
    assert.equal(answer.status, 503, 'as the requests buffered for a start that failed');
    assert.match(await answer.text(), /exited before it was ready/);
    lease.release('answered');
    assert.equal((await fetch(lease.url, { method: 'POST', body: '{}' })).status, 404, 'the answer is given once');
    assert.equal(
      a.lease(broken, undefined, { abort: new AbortController().signal }),
      undefined,
      'after a failed start: the front door, whose retries pace the starts',
    );

    const busy = a.urlFor('busy');
    const given = new AbortController();
    const gaveUp = a.lease(busy, undefined, { abort: given.signal });
    assert.ok(gaveUp instanceof Promise);
    given.abort();
    assert.equal(await gaveUp, undefined, 'the sender gave up: no route');
    assert.equal((await fetch(`${busy}/first`)).status, 200);
    const held = a.lease(busy);
    assert.ok(held, 'the only slot');
    assert.equal(
      a.lease(busy, undefined, { abort: new AbortController().signal }),
      undefined,
      'an instance serves: the front door queues, not the lease',
    );
    held.release('answered');
  });

  test('stats show how many instances a burst used', async () => {
    const { a } = await start([spec('burst')]);
    await Promise.all(Array.from({ length: 6 }, (_, i) => fetch(`${a.urlFor('burst')}/slow?${i}`)));
    const stats = a.stats().burst;
    assert.ok((stats?.peakInstances ?? 0) >= 2, `more than one instance for a burst over target 1 (peak ${stats?.peakInstances})`);
    assert.ok((stats?.peakInstances ?? 0) <= 3, 'never beyond maxScale');
  });
});

describe('activator pure pieces', () => {
  test('decider: capacity at max scale and desired scale', () => {
    assert.equal(capacityAtMaxScale({ minScale: 0, maxScale: 4, target: 100, containerConcurrency: 0 }), 400);
    assert.equal(capacityAtMaxScale({ minScale: 0, maxScale: 4, target: 100, containerConcurrency: 10 }), 40);
    assert.equal(capacityAtMaxScale({ minScale: 0, maxScale: 0, target: 100, containerConcurrency: 0 }), undefined);
    assert.deepEqual(desiredScale(250, { minScale: 0, maxScale: 4, target: 100, containerConcurrency: 0 }, 1), {
      want: 3,
      reason: 'concurrency 250 > target 100 x 1',
    });
    assert.equal(desiredScale(0, { minScale: 2, maxScale: 4, target: 100, containerConcurrency: 0 }, 0).want, 2);
    assert.equal(desiredScale(10_000, { minScale: 0, maxScale: 4, target: 100, containerConcurrency: 0 }, 0).want, 4);
  });

  test('decider: the host limit caps instances below max-scale, never below one', () => {
    const scaling = { minScale: 0, maxScale: 4, target: 100, containerConcurrency: 0 };
    assert.equal(desiredScale(10_000, scaling, 0, 1).want, 1);
    assert.equal(desiredScale(10_000, scaling, 0, 3).want, 3);
    assert.equal(desiredScale(10_000, scaling, 0, 8).want, 4, 'max-scale still bounds it');
    assert.equal(desiredScale(10_000, { ...scaling, minScale: 2 }, 0, 1).want, 1, 'min-scale cannot exceed what the host runs');
    assert.equal(desiredScale(1, scaling, 0, 0).want, 1, 'a cold start is never refused');
  });

  test('lb-policy: least loaded with room, ties to the oldest; hard and soft limits', () => {
    const a = { state: 'ready', inFlight: 2 };
    const b = { state: 'ready', inFlight: 1 };
    const c = { state: 'ready', inFlight: 1 };
    assert.equal(pick([a, b, c], 0, 10), b);
    assert.equal(pick([a, b], 2, 10), b);
    assert.equal(pick([{ state: 'ready', inFlight: 2 }], 2, 10), undefined, 'hard limit');
    assert.ok(pick([{ state: 'ready', inFlight: 50 }], 0, 10), 'soft limit: over target when nothing else is coming');
    assert.equal(
      pick(
        [
          { state: 'ready', inFlight: 10 },
          { state: 'starting', inFlight: 0 },
        ],
        0,
        10,
      ),
      undefined,
      'soft limit held while capacity is on its way',
    );
  });

  test('instance state machine: exited is final, stopping only exits', () => {
    assert.ok(canTransition('starting', 'ready'));
    assert.ok(canTransition('ready', 'suspect') && canTransition('suspect', 'ready'));
    assert.ok(!canTransition('stopping', 'ready'));
    assert.ok(!canTransition('exited', 'starting'));
  });

  test('handler: routes /<function>/<path>, absolute-form targets too; 404 and 400 with reasons', () => {
    const known = new Set(['fn', 'other']);
    assert.deepEqual(routeOf('/fn/a/b?x=1', known), { name: 'fn', path: '/a/b?x=1' });
    assert.deepEqual(routeOf('/fn', known), { name: 'fn', path: '/' });
    assert.deepEqual(routeOf('http://h:1/other/z', known), { name: 'other', path: '/z' });
    assert.deepEqual(routeOf('/nope/x', known), { status: 404, message: 'no function named "nope" (known: fn, other)' });
    assert.equal((routeOf('::bad', known) as { status: number }).status, 400);
  });
});
