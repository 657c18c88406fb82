// The function host's answers without a reachable API: per-key coalescing, requeue replies,
// failed keys of a fan-out, error classes, and the pieces they are built from (workqueue,
// config, cron, HTTP client, names, the bounded recent-entries map).
import { inspect } from 'node:util';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { CloudEvent, HTTP } from 'cloudevents';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import {
  resolveConfig,
  cronProblem,
  defineFunction,
  type ReconcileResult,
  statusForError,
  TerminalError,
  TransientError,
  httpClient,
  ConfigMap,
  InvalidPathSegmentError,
  objectPath,
  parseKindKey,
  type ObjectKey,
  type ResourceKind,
  isHashedLabelValue,
  ownerLabelValue,
  MAX_KEYS_PER_EVENT,
  setRecent,
} from '../../functions/runtime/index.ts';
import {
  createMetrics,
  createFunctionHost,
  MAX_REQUEUE_SECONDS,
  OUTCOME_HEADER,
  answerFor,
  failedResult,
  type KeyResult,
  KeyedWorkQueue,
} from '../../functions/runtime/host/index.ts';
import { quietLog, unreachableKube } from '../support/cluster.ts';

const Widget: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };

/** A host whose reconcile is `reconcile`; events are handed to it directly (no HTTP). */
function hostFor(reconcile: (key: ObjectKey) => Promise<ReconcileResult | void>, now = () => new Date('2025-05-01T00:00:00Z')) {
  const declaration = defineFunction({ name: 'widgets', description: 'test', reconciles: Widget, rbac: [], reconcile });
  return createFunctionHost(declaration, { kube: unreachableKube(), log: quietLog, metrics: createMetrics('widgets'), now });
}

const widgetEvent = (name: string) =>
  apiServerSourceEvent({
    server: 'https://x',
    kind: Widget,
    object: { metadata: { name, namespace: 'ns' } },
    action: 'update',
    mode: 'Reference',
  });
const reconcileEvent = (keys: string[], notBefore?: string) =>
  new CloudEvent<unknown>({
    type: 'dev.opfn.reconcile',
    source: '/opfn/functions/widgets',
    opfnfunction: 'widgets',
    ...(notBefore ? { opfnnotbefore: notBefore } : {}),
    datacontenttype: 'application/json',
    data: { keys },
  });
const receive = (host: ReturnType<typeof hostFor>, event: CloudEvent<unknown>) => {
  const message = HTTP.binary(event);
  return host.receive(message.headers as Record<string, string>, Buffer.from(message.body as string));
};
const key = (name: string) => `example.com/Widget:ns/${name}`;
const ping = () =>
  new CloudEvent<unknown>({
    type: 'dev.knative.sources.ping',
    source: '/apis/v1/namespaces/default/pingsources/x',
    datacontenttype: 'application/json',
    data: {},
  });

describe('reads shared by the keys of one event', () => {
  test('each name is read once per event; a failed read is tried again by the next key; the next event reads afresh', async () => {
    let reads = 0;
    let failNext = true;
    const declaration = defineFunction({
      name: 'widgets',
      description: 'test',
      reconciles: Widget,
      rbac: [],
      reconcile: async (_key, ctx) => {
        await ctx.readOnce('namespaces', async () => {
          reads++;
          if (failNext) {
            failNext = false;
            throw new TransientError('the first read fails');
          }
          return ['a', 'b'];
        });
      },
    });
    const host = createFunctionHost(declaration, {
      kube: unreachableKube(),
      log: quietLog,
      metrics: createMetrics('widgets'),
      fanOutConcurrency: 1,
    });
    const keys = ['w1', 'w2', 'w3', 'w4'].map(key);
    const first = await receive(host, reconcileEvent(keys));
    assert.equal(reads, 2, 'the failed read, then one for the three other keys');
    assert.deepEqual(
      (first.body as { failures?: { key: string }[] }).failures?.map((failure) => failure.key),
      [key('w1')],
    );
    await receive(host, reconcileEvent(keys));
    assert.equal(reads, 3, 'one more for the next event');
  });

  test("a run several events share reads afresh, never one event's answer that may predate another's change", async () => {
    let generation = 0;
    const seen: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const declaration = defineFunction({
      name: 'widgets',
      description: 'test',
      reconciles: Widget,
      rbac: [],
      reconcile: async ({ name }, ctx) => {
        if (name === 'busy' && seen.length === 0) {
          seen.push('busy:first');
          await gate;
          return;
        }
        seen.push(`${name}:${await ctx.readOnce('namespaces', async () => ++generation)}`);
      },
    });
    const host = createFunctionHost(declaration, {
      kube: unreachableKube(),
      log: quietLog,
      metrics: createMetrics('widgets'),
      fanOutConcurrency: 1,
    });
    const first = receive(host, reconcileEvent([key('busy')]));
    await new Promise((resolve) => setImmediate(resolve));
    // Two events each ring for `busy` (running) and one other key; the follow-up of `busy` serves both.
    const second = receive(host, reconcileEvent([key('a'), key('busy')]));
    const third = receive(host, reconcileEvent([key('b'), key('busy')]));
    await new Promise((resolve) => setImmediate(resolve));
    release();
    await Promise.all([first, second, third]);
    assert.deepEqual(seen, ['busy:first', 'a:1', 'b:2', 'busy:3']);
  });
});

