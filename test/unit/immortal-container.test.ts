// ImmortalContainer's desired state, computed without any API call.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  asCreated,
  COUNTED_POD_HISTORY,
  desiredPod,
  finishedRun,
  GENERATION_ANNOTATION,
  nextStatus,
  nothingToDo,
  OWNER_LABEL,
  podAction,
  podNameFor,
  reported,
  statusShowsHealthyPod,
  type ImmortalContainer,
  type ImmortalContainerStatus,
  type PodObject,
} from '../../functions/immortal-container/desired.ts';
import { type Condition, boundedMessage } from '../../functions/runtime/index.ts';
import { backoffSeconds, restartBackoff, type RestartBackoff } from '../../functions/immortal-container/backoff.ts';

const T0 = new Date('2025-03-01T12:00:00Z');

const owner = (
  overrides: { generation?: number; uid?: string; image?: string; status?: ImmortalContainerStatus } = {},
): ImmortalContainer => ({
  apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
  kind: 'ImmortalContainer',
  metadata: {
    name: 'web',
    namespace: 'prod',
    uid: overrides.uid ?? 'owner-uid-1',
    generation: overrides.generation ?? 2,
    resourceVersion: '100',
  },
  spec: { image: overrides.image ?? 'nginx:1.27' },
  ...(overrides.status ? { status: overrides.status } : {}),
});

/** The pod as the API server returns it after creating desiredPod, plus a uid and a phase. */
const podFor = (ic: ImmortalContainer, extra: { uid?: string; phase?: string; deletionTimestamp?: string } = {}): PodObject => {
  const pod = structuredClone(desiredPod(ic));
  pod.metadata.uid = extra.uid ?? 'pod-uid-1';
  if (extra.deletionTimestamp) pod.metadata.deletionTimestamp = extra.deletionTimestamp;
  if (extra.phase) pod.status = { phase: extra.phase };
  return pod;
};

describe('desiredPod', () => {
  test("the seed's pod: name, container, label, owner, generation", () => {
    const ic = owner({ generation: 7 });
    const pod = desiredPod(ic);
    assert.equal(pod.apiVersion, 'v1');
    assert.equal(pod.kind, 'Pod');
    assert.equal(pod.metadata.name, 'web-immortalpod');
    assert.equal(podNameFor(ic), 'web-immortalpod');
    assert.equal(pod.metadata.namespace, 'prod');
    assert.deepEqual(pod.spec?.containers, [{ name: 'acontainer', image: 'nginx:1.27' }]);
    assert.deepEqual(pod.metadata.labels, { controller: 'web' });
    assert.deepEqual(pod.metadata.ownerReferences, [
      {
        apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
        kind: 'ImmortalContainer',
        name: 'web',
        uid: 'owner-uid-1',
        controller: true,
        blockOwnerDeletion: true,
      },
    ]);
    assert.deepEqual(pod.metadata.annotations, { [GENERATION_ANNOTATION]: '7' });
  });

  test('an object without a generation gets annotation "0"', () => {
    const ic = owner();
    delete ic.metadata.generation;
    assert.equal(desiredPod(ic).metadata.annotations?.[GENERATION_ANNOTATION], '0');
  });

  test("follows the owner's name, uid and image", () => {
    const ic = owner({ uid: 'other-uid', image: 'busybox:1.36' });
    ic.metadata.name = 'db';
    const pod = desiredPod(ic);
    assert.equal(pod.metadata.name, 'db-immortalpod');
    assert.equal(pod.metadata.labels?.[OWNER_LABEL], 'db');
    assert.equal(pod.metadata.ownerReferences?.[0].uid, 'other-uid');
    assert.equal(pod.metadata.ownerReferences?.[0].name, 'db');
    assert.equal(pod.spec?.containers?.[0].image, 'busybox:1.36');
  });
});

