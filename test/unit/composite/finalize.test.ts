// Finalizer decisions and the after-hook plan (functions/composite/metacontroller/finalize.ts, sync-plan.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { forCreate } from '../../../functions/composite/metacontroller/apply.ts';
import {
  finalizerAction,
  finalizerEnabled,
  finalizerName,
  hookToCall,
  isOurs,
  manageChildren,
  shouldFinalize,
} from '../../../functions/composite/metacontroller/finalize.ts';
import { compileSelector, type Selector } from '../../../functions/composite/metacontroller/selector.ts';
import { objectToWrite } from '../../../functions/composite/metacontroller/manage-children.ts';
import { planSync, statusWrite, type SyncPlanInput } from '../../../functions/composite/metacontroller/sync-plan.ts';
import type { CompositeController, CompositeHookResponse } from '../../../functions/composite/metacontroller/types.ts';
import { type KubeObject } from '../../../functions/runtime/index.ts';

const controller = (finalize: boolean): CompositeController => ({
  apiVersion: 'metacontroller.k8s.io/v1alpha1',
  kind: 'CompositeController',
  metadata: { name: 'things' },
  spec: {
    parentResource: { apiVersion: 'example.com/v1', resource: 'things' },
    childResources: [{ apiVersion: 'v1', resource: 'pods', updateStrategy: { method: 'InPlace' } }],
    generateSelector: true,
    hooks: {
      sync: { webhook: { url: 'http://hook/sync' } },
      ...(finalize ? { finalize: { webhook: { url: 'http://hook/finalize' } } } : {}),
    },
  },
});
const NAME = 'metacontroller.io/compositecontroller-things';
const parent = (extra: Partial<KubeObject['metadata']> = {}): KubeObject => ({
  apiVersion: 'example.com/v1',
  kind: 'Thing',
  metadata: { name: 'p', namespace: 'prod', uid: 'uid-1', generation: 3, ...extra },
});
const DELETING = { deletionTimestamp: '2026-01-01T00:00:00Z' };

describe('finalizer', () => {
  test('name and enablement follow the finalize hook', () => {
    assert.equal(finalizerName(controller(true)), NAME);
    assert.equal(finalizerEnabled(controller(true)), true);
    assert.equal(finalizerEnabled(controller(false)), false);
  });

  test('added when enabled (not while deleting), removed when not enabled, else left', () => {
    assert.equal(finalizerAction(parent(), NAME, true), 'add');
    assert.equal(finalizerAction(parent(DELETING), NAME, true), 'none');
    assert.equal(finalizerAction(parent({ finalizers: [NAME] }), NAME, true), 'none');
    assert.equal(finalizerAction(parent({ finalizers: [NAME] }), NAME, false), 'remove');
    assert.equal(finalizerAction(parent(), NAME, false), 'none');
  });

  test('shouldFinalize: only with our finalizer and no garbage-collector finalizer', () => {
    assert.equal(shouldFinalize(parent({ finalizers: [NAME] }), NAME, true), true);
    assert.equal(shouldFinalize(parent({ finalizers: [NAME, 'foregroundDeletion'] }), NAME, true), false);
    assert.equal(shouldFinalize(parent({ finalizers: [NAME, 'orphan'] }), NAME, true), false);
    assert.equal(shouldFinalize(parent(), NAME, true), false);
    assert.equal(shouldFinalize(parent({ finalizers: [NAME] }), NAME, false), false);
  });

  test('which hook: finalize while deleting or after leaving the selector; sync otherwise', () => {
    assert.equal(hookToCall(controller(true), parent(), true), 'sync');
    assert.equal(hookToCall(controller(true), parent(DELETING), true), 'finalize');
    assert.equal(hookToCall(controller(true), parent(), false), 'finalize');
    assert.equal(hookToCall(controller(false), parent(DELETING), true), 'sync');
    const noHooks = { ...controller(false), spec: { ...controller(false).spec, hooks: {} } };
    assert.equal(hookToCall(noHooks, parent(), true), 'none');
  });

  test('a parent outside the selector is ours only while it carries our finalizer', () => {
    assert.equal(isOurs(parent(), NAME, false), false);
    assert.equal(isOurs(parent({ finalizers: [NAME] }), NAME, false), true);
    assert.equal(isOurs(parent(), NAME, true), true);
  });

  test('children are managed while alive, or while being finalized by us', () => {
    assert.equal(manageChildren(parent(), NAME, false), true);
    assert.equal(manageChildren(parent(DELETING), NAME, false), false);
    assert.equal(manageChildren(parent({ ...DELETING, finalizers: [NAME] }), NAME, true), true);
  });
});

