// Reference-mode events of the reconciled kind are announced by the intake and taken, once each,
// by the next reconcile of their key that has no body to go on (functions/runtime/host/reference-reads.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  defineFunction,
  type FunctionEvent,
  Pod,
  type ResourceKind,
  OwnWrites,
  type KubeClient,
  discoveryFor,
} from '../../functions/runtime/index.ts';
import { eventObjectFromFirstRead, ReferenceEvents, SeenObjects, skipReason } from '../../functions/runtime/host/index.ts';
import { unreachableKube } from '../support/cluster.ts';

const Widget: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };
const declaration = defineFunction({
  name: 'w',
  description: '',
  reconciles: Widget,
  owns: [{ kind: Pod }],
  rbac: [],
  reconcile: async () => {},
});
const key = (name: string) => ({ kind: Widget, namespace: 'ns', name });
const referenceEvent = (
  action: 'add' | 'update' | 'delete',
  name = 'a',
  kind = 'Widget',
  apiVersion = 'example.com/v1',
): Extract<FunctionEvent, { type: 'change' }> => ({
  type: 'change',
  action,
  mode: 'ref',
  ref: { apiVersion, kind, namespace: 'ns', name },
  id: '1',
});

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
  assert.deepEqual(
    ['a', 'b', 'c'].map((name) => references.take(key(name))),
    [false, true, true],
  );
});

test('the intake announces Reference-mode adds and updates of the reconciled kind only', () => {
  const seen = new SeenObjects();
  const writes = new OwnWrites();
  for (const event of [
    referenceEvent('add'),
    referenceEvent('update'),
    referenceEvent('delete', 'gone'),
    referenceEvent('add', 'p', 'Pod', 'v1'),
    referenceEvent('add', 'bad..'),
  ]) {
    assert.equal(skipReason(declaration, event, writes, seen), undefined, 'a Reference-mode event is never skipped by the intake');
  }
  assert.equal(seen.references.take(key('a')), true);
  assert.equal(seen.references.take(key('a')), true);
  assert.equal(seen.references.take(key('a')), false, 'one per add or update');
  assert.equal(seen.references.take(key('gone')), false, 'a delete is not announced');
  assert.equal(seen.references.take(key('p')), false, 'an owned kind is not announced');
  assert.equal(seen.references.take({ kind: Pod, namespace: 'ns', name: 'p' }), false);
  assert.equal(seen.references.take(key('bad..')), false, 'an invalid name is not announced');
  const resource = {
    ...referenceEvent('add'),
    mode: 'resource' as const,
    object: { metadata: { name: 'a', namespace: 'ns', resourceVersion: '1' } },
  };
  skipReason(declaration, resource, writes, seen);
  assert.equal(seen.references.take(key('a')), false, 'a Resource-mode event carries its body instead');
});

test("the reconcile's first read of its object becomes its eventObject; nothing is read for it, other reads and the watch cache's are not hints", async () => {
  const reads: string[] = [];
  const stored = { apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'a', namespace: 'ns', resourceVersion: '7' } };
  const kube = {
    get: async (kind: { kind: string }, key: { name: string }, options?: { cached?: boolean }) => {
      reads.push(`${kind.kind}/${key.name}${options?.cached ? ' (cached)' : ''}`);
      return key.name === 'gone' ? undefined : { ...stored, metadata: { ...stored.metadata, name: key.name } };
    },
    server: 'https://x',
  } as unknown as KubeClient;

  const ctx: { kube: KubeClient; eventObject?: { metadata: { name?: string } } } = { kube };
  const client = eventObjectFromFirstRead(ctx as never, key('a'));
  assert.equal(reads.length, 0, 'no read of its own');
  assert.equal(client.server, 'https://x', 'everything else answers as the client does');
  await client.get(Pod, { namespace: 'ns', name: 'a' });
  assert.equal(ctx.eventObject, undefined, 'a read of another kind is no eventObject');
  const object = await client.get(Widget, { namespace: 'ns', name: 'a' });
  assert.deepEqual(ctx.eventObject, object, 'the first read of the key is');
  assert.notEqual(ctx.eventObject, object, 'a copy: the reconcile may change what it read');
  ctx.eventObject = undefined;
  await client.get(Widget, { namespace: 'ns', name: 'a' });
  assert.equal(ctx.eventObject, undefined, 'only the first read');
  assert.deepEqual(reads, ['Pod/a', 'Widget/a', 'Widget/a']);

  const cachedCtx: { kube: KubeClient; eventObject?: unknown } = { kube };
  await eventObjectFromFirstRead(cachedCtx as never, key('a')).get(Widget, { namespace: 'ns', name: 'a' }, { cached: true });
  assert.equal(cachedCtx.eventObject, undefined, "the watch cache's answer may be stale: no eventObject");
  const goneCtx: { kube: KubeClient; eventObject?: unknown } = { kube };
  assert.equal(await eventObjectFromFirstRead(goneCtx as never, key('gone')).get(Widget, { namespace: 'ns', name: 'gone' }), undefined);
  assert.equal(goneCtx.eventObject, undefined, 'an object that is gone is no eventObject');
});

test("per-client caches see through a reconcile's view of the client (kube.underlying): one discovery cache for all reconciles", () => {
  const kube = unreachableKube();
  const view = eventObjectFromFirstRead({ kube }, key('a'));
  assert.notEqual(view, kube, 'a view of its own per reconcile');
  assert.equal(view.underlying, kube);
  assert.equal(
    discoveryFor(view),
    discoveryFor(kube),
    'what one reconcile discovered serves the next (a cache keyed on the view would miss, and forgetting through it would forget nothing)',
  );
});
