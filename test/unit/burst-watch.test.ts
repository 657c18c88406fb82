// The burst watch's bookkeeping (functions/runtime/kube/burst-watch.ts), fed by a watch stream of
// its own making: when it opens, what it answers for which version, and what it keeps at most.
// Against a real API server: test/integration/reads-no-older-than.test.ts.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { BurstWatch, type Watcher } from '../../functions/runtime/kube/burst-watch.ts';
import type { KubeObject, ResourceKind, WatchEvent } from '../../functions/runtime/index.ts';

const Widget: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };
const BURST_READS = 20;

const widget = (name: string, resourceVersion: string, data = ''): KubeObject & { data: string } => ({
  apiVersion: 'example.com/v1',
  kind: 'Widget',
  metadata: { name, namespace: 'ns', resourceVersion },
  data,
});
const added = (object: KubeObject): WatchEvent => {
  const event: WatchEvent = { type: 'ADDED', object };
  return { ...event, line: JSON.stringify(event) };
};
const key = (name: string) => ({ namespace: 'ns', name });

/** A watch that sends `events` and then stays open until aborted (or fails at once with `failure`). */
function streamOf(events: WatchEvent[], failure?: Error): Watcher & { opened: (string | undefined)[] } {
  const opened: (string | undefined)[] = [];
  return {
    opened,
    async *watch<T extends KubeObject>(_kind: ResourceKind, options: { resourceVersion?: string; signal?: AbortSignal }) {
      opened.push(options.resourceVersion);
      if (failure) throw failure;
      for (const event of events) yield event as WatchEvent<T>;
      await new Promise((_, reject) => options.signal!.addEventListener('abort', () => reject(new Error('aborted'))));
    },
  };
}

/** Reads until the watch opens (BURST_READS within a second), announcing `version`. */
function openBurst(watch: BurstWatch, version = '1'): void {
  for (let i = 0; i < BURST_READS; i++)
    assert.equal(watch.read(key('x'), version), undefined, 'nothing is answered before the watch opens');
}

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await sleep(5);
  assert.ok(check());
}

describe('BurstWatch', () => {
  test('opens on the twentieth read within a second, from the version that read announced', () => {
    const stream = streamOf([]);
    const watch = new BurstWatch(stream, Widget);
    for (let i = 0; i < BURST_READS - 1; i++) watch.read(key('x'), '7');
    assert.equal(watch.watching, false);
    watch.read(key('x'), '42');
    assert.equal(watch.watching, true);
    assert.deepEqual(stream.opened, ['42']);
    watch.close();
  });

  test('answers an object it saw at the announced version or later; a later version it has not seen is not answered', async () => {
    const watch = new BurstWatch(streamOf([added(widget('a', '5', 'five'))]), Widget);
    openBurst(watch);
    await until(() => watch.read(key('a'), '5') !== undefined);
    assert.equal((watch.read(key('a'), '4')?.object as { data?: string })?.data, 'five');
    assert.equal(watch.read(key('a'), '6'), undefined);
    assert.equal(watch.read(key('a'), 'not-a-version'), undefined);
    assert.equal(watch.read(key('b'), '1'), undefined);
    watch.close();
  });

  test('a deleted object is answered as gone for the versions before its deletion', async () => {
    const object = widget('a', '5');
    const watch = new BurstWatch(streamOf([added(object), { type: 'DELETED', object: widget('a', '9') }]), Widget);
    openBurst(watch);
    await until(() => watch.read(key('a'), '9') !== undefined);
    assert.deepEqual(watch.read(key('a'), '5'), { object: undefined });
    watch.close();
  });

  test('keeps at most 10,000 objects: the one seen longest ago is forgotten', async () => {
    const events = Array.from({ length: 10_001 }, (_, i) => added(widget(`w${i}`, String(i + 1))));
    const watch = new BurstWatch(streamOf(events), Widget);
    openBurst(watch);
    await until(() => watch.read(key('w10000'), '10001') !== undefined);
    assert.equal(watch.read(key('w0'), '1'), undefined);
    assert.notEqual(watch.read(key('w1'), '2'), undefined);
    watch.close();
  });

  test('keeps at most 16 MiB of objects: large ones push the oldest out', async () => {
    const MiB = 'x'.repeat(1024 * 1024);
    const events = Array.from({ length: 20 }, (_, i) => added(widget(`big${i}`, String(i + 1), MiB)));
    const watch = new BurstWatch(streamOf(events), Widget);
    openBurst(watch);
    await until(() => watch.read(key('big19'), '20') !== undefined);
    // Each a little over 1 MiB: the last 15 fit.
    assert.equal(watch.read(key('big0'), '1'), undefined);
    assert.equal(watch.read(key('big4'), '5'), undefined);
    assert.notEqual(watch.read(key('big5'), '6'), undefined);
    watch.close();
  });

  test('after a failed watch (refused, version too old, API unreachable) the reads stay GETs for a while: no watch is opened again at once', async () => {
    const stream = streamOf([], new Error('403 Forbidden'));
    const watch = new BurstWatch(stream, Widget);
    openBurst(watch);
    await until(() => !watch.watching);
    openBurst(watch);
    assert.equal(watch.watching, false);
    assert.deepEqual(stream.opened, ['1']);
  });

  test('closed, it forgets what it saw', async () => {
    const watch = new BurstWatch(streamOf([added(widget('a', '5'))]), Widget);
    openBurst(watch);
    await until(() => watch.read(key('a'), '5') !== undefined);
    watch.close();
    await until(() => !watch.watching);
    assert.equal(watch.read(key('a'), '5'), undefined);
  });
});