const selector = (compileSelector({ matchLabels: { 'controller-uid': 'uid-1' } }) as { selector: Selector }).selector;
const response = (extra: Partial<CompositeHookResponse> = {}): CompositeHookResponse => ({
  status: { ready: true },
  children: [],
  resyncAfterSeconds: 0,
  finalized: false,
  ...extra,
});
const pod = (name: string): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name },
  spec: { containers: [{ name: 'c', image: 'x' }] },
});
const input = (extra: Partial<SyncPlanInput> = {}): SyncPlanInput => ({
  controller: controller(true),
  parent: parent({ finalizers: [NAME] }),
  parentApiVersion: 'example.com/v1',
  parentKind: 'Thing',
  childRules: [{ apiVersion: 'v1', resource: 'pods', kind: 'Pod', namespaced: true }],
  strategies: { 'Pod.': 'InPlace' },
  selector,
  observed: [],
  response: response(),
  statusSubresource: true,
  ...extra,
});

describe('planSync', () => {
  test('children are planned with namespace and controller-uid, and the status carries observedGeneration', () => {
    const plan = planSync(input({ response: response({ children: [pod('a')], resyncAfterSeconds: 30 }) }));
    assert.equal(plan.resyncAfterSeconds, 30);
    assert.equal(plan.removeFinalizer, false);
    assert.ok(plan.outcome.ok);
    const [create] = plan.outcome.value.children;
    assert.equal(create?.action, 'create');
    assert.ok(create?.action === 'create');
    const object = objectToWrite(create);
    assert.equal(object.metadata.namespace, 'prod');
    assert.equal(object.metadata.labels!['controller-uid'], 'uid-1');
    assert.deepEqual(plan.outcome.value.status, { status: { ready: true, observedGeneration: 3 }, changed: true });
  });

  test('a negative resyncAfterSeconds means no delayed resync', () => {
    assert.equal(planSync(input({ response: response({ resyncAfterSeconds: -5 }) })).resyncAfterSeconds, 0);
  });

  test('finalized removes the finalizer; a deleting parent then manages no children', () => {
    const observed = [forCreate({ ...pod('a'), metadata: { name: 'a', namespace: 'prod', labels: { 'controller-uid': 'uid-1' } } })];
    const finalizing = planSync(
      input({ parent: parent({ ...DELETING, finalizers: [NAME] }), observed, response: response({ finalized: false }) }),
    );
    assert.ok(finalizing.outcome.ok);
    assert.deepEqual(
      finalizing.outcome.value.children.map((op) => op.action),
      ['delete'],
      'still finalizing: children are managed',
    );
    const done = planSync(
      input({ parent: parent({ ...DELETING, finalizers: [NAME] }), observed, response: response({ finalized: true }) }),
    );
    assert.equal(done.removeFinalizer, true);
    assert.ok(done.outcome.ok);
    assert.deepEqual(done.outcome.value.children, []);
  });

  test('an invariant violation refuses children and status, but the resync and finalizer decisions stand', () => {
    const bad = { ...pod('a'), metadata: { name: 'a', labels: { 'controller-uid': 'other' } } };
    const plan = planSync(input({ response: response({ children: [bad], finalized: true, resyncAfterSeconds: 5 }) }));
    assert.equal(plan.outcome.ok, false);
    assert.equal(plan.removeFinalizer, true);
    assert.equal(plan.resyncAfterSeconds, 5);
  });

  test('a deleting parent without our finalizer gets its status but no child writes', () => {
    const plan = planSync(input({ controller: controller(false), parent: parent(DELETING), response: response({ children: [pod('a')] }) }));
    assert.ok(plan.outcome.ok);
    assert.deepEqual(plan.outcome.value.children, []);
    assert.equal(plan.outcome.value.status.changed, true);
  });

  test('statusWrite: the same status is no write; an absent status is {} plus observedGeneration', () => {
    const current = { ...parent(), status: { ready: true, observedGeneration: 3 } };
    assert.equal(statusWrite(current, { ready: true }, true).changed, false);
    assert.equal(statusWrite(current, { ready: false }, true).changed, true);
    assert.deepEqual(statusWrite(parent({ generation: undefined }), null, true).status, { observedGeneration: 0 });
  });

  test('without the status subresource, no observedGeneration: the plain update that writes the status bumps the generation, so it would never settle', () => {
    const plan = planSync(input({ statusSubresource: false }));
    assert.ok(plan.outcome.ok);
    assert.deepEqual(plan.outcome.value.status, { status: { ready: true }, changed: true });
    const written = { ...parent({ generation: 4 }), status: { ready: true } };
    assert.equal(
      statusWrite(written, { ready: true }, false).changed,
      false,
      'the status written last is no news, whatever the generation',
    );
  });
});