describe('podAction', () => {
  const ic = owner({ generation: 2 });

  test('no pod → create', () => {
    assert.deepEqual(podAction(ic, undefined), { type: 'create' });
  });

  test('terminating → wait (even when it finished or is stale)', () => {
    const action = podAction(ic, podFor(ic, { deletionTimestamp: '2025-01-01T00:00:00Z', phase: 'Failed' }));
    assert.equal(action.type, 'wait');
    assert.match((action as { message: string }).message, /web-immortalpod is terminating/);
  });

  test("someone else's pod with the same name → blocked, never touched", () => {
    const foreign: PodObject = {
      metadata: { name: 'web-immortalpod', namespace: 'prod', uid: 'x' },
      spec: { containers: [{ name: 'acontainer', image: 'nginx:1.27' }] },
    };
    const action = podAction(ic, foreign);
    assert.equal(action.type, 'blocked');
    assert.match((action as { message: string }).message, /not controlled by this ImmortalContainer/);

    const ownedByADeployment = structuredClone(foreign);
    ownedByADeployment.metadata.ownerReferences = [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'web', uid: 'rs', controller: true }];
    assert.equal(podAction(ic, ownedByADeployment).type, 'blocked');

    const notController = structuredClone(foreign);
    notController.metadata.ownerReferences = [
      { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', name: 'web', uid: 'owner-uid-1', controller: false },
    ];
    assert.equal(podAction(ic, notController).type, 'blocked', 'a non-controller reference does not make it ours');
  });

  test('pod of an earlier ImmortalContainer with the same name → replace (OwnerReplaced)', () => {
    const earlier = owner({ uid: 'owner-uid-0' });
    const action = podAction(ic, podFor(earlier, { phase: 'Running' }));
    assert.equal(action.type, 'replace');
    assert.equal((action as { reason: string }).reason, 'OwnerReplaced');

    // The Metacontroller variant's ImmortalContainer (another group) of the same name is another controller's.
    const metacontrollers = podFor(earlier, { phase: 'Running' });
    metacontrollers.metadata.ownerReferences![0].apiVersion = 'immortalcontainers.flugel.it/v1alpha1';
    assert.equal(podAction(ic, metacontrollers).type, 'blocked');
  });

  for (const phase of ['Succeeded', 'Failed']) {
    test(`phase ${phase} → back off 10 s, then replace (PodFinished)`, () => {
      const finished = podFor(ic, { phase });
      const first = podAction(ic, finished, T0);
      assert.equal(first.type, 'backoff');
      assert.equal((first as { seconds: number }).seconds, 10);
      assert.match((first as { message: string }).message, new RegExp(`phase ${phase}`));
      // The decision is recorded in status; ten seconds later it is due.
      const recorded = owner({ status: { restartBackoff: (first as { backoff: RestartBackoff }).backoff } });
      const later = podAction(recorded, finished, new Date(T0.getTime() + 10_000));
      assert.equal(later.type, 'replace');
      assert.equal((later as { reason: string }).reason, 'PodFinished');
      assert.match((later as { message: string }).message, new RegExp(`phase ${phase}`));
    });
  }

  test('image changed → replace (ImageChanged)', () => {
    const action = podAction(owner({ generation: 3, image: 'nginx:1.28' }), podFor(ic, { phase: 'Running' }));
    assert.equal(action.type, 'replace');
    assert.equal((action as { reason: string }).reason, 'ImageChanged');
    assert.match((action as { message: string }).message, /from nginx:1\.27 to nginx:1\.28/);
  });

  test('a pod without the acontainer container counts as a changed image', () => {
    const pod = podFor(ic, { phase: 'Running' });
    pod.spec = { containers: [{ name: 'sidecar', image: 'nginx:1.27' }] };
    assert.equal(podAction(ic, pod).type, 'replace');
  });

  test('a pod made for a newer generation → keep (our read is stale)', () => {
    const newer = owner({ generation: 5, image: 'nginx:1.28' });
    const stale = owner({ generation: 4, image: 'nginx:1.27' });
    assert.deepEqual(podAction(stale, podFor(newer, { phase: 'Pending' })), { type: 'keep' });
    assert.deepEqual(podAction(stale, podFor(newer, { phase: 'Failed' })), { type: 'keep' });
    // Same generation and a different image is a real change, not staleness.
    assert.equal(podAction(owner({ generation: 5, image: 'nginx:1.29' }), podFor(newer)).type, 'replace');
  });

  test('healthy → keep', () => {
    assert.deepEqual(podAction(ic, podFor(ic, { phase: 'Running' })), { type: 'keep' });
    assert.deepEqual(podAction(ic, podFor(ic, { phase: 'Pending' })), { type: 'keep' });
    assert.deepEqual(podAction(ic, podFor(ic)), { type: 'keep' }, 'no phase yet (unscheduled)');
    assert.deepEqual(
      podAction(owner({ generation: 3 }), podFor(ic, { phase: 'Running' })),
      { type: 'keep' },
      'a metadata-only generation bump with the same image',
    );
  });
});