describe('per-key coalescing', () => {
  test('doorbells for a running key share one follow-up run; each is answered 200 after it', async () => {
    let running = 0;
    let maxRunning = 0;
    let runs = 0;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const host = hostFor(async () => {
      runs++;
      running++;
      maxRunning = Math.max(maxRunning, running);
      if (runs === 1) await gate;
      running--;
    });
    const first = receive(host, widgetEvent('a'));
    await new Promise((resolve) => setImmediate(resolve));
    const burst = Array.from({ length: 20 }, () => receive(host, widgetEvent('a')));
    const other = await receive(host, widgetEvent('b'));
    assert.equal(other.status, 200, 'another key is not held up');
    release();
    const answers = await Promise.all([first, ...burst]);
    assert.deepEqual([...new Set(answers.map((a) => a.status))], [200]);
    assert.equal(runs, 3, 'a: the first run and ONE follow-up for 20 doorbells; b: one');
    assert.equal(maxRunning, 2, 'a and b at once, never a twice');
  });

  test('resyncs coalesce as keys do: 20 pings while one runs share ONE follow-up; every ping is answered after the run it shared', async () => {
    let sweeps = 0;
    let apiAttempts = 0;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const declaration = defineFunction({
      name: 'widgets',
      description: 'test',
      reconciles: Widget,
      rbac: [],
      reconcile: async () => {},
      sweep: async () => {
        if (++sweeps === 1) await gate;
      },
    });
    const kube = unreachableKube(() => void apiAttempts++);
    const waits: number[] = [];
    const host = createFunctionHost(declaration, {
      kube,
      log: quietLog,
      metrics: createMetrics('widgets'),
      fanOutSpacingMs: 60_000,
      sleep: async (ms) => void waits.push(ms),
    });
    const first = receive(host, ping());
    await new Promise((resolve) => setImmediate(resolve));
    const burst = Array.from({ length: 20 }, () => receive(host, ping()));
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(sweeps, 1, 'the follow-up waits for the run');
    release();
    const answers = await Promise.all([first, ...burst]);
    assert.equal(sweeps, 2, 'the first resync and ONE follow-up for 20 pings');
    assert.equal(waits.length, 1, 'the follow-up waited out the spacing');
    assert.ok(waits[0]! > 59_000 && waits[0]! <= 60_000, String(waits[0]));
    // The API is unreachable: both runs' lists fail, and every ping says so (the broker retries each).
    assert.deepEqual([...new Set(answers.map((answer) => answer.status))], [503]);
    const burstAttempts = apiAttempts;
    await receive(host, ping());
    assert.equal(sweeps, 3, 'a ping after the runs ended starts its own, after the spacing');
    assert.equal(waits.length, 2);
    const oneAttempts = apiAttempts - burstAttempts;
    assert.ok(oneAttempts > 0 && burstAttempts <= 2 * oneAttempts, `${burstAttempts} API attempts for 21 pings, ${oneAttempts} for one`);
  });

  test('setRecent: a touched entry becomes the most recent; past the limit the one set longest ago is forgotten', () => {
    const map = new Map<string, number>();
    for (const key of ['a', 'b', 'c']) setRecent(map, key, 1, 3);
    setRecent(map, 'a', 2, 3);
    setRecent(map, 'd', 1, 3);
    assert.deepEqual(
      [...map.entries()],
      [
        ['c', 1],
        ['a', 2],
        ['d', 1],
      ],
      'b, untouched longest, went; a moved to the end with its new value',
    );
  });

  test('KeyedWorkQueue: a failed run does not block the key; the follow-up knows it is one', async () => {
    const queue = new KeyedWorkQueue();
    let fail!: (error: Error) => void;
    const failing = queue.run('k', () => new Promise((_, reject) => (fail = reject)));
    const followUps = [queue.run('k', async (followUp) => followUp), queue.run('k', async (followUp) => followUp)];
    fail(new Error('boom'));
    await assert.rejects(failing, /boom/);
    assert.deepEqual(await Promise.all(followUps), [true, true]);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(queue.size, 0, 'idle keys are forgotten');
  });
});

