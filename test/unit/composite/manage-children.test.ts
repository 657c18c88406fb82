// Planning the children's writes (functions/composite/metacontroller/manage-children.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { forCreate, LAST_APPLIED_ANNOTATION } from '../../../functions/composite/metacontroller/apply.ts';
import {
  childErrorsMessage,
  methodFor,
  objectToWrite,
  planChildren,
  updateStrategies,
  type ChildOperation,
  type UpdateStrategies,
} from '../../../functions/composite/metacontroller/manage-children.ts';
import type { ResolvedResource } from '../../../functions/composite/metacontroller/types.ts';
import { type KubeObject } from '../../../functions/runtime/index.ts';

const parent: KubeObject = { apiVersion: 'example.com/v1', kind: 'Thing', metadata: { name: 'p', namespace: 'prod', uid: 'parent-uid' } };
const pods: ResolvedResource = { apiVersion: 'v1', resource: 'pods', kind: 'Pod', namespaced: true };
const configMaps: ResolvedResource = { apiVersion: 'v1', resource: 'configmaps', kind: 'ConfigMap', namespaced: true };

const pod = (name: string, image: string): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace: 'prod' },
  spec: { containers: [{ name: 'c', image }] },
});

/** The child as it exists after we created it: annotation, ownerReference, server fields. */
function existing(desired: KubeObject, extra: Partial<KubeObject['metadata']> = {}): KubeObject {
  const object = forCreate(desired);
  return {
    ...object,
    metadata: {
      ...object.metadata,
      uid: `${desired.metadata.name}-uid`,
      resourceVersion: '5',
      ownerReferences: [{ apiVersion: 'example.com/v1', kind: 'Thing', name: 'p', uid: 'parent-uid', controller: true }],
      ...extra,
    },
  };
}

const plan = (observed: KubeObject[], desired: KubeObject[], strategies: UpdateStrategies = {}): ChildOperation[] =>
  planChildren({ parent, parentApiVersion: 'example.com/v1', parentKind: 'Thing', observed, desired, strategies });

const actions = (operations: ChildOperation[]) => operations.map((operation) => operation.action);

/** The object a create or update writes, made as the shell makes it when the write starts. */
const written = (operation: ChildOperation | undefined): KubeObject => {
  assert.ok(operation?.action === 'create' || operation?.action === 'update', `a write, not ${operation?.action}`);
  return objectToWrite(operation);
};