describe('nextStatus', () => {
  const ready = (status: ImmortalContainerStatus | undefined): Condition | undefined => status?.conditions?.find((c) => c.type === 'Ready');

  test('counts a new pod uid once', () => {
    const ic = owner();
    const status = nextStatus(ic, ic, podFor(ic, { uid: 'p1' }))!;
    assert.equal(status.startTimes, 1);
    assert.deepEqual(status.countedPods, ['p1']);
    assert.equal(status.currentPod, 'web-immortalpod');
  });

  test('does not recount a counted uid (redelivery, another replica)', () => {
    const ic = owner({ status: { currentPod: 'web-immortalpod', startTimes: 4, countedPods: ['p0', 'p1'] } });
    const status = nextStatus(ic, ic, podFor(ic, { uid: 'p1' }))!;
    assert.equal(status.startTimes, 4);
    assert.deepEqual(status.countedPods, ['p0', 'p1']);
    const again = nextStatus({ ...ic, status }, ic, podFor(ic, { uid: 'p1' }))!;
    assert.equal(again.startTimes, 4);
  });

  test('a recreated pod (new uid) counts once more', () => {
    const ic = owner({ status: { startTimes: 1, countedPods: ['p1'] } });
    const status = nextStatus(ic, ic, podFor(ic, { uid: 'p2' }))!;
    assert.equal(status.startTimes, 2);
    assert.deepEqual(status.countedPods, ['p1', 'p2']);
  });

  test(`keeps at most ${COUNTED_POD_HISTORY} counted uids, the newest`, () => {
    assert.ok(COUNTED_POD_HISTORY > 1);
    const full = Array.from({ length: COUNTED_POD_HISTORY }, (_, i) => `p${i}`);
    const ic = owner({ status: { startTimes: 25, countedPods: full } });
    const status = nextStatus(ic, ic, podFor(ic, { uid: 'newest' }))!;
    assert.equal(status.startTimes, 26);
    assert.equal(status.countedPods?.length, COUNTED_POD_HISTORY);
    assert.deepEqual(status.countedPods, [...full.slice(1), 'newest']);
  });

  test('does not count pods that are not ours or are terminating', () => {
    const ic = owner({ status: { startTimes: 3, countedPods: ['p1'], currentPod: 'web-immortalpod' } });
    const foreign: PodObject = { metadata: { name: 'web-immortalpod', namespace: 'prod', uid: 'f1' } };
    const terminating = podFor(ic, { uid: 'p9', deletionTimestamp: '2025-01-01T00:00:00Z', phase: 'Running' });
    for (const pod of [foreign, terminating, podFor(owner({ uid: 'owner-uid-0' }), { uid: 'old' })]) {
      const status = nextStatus(ic, ic, pod)!;
      assert.equal(status.startTimes, 3);
      assert.deepEqual(status.countedPods, ['p1']);
      assert.equal(ready(status)?.reason, 'PodMissing');
    }
  });

  test('skips when the object was recreated under the same name (uid differs)', () => {
    const actedOn = owner({ uid: 'owner-uid-1' });
    const current = owner({ uid: 'owner-uid-2' });
    assert.equal(nextStatus(current, actedOn, podFor(actedOn, { uid: 'p1' })), undefined);
  });

  test('observedGeneration never goes backwards, and moves forward', () => {
    const current = owner({ generation: 6, status: { observedGeneration: 6, startTimes: 1, countedPods: ['p1'] } });
    const staleRead = owner({ generation: 5 });
    const status = nextStatus(current, staleRead, podFor(current, { uid: 'p1', phase: 'Running' }))!;
    assert.equal(status.observedGeneration, 6);
    assert.equal(ready(status)?.observedGeneration, 6);

    const forward = nextStatus(current, owner({ generation: 8 }), podFor(current, { uid: 'p1', phase: 'Running' }))!;
    assert.equal(forward.observedGeneration, 8);
    assert.equal(ready(forward)?.observedGeneration, 8);
  });

  test('Ready: PodRunning, PodPending, PodMissing', () => {
    const ic = owner();
    const running = ready(nextStatus(ic, ic, podFor(ic, { phase: 'Running' })))!;
    assert.deepEqual([running.status, running.reason], ['True', 'PodRunning']);
    const pending = ready(nextStatus(ic, ic, podFor(ic, { phase: 'Pending' })))!;
    assert.deepEqual([pending.status, pending.reason], ['False', 'PodPending']);
    assert.match(pending.message, /is Pending/);
    const noPhase = ready(nextStatus(ic, ic, podFor(ic)))!;
    assert.deepEqual([noPhase.status, noPhase.reason], ['False', 'PodPending']);
    const missing = ready(nextStatus(ic, ic, undefined))!;
    assert.deepEqual([missing.status, missing.reason], ['False', 'PodMissing']);
  });

  test('a missing pod keeps the last currentPod and the count', () => {
    const ic = owner({ status: { currentPod: 'web-immortalpod', startTimes: 2, countedPods: ['p1', 'p2'] } });
    const status = nextStatus(ic, ic, undefined)!;
    assert.equal(status.currentPod, 'web-immortalpod');
    assert.equal(status.startTimes, 2);
    assert.deepEqual(status.countedPods, ['p1', 'p2']);
  });

  test("a problem condition overrides the pod's condition", () => {
    const ic = owner();
    const status = nextStatus(ic, ic, podFor(ic, { phase: 'Running', uid: 'p1' }), {
      type: 'Ready',
      status: 'False',
      reason: 'PodNameTaken',
      message: 'pod web-immortalpod exists and is not ours',
    })!;
    const condition = ready(status)!;
    assert.deepEqual(
      [condition.status, condition.reason, condition.message],
      ['False', 'PodNameTaken', 'pod web-immortalpod exists and is not ours'],
    );
    assert.equal(condition.observedGeneration, 2);
    assert.equal(status.conditions?.length, 1);
  });

  test('lastTransitionTime survives a reconcile that does not flip Ready', () => {
    const ic = owner();
    const first = nextStatus(ic, ic, podFor(ic, { phase: 'Pending' }))!;
    const earlier = { ...first, conditions: first.conditions!.map((c) => ({ ...c, lastTransitionTime: '2020-01-01T00:00:00Z' })) };
    const second = nextStatus({ ...ic, status: earlier }, ic, undefined)!;
    assert.equal(ready(second)?.reason, 'PodMissing');
    assert.equal(ready(second)?.lastTransitionTime, '2020-01-01T00:00:00Z');
    const third = nextStatus({ ...ic, status: second }, ic, podFor(ic, { phase: 'Running' }))!;
    assert.notEqual(ready(third)?.lastTransitionTime, '2020-01-01T00:00:00Z');
  });

  test('keeps status fields it does not manage', () => {
    const ic = owner({ status: { startTimes: 1, countedPods: ['p1'], extra: 'kept' } as ImmortalContainerStatus });
    const status = nextStatus(ic, ic, podFor(ic, { uid: 'p1' })) as ImmortalContainerStatus & { extra?: string };
    assert.equal(status.extra, 'kept');
  });
});

