// Pure reconcile helpers: standard conditions and the equality that decides whether a status
// write is needed at all.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { compareResourceVersions, jsonEqual, setCondition, type Condition } from '../../functions/runtime/index.ts';

const T0 = new Date('2025-01-02T03:04:05.678Z');
const T1 = new Date('2025-01-02T04:00:00.999Z');

describe('setCondition', () => {
  const ready: Condition = {
    type: 'Ready',
    status: 'False',
    reason: 'PodPending',
    message: 'pod is Pending',
    lastTransitionTime: '2025-01-01T00:00:00Z',
    observedGeneration: 1,
  };
  const other: Condition = {
    type: 'Degraded',
    status: 'False',
    reason: 'AllGood',
    message: '',
    lastTransitionTime: '2024-12-31T00:00:00Z',
  };

  test('adds a new condition with a whole-second RFC 3339 time', () => {
    const conditions = setCondition(undefined, { type: 'Ready', status: 'True', reason: 'PodRunning', message: 'running' }, T0);
    assert.deepEqual(conditions, [
      { type: 'Ready', status: 'True', reason: 'PodRunning', message: 'running', lastTransitionTime: '2025-01-02T03:04:05Z' },
    ]);
  });

  test('keeps lastTransitionTime when the status does not flip, while reason, message and generation change', () => {
    const [next] = setCondition(
      [ready],
      { type: 'Ready', status: 'False', reason: 'PodMissing', message: 'recreating', observedGeneration: 2 },
      T1,
    );
    assert.equal(next.lastTransitionTime, '2025-01-01T00:00:00Z');
    assert.equal(next.reason, 'PodMissing');
    assert.equal(next.message, 'recreating');
    assert.equal(next.observedGeneration, 2);
  });

  test('moves lastTransitionTime when the status flips', () => {
    const [next] = setCondition([ready], { type: 'Ready', status: 'True', reason: 'PodRunning', message: 'running' }, T1);
    assert.equal(next.status, 'True');
    assert.equal(next.lastTransitionTime, '2025-01-02T04:00:00Z');
    const [back] = setCondition([next], { type: 'Ready', status: 'Unknown', reason: 'Lost', message: '?' }, T0);
    assert.equal(back.lastTransitionTime, '2025-01-02T03:04:05Z');
  });

  test('replaces only the condition of the same type, once, and leaves the input alone', () => {
    const input = [other, ready];
    const conditions = setCondition(input, { type: 'Ready', status: 'True', reason: 'PodRunning', message: 'running' }, T1);
    assert.equal(conditions.filter((c) => c.type === 'Ready').length, 1);
    assert.deepEqual(
      conditions.find((c) => c.type === 'Degraded'),
      other,
    );
    assert.equal(conditions.length, 2);
    assert.deepEqual(input, [other, ready], 'the input array is not modified');
    assert.equal(ready.status, 'False');
  });
});

describe('jsonEqual', () => {
  test('primitives', () => {
    assert.equal(jsonEqual(1, 1), true);
    assert.equal(jsonEqual('a', 'a'), true);
    assert.equal(jsonEqual(null, null), true);
    assert.equal(jsonEqual(1, '1'), false);
    assert.equal(jsonEqual(0, false), false);
    assert.equal(jsonEqual(null, undefined), false);
    assert.equal(jsonEqual(null, {}), false);
    assert.equal(jsonEqual({}, null), false);
  });

  test('fields that are undefined are ignored, as JSON.stringify drops them', () => {
    assert.equal(jsonEqual({ a: 1, b: undefined }, { a: 1 }), true);
    assert.equal(jsonEqual({ a: 1 }, { a: 1, b: undefined }), true);
    assert.equal(jsonEqual({ b: undefined }, {}), true);
    assert.equal(jsonEqual({ a: 1, b: undefined }, { a: 1, c: 2 }), false);
    assert.equal(jsonEqual({ a: undefined }, { a: null }), false, 'null is a value, undefined is absence');
    assert.equal(jsonEqual({ a: 1, b: undefined }, { a: 1, c: undefined, d: undefined }), true);
  });

  test('key order does not matter, values do', () => {
    assert.equal(jsonEqual({ a: 1, b: 2 }, { b: 2, a: 1 }), true);
    assert.equal(jsonEqual({ a: 1, b: 2 }, { a: 1, b: 3 }), false);
    assert.equal(jsonEqual({ a: 1 }, { b: 1 }), false);
  });

  test('arrays versus objects', () => {
    assert.equal(jsonEqual([], {}), false);
    assert.equal(jsonEqual({}, []), false);
    assert.equal(jsonEqual(['x'], { 0: 'x' }), false);
    assert.equal(jsonEqual({ 0: 'x' }, ['x']), false);
    assert.equal(jsonEqual([1, 2], [1, 2]), true);
    assert.equal(jsonEqual([1, 2], [2, 1]), false, 'array order matters');
    assert.equal(jsonEqual([1, 2], [1, 2, 3]), false);
    assert.equal(jsonEqual([1, 2, 3], [1, 2]), false);
    assert.equal(jsonEqual([], []), true);
  });

  test('nested structures', () => {
    const status = {
      currentPod: 'web-immortalpod',
      startTimes: 2,
      countedPods: ['u1', 'u2'],
      conditions: [{ type: 'Ready', status: 'True', observedGeneration: 3 }],
    };
    assert.equal(jsonEqual(status, structuredClone(status)), true);
    assert.equal(jsonEqual(status, { ...status, countedPods: ['u1', 'u3'] }), false);
    assert.equal(jsonEqual(status, { ...status, conditions: [{ type: 'Ready', status: 'True', observedGeneration: 4 }] }), false);
    assert.equal(
      jsonEqual(status, { ...status, conditions: [{ type: 'Ready', status: 'True', observedGeneration: 3, message: undefined }] }),
      true,
    );
    assert.equal(jsonEqual({ a: { b: { c: [1, { d: 'x' }] } } }, { a: { b: { c: [1, { d: 'y' }] } } }), false);
    assert.equal(jsonEqual({ a: { b: {} } }, { a: { b: [] } }), false);
  });

  test('a status write is skipped only when nothing changed', () => {
    assert.equal(jsonEqual({ startTimes: 1 }, undefined), false, 'no status yet');
    assert.equal(jsonEqual(undefined, undefined), true);
  });
});

describe('compareResourceVersions', () => {
  test('integers of any length, as client-go compares them (KEP-5504)', () => {
    assert.equal(compareResourceVersions('812', '812'), 0);
    assert.equal(compareResourceVersions('813', '812'), 1);
    assert.equal(compareResourceVersions('99', '812'), -1, 'shorter is older, though "99" > "812" as text');
    assert.equal(compareResourceVersions('1000000000000000000000000000001', '1000000000000000000000000000000'), 1, 'beyond a double');
    assert.equal(compareResourceVersions('0', '1'), -1);
  });

  test('what is no well-formed integer is only equal or unordered', () => {
    assert.equal(compareResourceVersions('abc', 'abc'), 0);
    for (const [a, b] of [
      ['abc', '812'],
      ['0812', '812'],
      ['-1', '1'],
      ['1.5', '1'],
      ['', '1'],
      [' 1', '1'],
    ]) {
      assert.equal(compareResourceVersions(a, b), undefined, `${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
    }
    assert.equal(compareResourceVersions(undefined, '1'), undefined);
    assert.equal(compareResourceVersions('1', undefined), undefined);
  });
});
