// The activator's load-balancing policy (eventing/activator/lb-policy.ts): least loaded with room,
// and per-key affinity by the CloudEvents `partitionkey` with a fallback when the key's instance
// is full.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { partitionKeyOf, pick, type Candidate } from '../../eventing/activator/lb-policy.ts';

const ready = (n: number, inFlight = 0): Candidate => ({ state: 'ready', inFlight, n });
const keys = Array.from({ length: 400 }, (_, i) => `default/object-with-a-long-name-${i}`);

describe('lb-policy: per-key affinity', () => {
  it('sends the same key to the same instance whatever the loads, and spreads keys over instances', () => {
    const instances = [ready(1), ready(2), ready(3), ready(4)];
    const home = new Map(keys.map((key) => [key, pick(instances, 0, 100, key)!.n]));
    instances[0].inFlight = 7;
    instances[2].inFlight = 3;
    for (const key of keys) assert.equal(pick(instances, 0, 100, key)!.n, home.get(key), key);
    const perInstance = [1, 2, 3, 4].map((n) => [...home.values()].filter((h) => h === n).length);
    for (const count of perInstance) assert.ok(count > 60 && count < 140, `keys per instance ${perInstance.join(', ')}`);
  });

  it('moves only the keys of an instance that leaves (rendezvous hashing)', () => {
    const four = [ready(1), ready(2), ready(3), ready(4)];
    const before = new Map(keys.map((key) => [key, pick(four, 0, 100, key)!.n]));
    const three = [four[0], { ...four[1], state: 'stopping' }, four[2], four[3]];
    for (const key of keys) {
      const now = pick(three, 0, 100, key)!.n;
      if (before.get(key) !== 2) assert.equal(now, before.get(key), `${key} stayed`);
      else assert.notEqual(now, 2);
    }
  });

  it("falls back to the least-loaded instance with room when the key's instance is full", () => {
    const instances = [ready(1), ready(2), ready(3)];
    const key = keys[0];
    const home = pick(instances, 2, 100, key)!;
    home.inFlight = 2; // containerConcurrency 2: full
    const others = instances.filter((i) => i !== home);
    others[0].inFlight = 1;
    assert.equal(pick(instances, 2, 100, key), others[1], 'least loaded of the others');
    for (const i of instances) i.inFlight = 2;
    assert.equal(pick(instances, 2, 100, key), undefined, 'nobody has room: the caller waits');
  });

  it("holds the soft target for the key's instance while capacity is starting", () => {
    const a = ready(1, 0);
    const b = ready(2, 0);
    const key = keys.find((k) => pick([a, b], 0, 10, k) === a)!;
    a.inFlight = 10;
    assert.equal(pick([a, b, { state: 'starting', inFlight: 0, n: 3 }], 0, 10, key), b);
    assert.equal(pick([a, b], 0, 10, key), a, 'nothing starting: the soft limit does not apply');
  });

  it('ignores instances that are not ready and behaves as before without a key', () => {
    const instances = [{ state: 'starting', inFlight: 0, n: 1 }, ready(2, 3), ready(3, 1)];
    for (const key of keys.slice(0, 20)) assert.notEqual(pick(instances, 0, 100, key)!.n, 1);
    assert.equal(pick(instances, 0, 100)!.n, 3);
  });

  it('reads the key from a header value or attribute', () => {
    assert.equal(partitionKeyOf('ns/a'), 'ns/a');
    assert.equal(partitionKeyOf(['ns/a', 'ns/b']), 'ns/a');
    assert.equal(partitionKeyOf(''), undefined);
    assert.equal(partitionKeyOf(undefined), undefined);
    assert.equal(partitionKeyOf(3), undefined);
  });
});