describe('answers', () => {
  test('requeueAfterSeconds → 200 with a reply CloudEvent due then; counts in the outcome', async () => {
    const host = hostFor(async () => ({ requeueAfterSeconds: 90 }));
    const outcome = await receive(host, widgetEvent('a'));
    assert.equal(outcome.status, 200);
    assert.deepEqual(outcome.body, { reconciled: 1, failed: 0, requeued: 1 });
    assert.equal(outcome.reply?.headers['ce-type'], 'dev.opfn.reconcile');
    assert.equal(outcome.reply?.headers['ce-opfnfunction'], 'widgets');
    assert.equal(outcome.reply?.headers['ce-opfnnotbefore'], '2025-05-01T00:01:30.000Z');
    assert.deepEqual(JSON.parse(outcome.reply!.body), { keys: [key('a')] });
  });

  test("more failed keys than a reply carries: 503 with the Retry-After they agree on (a hook's 429 in a sweep)", () => {
    const keys = Array.from({ length: MAX_KEYS_PER_EVENT + 2 }, (_, i) => ({ kind: Widget, namespace: 'ns', name: `w${i}` }));
    const results: KeyResult[] = keys.map((_, i) =>
      i === 0 ? { type: 'done' } : failedResult(new TransientError('hook answered 429', { retryAfterSeconds: 30 + (i % 2) })),
    );
    const outcome = answerFor('widgets', keys, results, new Date());
    assert.equal(outcome.status, 503);
    assert.equal(outcome.retryAfterSeconds, 30, 'the shortest wait all asked for');
    results[1] = failedResult(new TransientError('no wait asked'));
    assert.equal(answerFor('widgets', keys, results, new Date()).retryAfterSeconds, undefined, 'one key asked for none: none');
  });

  test('keys of a fan-out requeued at different times: one reply, each key with its own time to the millisecond', async () => {
    const after = new Map([
      ['a', 90],
      ['b', 5.25],
      ['c', 90],
      ['d', 12.5],
    ]);
    const host = hostFor(async ({ name }) => ({ requeueAfterSeconds: after.get(name) }));
    const outcome = await receive(host, reconcileEvent(['a', 'b', 'c', 'd'].map(key)));
    assert.equal(outcome.status, 200);
    assert.deepEqual(outcome.body, { reconciled: 4, failed: 0, requeued: 4 });
    assert.equal(
      outcome.reply?.headers['ce-opfnnotbefore'],
      '2025-05-01T00:00:05.250Z',
      'the event is due with its soonest key (not rounded up to a whole second)',
    );
    assert.deepEqual(JSON.parse(outcome.reply!.body), {
      keys: [key('b'), key('d'), key('a'), key('c')],
      notBefore: { [key('d')]: '2025-05-01T00:00:12.500Z', [key('a')]: '2025-05-01T00:01:30.000Z', [key('c')]: '2025-05-01T00:01:30.000Z' },
    });
  });

  test('requeueKeys: other keys a reconcile requeues come back each at its own time, a key asked for twice at the earlier; beside a failed key too', async () => {
    const other = (name: string) => ({ key: { kind: Widget, namespace: 'ns', name }, afterSeconds: name === 'p1' ? 30 : 10 });
    const host = hostFor(async ({ name }) => {
      if (name === 'sweep')
        return {
          requeueAfterSeconds: 60,
          requeueKeys: [other('p1'), other('p2'), { ...other('p1'), afterSeconds: 5 }, { ...other('p3'), afterSeconds: -1 }],
        };
      if (name === 'p2') return { requeueAfterSeconds: 20 };
      if (name === 'bad') throw new TransientError('not yet');
    });
    const answer = await receive(host, reconcileEvent([key('sweep'), key('p2')]));
    assert.deepEqual(answer.body, { reconciled: 2, failed: 0, requeued: 3 });
    assert.equal(answer.reply?.headers['ce-opfnnotbefore'], '2025-05-01T00:00:05.000Z');
    assert.deepEqual(JSON.parse(answer.reply!.body), {
      keys: [key('p1'), key('p2'), key('sweep')],
      notBefore: { [key('p2')]: '2025-05-01T00:00:10.000Z', [key('sweep')]: '2025-05-01T00:01:00.000Z' },
    });
    const withFailure = await receive(host, reconcileEvent([key('sweep'), key('bad')]));
    assert.deepEqual(withFailure.body, {
      reconciled: 1,
      failed: 1,
      requeued: 3,
      retrying: 1,
      failures: [{ key: key('bad'), error: 'not yet' }],
    });
    assert.equal(withFailure.reply?.headers['ce-opfnnotbefore'], undefined, 'due at once, for the failed key');
    assert.deepEqual(
      JSON.parse(withFailure.reply!.body),
      {
        keys: [key('bad'), key('p1'), key('p2'), key('sweep')],
        notBefore: {
          [key('p1')]: '2025-05-01T00:00:05.000Z',
          [key('p2')]: '2025-05-01T00:00:10.000Z',
          [key('sweep')]: '2025-05-01T00:01:00.000Z',
        },
      },
      'the failed key at once, and every requeue kept at its own time (a failing sibling does not cost the others their resync)',
    );
  });

  test("a 2xx answer's outcome header stays small whatever the failed keys' messages (undici refuses headers over 16 KiB)", async () => {
    // Each failing key's message is a sweep's parent error listing child errors, with control
    // and non-ASCII characters, which the header writes as 6-byte \uXXXX escapes.
    const huge = `can't create Pod default/x: ${'é\u0001"'.repeat(20_000)}`;
    const host = hostFor(async ({ name }) => {
      if (name === 'sweep')
        return {
          failedKeys: Array.from({ length: 8 }, (_, i) => ({
            key: { kind: Widget, namespace: 'ns', name: `p${i}` },
            error: new TransientError(huge),
          })),
        };
    });
    // Served over HTTP as the broker reads it: undici (fetch) throws on a header section over 16 KiB.
    const server = host.app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    try {
      const message = HTTP.binary(reconcileEvent([key('sweep')]));
      const response = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, {
        method: 'POST',
        headers: message.headers as Record<string, string>,
        body: message.body as string,
      });
      assert.equal(response.status, 200);
      const header = response.headers.get(OUTCOME_HEADER)!;
      assert.ok(header.length < 10 * 1024, `outcome header ${header.length} bytes`);
      const failures = JSON.parse(header).failures as { key: string; error: string }[];
      assert.equal(failures.length, 5);
      assert.match(failures[0]!.error, /^can't create Pod default\/x: é/);
      assert.match(failures[0]!.error, /… \(cut from 60028 characters\)$/);
      await response.text();
    } finally {
      server.close();
    }
  });

  test("a reconcile event delivered before its keys are due (Knative delivers replies at once): a key due within the delivery's budget is reconciled at its own time, soonest first; one due later is dropped, neither done nor failed", async () => {
    let clock = Date.parse('2025-05-01T00:00:00Z');
    const calls: string[] = [];
    const declaration = defineFunction({
      name: 'widgets',
      description: 'test',
      reconciles: Widget,
      rbac: [],
      reconcile: async ({ name }) => void calls.push(`${name}@${new Date(clock).toISOString().slice(11, 23)}`),
    });
    // The host waits on this clock: a wait moves it on, so no test time passes (one key at a
    // time: one clock cannot model waits that overlap).
    const host = createFunctionHost(declaration, {
      kube: unreachableKube(),
      log: quietLog,
      metrics: createMetrics('widgets'),
      fanOutConcurrency: 1,
      now: () => new Date(clock),
      sleep: async (ms) => void (clock += ms),
    });
    const event = (notBefore: string | undefined, perKey?: Record<string, string>) =>
      new CloudEvent<unknown>({
        type: 'dev.opfn.reconcile',
        source: '/opfn/functions/widgets',
        opfnfunction: 'widgets',
        ...(notBefore ? { opfnnotbefore: notBefore } : {}),
        datacontenttype: 'application/json',
        data: { keys: ['a', 'b', 'c'].map(key), ...(perKey ? { notBefore: perKey } : {}) },
      });
    // Budget 30 s from 00:00:00: a at +20 s and b at +0.5 s are waited for, c at +10 min is not.
    const mixed = await receive(
      host,
      event('2025-05-01T00:00:00.500Z', { [key('a')]: '2025-05-01T00:00:20Z', [key('c')]: '2025-05-01T00:10:00Z' }),
    );
    assert.deepEqual([mixed.status, mixed.body, mixed.reply], [200, { reconciled: 2, failed: 0, requeued: 0 }, undefined]);
    assert.deepEqual(calls, ['b@00:00:00.500', 'a@00:00:20.000'], 'each at its own time, the sooner first');
    // Now 00:00:20: nothing due within the budget (until 00:00:50).
    const none = await receive(host, event('2025-05-01T00:01:00Z', { [key('c')]: '2025-05-01T00:10:00Z' }));
    assert.equal(none.status, 200);
    assert.match(String(none.body.ignored), /not due until 2025-05-01T00:01:00.000Z/);
    assert.equal(calls.length, 2, 'nothing reconciled early');
    const perKeyOnly = await receive(host, event(undefined, { [key('a')]: '2025-05-01T00:00:25Z' }));
    assert.deepEqual(
      [perKeyOnly.body.reconciled, calls.slice(2)],
      [3, ['b@00:00:20.000', 'c@00:00:20.000', 'a@00:00:25.000']],
      'a key without a time of its own is due with the event, at once',
    );
  });

  test("a requeue too far for a Date (a hook's resyncAfterSeconds 1e13, Infinity) comes back after MAX_REQUEUE_SECONDS; NaN or negative: none", async () => {
    for (const far of [1e13, 1e300, Infinity]) {
      const outcome = await receive(
        hostFor(async () => ({ requeueAfterSeconds: far })),
        widgetEvent('a'),
      );
      assert.equal(outcome.status, 200, `${far}: the reconcile succeeded, so does its answer`);
      assert.equal(
        outcome.reply?.headers['ce-opfnnotbefore'],
        new Date(Date.parse('2025-05-01T00:00:00Z') + MAX_REQUEUE_SECONDS * 1000).toISOString(),
      );
    }
    for (const none of [NaN, -5]) {
      const outcome = await receive(
        hostFor(async () => ({ requeueAfterSeconds: none })),
        widgetEvent('a'),
      );
      assert.deepEqual([outcome.status, outcome.reply], [200, undefined], `${none}: no requeue`);
    }
  });

  test('a fan-out with one failing key: 200 and a reply naming only that key; when only failing keys remain: 503', async () => {
    const calls = new Map<string, number>();
    const host = hostFor(async ({ name }) => {
      calls.set(name, (calls.get(name) ?? 0) + 1);
      if (name === 'bad') throw new TransientError('not yet', { retryAfterSeconds: 7 });
    });
    const keys = ['a', 'bad', 'c', 'd'].map(key);
    const first = await receive(host, reconcileEvent(keys));
    assert.equal(first.status, 200);
    assert.deepEqual(JSON.parse(first.reply!.body), { keys: [key('bad')] });
    assert.equal(first.reply!.headers['ce-opfnnotbefore'], undefined, 'retried by the broker at once (its backoff applies on failure)');
    assert.deepEqual(first.body, { reconciled: 3, failed: 1, requeued: 0, retrying: 1, failures: [{ key: key('bad'), error: 'not yet' }] });
    const retry = await receive(host, reconcileEvent([key('bad')]));
    assert.equal(retry.status, 503, 'all its keys failed: the broker retries with backoff, then dead-letters with the reason');
    assert.equal(retry.retryAfterSeconds, 7);
    assert.match(String(retry.body.error), /not yet/);
    assert.deepEqual(Object.fromEntries(calls), { a: 1, bad: 2, c: 1, d: 1 }, 'the keys that succeeded were not redone');
  });

  test('a fan-out where one key fails and another asks to come back: the reply names both, the failed key due at once and the other at its time; the failed key alone is 503, backed off', async () => {
    const host = hostFor(async ({ name }) => {
      if (name === 'bad') throw new TransientError('still broken');
      return { requeueAfterSeconds: 30 };
    });
    const first = await receive(host, reconcileEvent([key('bad'), key('periodic')]));
    assert.equal(first.status, 200);
    assert.deepEqual(
      JSON.parse(first.reply!.body),
      { keys: [key('bad'), key('periodic')], notBefore: { [key('periodic')]: '2025-05-01T00:00:30.000Z' } },
      'the requeue is kept beside the failure',
    );
    // The local broker holds each key apart (requeue-hold.ts): the failed key comes back alone.
    const retry = await receive(host, reconcileEvent([key('bad')]));
    assert.equal(retry.status, 503, 'alone, its failure is the whole answer: the broker backs off');
  });

  test('failedKeys: other keys a reconcile reports as failed are retried alone, as failed keys of the event; a TerminalError is not retried', async () => {
    const host = hostFor(async ({ name }): Promise<ReconcileResult> => {
      if (name !== 'sweep') throw new TransientError(`${name} still broken`);
      return {
        failedKeys: [
          { key: { kind: Widget, namespace: 'ns', name: 'p1' }, error: new TransientError('hook answered 500') },
          { key: { kind: Widget, namespace: 'ns', name: 'p2' }, error: new TerminalError('spec is nonsense', { reason: 'InvalidSpec' }) },
          { key: { kind: Widget, namespace: 'ns', name: 'p1' }, error: new TransientError('reported twice') },
        ],
      };
    });
    const outcome = await receive(host, widgetEvent('sweep'));
    assert.equal(outcome.status, 200);
    assert.deepEqual(outcome.body, {
      reconciled: 1,
      failed: 1,
      requeued: 0,
      retrying: 1,
      failures: [{ key: key('p1'), error: 'hook answered 500' }],
    });
    assert.deepEqual(JSON.parse(outcome.reply!.body), { keys: [key('p1')] }, 'due at once; the sweep itself is not redone');
    const retry = await receive(host, reconcileEvent([key('p1')]));
    assert.equal(retry.status, 503, 'alone, its failure is the whole answer: the broker backs off');
  });

  test("a Retry-After only when every failed key asked for one: one key's wait does not hold back the others", async () => {
    const host = hostFor(async ({ name }) => {
      if (name.startsWith('limited')) throw new TransientError('429', { retryAfterSeconds: name === 'limited-a' ? 7 : 3 });
      throw new TransientError('500');
    });
    assert.equal(
      (await receive(host, reconcileEvent([key('limited-a'), key('limited-b')]))).retryAfterSeconds,
      3,
      'all asked: the shortest',
    );
    const mixed = await receive(host, reconcileEvent([key('limited-a'), key('plain')]));
    assert.deepEqual(
      [mixed.status, mixed.retryAfterSeconds],
      [503, undefined],
      "the plain failure is retried with the broker's backoff alone",
    );
  });

  test('TerminalError is answered 200 (retrying cannot help); other errors by class', async () => {
    assert.equal(
      (
        await receive(
          hostFor(async () => {
            throw new TerminalError('spec is nonsense', { reason: 'InvalidSpec' });
          }),
          widgetEvent('a'),
        )
      ).status,
      200,
    );
    assert.equal(
      (
        await receive(
          hostFor(async () => {
            throw new Error('bug');
          }),
          widgetEvent('a'),
        )
      ).status,
      500,
    );
    assert.equal(statusForError(new InvalidPathSegmentError('name', '..')), 400);
    assert.equal(statusForError(new TransientError('later')), 503);
  });

  test('outcome stays small whatever the number of keys', async () => {
    const host = hostFor(async ({ name }) => {
      if (name.endsWith('7')) throw new TransientError('x'.repeat(300));
    });
    const keys = Array.from({ length: 1000 }, (_, i) => key(`${'n'.repeat(50)}-${i}`));
    const outcome = await receive(host, reconcileEvent(keys));
    assert.equal(outcome.status, 200);
    assert.ok(JSON.stringify(outcome.body).length < 4096, `outcome ${JSON.stringify(outcome.body).length} bytes`);
    assert.equal(JSON.parse(outcome.reply!.body).keys.length, 100);
  });
});

