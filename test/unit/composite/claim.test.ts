// Adoption and release of children (functions/composite/metacontroller/claim.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { planClaim } from '../../../functions/composite/metacontroller/claim.ts';
import { compileSelector, type Selector } from '../../../functions/runtime/index.ts';
import { type KubeObject, type OwnerReference } from '../../../functions/runtime/index.ts';

const selector = (compileSelector({ matchLabels: { app: 'web' } }) as { selector: Selector }).selector;
const parent = (deleting = false, namespace: string | undefined = 'prod'): KubeObject => ({
  apiVersion: 'example.com/v1',
  kind: 'Thing',
  metadata: {
    name: 'p',
    uid: 'parent-uid',
    ...(namespace ? { namespace } : {}),
    ...(deleting ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
  },
});
const ours: OwnerReference = {
  apiVersion: 'example.com/v1',
  kind: 'Thing',
  name: 'p',
  uid: 'parent-uid',
  controller: true,
  blockOwnerDeletion: true,
};
const child = (
  name: string,
  labels: Record<string, string>,
  owners: OwnerReference[] = [],
  extra: Partial<KubeObject['metadata']> = {},
): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace: 'prod', labels, ownerReferences: owners, ...extra },
});
const claim = (candidates: KubeObject[], p = parent(), parentNamespaced = true) =>
  planClaim({ parent: p, parentApiVersion: 'example.com/v1', parentKind: 'Thing', parentNamespaced, selector, candidates });
const names = (objects: { metadata: { name?: string } }[]) => objects.map((object) => object.metadata.name);

describe('planClaim', () => {
  test('owned and matching children are claimed', () => {
    const plan = claim([child('a', { app: 'web' }, [ours])]);
    assert.deepEqual(names(plan.claimed), ['a']);
    assert.deepEqual(plan.adopt, []);
    assert.deepEqual(plan.release, []);
  });

  test('a matching orphan is adopted with a controller reference, keeping its other owners', () => {
    const other: OwnerReference = { apiVersion: 'v1', kind: 'ConfigMap', name: 'c', uid: 'cm-uid' };
    const plan = claim([child('orphan', { app: 'web' }, [other])]);
    assert.deepEqual(names(plan.adopt.map((a) => a.child)), ['orphan']);
    assert.deepEqual(plan.adopt[0]!.ownerReferences, [other, ours]);
  });

  test('a non-controller reference to the parent is upgraded, not duplicated', () => {
    const plan = claim([child('orphan', { app: 'web' }, [{ ...ours, controller: false }])]);
    assert.deepEqual(plan.adopt[0]!.ownerReferences, [ours]);
  });

  test('an owned child that stopped matching is released: only our reference goes', () => {
    const other: OwnerReference = { apiVersion: 'v1', kind: 'ConfigMap', name: 'c', uid: 'cm-uid' };
    const plan = claim([child('drifted', { app: 'api' }, [other, ours])]);
    assert.deepEqual(plan.claimed, []);
    assert.deepEqual(plan.release[0]!.ownerReferences, [other]);
  });

  test("someone else's children, non-matching orphans and orphans being deleted are ignored", () => {
    const theirs: OwnerReference = { ...ours, uid: 'other-parent' };
    const plan = claim([
      child('theirs', { app: 'web' }, [theirs]),
      child('stranger', { app: 'api' }),
      child('leaving', { app: 'web' }, [], { deletionTimestamp: '2026-01-01T00:00:00Z' }),
    ]);
    assert.deepEqual([plan.claimed, plan.adopt, plan.release], [[], [], []]);
  });

  test('a parent being deleted adopts and releases nothing, but keeps what it owns and matches', () => {
    const plan = claim(
      [child('a', { app: 'web' }, [ours]), child('orphan', { app: 'web' }), child('drifted', { app: 'api' }, [ours])],
      parent(true),
    );
    assert.deepEqual(names(plan.claimed), ['a']);
    assert.deepEqual([plan.adopt, plan.release], [[], []]);
  });

  test('a namespaced parent only claims in its namespace; a cluster-scoped one anywhere', () => {
    const elsewhere = {
      ...child('x', { app: 'web' }, [ours]),
      metadata: { ...child('x', { app: 'web' }, [ours]).metadata, namespace: 'other' },
    };
    assert.deepEqual(claim([elsewhere]).claimed, []);
    assert.deepEqual(names(claim([elsewhere], parent(false, undefined), false).claimed), ['x']);
  });
});
