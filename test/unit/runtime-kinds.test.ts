// Kinds known only at run time (declaration.runtimeKinds): the runtime asks the function which
// keys an event of an undeclared kind concerns and which kind a reconcile event's key names,
// and treats those keys as its own: validated, coalesced, reconciled with their kind, and named
// again (round-trippable) in a reply when they fail. No API is involved: the function under test
// decides from the event alone, so the Kubernetes client is an unreachable one.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  defineFunction,
  type RuntimeKinds,
  type ChangeEvent,
  type FunctionEvent,
  groupKind,
  kindKeyString,
  type KindKey,
  type ResourceKind,
} from '../../functions/runtime/index.ts';
import { createMetrics, createFunctionHost } from '../../functions/runtime/host/index.ts';
import { quietLog, unreachableKube } from '../support/cluster.ts';

const Controller: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Controller', plural: 'controllers', namespaced: false };
/** Learnt at run time: neither reconciled, owned nor watched by the declaration. */
const Gadget: ResourceKind = { group: 'gadgets.example.com', version: 'v1', kind: 'Gadget', plural: 'gadgets', namespaced: true };
/** A built-in kind whose names are path segments (kinds.ts hasPathSegmentNames), learnt at run time. */
const ClusterRole: ResourceKind = {
  group: 'rbac.authorization.k8s.io',
  version: 'v1',
  kind: 'ClusterRole',
  plural: 'clusterroles',
  namespaced: false,
};
const Part: ResourceKind = { group: '', version: 'v1', kind: 'ConfigMap', plural: 'configmaps', namespaced: true };

function hostWith(runtimeKinds: RuntimeKinds, fail: (key: KindKey) => boolean = () => false) {
  const reconciled: KindKey[] = [];
  const declaration = defineFunction({
    name: 'runtime-kinds-test',
    description: 'test',
    reconciles: Controller,
    rbac: [],
    runtimeKinds,
    async reconcile(key) {
      reconciled.push(key);
      if (fail(key)) throw new Error(`${key.name} failed`);
    },
  });
  const host = createFunctionHost(declaration, { kube: unreachableKube(), log: quietLog, metrics: createMetrics(declaration.name) });
  return { host, reconciled };
}

const change = (kind: ResourceKind, namespace: string, name: string, object?: ChangeEvent['object']): FunctionEvent => ({
  type: 'change',
  action: 'add',
  mode: object ? 'resource' : 'ref',
  ref: { apiVersion: kind.group ? `${kind.group}/${kind.version}` : kind.version, kind: kind.kind, namespace, name },
  object,
  id: 'e1',
});

/** Parts name their gadget in a label; gadgets are their own key. */
const gadgets: RuntimeKinds = {
  async keysFor(event) {
    if (event.ref.kind === 'Gadget') return [{ kind: Gadget, namespace: event.ref.namespace, name: event.ref.name }];
    const gadget = event.object?.metadata.labels?.gadget;
    return gadget === undefined ? [] : [{ kind: Gadget, namespace: event.ref.namespace, name: gadget }];
  },
  async kindOf(text) {
    return text === groupKind(Gadget) ? Gadget : undefined;
  },
};