describe('the delivery budget', () => {
  /** A host on a clock that each reconcile moves on by `stepSeconds`; keys reconciled one at a time. */
  function budgetedHost(
    budgetSeconds: number,
    reconcile: (name: string, deadline: number) => Promise<ReconcileResult | void>,
    stepSeconds = 10,
  ) {
    let clock = Date.parse('2025-05-01T00:00:00Z');
    const declaration = defineFunction({
      name: 'widgets',
      description: 'test',
      reconciles: Widget,
      rbac: [],
      reconcile: async ({ name }, ctx) => {
        clock += stepSeconds * 1000;
        return reconcile(name, ctx.deadline);
      },
    });
    return createFunctionHost(declaration, {
      kube: unreachableKube(),
      log: quietLog,
      metrics: createMetrics('widgets'),
      fanOutConcurrency: 1,
      deliveryBudgetMs: budgetSeconds * 1000,
      now: () => new Date(clock),
    });
  }
  const replyOf = (outcome: { reply?: { body: string } }) =>
    JSON.parse(outcome.reply!.body) as { keys: string[]; notBefore?: Record<string, string> };

  test("keys not started within the budget go back in the reply, due at once; the reply's delivery does them", async () => {
    const calls: string[] = [];
    const deadlines = new Set<number>();
    const host = budgetedHost(25, async (name, deadline) => {
      calls.push(name);
      deadlines.add(deadline);
    });
    const first = await receive(host, reconcileEvent(['a', 'b', 'c', 'd', 'e'].map(key)));
    assert.equal(first.status, 200);
    assert.deepEqual(
      first.body,
      { reconciled: 3, failed: 0, requeued: 0, deferred: 2 },
      'started at 0, 10 and 20 s; at 30 s the 25 s budget is spent',
    );
    assert.deepEqual(replyOf(first), { keys: [key('d'), key('e')] });
    assert.equal(first.reply!.headers['ce-opfnnotbefore'], undefined);
    assert.deepEqual([...deadlines], [Date.parse('2025-05-01T00:00:25Z')], 'ctx.deadline: the budget after the event arrived');
    const second = await receive(host, reconcileEvent(replyOf(first).keys));
    assert.deepEqual(
      [second.status, second.body, second.reply],
      [200, { reconciled: 2, failed: 0, requeued: 0 }, undefined],
      'its own budget',
    );
    assert.deepEqual(calls, ['a', 'b', 'c', 'd', 'e'], 'each key once');
  });

  test('the first key is always started; when every key started failed, the whole event is retried with backoff', async () => {
    const host = budgetedHost(0, async (name) => {
      if (name === 'bad') throw new TransientError('not yet');
    });
    const one = await receive(host, reconcileEvent(['a', 'b'].map(key)));
    assert.deepEqual([one.status, one.body.reconciled, replyOf(one).keys], [200, 1, [key('b')]]);
    const failing = await receive(host, reconcileEvent(['bad', 'b'].map(key)));
    assert.deepEqual([failing.status, failing.body.deferred, failing.reply], [503, 1, undefined]);
  });

  test('beside deferred keys: a failed key rides along, and the requeues too, each at its own time', async () => {
    const host = budgetedHost(15, async (name) => {
      if (name === 'bad') throw new TransientError('not yet');
      if (name === 'periodic') return { requeueAfterSeconds: 60 };
    });
    const withFailure = await receive(host, reconcileEvent(['periodic', 'bad', 'c'].map(key)));
    assert.deepEqual(withFailure.body, {
      reconciled: 1,
      failed: 1,
      requeued: 1,
      deferred: 1,
      retrying: 1,
      failures: [{ key: key('bad'), error: 'not yet' }],
    });
    assert.deepEqual(replyOf(withFailure), {
      keys: [key('bad'), key('c'), key('periodic')],
      notBefore: { [key('periodic')]: '2025-05-01T00:01:10.000Z' },
    });
    const clean = await receive(host, reconcileEvent(['periodic', 'b', 'c'].map(key)));
    assert.deepEqual(replyOf(clean), { keys: [key('c'), key('periodic')], notBefore: { [key('periodic')]: '2025-05-01T00:01:30.000Z' } });
    assert.equal(clean.reply!.headers['ce-opfnnotbefore'], undefined, 'due at once, for the deferred key');
  });

  test("deferredKeys a reconcile reports (a sweep's parents) go back in the reply; more than it carries: a window at a random place, the rest counted", () => {
    const widget = (name: string) => ({ kind: Widget, namespace: 'ns', name });
    const parents = Array.from({ length: 1500 }, (_, i) => widget(`p${i}`));
    const results: KeyResult[] = [
      {
        type: 'done',
        deferredKeys: parents,
        failedKeys: [{ key: widget('failing'), result: failedResult(new TransientError('hook 500')) }],
      },
    ];
    const outcome = answerFor('widgets', [widget('sweep')], results, new Date(), () => 0.5);
    assert.equal(outcome.status, 200);
    assert.deepEqual(
      { ...outcome.body, failures: undefined },
      { reconciled: 1, failed: 1, requeued: 0, deferred: 1500, retrying: 1, failures: undefined, deferredLeft: 501 },
    );
    const carried = replyOf(outcome).keys;
    assert.equal(carried.length, MAX_KEYS_PER_EVENT);
    assert.deepEqual(
      [carried[0], carried[1], carried.at(-1)],
      [key('failing'), key('p750'), key('p248')],
      'the failed key, then 999 deferred from the middle, wrapping around',
    );
  });
});

