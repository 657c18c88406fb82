// Events that need no reconcile, decided from the event alone: an event body may make a
// function do less, never more.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defineFunction, type FunctionEvent, Pod, type KubeObject, type ResourceKind, OwnWrites } from '../../functions/runtime/index.ts';
import { SeenObjects, skipReason } from '../../functions/runtime/host/index.ts';

const Widget: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };
const declare = (extra: object = {}) =>
  defineFunction({ name: 'w', description: '', reconciles: Widget, owns: [{ kind: Pod }], rbac: [], reconcile: async () => {}, ...extra });
const widget = (meta: Partial<KubeObject['metadata']> = {}, observedGeneration = 3): KubeObject => ({
  apiVersion: 'example.com/v1',
  kind: 'Widget',
  metadata: { name: 'a', namespace: 'ns', uid: 'u', generation: 3, resourceVersion: '10', ...meta },
  status: { observedGeneration },
});
const change = (
  object: KubeObject,
  action: 'add' | 'update' | 'delete' = 'update',
  kind = 'Widget',
  apiVersion = 'example.com/v1',
): Extract<FunctionEvent, { type: 'change' }> => ({
  type: 'change',
  action,
  mode: 'resource',
  ref: { apiVersion, kind, namespace: 'ns', name: object.metadata.name! },
  object,
  id: '1',
});

test('the echo of our own write is skipped; a delete never is', () => {
  const writes = new OwnWrites();
  const pod: KubeObject = { metadata: { name: 'p', namespace: 'ns', resourceVersion: '7' } };
  writes.record(Pod, pod);
  const declaration = declare();
  assert.match(skipReason(declaration, change(pod, 'add', 'Pod', 'v1'), writes, new SeenObjects())!, /at the version this function wrote/);
  assert.equal(
    skipReason(
      declaration,
      change({ ...pod, metadata: { ...pod.metadata, resourceVersion: '8' } }, 'update', 'Pod', 'v1'),
      writes,
      new SeenObjects(),
    ),
    undefined,
  );
  assert.equal(skipReason(declaration, change(pod, 'delete', 'Pod', 'v1'), writes, new SeenObjects()), undefined);
});

test("the echo of an earlier own write is skipped too (a finalizer's, arriving after the status write); another version is not", () => {
  const writes = new OwnWrites();
  const declaration = declare();
  const at = (resourceVersion: string) => widget({ resourceVersion, finalizers: ['f'] }, 2);
  writes.record(Widget, at('11'));
  writes.record(Widget, at('12'));
  for (const version of ['11', '12'])
    assert.match(skipReason(declaration, change(at(version)), writes, new SeenObjects())!, /at the version this function wrote/, version);
  assert.equal(skipReason(declaration, change(at('13')), writes, new SeenObjects()), undefined, "someone else's write");
  for (const version of ['13', '14', '15', '16']) writes.record(Widget, at(version));
  assert.equal(
    skipReason(declaration, change(at('11')), writes, new SeenObjects()),
    undefined,
    'a few versions per object are kept, not all',
  );
});

test('an own write is known by group and kind as an event names them (a kind known only at run time), in any version', () => {
  const writes = new OwnWrites();
  const gadget: KubeObject = { metadata: { name: 'g', namespace: 'ns', resourceVersion: '5' } };
  writes.record({ group: 'example.com', version: 'v1', kind: 'Gadget', plural: 'gadgets', namespaced: true }, gadget);
  assert.ok(writes.isOwnOf({ apiVersion: 'example.com/v2', kind: 'Gadget' }, gadget));
  assert.ok(!writes.isOwnOf({ apiVersion: 'other.example.com/v1', kind: 'Gadget' }, gadget), 'another group');
  assert.ok(!writes.isOwnOf({ apiVersion: 'example.com/v1', kind: 'Gizmo' }, gadget), 'another kind');
  assert.ok(!writes.isOwnOf({ apiVersion: 'example.com/v1', kind: 'Gadget' }, { metadata: { ...gadget.metadata, namespace: 'other' } }));
  assert.ok(!writes.isOwnOf({ apiVersion: 'example.com/v1', kind: 'Gadget' }, { metadata: { ...gadget.metadata, resourceVersion: '6' } }));
  writes.record(Pod, { metadata: { name: 'p', namespace: 'ns', resourceVersion: '9' } });
  assert.ok(
    writes.isOwnOf({ apiVersion: 'v1', kind: 'Pod' }, { metadata: { name: 'p', namespace: 'ns', resourceVersion: '9' } }),
    'core group',
  );
});

test('status-only updates: generation observed, not deleting, finalizer in place; metadata as last seen when the function reads it', () => {
  const seen = new SeenObjects();
  const none = new OwnWrites();
  const lean = declare({ readsMetadata: false });
  assert.match(skipReason(lean, change(widget()), none, seen)!, /only its status changed/);
  assert.equal(skipReason(lean, change(widget({}, 2)), none, seen), undefined, 'a new generation');
  assert.equal(skipReason(lean, change(widget(), 'add'), none, seen), undefined, 'adds are reconciled');
  assert.equal(skipReason(lean, change(widget({ deletionTimestamp: '2025-01-01T00:00:00Z' })), none, seen), undefined);
  assert.equal(
    skipReason(
      declare({ readsMetadata: false, finalizer: { name: 'example.com/f', finalize: async () => true } }),
      change(widget()),
      none,
      seen,
    ),
    undefined,
    'the finalizer is still to be added',
  );

  const careful = declare();
  const key = { kind: Widget, namespace: 'ns', name: 'a' };
  assert.equal(skipReason(careful, change(widget()), none, seen), undefined, 'never seen: labels may have changed');
  seen.remember(key, widget({ labels: { team: 'a' } }));
  assert.match(
    skipReason(careful, change(widget({ labels: { team: 'a' }, resourceVersion: '11' })), none, seen)!,
    /only its status changed/,
  );
  assert.equal(skipReason(careful, change(widget({ labels: { team: 'b' } })), none, seen), undefined, 'a label changed');
});

test('a change the declaration leaves out (`changes`) is skipped in either mode, with or without a body; the others are not', () => {
  const declaration = declare({ owns: [{ kind: Pod, changes: ['update', 'delete'] }] });
  const pod: KubeObject = { metadata: { name: 'p', namespace: 'ns', resourceVersion: '7' } };
  const none = new OwnWrites();
  assert.match(skipReason(declaration, change(pod, 'add', 'Pod', 'v1'), none, new SeenObjects())!, /w does not ask for add events of Pod/);
  assert.match(
    skipReason(declaration, { ...change(pod, 'add', 'Pod', 'v1'), mode: 'ref', object: undefined }, none, new SeenObjects())!,
    /does not ask for add events/,
  );
  assert.equal(skipReason(declaration, change(pod, 'update', 'Pod', 'v1'), none, new SeenObjects()), undefined);
  assert.equal(skipReason(declaration, change(pod, 'delete', 'Pod', 'v1'), none, new SeenObjects()), undefined);
  assert.equal(
    skipReason(declare(), change(pod, 'add', 'Pod', 'v1'), none, new SeenObjects()),
    undefined,
    'without changes, adds are heard',
  );
  assert.equal(skipReason(declaration, change(widget(), 'add'), none, new SeenObjects()), undefined, 'the reconciled kind is always heard');
});