describe('planChildren', () => {
  test('a missing child is created with the last-applied annotation and a controller ownerReference', () => {
    const [operation] = plan([], [pod('a', 'nginx:1')]);
    assert.equal(operation?.action, 'create');
    const object = written(operation);
    assert.deepEqual(object.metadata.ownerReferences, [
      { apiVersion: 'example.com/v1', kind: 'Thing', name: 'p', uid: 'parent-uid', controller: true, blockOwnerDeletion: true },
    ]);
    const recorded = JSON.parse(object.metadata.annotations![LAST_APPLIED_ANNOTATION]!);
    assert.equal(recorded.metadata.ownerReferences, undefined, 'the annotation holds what the hook asked for, not our ownerReference');
  });

  test("a create or update holds the hook's child itself: its object is made only when its write starts", () => {
    const created = pod('a', 'nginx:1');
    const changed = pod('b', 'nginx:2');
    const [create, update] = plan([existing(pod('b', 'nginx:1'))], [created, changed], { 'Pod.': 'InPlace' });
    assert.ok(create?.action === 'create' && update?.action === 'update');
    assert.equal(create.desired, created);
    assert.equal(update.desired, changed);
    assert.ok(!('object' in create) && !('object' in update));
    assert.notEqual(written(create), written(create), 'made afresh for each write');
  });

  test('an ownerReference to the parent given by the hook is kept as is, not doubled', () => {
    const desired = pod('a', 'nginx:1');
    desired.metadata.ownerReferences = [{ apiVersion: 'example.com/v1', kind: 'Thing', name: 'p', uid: 'parent-uid', controller: false }];
    const [operation] = plan([], [desired]);
    assert.equal(written(operation).metadata.ownerReferences!.length, 1);
  });

  test('observed children not desired are deleted first; ones pending deletion are left alone', () => {
    const gone = existing(pod('old', 'nginx:1'));
    const leaving = existing(pod('leaving', 'nginx:1'), { deletionTimestamp: '2026-01-01T00:00:00Z' });
    const operations = plan([gone, leaving], [pod('new', 'nginx:1')]);
    assert.deepEqual(actions(operations), ['delete', 'create']);
    assert.equal((operations[0] as { observed: KubeObject }).observed.metadata.name, 'old');
  });

  test('an empty answer deletes every observed child', () => {
    assert.deepEqual(actions(plan([existing(pod('a', 'x')), existing(pod('b', 'x'))], [])), ['delete', 'delete']);
  });

  test('an unchanged child is unchanged under every strategy', () => {
    for (const method of ['OnDelete', 'Recreate', 'InPlace'] as const) {
      const operations = plan([existing(pod('a', 'nginx:1'))], [pod('a', 'nginx:1')], { 'Pod.': method });
      assert.deepEqual(
        operations.map((op) => [op.action, 'reason' in op ? op.reason : '']),
        [['unchanged', 'up to date']],
        method,
      );
    }
  });

  test('a changed child: OnDelete (the default) leaves it, Recreate deletes it, InPlace updates it', () => {
    const observed = existing(pod('a', 'nginx:1'));
    const desired = pod('a', 'nginx:2');
    const onDelete = plan([observed], [desired]);
    assert.deepEqual(
      onDelete.map((op) => [op.action, 'reason' in op ? op.reason : '']),
      [['unchanged', 'OnDelete update strategy selected']],
    );
    assert.deepEqual(actions(plan([observed], [desired], { 'Pod.': 'Recreate' })), ['recreate']);
    assert.deepEqual(actions(plan([observed], [desired], { 'Pod.': 'RollingRecreate' })), ['recreate']);
    const [inPlace] = plan([observed], [desired], { 'Pod.': 'InPlace' });
    assert.equal(inPlace?.action, 'update');
    const updated = written(inPlace);
    assert.equal((updated.spec as { containers: { image: string }[] }).containers[0]!.image, 'nginx:2');
    assert.equal(updated.metadata.resourceVersion, '5');
    assert.equal(updated.metadata.ownerReferences![0]!.uid, 'parent-uid');
  });

  test('a field added by someone else triggers no recreate, and survives an InPlace update', () => {
    const observed = existing(pod('a', 'nginx:1'));
    observed.metadata.labels = { 'added-by': 'someone' };
    (observed.spec as Record<string, unknown>).priority = 0;
    assert.deepEqual(actions(plan([observed], [pod('a', 'nginx:1')], { 'Pod.': 'Recreate' })), ['unchanged']);
    const [update] = plan([observed], [pod('a', 'nginx:2')], { 'Pod.': 'InPlace' });
    const object = written(update);
    assert.deepEqual(object.metadata.labels, { 'added-by': 'someone' });
    assert.equal((object.spec as Record<string, unknown>).priority, 0);
  });

  test('a changed child pending deletion is waited for', () => {
    const observed = existing(pod('a', 'nginx:1'), { deletionTimestamp: '2026-01-01T00:00:00Z' });
    const operations = plan([observed], [pod('a', 'nginx:2')], { 'Pod.': 'Recreate' });
    assert.deepEqual(
      operations.map((op) => [op.action, 'reason' in op ? op.reason : '']),
      [['unchanged', 'pending deletion of child object']],
    );
  });

  test('children match by kind and namespace/name: same name, other kind or namespace is another child', () => {
    const configMap: KubeObject = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'a', namespace: 'prod' } };
    const operations = plan([existing(pod('a', 'x'))], [configMap, { ...pod('a', 'x'), metadata: { name: 'a', namespace: 'other' } }]);
    assert.deepEqual(actions(operations), ['delete', 'create', 'create']);
  });

  test('a child whose merge fails is an error for that child only', () => {
    const broken = existing(pod('a', 'x'));
    broken.metadata.annotations = { [LAST_APPLIED_ANNOTATION]: '{' };
    const operations = plan([broken], [pod('a', 'y'), pod('b', 'y')], { 'Pod.': 'InPlace' });
    assert.deepEqual(actions(operations), ['error', 'create']);
  });

  test('strategies are keyed by group and kind, version ignored; OnDelete is the default', () => {
    const strategies = updateStrategies(
      [pods, configMaps, { apiVersion: 'apps/v1', resource: 'deployments', kind: 'Deployment', namespaced: true }],
      ['Recreate', undefined, 'InPlace'],
    );
    assert.deepEqual(strategies, { 'Pod.': 'Recreate', 'Deployment.apps': 'InPlace' });
    assert.equal(methodFor(strategies, { apiVersion: 'apps/v1beta1', kind: 'Deployment', metadata: {} }), 'InPlace');
    assert.equal(methodFor(strategies, { apiVersion: 'v1', kind: 'ConfigMap', metadata: {} }), 'OnDelete');
  });

  test('an unknown method is reported for the child', () => {
    const [operation] = plan([existing(pod('a', 'x'))], [pod('a', 'y')], { 'Pod.': 'Sideways' as never });
    assert.equal(operation?.action, 'error');
    assert.match((operation as { reason: string }).reason, /invalid update strategy for Pod: unknown method "Sideways"/);
  });

  test("a sync's child errors make one message that does not grow with the children: the first three, each cut, then how many more", () => {
    assert.equal(childErrorsMessage(['a failed']), 'a failed');
    assert.equal(childErrorsMessage(['a', 'b', 'c']), 'a; b; c');
    const quota = (i: number) =>
      `can't create ConfigMap ns/child-${i}: configmaps "child-${i}" is forbidden: exceeded quota: ${'q'.repeat(400)}`;
    const message = childErrorsMessage(Array.from({ length: 80 }, (_, i) => quota(i)));
    assert.match(message, /^can't create ConfigMap ns\/child-0: .*; can't create ConfigMap ns\/child-2: .*; and 77 more child errors$/);
    assert.ok(message.length < 1100, `${message.length} characters`);
    assert.equal(
      childErrorsMessage(Array.from({ length: 10_000 }, (_, i) => quota(i))).length,
      message.length + 2,
      'the same size for 10000 children (only the count grows)',
    );
    assert.match(childErrorsMessage(['a', 'b', 'c', 'd']), /; and 1 more child error$/);
  });
});
