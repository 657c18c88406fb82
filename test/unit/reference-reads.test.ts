// Reference-mode events of the reconciled kind are announced by the intake and taken, once each,
// by the next reconcile of their key that has no body to go on (functions/runtime/reference-reads.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defineFunction } from '../../functions/runtime/declaration.ts';
import type { FunctionEvent } from '../../functions/runtime/events.ts';
import { Pod, type ResourceKind } from '../../functions/runtime/kinds.ts';
import { OwnWrites } from '../../functions/runtime/own-writes.ts';
import { ReferenceEvents } from '../../functions/runtime/reference-reads.ts';
import { SeenObjects, skipReason } from '../../functions/runtime/skips.ts';

const Widget: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };
const declaration = defineFunction({ name: 'w', description: '', reconciles: Widget, owns: [{ kind: Pod }], rbac: [], reconcile: async () => {} });
const key = (name: string) => ({ kind: Widget, namespace: 'ns', name });
const referenceEvent = (action: 'add' | 'update' | 'delete', name = 'a', kind = 'Widget', apiVersion = 'example.com/v1'): Extract<FunctionEvent, { type: 'change' }> =>
  ({ type: 'change', action, mode: 'ref', ref: { apiVersion, kind, namespace: 'ns', name }, id: '1' });

test('announcements are counted per key and taken one at a time', () => {
  const references = new ReferenceEvents();
  assert.equal(references.take(key('a')), false, 'nothing announced');
  references.announce(key('a'));
  references.announce(key('a'));
  references.announce(key('b'));
  assert.equal(references.take(key('a')), true);
  assert.equal(references.take(key('a')), true);
  assert.equal(references.take(key('a')), false, 'two announced, two taken');
  assert.equal(references.take({ kind: Pod, namespace: 'ns', name: 'b' }), false, 'the kind is part of the key');
  assert.equal(references.take(key('b')), true);
});

test('bounded: the oldest announcement is forgotten (its reconcile then runs in full)', () => {
  const references = new ReferenceEvents(2);
  for (const name of ['a', 'b', 'c']) references.announce(key(name));
  assert.deepEqual(['a', 'b', 'c'].map((name) => references.take(key(name))), [false, true, true]);
});

test('the intake announces Reference-mode adds and updates of the reconciled kind only', () => {
  const seen = new SeenObjects();
  const writes = new OwnWrites();
  for (const event of [referenceEvent('add'), referenceEvent('update'), referenceEvent('delete', 'gone'), referenceEvent('add', 'p', 'Pod', 'v1'), referenceEvent('add', 'bad..')]) {
    assert.equal(skipReason(declaration, event, writes, seen), undefined, 'a Reference-mode event is never skipped by the intake');
  }
  assert.equal(seen.references.take(key('a')), true);
  assert.equal(seen.references.take(key('a')), true);
  assert.equal(seen.references.take(key('a')), false, 'one per add or update');
  assert.equal(seen.references.take(key('gone')), false, 'a delete is not announced');
  assert.equal(seen.references.take(key('p')), false, 'an owned kind is not announced');
  assert.equal(seen.references.take({ kind: Pod, namespace: 'ns', name: 'p' }), false);
  assert.equal(seen.references.take(key('bad..')), false, 'an invalid name is not announced');
  const resource = { ...referenceEvent('add'), mode: 'resource' as const, object: { metadata: { name: 'a', namespace: 'ns', resourceVersion: '1' } } };
  skipReason(declaration, resource, writes, seen);
  assert.equal(seen.references.take(key('a')), false, 'a Resource-mode event carries its body instead');
});
