// The Kubernetes Event recorder's rate limit for Normal Events (functions/runtime/recorder.ts):
// a burst, then a steady rate; Warnings not rate limited; the queue of unwritten Events bounded. The API is a recording stand-in: what is
// under test is which Events reach it, not how the API server stores them (runtime.test.ts does).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  ConfigMap,
  type KubeObject,
  type KubeClient,
  EventSink,
  MAX_QUEUED,
  NORMAL_BURST,
  NORMAL_PER_SECOND,
} from '../../functions/runtime/index.ts';
import { quietLog } from '../support/cluster.ts';

/** `answered`: what each write waits for (an API server that takes its time). */
function recordingKube(answered: Promise<void> = Promise.resolve()) {
  const posted: { reason: string; name: string; count: number }[] = [];
  const kube = {
    create: async (_kind: unknown, event: { reason: string; count: number; involvedObject: { name: string } }) => {
      await answered;
      posted.push({ reason: event.reason, name: event.involvedObject.name, count: event.count });
      return event;
    },
    mergePatch: async () => ({}),
  } as unknown as KubeClient;
  return { kube, posted };
}

const object = (name: string): KubeObject => ({ metadata: { name, namespace: 'default', uid: `uid-${name}` } });

test('Normal Events: a burst, then the steady rate; Warnings are not rate limited', async () => {
  const { kube, posted } = recordingKube();
  let now = new Date('2025-06-01T10:00:00Z');
  const sink = new EventSink(kube, 'test', quietLog, () => now);
  const recorder = sink.recorder();
  for (let i = 0; i < NORMAL_BURST + 20; i++) recorder.normal(object(`a${i}`), ConfigMap, 'Created', `created a${i}`);
  for (let i = 0; i < 10; i++) recorder.warning(object(`w${i}`), ConfigMap, 'Failed', `failed w${i}`);
  await sink.flush();
  assert.equal(posted.filter((event) => event.reason === 'Created').length, NORMAL_BURST, 'the burst, then nothing at the same instant');
  assert.equal(posted.filter((event) => event.reason === 'Failed').length, 10, 'every Warning');

  now = new Date(now.getTime() + 2000);
  for (let i = 0; i < 30; i++) recorder.normal(object(`b${i}`), ConfigMap, 'Created', `created b${i}`);
  await sink.flush();
  assert.equal(
    posted.filter((event) => event.name.startsWith('b')).length,
    2 * NORMAL_PER_SECOND,
    'two seconds later: two seconds of the rate',
  );

  now = new Date(now.getTime() + 3_600_000);
  for (let i = 0; i < NORMAL_BURST + 5; i++) recorder.normal(object(`c${i}`), ConfigMap, 'Created', `created c${i}`);
  await sink.flush();
  assert.equal(posted.filter((event) => event.name.startsWith('c')).length, NORMAL_BURST, 'an idle hour refills the burst, no more');
});

test(`an API server slower than the Events: at most ${MAX_QUEUED} wait to be written, and a dropped one's count is written by its next occurrence`, async () => {
  let answer!: () => void;
  const { kube, posted } = recordingKube(new Promise<void>((resolve) => (answer = resolve)));
  const sink = new EventSink(kube, 'test', quietLog);
  const recorder = sink.recorder();
  const objects = 5000;
  for (let i = 0; i < objects; i++) recorder.warning(object(`o${i}`), ConfigMap, 'Failed', 'failed');
  // Its first occurrence was dropped (the queue was full); this one finds room once the queue has drained.
  const late = object(`o${objects - 1}`);
  answer();
  await sink.flush();
  const writers = posted.length - MAX_QUEUED;
  assert.ok(
    writers > 0 && writers <= 2,
    `${posted.length} written: the ${MAX_QUEUED} queued and the writes already under way, not all ${objects}`,
  );
  recorder.warning(late, ConfigMap, 'Failed', 'failed');
  await sink.flush();
  assert.deepEqual(posted.at(-1), { reason: 'Failed', name: late.metadata.name, count: 2 }, 'both occurrences counted');
});