describe('restart back-off (CrashLoopBackOff)', () => {
  const ic = owner();
  const failed = (uid: string, extra: { startTime?: string; finishedAt?: string } = {}): PodObject => {
    const pod = podFor(ic, { uid, phase: 'Failed' });
    pod.status = {
      phase: 'Failed',
      ...(extra.startTime ? { startTime: extra.startTime } : {}),
      ...(extra.finishedAt ? { containerStatuses: [{ name: 'acontainer', state: { terminated: { finishedAt: extra.finishedAt } } }] } : {}),
    } as PodObject['status'];
    return pod;
  };

  test('10 s doubling to 5 minutes', () => {
    assert.deepEqual([1, 2, 3, 4, 5, 6, 7, 8].map(backoffSeconds), [10, 20, 40, 80, 160, 300, 300, 300]);
  });

  test('each quick failure of a new pod doubles the wait; the same pod decided twice changes nothing', () => {
    let backoff: RestartBackoff | undefined;
    const waits: number[] = [];
    for (let i = 0; i < 7; i++) {
      backoff = restartBackoff(backoff, finishedRun(failed(`p${i}`), T0));
      waits.push((Date.parse(backoff.notBefore) - T0.getTime()) / 1000);
      assert.deepEqual(
        restartBackoff(backoff, finishedRun(failed(`p${i}`), new Date(T0.getTime() + 99_000))),
        backoff,
        'idempotent per pod',
      );
    }
    assert.deepEqual(waits, [10, 20, 40, 80, 160, 300, 300]);
  });

  test('a pod that ran 10 minutes resets the back-off: its replacement starts at once', () => {
    const previous: RestartBackoff = { quickFailures: 6, failedPod: 'old', notBefore: '2025-03-01T11:00:00Z' };
    const ranLong = failed('long', { startTime: '2025-03-01T11:40:00Z', finishedAt: '2025-03-01T11:50:00Z' });
    const reset = restartBackoff(previous, finishedRun(ranLong, T0));
    assert.equal(reset.quickFailures, 0);
    assert.equal(podAction(owner({ status: { restartBackoff: previous } }), ranLong, T0).type, 'replace');
    const quick = failed('quick', { startTime: '2025-03-01T11:49:00Z', finishedAt: '2025-03-01T11:50:00Z' });
    assert.equal(restartBackoff(previous, finishedRun(quick, T0)).quickFailures, 7, 'ran 1 minute: not reset');
  });

  test("the wait counts from the container's finish time, not from when the function looked", () => {
    const pod = failed('p', { finishedAt: '2025-03-01T11:59:55Z' });
    const action = podAction(ic, pod, T0);
    assert.equal(action.type, 'backoff');
    assert.equal((action as { seconds: number }).seconds, 5);
  });

  test('a changed image does not wait for the back-off, and its failures are counted from zero (the kubelet keys the back-off on the container)', () => {
    const old = failed('old', { finishedAt: '2025-03-01T11:59:59Z' });
    const waiting = podAction(ic, old, T0) as { type: string; backoff: RestartBackoff };
    assert.equal(waiting.type, 'backoff', 'the same image waits');
    const counted: RestartBackoff = { ...waiting.backoff, quickFailures: 5 };
    const changed = owner({ generation: 3, image: 'nginx:1.28', status: { restartBackoff: counted } });

    const action = podAction(changed, old, T0);
    assert.deepEqual(action, {
      type: 'replace',
      reason: 'ImageChanged',
      message: 'image changed from nginx:1.27 to nginx:1.28',
      backoff: { quickFailures: 0, failedPod: 'old', notBefore: '2025-03-01T12:00:00Z' },
    });
    // The new image's pod fails at once: the first wait of a new back-off, not the old image's sixth.
    const recorded = owner({
      generation: 3,
      image: 'nginx:1.28',
      status: { restartBackoff: (action as { backoff: RestartBackoff }).backoff },
    });
    const newPod = podFor(recorded, { uid: 'new', phase: 'Failed' });
    const next = podAction(recorded, newPod, T0);
    assert.deepEqual(
      [next.type, (next as { seconds: number }).seconds, (next as { backoff: RestartBackoff }).backoff.quickFailures],
      ['backoff', 10, 1],
    );

    // A running pod of the old image, nothing counted: replaced without a back-off record to write.
    assert.deepEqual(podAction(owner({ generation: 3, image: 'nginx:1.28' }), podFor(ic, { phase: 'Running' }), T0), {
      type: 'replace',
      reason: 'ImageChanged',
      message: 'image changed from nginx:1.27 to nginx:1.28',
    });
  });

  test('nextStatus keeps the back-off it is given', () => {
    const backoff: RestartBackoff = { quickFailures: 2, failedPod: 'p', notBefore: '2025-03-01T12:00:20Z' };
    assert.deepEqual(nextStatus(ic, ic, failed('p'), undefined, backoff)?.restartBackoff, backoff);
  });
});

