// The local broker's hold of requeued keys (eventing/broker/requeue-hold.ts): a reply split into what is
// due now and the keys for later, one entry per (function, key) at the earliest time asked for,
// keys that come due together released together, and memory bounded by a count of keys.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { CloudEventV1 } from 'cloudevents';
import { pino } from 'pino';
import { RequeueHold, splitReply, type Requeue } from '../../eventing/broker/requeue-hold.ts';
import { MAX_KEYS_PER_EVENT, MAX_TIMER_MS } from '../../functions/runtime/index.ts';

const NOW = Date.parse('2026-01-01T00:00:00Z');
const iso = (ms: number) => new Date(NOW + ms).toISOString();

function reply(data: unknown, attributes: Record<string, unknown> = {}): CloudEventV1<unknown> {
  return {
    specversion: '1.0',
    id: 'r1',
    source: '/opfn/functions/fn',
    type: 'dev.opfn.reconcile',
    opfnfunction: 'fn',
    datacontenttype: 'application/json',
    data,
    ...attributes,
  };
}

function captureLog() {
  const lines: Array<Record<string, unknown>> = [];
  return {
    log: pino(
      { level: 'debug' },
      {
        write: (chunk: string) =>
          chunk
            .split('\n')
            .filter((l) => l.trim())
            .forEach((l) => lines.push(JSON.parse(l))),
      },
    ),
    lines,
  };
}

function newHold(maxKeysPerFunction?: number) {
  const released: CloudEventV1<unknown>[] = [];
  const { log, lines } = captureLog();
  const hold = new RequeueHold({ maxKeysPerFunction, log, release: (event) => released.push(event) });
  return { hold, released, lines };
}

const requeue = (key: string, inMs: number, extra: Partial<Requeue> = {}): Requeue => ({
  function: 'fn',
  key,
  at: Date.now() + inMs,
  source: '/opfn/functions/fn',
  ...extra,
});
const keysOf = (event: CloudEventV1<unknown>) => (event.data as { keys: string[] }).keys;

describe('splitReply', () => {
  test('a reply due now, or without a due time, goes on unchanged', () => {
    for (const event of [
      reply({ keys: ['a'] }),
      reply({ keys: ['a'] }, { opfnnotbefore: iso(-1000) }),
      reply({ keys: ['a', 'b'] }, { opfnnotbefore: iso(-1) }),
      reply({ keys: ['a'], notBefore: { a: iso(-5) } }),
    ]) {
      const split = splitReply(event, NOW);
      assert.equal(split.now, event, 'the same event, byte for byte');
      assert.deepEqual([split.later, split.problems], [[], []]);
    }
  });

  test("keys due later are held each at its own time (the event's opfnnotbefore, or the key's own in data.notBefore)", () => {
    const split = splitReply(
      reply({ keys: ['a', 'b', 'c'], notBefore: { b: iso(5000), c: iso(90_000) } }, { opfnnotbefore: iso(1000), knativebrokerttl: 200 }),
      NOW,
    );
    assert.equal(split.now, undefined, 'nothing is due now');
    assert.deepEqual(
      split.later.map(({ key, at, ttl }) => [key, at - NOW, ttl]),
      [
        ['a', 1000, 200],
        ['b', 5000, 200],
        ['c', 90_000, 200],
      ],
    );
  });

  test('a reply with keys due now and later: the now-part goes on narrowed to its keys, without the due time', () => {
    const event = reply(undefined, {
      data_base64: Buffer.from(JSON.stringify({ keys: ['a', 'b'], notBefore: { b: iso(3000) } })).toString('base64'),
      knativebrokerttl: 7,
    });
    const split = splitReply(event, NOW);
    assert.deepEqual(
      split.later.map(({ key }) => key),
      ['b'],
    );
    assert.deepEqual(keysOf(split.now!), ['a']);
    assert.equal(split.now!.data_base64, undefined);
    assert.equal(split.now!.opfnnotbefore, undefined);
    assert.deepEqual([split.now!.id, split.now!.knativebrokerttl, split.now!.opfnfunction], ['r1', 7, 'fn']);
  });

  test('what the broker cannot read goes on now, with a problem to log when it asked for later; the function refuses or drops it', () => {
    const cases: Array<[string, CloudEventV1<unknown>, RegExp]> = [
      [
        'another type',
        reply({ keys: ['a'] }, { type: 'com.example.other', opfnnotbefore: iso(1000) }),
        /not a reconcile reply with keys, so it goes on now, unheld/,
      ],
      ['no keys', reply({ nothing: true }, { opfnnotbefore: iso(1000) }), /not a reconcile reply/],
      [
        'bytes that are not JSON',
        reply(undefined, { data_base64: Buffer.from('{nope').toString('base64'), opfnnotbefore: iso(1000) }),
        /not a reconcile reply/,
      ],
    ];
    for (const [what, event, problem] of cases) {
      const split = splitReply(event, NOW);
      assert.equal(split.now, event, what);
      assert.equal(split.later.length, 0, what);
      assert.match(split.problems.join('; '), problem, what);
    }
  });

  test('an unreadable due time makes its keys due now, and the reply goes on without the due times (the function would refuse it whole)', () => {
    const eventLevel = splitReply(reply({ keys: ['a', 'b'], notBefore: { b: iso(2000) } }, { opfnnotbefore: 'tomorrow' }), NOW);
    assert.deepEqual(
      eventLevel.later.map(({ key, at }) => [key, at - NOW]),
      [['b', 2000]],
      'b has a time of its own',
    );
    assert.deepEqual([keysOf(eventLevel.now!), eventLevel.now!.opfnnotbefore], [['a'], undefined]);
    assert.match(
      eventLevel.problems.join(),
      /opfnnotbefore: due time "tomorrow" is not an RFC 3339 time, so the keys without a time of their own go on now/,
    );

    const long = 'k'.repeat(2000);
    const ownTime = splitReply(reply({ keys: ['a', long], notBefore: { a: 'soon' } }, { opfnnotbefore: iso(2000) }), NOW);
    assert.deepEqual(ownTime.later, [], 'a: its unreadable own time is due now; the over-long key is never held');
    assert.deepEqual(
      [keysOf(ownTime.now!), ownTime.now!.opfnnotbefore, (ownTime.now!.data as { notBefore?: unknown }).notBefore],
      [['a', long], undefined, undefined],
    );
    assert.match(ownTime.problems.join(), /key a: due time "soon" is not an RFC 3339 time, so it goes on now/);
  });
});