describe('Kubernetes Events on shutdown', () => {
  test('drain() waits until the Events recorded by finished reconciles have been written (or given up)', async () => {
    const posts: number[] = [];
    const kube = unreachableKube((verb, resource) => {
      if (verb === 'post' && resource === 'events') posts.push(Date.now());
    });
    const declaration = defineFunction({
      name: 'widgets',
      description: 'test',
      reconciles: Widget,
      rbac: [],
      reconcile: async () => {
        throw new TerminalError('spec is nonsense', { reason: 'InvalidSpec' });
      },
    });
    const host = createFunctionHost(declaration, { kube, log: quietLog, metrics: createMetrics('widgets') });
    assert.equal((await receive(host as ReturnType<typeof hostFor>, widgetEvent('a'))).status, 200, 'answered before the Event is written');
    assert.equal(posts.length, 0, 'the Event is written off the critical path');
    await host.drain();
    assert.equal(posts.length, 4, 'the write (and its retries) happened before drain resolved');
  });
});

describe('building blocks', () => {
  test('config: defaults, environment, a missing required value names itself, an undeclared name throws', async () => {
    const parameters = [
      { name: 'BASE_URL', description: 'provider', default: 'https://example.com' },
      { name: 'API_KEY', description: 'provider key', secret: true },
    ];
    assert.throws(() => resolveConfig('fx', parameters, {}), /function fx needs configuration: set API_KEY \(provider key\)/);
    const config = resolveConfig('fx', parameters, { API_KEY: 's3cret' });
    assert.equal(config.BASE_URL, 'https://example.com');
    assert.equal(config.API_KEY, 's3cret');
    assert.throws(() => config.TYPO, /config "TYPO" is not declared by function fx/);
    // Logged, printed, serialised or awaited, it works, and shows no secret.
    assert.equal(JSON.stringify(config), '{"BASE_URL":"https://example.com","API_KEY":"(secret)"}');
    assert.doesNotMatch(inspect(config), /s3cret/);
    assert.deepEqual(Object.keys(config), ['BASE_URL', 'API_KEY']);
    assert.equal(await Promise.resolve(config), config);
    assert.throws(
      () =>
        defineFunction({
          name: 'fx',
          description: '',
          reconciles: Widget,
          rbac: [],
          reconcile: async () => {},
          config: [{ name: 'bad-name', description: '' }],
        }),
      /environment variable name/,
    );
  });

  test('cron: the resync schedule is validated at definition', () => {
    for (const good of ['*/5 * * * *', '0 */2 * * 1-5', '15 3 1 jan,jul sun', '@hourly', '@every 30s', 'CRON_TZ=UTC 0 0 * * *'])
      assert.equal(cronProblem(good), undefined, good);
    assert.match(cronProblem('* * * *')!, /expected 5 fields/);
    assert.match(cronProblem('60 * * * *')!, /minute field "60"/);
    assert.match(cronProblem('*/0 * * * *')!, /step "0"/);
    // Knative's PingSource validation (robfig/cron v3) refuses a 7 for Sunday; so does the declaration.
    assert.match(cronProblem('0 0 * * 7')!, /day of week field "7": "7" is outside 0-6/);
    assert.throws(
      () =>
        defineFunction({
          name: 'fx',
          description: '',
          reconciles: Widget,
          rbac: [],
          reconcile: async () => {},
          resyncSchedule: 'every 5 minutes',
        }),
      /resyncSchedule "every 5 minutes" is not a cron expression/,
    );
  });

  test('http: a timeout on every request becomes a TransientError naming the URL without its query', async () => {
    const server = createServer((req, res) => {
      if (req.url?.startsWith('/slow')) setTimeout(() => res.end('late'), 2000).unref();
      else res.end('{"ok":true}');
    }).listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const http = httpClient({ timeoutMs: 200 });
      assert.deepEqual(await (await http.fetch(`${base}/fast`)).json(), { ok: true });
      await assert.rejects(
        http.fetch(`${base}/slow?apikey=secret`),
        (error: unknown) =>
          error instanceof TransientError &&
          /GET http:\/\/127\.0\.0\.1:\d+\/slow: no answer within 200 ms/.test(error.message) &&
          !error.message.includes('secret'),
      );
      const closed = createServer().listen(0, '127.0.0.1');
      await new Promise((resolve) => closed.once('listening', resolve));
      const closedPort = (closed.address() as AddressInfo).port;
      await new Promise((resolve) => closed.close(resolve));
      await assert.rejects(
        http.fetch(`http://127.0.0.1:${closedPort}/x`),
        (error: unknown) => error instanceof TransientError && /ECONNREFUSED/.test(error.message),
      );
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  test('objectPath refuses names that are not one path segment; parseKindKey validates as the API server would', () => {
    for (const name of ['.', '..', '', 'a/b', '%2e%2e'])
      assert.throws(() => objectPath(ConfigMap, { namespace: 'default', name }), InvalidPathSegmentError, name);
    assert.throws(() => objectPath(ConfigMap, { namespace: '..', name: 'x' }), InvalidPathSegmentError);
    assert.equal(objectPath(ConfigMap, { namespace: 'default', name: 'a.b' }), '/api/v1/namespaces/default/configmaps/a.b');
    assert.deepEqual(parseKindKey('ConfigMap:default/a.b', [ConfigMap]), { kind: ConfigMap, namespace: 'default', name: 'a.b' });
    assert.match(String(parseKindKey('ConfigMap:default/..', [ConfigMap])), /invalid object name/);
    assert.match(String(parseKindKey('ConfigMap:Default/a', [ConfigMap])), /invalid namespace/);
  });

  test('ownerLabelValue: names that fit are kept; longer ones get a stable 63-character hash form no name can take', () => {
    assert.equal(ownerLabelValue('short'), 'short');
    const long = `${'a'.repeat(60)}.example.com`;
    const value = ownerLabelValue(long);
    assert.equal(value.length, 63);
    assert.equal(value, ownerLabelValue(long));
    assert.notEqual(value, ownerLabelValue(`${long}x`));
    assert.ok(isHashedLabelValue(value) && !isHashedLabelValue('short'));
    assert.match(value, /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/, 'a valid label value');
  });
});
