// The 3-way merge against the last-applied annotation (functions/composite/metacontroller/apply.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  applyUpdate,
  forCreate,
  goJsonMarshal,
  LAST_APPLIED_ANNOTATION,
  threeWayMerge,
} from '../../../functions/composite/metacontroller/apply.ts';
import { type KubeObject } from '../../../functions/runtime/index.ts';

const merge = (observed: string, lastApplied: string, desired: string) =>
  threeWayMerge(JSON.parse(observed), JSON.parse(lastApplied), JSON.parse(desired));

describe('threeWayMerge (upstream TestMerge cases)', () => {
  test('empty', () => assert.deepEqual(merge('{}', '{}', '{}'), {}));

  test('scalars: keep others, remove what we stopped setting, replace and add', () => {
    assert.deepEqual(
      merge('{"keep":"other","remove":"other","replace":"other"}', '{"remove":"old","replace":"old"}', '{"replace":"new","add":"new"}'),
      {
        replace: 'new',
        add: 'new',
        keep: 'other',
      },
    );
  });

  test('nested object', () => {
    assert.deepEqual(
      merge(
        '{"update":{"keep":"other","remove":"other"}}',
        '{"update":{"remove":"old","replace":"old"}}',
        '{"update":{"replace":"new","add":"new"}}',
      ),
      {
        update: { replace: 'new', add: 'new', keep: 'other' },
      },
    );
  });

  test('an ordinary list is replaced', () => {
    assert.deepEqual(merge('{"list":[1,2,3,{"a":true}]}', '{"list":[4,5,6]}', '{"list":[7,8,9,{"b":false}]}'), {
      list: [7, 8, 9, { b: false }],
    });
  });

  test('list-maps merge by name, port and containerPort, keeping order then appending', () => {
    const got = merge(
      JSON.stringify({
        listMap: [
          { name: 'keep', value: 'other' },
          { name: 'remove', value: 'other' },
          { name: 'merge', nested: { keep: 'other' } },
        ],
        ports1: [{ port: 80, keep: 'other' }],
        ports2: [{ containerPort: 80, keep: 'other' }],
      }),
      JSON.stringify({ listMap: [{ name: 'remove', value: 'old' }], ports1: [{ port: 80, remove: 'old' }] }),
      JSON.stringify({
        listMap: [
          { name: 'add', value: 'new' },
          { name: 'merge', nested: { add: 'new' } },
        ],
        ports1: [{ port: 80, add: 'new' }, { port: 90 }],
        ports2: [{ containerPort: 80 }, { containerPort: 90 }],
      }),
    );
    assert.deepEqual(got, {
      listMap: [
        { name: 'keep', value: 'other' },
        { name: 'merge', nested: { keep: 'other', add: 'new' } },
        { name: 'add', value: 'new' },
      ],
      ports1: [{ port: 80, keep: 'other', add: 'new' }, { port: 90 }],
      ports2: [{ containerPort: 80, keep: 'other' }, { containerPort: 90 }],
    });
  });

  test('a list of objects without a common merge key is replaced', () => {
    const got = merge(
      JSON.stringify({
        notListMap: [
          { name: 'keep', value: 'other' },
          { notName: 'remove', value: 'other' },
        ],
      }),
      JSON.stringify({ notListMap: [{ name: 'remove', value: 'old' }] }),
      JSON.stringify({ notListMap: [{ name: 'add', value: 'new' }] }),
    );
    assert.deepEqual(got, { notListMap: [{ name: 'add', value: 'new' }] });
  });

  test('a desired null for an object field removes what we set there and keeps the rest', () => {
    assert.deepEqual(merge('{"o":{"ours":1,"theirs":2}}', '{"o":{"ours":1}}', '{"o":null}'), { o: { theirs: 2 } });
  });

  test("a type change counts as null, as upstream's never-firing type check makes it", () => {
    // A scalar where the object holds a map: our keys there go, others' stay, no error.
    assert.deepEqual(merge('{"spec":{"a":{"ours":1,"theirs":2}}}', '{"spec":{"a":{"ours":1}}}', '{"spec":{"a":"x"}}'), {
      spec: { a: { theirs: 2 } },
    });
    // A map where the object holds an ordinary list: the field becomes null.
    assert.deepEqual(merge('{"list":[1,2]}', '{}', '{"list":{"k":"v"}}'), { list: null });
    // A scalar destination takes whatever is desired.
    assert.deepEqual(merge('{"a":"x"}', '{}', '{"a":{"k":1}}'), { a: { k: 1 } });
  });

  test('does not modify its inputs', () => {
    const observed = { a: { b: 1 } };
    const desired = { a: { c: 2 } };
    threeWayMerge(observed, null, desired);
    assert.deepEqual(observed, { a: { b: 1 } });
    assert.deepEqual(desired, { a: { c: 2 } });
  });
});