describe('RequeueHold', () => {
  test('one entry per function and key, at the earliest time asked for', (t) => {
    t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: NOW });
    const { hold, released } = newHold();
    hold.add([requeue('a', 60_000), requeue('b', 60_000)]);
    hold.add([requeue('a', 120_000), requeue('b', 40), requeue('b', 30_000, { function: 'other' })]);
    assert.equal(hold.size, 3, 'a, b, and b of another function');
    t.mock.timers.tick(120);
    assert.deepEqual(
      released.map((event) => [event.opfnfunction, keysOf(event)]),
      [['fn', ['b']]],
      'b at its earlier time; a not at its later one',
    );
    assert.equal(hold.size, 2);
    hold.dropAll();
  });

  test('keys due at the same time leave as one reconcile event per function, at most MAX_KEYS_PER_EVENT keys each, with the freshest TTL', (t) => {
    t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: NOW });
    const { hold, released } = newHold();
    const at = Date.now() + 50;
    const keys = Array.from({ length: MAX_KEYS_PER_EVENT + 1 }, (_, i) => `k${i}`);
    hold.add(keys.map((key, i) => ({ function: 'fn', key, at, source: '/opfn/functions/fn', ttl: i === 7 ? 250 : 3 })));
    hold.add([{ function: 'other', key: 'x', at, source: '/opfn/functions/other' }]);
    t.mock.timers.tick(49);
    assert.equal(released.length, 0, 'not before their time');
    t.mock.timers.tick(1);
    assert.deepEqual(
      released.map((event) => [event.opfnfunction, keysOf(event).length]),
      [
        ['fn', MAX_KEYS_PER_EVENT],
        ['fn', 1],
        ['other', 1],
      ],
    );
    assert.deepEqual(
      released.map((event) => event.knativebrokerttl),
      [250, 3, undefined],
    );
    for (const event of released) {
      assert.equal(event.type, 'dev.opfn.reconcile');
      assert.equal(event.opfnnotbefore, undefined, 'due now');
    }
    assert.notEqual(released[0].id, released[1].id);
  });

  test('bounded by a count of keys per function: beyond it a key is dropped with a log line, another function keeps its room; close drops the rest with a line per function', () => {
    const { hold, lines } = newHold(2);
    hold.add([requeue('a', 60_000), requeue('b', 60_000), requeue('c', 60_000), requeue('d', 60_000)]);
    assert.equal(hold.size, 2);
    hold.add([requeue('a', 30_000), requeue('x', 60_000, { function: 'other' })]);
    assert.equal(hold.size, 3, 'a key already held is moved, not refused; the other function has room of its own');
    const refused = lines.find((line) => /more dropped/.test(String(line.msg)));
    assert.deepEqual([refused?.function, refused?.refused, refused?.keys], ['fn', 2, ['c', 'd']]);
    assert.equal(hold.dropAll(), 3);
    const dropped = lines.filter((line) => /dropped because the plane stopped/.test(String(line.msg)));
    assert.deepEqual(
      dropped.map((line) => [line.function, line.dropped, line.keys]),
      [
        ['fn', 2, ['a', 'b']],
        ['other', 1, ['x']],
      ],
    );
    assert.equal(hold.size, 0);
  });

  test('a key moved to an earlier time leaves at that time, once', (t) => {
    t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: NOW });
    const { hold, released } = newHold();
    hold.add([requeue('a', 60_000), requeue('b', 60_000)]);
    hold.add([requeue('a', 30)]);
    t.mock.timers.tick(100);
    assert.deepEqual(released.map(keysOf), [['a']]);
    assert.equal(hold.size, 1, 'b still held; a is not held twice');
    hold.add([requeue('b', 20)]);
    t.mock.timers.tick(100);
    assert.deepEqual(released.map(keysOf), [['a'], ['b']]);
    assert.equal(hold.size, 0);
  });

  test("a key due beyond a timer's range (about 24.8 days) is re-armed, not released early", (t) => {
    // Node fires a longer timer after 1 ms, so the hold caps each wait and re-checks the clock.
    t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: NOW });
    const { hold, released } = newHold();
    const thirtyDays = 30 * 24 * 3600_000;
    hold.add([requeue('a', thirtyDays)]);
    t.mock.timers.tick(MAX_TIMER_MS);
    assert.deepEqual(released, [], 'the first timer ran out; the key is not due yet');
    assert.equal(hold.size, 1);
    t.mock.timers.tick(thirtyDays - MAX_TIMER_MS - 1);
    assert.deepEqual(released, [], 'still 1 ms early');
    t.mock.timers.tick(1);
    assert.deepEqual(released.map(keysOf), [['a']]);
    assert.equal(hold.size, 0);
  });
});
