// The Kubernetes Event recorder's rate limit for Normal Events (functions/runtime/recorder.ts):
// a burst, then a steady rate; Warnings always recorded. The API is a recording stand-in: what is
// under test is which Events reach it, not how the API server stores them (runtime.test.ts does).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigMap, type KubeObject } from '../../functions/runtime/kinds.ts';
import type { KubeClient } from '../../functions/runtime/kube.ts';
import { EventSink, NORMAL_BURST, NORMAL_PER_SECOND } from '../../functions/runtime/recorder.ts';
import { quietLog } from '../support/cluster.ts';

function recordingKube() {
  const posted: { reason: string; name: string }[] = [];
  const kube = {
    create: async (_kind: unknown, event: { reason: string; involvedObject: { name: string } }) => {
      posted.push({ reason: event.reason, name: event.involvedObject.name });
      return event;
    },
    mergePatch: async () => ({}),
  } as unknown as KubeClient;
  return { kube, posted };
}

const object = (name: string): KubeObject => ({ metadata: { name, namespace: 'default', uid: `uid-${name}` } });

test('Normal Events: a burst, then the steady rate; Warnings are never dropped', async () => {
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
  assert.equal(posted.filter((event) => event.name.startsWith('b')).length, 2 * NORMAL_PER_SECOND, 'two seconds later: two seconds of the rate');

  now = new Date(now.getTime() + 3_600_000);
  for (let i = 0; i < NORMAL_BURST + 5; i++) recorder.normal(object(`c${i}`), ConfigMap, 'Created', `created c${i}`);
  await sink.flush();
  assert.equal(posted.filter((event) => event.name.startsWith('c')).length, NORMAL_BURST, 'an idle hour refills the burst, no more');
});
