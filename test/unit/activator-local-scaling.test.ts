// The local plane's scaling cap (eventing/activator/decider.ts localScaling): instances share this
// machine's cores, so maxScale is at most cores − 1 (at least 1, never below minScale).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { localScaling } from '../../eventing/activator/decider.ts';

const scaling = (over: Partial<{ minScale: number; maxScale: number; target: number; containerConcurrency: number }> = {}) =>
  ({ minScale: 0, maxScale: 4, target: 100, containerConcurrency: 0, ...over });

describe('localScaling', () => {
  it('caps maxScale at cores − 1, at least 1', () => {
    assert.equal(localScaling(scaling(), 2).maxScale, 1);
    assert.equal(localScaling(scaling(), 1).maxScale, 1);
    assert.equal(localScaling(scaling(), 4).maxScale, 3);
    assert.equal(localScaling(scaling(), 16).maxScale, 4, 'the declaration stays the upper bound');
  });

  it('bounds an unbounded maxScale and never goes below minScale', () => {
    assert.equal(localScaling(scaling({ maxScale: 0 }), 8).maxScale, 7);
    assert.equal(localScaling(scaling({ minScale: 3, maxScale: 5 }), 2).maxScale, 3);
  });

  it('keeps the other fields and returns the same object when nothing changes', () => {
    const s = scaling({ maxScale: 1, containerConcurrency: 10 });
    assert.equal(localScaling(s, 2), s);
    assert.deepEqual(localScaling(scaling({ containerConcurrency: 10 }), 2), scaling({ maxScale: 1, containerConcurrency: 10 }));
  });
});