describe('what the reconcile may skip (pure)', () => {
  const key = { namespace: 'prod', name: 'web' };
  test('a pod as created: ours, Pending or no phase yet, not going', () => {
    assert.equal(asCreated(podFor(owner()), key), true);
    assert.equal(asCreated(podFor(owner(), { phase: 'Pending' }), key), true);
    assert.equal(asCreated(podFor(owner(), { phase: 'Running' }), key), false, 'started');
    assert.equal(asCreated(podFor(owner(), { deletionTimestamp: '2026-01-01T00:00:00Z' }), key), false, 'going');
    assert.equal(asCreated(podFor(owner()), { namespace: 'prod', name: 'other' }), false, 'of another ImmortalContainer');
    const foreign = podFor(owner());
    foreign.metadata.ownerReferences = [];
    assert.equal(asCreated(foreign, key), false, 'not controlled by it');
  });

  test('statusShowsHealthyPod: this generation carried out, its pod healthy then', () => {
    const status = (generation: number, reason: string): ImmortalContainerStatus => ({
      observedGeneration: generation,
      currentPod: 'web-immortalpod',
      conditions: [{ type: 'Ready', status: 'True', reason, message: '', lastTransitionTime: '' }] as Condition[],
    });
    assert.equal(statusShowsHealthyPod(owner({ status: status(2, 'PodRunning') }), 'web-immortalpod'), true);
    assert.equal(statusShowsHealthyPod(owner({ status: status(1, 'PodRunning') }), 'web-immortalpod'), false, 'an older generation');
    assert.equal(statusShowsHealthyPod(owner({ status: status(2, 'PodMissing') }), 'web-immortalpod'), false, 'its pod was missing');
    assert.equal(statusShowsHealthyPod(owner({ status: status(2, 'PodRunning') }), 'other-pod'), false);
  });

  test('nothingToDo: from the event alone only a pod as created; with the object read, a pod or an object that changes nothing', () => {
    const running = podFor(owner(), { phase: 'Running' });
    assert.equal(nothingToDo(key, undefined, owner(), T0), false, 'no eventObject: a resync reads everything');
    assert.equal(nothingToDo(key, podFor(owner())), true, 'our pod as created, before any read');
    assert.equal(nothingToDo(key, running), false, 'a started pod needs the object read');
    const done = owner({ status: nextStatus(owner(), owner(), running) });
    assert.equal(nothingToDo(key, running, done, T0), true, 'our running pod, and the status says so');
    assert.equal(nothingToDo(key, running, owner(), T0), false, 'the status does not say so yet');
    assert.equal(nothingToDo(key, done, done, T0), true, 'the object itself, statusShowsHealthyPod');
    assert.equal(nothingToDo(key, owner(), owner(), T0), false, 'the object itself, not statusShowsHealthyPod');
  });

  test('reported: the same reason and (bounded) message are already on Ready', () => {
    const long = 'x'.repeat(5000);
    // As setCondition stored it: bounded.
    const ic = owner({
      status: {
        conditions: [
          { type: 'Ready', status: 'False', reason: 'PodInvalid', message: boundedMessage(long), lastTransitionTime: '' },
        ] as Condition[],
      },
    });
    assert.equal(reported(ic, 'PodInvalid', long), true, 'a long refusal is not posted again on every reconcile');
    assert.equal(reported(ic, 'PodInvalid', 'other'), false);
    assert.equal(reported(ic, 'Other', long), false);
  });
});