describe('kinds known only at run time', () => {
  test('an event of an undeclared kind is routed by the function, and the key keeps its kind', async () => {
    const { host, reconciled } = hostWith(gadgets);
    const answer = await host.handle(change(Gadget, 'team-a', 'g1'));
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.deepEqual(reconciled.map(kindKeyString), ['gadgets.example.com/Gadget:team-a/g1']);
    assert.equal(reconciled[0]!.kind, Gadget);
  });

  test('a key the function finds from an event body is held to the API server rules: ".." is dropped, not requested', async () => {
    const { host, reconciled } = hostWith(gadgets);
    const answer = await host.handle(
      change(Part, 'team-a', 'p1', { metadata: { name: 'p1', namespace: 'team-a', labels: { gadget: '..' } } }),
    );
    assert.equal(answer.status, 200);
    assert.match(String(answer.body.ignored), /ConfigMap team-a\/p1 concerns nothing runtime-kinds-test reconciles/);
    assert.equal(reconciled.length, 0);
  });

  test('an event the function finds no key for is answered 200 and ignored', async () => {
    const { host, reconciled } = hostWith(gadgets);
    const answer = await host.handle(change(Part, 'team-a', 'p2', { metadata: { name: 'p2', namespace: 'team-a' } }));
    assert.equal(answer.status, 200);
    assert.ok(answer.body.ignored);
    assert.equal(reconciled.length, 0);
  });

  test('a reconcile event names a run-time kind by <group>/<Kind>; an unknown kind is refused with 400', async () => {
    const { host, reconciled } = hostWith(gadgets);
    const good = await host.handle({
      type: 'reconcile',
      keys: ['gadgets.example.com/Gadget:team-a/g2', 'example.com/Controller:c1'],
      id: 'r1',
    });
    assert.equal(good.status, 200, JSON.stringify(good.body));
    assert.deepEqual(reconciled.map(kindKeyString).sort(), ['example.com/Controller:c1', 'gadgets.example.com/Gadget:team-a/g2']);
    const unknown = await host.handle({ type: 'reconcile', keys: ['widgets.example.com/Widget:team-a/w1'], id: 'r2' });
    assert.equal(unknown.status, 400);
    assert.match(String(unknown.body.error), /not a kind this function reconciles/);
    const invalid = await host.handle({ type: 'reconcile', keys: ['gadgets.example.com/Gadget:team-a/..'], id: 'r3' });
    assert.equal(invalid.status, 400);
    assert.match(String(invalid.body.error), /invalid object name/);
  });

  test('a run-time kind is held to its own name rule: a system:* ClusterRole key reaches kindOf and is reconciled', async () => {
    const asked: string[] = [];
    const { host, reconciled } = hostWith({
      async keysFor() {
        return [];
      },
      async kindOf(text) {
        asked.push(text);
        return text === groupKind(ClusterRole) ? ClusterRole : undefined;
      },
    });
    const answer = await host.handle({ type: 'reconcile', keys: ['rbac.authorization.k8s.io/ClusterRole:system:foo'], id: 'r7' });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.deepEqual(asked, ['rbac.authorization.k8s.io/ClusterRole']);
    assert.deepEqual(reconciled.map(kindKeyString), ['rbac.authorization.k8s.io/ClusterRole:system:foo']);
    // What no kind could name is refused before kindOf is asked (an API read in a real function).
    const unsafe = await host.handle({ type: 'reconcile', keys: ['rbac.authorization.k8s.io/ClusterRole:a%2fb'], id: 'r8' });
    assert.equal(unsafe.status, 400);
    assert.match(String(unsafe.body.error), /invalid object name/);
    assert.equal(asked.length, 1);
  });

  test('a failed key of a run-time kind is named in the reply, and that reply is a reconcile event the host takes back', async () => {
    let failing = true;
    const { host, reconciled } = hostWith(gadgets, (key) => failing && key.name === 'bad');
    const answer = await host.handle({
      type: 'reconcile',
      keys: ['gadgets.example.com/Gadget:team-a/good', 'gadgets.example.com/Gadget:team-a/bad'],
      id: 'r4',
    });
    assert.equal(answer.status, 200);
    assert.ok(answer.reply, 'a reply names the failed key');
    const { keys } = JSON.parse(answer.reply.body) as { keys: string[] };
    assert.deepEqual(keys, ['gadgets.example.com/Gadget:team-a/bad']);
    failing = false;
    const again = await host.handle({ type: 'reconcile', keys, id: 'r5' });
    assert.equal(again.status, 200);
    assert.equal(again.reply, undefined);
    assert.deepEqual(
      reconciled.map((key) => key.name),
      ['good', 'bad', 'bad'],
    );
  });

  test('a function without runtimeKinds still refuses keys and events of other kinds as before', async () => {
    const declaration = defineFunction({
      name: 'static-test',
      description: 'test',
      reconciles: Controller,
      rbac: [],
      async reconcile() {},
    });
    const host = createFunctionHost(declaration, { kube: unreachableKube(), log: quietLog, metrics: createMetrics(declaration.name) });
    const answer = await host.handle({ type: 'reconcile', keys: ['gadgets.example.com/Gadget:team-a/g1'], id: 'r6' });
    assert.equal(answer.status, 400);
    const ignored = await host.handle(change(Gadget, 'team-a', 'g1'));
    assert.match(String(ignored.body.ignored), /concerns no Controller/);
  });
});
