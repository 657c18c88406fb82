// Routing child changes to parents (functions/composite/metacontroller/child-events.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { potentialParents, referencedParent, type ParentKind } from '../../../functions/composite/metacontroller/child-events.ts';
import { parentFilter, type Selector } from '../../../functions/composite/metacontroller/selector.ts';
import type { CompositeController } from '../../../functions/composite/metacontroller/types.ts';
import { type KubeObject } from '../../../functions/runtime/index.ts';

const controller = (extra: Partial<CompositeController['spec']> = {}): CompositeController => ({
  apiVersion: 'metacontroller.k8s.io/v1alpha1',
  kind: 'CompositeController',
  metadata: { name: 'cc' },
  spec: {
    parentResource: { apiVersion: 'example.com/v1', resource: 'things' },
    hooks: { sync: { webhook: { url: 'http://h' } } },
    ...extra,
  },
});
const everything = (parentFilter(controller().spec) as { selector: Selector }).selector;
const thing: ParentKind = { group: 'example.com', kind: 'Thing', namespaced: true };
const parent = (
  name: string,
  extra: Partial<KubeObject['metadata']> = {},
  spec: Record<string, unknown> = { selector: { matchLabels: { app: name } } },
): KubeObject => ({
  apiVersion: 'example.com/v1',
  kind: 'Thing',
  metadata: { name, namespace: 'prod', uid: `${name}-uid`, ...extra },
  spec,
});
const pod = (labels: Record<string, string>, extra: Partial<KubeObject['metadata']> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'x', namespace: 'prod', labels, ...extra },
});

describe('child events', () => {
  test('a controlled child names its parent (same namespace for a namespaced parent); other kinds do not', () => {
    const child = pod(
      {},
      { ownerReferences: [{ apiVersion: 'example.com/v2', kind: 'Thing', name: 'a', uid: 'a-uid', controller: true }] },
    );
    assert.deepEqual(referencedParent(child, thing), { namespace: 'prod', name: 'a', uid: 'a-uid' });
    assert.deepEqual(referencedParent(child, { ...thing, namespaced: false }), { namespace: '', name: 'a', uid: 'a-uid' });
    assert.equal(referencedParent(child, { ...thing, group: 'other.com' }), undefined);
    assert.equal(
      referencedParent(pod({}, { ownerReferences: [{ apiVersion: 'example.com/v1', kind: 'Thing', name: 'a', uid: 'a-uid' }] }), thing),
      undefined,
      'not a controller reference',
    );
  });

  test('an orphan wakes the parents whose selector matches it, in its namespace', () => {
    const parents = [
      parent('a'),
      parent('b'),
      { ...parent('a2', {}, { selector: { matchLabels: { app: 'a' } } }), metadata: { name: 'a2', namespace: 'other', uid: 'u' } },
      parent('none', {}, {}),
    ];
    assert.deepEqual(
      potentialParents(controller(), everything, thing, pod({ app: 'a' }), parents).map((p) => p.metadata.name),
      ['a'],
    );
    assert.deepEqual(
      potentialParents(controller(), everything, { ...thing, namespaced: false }, pod({ app: 'a' }), parents).map((p) => p.metadata.name),
      ['a', 'a2'],
    );
  });

  test('with generateSelector only the parent with that uid can adopt; controlled or deleting objects wake nobody this way', () => {
    const generated = controller({ generateSelector: true });
    assert.deepEqual(
      potentialParents(generated, everything, thing, pod({ 'controller-uid': 'b-uid' }), [parent('a'), parent('b')]).map(
        (p) => p.metadata.name,
      ),
      ['b'],
    );
    assert.deepEqual(
      potentialParents(controller(), everything, thing, pod({ app: 'a' }, { deletionTimestamp: '2026-01-01T00:00:00Z' }), [parent('a')]),
      [],
    );
    assert.deepEqual(
      potentialParents(
        controller(),
        everything,
        thing,
        pod({ app: 'a' }, { ownerReferences: [{ apiVersion: 'v1', kind: 'X', name: 'x', uid: 'x', controller: true }] }),
        [parent('a')],
      ),
      [],
    );
  });
});