const desiredPod = (image: string, extra: Record<string, unknown> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'web-immortalpod', namespace: 'prod' },
  spec: { restartPolicy: 'OnFailure', containers: [{ name: 'acontainer', image, ...extra }] },
});

/** What the API server returns after creating forCreate(desired): defaults, system fields, status. */
function created(desired: KubeObject): KubeObject {
  const object = forCreate(desired) as KubeObject & { spec: { containers: Record<string, unknown>[] } };
  return {
    ...object,
    metadata: {
      ...object.metadata,
      uid: 'pod-uid',
      resourceVersion: '7',
      creationTimestamp: '2026-01-01T00:00:00Z',
      ownerReferences: [{ apiVersion: 'x/v1', kind: 'P', name: 'web', uid: 'p', controller: true }],
    },
    spec: {
      ...object.spec,
      dnsPolicy: 'ClusterFirst',
      containers: object.spec.containers.map((container) => ({
        ...container,
        imagePullPolicy: 'Always',
        terminationMessagePath: '/dev/termination-log',
      })),
    },
    status: { phase: 'Pending' },
  };
}

describe('applyUpdate', () => {
  test('the same desired object against its own creation is unchanged, whatever the server added', () => {
    const observed = created(desiredPod('nginx:1'));
    const result = applyUpdate(observed, desiredPod('nginx:1'));
    assert.ok(result.ok);
    assert.equal(result.changed, false);
  });

  test('a field set by someone else survives and does not count as a change', () => {
    const observed = created(desiredPod('nginx:1'));
    observed.metadata.labels = { team: 'blue' };
    (observed.spec as { nodeName?: string }).nodeName = 'node-1';
    const result = applyUpdate(observed, desiredPod('nginx:1'));
    assert.ok(result.ok);
    assert.equal(result.changed, false);
    assert.deepEqual(result.object.metadata.labels, { team: 'blue' });
  });

  test('a changed field is a change; fields set by others stay, server defaults inside list-map items stay', () => {
    const observed = created(desiredPod('nginx:1'));
    observed.metadata.labels = { team: 'blue' };
    const result = applyUpdate(observed, desiredPod('nginx:2'));
    assert.ok(result.ok);
    assert.equal(result.changed, true);
    const container = (result.object.spec as { containers: Record<string, unknown>[] }).containers[0]!;
    assert.equal(container.image, 'nginx:2');
    assert.equal(container.imagePullPolicy, 'Always');
    assert.deepEqual(result.object.metadata.labels, { team: 'blue' });
    assert.equal(result.object.metadata.resourceVersion, '7', 'the PUT carries the observed resourceVersion');
  });

  test('a field we stopped setting is removed; one we never set is not', () => {
    const observed = created(desiredPod('nginx:1', { args: ['--verbose'] }));
    const result = applyUpdate(observed, desiredPod('nginx:1'));
    assert.ok(result.ok);
    assert.equal(result.changed, true);
    const container = (result.object.spec as { containers: Record<string, unknown>[] }).containers[0]!;
    assert.equal('args' in container, false);
    assert.equal(container.terminationMessagePath, '/dev/termination-log');
  });

  test('the annotation records the new desired object, without a hook-supplied annotation inside', () => {
    const observed = created(desiredPod('nginx:1'));
    const desired = desiredPod('nginx:2');
    desired.metadata.annotations = { [LAST_APPLIED_ANNOTATION]: '{"forged":true}', note: 'x' };
    const result = applyUpdate(observed, desired);
    assert.ok(result.ok);
    const recorded = JSON.parse(result.object.metadata.annotations![LAST_APPLIED_ANNOTATION]!);
    assert.equal(recorded.spec.containers[0].image, 'nginx:2');
    assert.deepEqual(recorded.metadata.annotations, { note: 'x' });
    assert.equal(result.object.metadata.annotations!.note, 'x');
  });

  test('system metadata fields and status are reverted: asking for them never causes a diff', () => {
    const observed = created(desiredPod('nginx:1'));
    const desired = desiredPod('nginx:1');
    desired.metadata.uid = 'forged';
    desired.metadata.resourceVersion = '1';
    (desired as { status?: unknown }).status = { phase: 'Running' };
    const first = applyUpdate(observed, desired);
    assert.ok(first.ok);
    assert.equal(first.object.metadata.uid, 'pod-uid');
    assert.equal(first.object.metadata.resourceVersion, '7');
    assert.deepEqual((first.object as { status?: unknown }).status, { phase: 'Pending' });
    // Only the annotation changed (it now records uid/status in the request): once written, stable.
    const second = applyUpdate(first.object, desired);
    assert.ok(second.ok);
    assert.equal(second.changed, false);
  });

  test('writes into neither input, which a sync may hold frozen, and copies only what changes', () => {
    const deepFreeze = <T>(value: T): T => {
      if (typeof value === 'object' && value !== null) {
        for (const inner of Object.values(value)) deepFreeze(inner);
        Object.freeze(value);
      }
      return value;
    };
    const observed = created(desiredPod('nginx:1', { args: ['--verbose'] }));
    observed.metadata.labels = { team: 'blue' };
    const before = structuredClone(observed);
    deepFreeze(observed);
    const desired = deepFreeze({ ...desiredPod('nginx:2'), status: { phase: 'Running' } } as KubeObject);
    const result = applyUpdate(observed, desired);
    assert.ok(result.ok);
    assert.equal(result.changed, true);
    assert.deepEqual(observed, before);
    const container = (result.object.spec as { containers: Record<string, unknown>[] }).containers[0]!;
    assert.equal(container.image, 'nginx:2');
    assert.equal('args' in container, false);
    assert.deepEqual((result.object as { status?: unknown }).status, { phase: 'Pending' });
    // What the merge did not change is the observed object's own.
    assert.equal(result.object.metadata.labels, observed.metadata.labels);
    assert.equal(result.object.metadata.ownerReferences, observed.metadata.ownerReferences);
    const same = applyUpdate(observed, desiredPod('nginx:1', { args: ['--verbose'] }));
    assert.ok(same.ok);
    assert.equal(same.changed, false);
    assert.equal(same.object.spec, observed.spec);
  });

  test('an observed object without the annotation: desired fields are set, nothing is removed', () => {
    const observed: KubeObject = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'c', namespace: 'n' },
      data: { theirs: '1', shared: 'old' },
    };
    const result = applyUpdate(observed, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'c', namespace: 'n' },
      data: { shared: 'new' },
    });
    assert.ok(result.ok);
    assert.deepEqual((result.object as { data?: unknown }).data, { theirs: '1', shared: 'new' });
  });

  test('an unreadable annotation is an error, not a guess', () => {
    const observed: KubeObject = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'c', annotations: { [LAST_APPLIED_ANNOTATION]: '{not json' } },
    };
    const result = applyUpdate(observed, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c' } });
    assert.equal(result.ok, false);
    assert.match(!result.ok ? result.reason : '', /can't unmarshal "metacontroller.k8s.io\/last-applied-configuration"/);
  });

  test('forCreate records the hook object as given and leaves the input alone', () => {
    const desired = desiredPod('nginx:1');
    const object = forCreate(desired);
    assert.deepEqual(JSON.parse(object.metadata.annotations![LAST_APPLIED_ANNOTATION]!), desired);
    assert.equal(desired.metadata.annotations, undefined);
  });

  test('the annotation is written as Go writes it: keys sorted by bytes, <, >, & and U+2028 escaped', () => {
    const desired = {
      kind: 'ConfigMap',
      apiVersion: 'v1',
      metadata: { name: 'x' },
      data: { b: '2', a: 'x&y<z>', 10: '\u2028', 9: 'n' },
    } as unknown as KubeObject;
    // What Go's json.Marshal printed for the same object (metacontroller's SetLastApplied).
    assert.equal(
      forCreate(desired).metadata.annotations![LAST_APPLIED_ANNOTATION],
      '{"apiVersion":"v1","data":{"10":"\\u2028","9":"n","a":"x\\u0026y\\u003cz\\u003e","b":"2"},"kind":"ConfigMap","metadata":{"name":"x"}}',
    );
    assert.equal(goJsonMarshal([1.5, null, true, { é: 1, z: 2 }]), '[1.5,null,true,{"z":2,"é":1}]');
    // UTF-16 puts U+1F600 (a surrogate pair, D83D DE00) before U+E000; its UTF-8 bytes (F0 …) come after EE 80 80.
    assert.equal(goJsonMarshal({ '\u{1F600}': 1, '\uE000': 2, a: 3 }), '{"a":3,"\uE000":2,"\u{1F600}":1}');
  });

  test("the hook's key order, or an annotation another writer wrote in another order, is no change", () => {
    const desired = (data: Record<string, string>): KubeObject =>
      ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c', namespace: 'n' }, data }) as KubeObject;
    const created = forCreate(desired({ a: '1', b: '2' }));
    const reordered = applyUpdate(created, desired({ b: '2', a: '1' }));
    assert.ok(reordered.ok);
    assert.equal(reordered.changed, false, 'a Recreate child would be deleted and made again');
    const otherWriter = {
      ...created,
      metadata: { ...created.metadata, annotations: { [LAST_APPLIED_ANNOTATION]: JSON.stringify(desired({ b: '2', a: '1' })) } },
    };
    const same = applyUpdate(otherWriter, desired({ a: '1', b: '2' }));
    assert.ok(same.ok);
    assert.equal(same.changed, false);
    const changed = applyUpdate(otherWriter, desired({ a: '1', b: '3' }));
    assert.ok(changed.ok);
    assert.equal(changed.changed, true);
  });

  test('a list whose first known key repeats merges by a unique one, and loses no item', () => {
    const service = (ports: object[]): KubeObject =>
      ({ apiVersion: 'v1', kind: 'Service', metadata: { name: 's', namespace: 'n' }, spec: { ports } }) as KubeObject;
    const ports = [
      { name: 'dns', port: 53, protocol: 'UDP' },
      { name: 'dns-tcp', port: 53, protocol: 'TCP' },
    ];
    const created = forCreate(service(ports));
    // As the API server stores it: a targetPort defaulted on each.
    const observed = service(ports.map((port) => ({ ...port, targetPort: 53 })));
    observed.metadata.annotations = created.metadata.annotations;
    const again = applyUpdate(observed, service(ports));
    assert.ok(again.ok);
    const portsOf = (object: KubeObject) => (object as unknown as { spec: { ports: unknown } }).spec.ports;
    assert.deepEqual(portsOf(again.object), portsOf(observed));
    assert.equal(again.changed, false);
    // No unique known key at all: the hook's list as given.
    assert.deepEqual(merge('{"l":[{"port":1,"a":1},{"port":1,"a":2}]}', '{"l":[]}', '{"l":[{"port":1,"b":1},{"port":1,"b":2}]}'), {
      l: [
        { port: 1, b: 1 },
        { port: 1, b: 2 },
      ],
    });
  });
});
