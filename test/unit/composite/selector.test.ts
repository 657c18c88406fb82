// Label selectors and the parent ↔ children selector (functions/composite/metacontroller/selector.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { childSelector, compileSelector, parentFilter } from '../../../functions/composite/metacontroller/selector.ts';
import type { CompositeControllerSpec } from '../../../functions/composite/metacontroller/types.ts';

const spec = (extra: Partial<CompositeControllerSpec> = {}): CompositeControllerSpec => ({
  parentResource: { apiVersion: 'example.com/v1', resource: 'things' },
  ...extra,
});

describe('label selectors', () => {
  test('matchLabels and every operator', () => {
    const result = compileSelector({
      matchLabels: { app: 'web' },
      matchExpressions: [
        { key: 'tier', operator: 'In', values: ['a', 'b'] },
        { key: 'env', operator: 'NotIn', values: ['prod'] },
        { key: 'owner', operator: 'Exists' },
        { key: 'legacy', operator: 'DoesNotExist' },
      ],
    });
    assert.ok(result.ok);
    const { selector } = result;
    assert.equal(selector.matches({ app: 'web', tier: 'a', owner: 'x' }), true);
    assert.equal(selector.matches({ app: 'web', tier: 'a', owner: 'x', env: 'prod' }), false);
    assert.equal(selector.matches({ app: 'web', tier: 'c', owner: 'x' }), false);
    assert.equal(selector.matches({ app: 'web', tier: 'a' }), false);
    assert.equal(selector.matches({ app: 'web', tier: 'a', owner: 'x', legacy: '' }), false);
    assert.equal(selector.toQuery(), 'app=web,env notin (prod),!legacy,owner,tier in (a,b)');
  });

  test('invalid requirements are refused with the reason', () => {
    const empty = compileSelector({ matchExpressions: [{ key: 'a', operator: 'In', values: [] }] });
    assert.equal(empty.ok, false);
    assert.match(!empty.ok ? empty.reason : '', /values set can't be empty/);
    const bad = compileSelector({ matchExpressions: [{ key: 'a', operator: 'Like' as never }] });
    assert.match(!bad.ok ? bad.reason : '', /not a valid label selector operator/);
    const exists = compileSelector({ matchExpressions: [{ key: 'a', operator: 'Exists', values: ['x'] }] });
    assert.equal(exists.ok, false);
  });

  test('parentResource.labelSelector: absent selects every parent', () => {
    const all = parentFilter(spec());
    assert.ok(all.ok && all.selector.matches({}));
    const some = parentFilter(
      spec({ parentResource: { apiVersion: 'example.com/v1', resource: 'things', labelSelector: { matchLabels: { managed: 'yes' } } } }),
    );
    assert.ok(some.ok);
    assert.equal(some.selector.matches({ managed: 'yes' }), true);
    assert.equal(some.selector.matches({}), false);
  });

  test('generateSelector selects controller-uid=<parent uid> and ignores spec.selector', () => {
    const parent = { metadata: { name: 'p', uid: 'uid-1' }, spec: { selector: { matchLabels: { app: 'x' } } } };
    const result = childSelector(spec({ generateSelector: true }), parent);
    assert.ok(result.ok);
    assert.equal(result.selector.matches({ 'controller-uid': 'uid-1' }), true);
    assert.equal(result.selector.matches({ app: 'x' }), false);
  });

  test("without generateSelector the parent's spec.selector is used, and an empty one is an error", () => {
    const withSelector = childSelector(spec(), { metadata: { name: 'p' }, spec: { selector: { matchLabels: { app: 'x' } } } });
    assert.ok(withSelector.ok && withSelector.selector.matches({ app: 'x' }));
    const none = childSelector(spec(), { metadata: { name: 'p' }, spec: { image: 'nginx' } });
    assert.equal(none.ok, false);
    assert.equal(!none.ok && none.reason, '.spec.selector must have either matchLabels, matchExpressions, or both');
    const wrongType = childSelector(spec(), { kind: 'Thing', metadata: { name: 'p', namespace: 'n' }, spec: { selector: 'app=x' } });
    assert.match(!wrongType.ok ? wrongType.reason : '', /can't get label selector from Thing n\/p/);
  });
});
