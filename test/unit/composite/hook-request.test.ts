// The sync/finalize hook request (functions/composite/metacontroller/hook-request.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { buildHookRequest, objectKey } from '../../../functions/composite/metacontroller/hook-request.ts';
import type { CompositeController, ResolvedResource } from '../../../functions/composite/metacontroller/types.ts';
import { type KubeObject } from '../../../functions/runtime/index.ts';

const controller: CompositeController = {
  apiVersion: 'metacontroller.k8s.io/v1alpha1',
  kind: 'CompositeController',
  metadata: { name: 'cc' },
  spec: { parentResource: { apiVersion: 'example.com/v1', resource: 'things' } },
};
const pods: ResolvedResource = { apiVersion: 'v1', resource: 'pods', kind: 'Pod', namespaced: true };
const deployments: ResolvedResource = { apiVersion: 'apps/v1', resource: 'deployments', kind: 'Deployment', namespaced: true };
const namespaces: ResolvedResource = { apiVersion: 'v1', resource: 'namespaces', kind: 'Namespace', namespaced: false };

const parentIn = (namespace?: string): KubeObject => ({
  apiVersion: 'example.com/v1',
  kind: 'Thing',
  metadata: { name: 'p', uid: 'u', ...(namespace ? { namespace } : {}) },
});
const object = (apiVersion: string, kind: string, name: string, namespace?: string): KubeObject => ({
  apiVersion,
  kind,
  metadata: { name, ...(namespace ? { namespace } : {}) },
});

describe('hook request', () => {
  test('children keyed <Kind>.<version> for core and <Kind>.<group>/<version> otherwise, by name (v1)', () => {
    const request = buildHookRequest({
      controller,
      parent: parentIn('prod'),
      version: 'v1',
      childRules: [pods, deployments],
      children: [object('v1', 'Pod', 'a', 'prod'), object('apps/v1', 'Deployment', 'd', 'prod')],
      finalizing: false,
    });
    assert.deepEqual(Object.keys(request.children), ['Deployment.apps/v1', 'Pod.v1']);
    assert.deepEqual(Object.keys(request.children['Pod.v1']!), ['a']);
    assert.deepEqual(Object.keys(request.children['Deployment.apps/v1']!), ['d']);
    assert.equal(request.finalizing, false);
    assert.deepEqual(request.related, {});
    assert.equal(request.controller, controller);
  });

  test('one entry per child rule even when it has no objects', () => {
    const request = buildHookRequest({
      controller,
      parent: parentIn('prod'),
      version: 'v1',
      childRules: [pods, deployments],
      children: [],
      finalizing: true,
    });
    assert.deepEqual(request.children, { 'Deployment.apps/v1': {}, 'Pod.v1': {} });
    assert.equal(request.finalizing, true);
    assert.equal(JSON.stringify(request.children), '{"Deployment.apps/v1":{},"Pod.v1":{}}');
  });

  test('v2 always keys namespaced objects ns/name', () => {
    const request = buildHookRequest({
      controller,
      parent: parentIn('prod'),
      version: 'v2',
      childRules: [pods],
      children: [object('v1', 'Pod', 'a', 'prod')],
      finalizing: false,
    });
    assert.deepEqual(Object.keys(request.children['Pod.v1']!), ['prod/a']);
  });

  test('cluster-scoped parent: v1 keys namespaced children ns/name and cluster-scoped ones by name', () => {
    const request = buildHookRequest({
      controller,
      parent: parentIn(),
      version: 'v1',
      childRules: [pods, namespaces],
      children: [object('v1', 'Pod', 'a', 'ns1'), object('v1', 'Pod', 'a', 'ns2'), object('v1', 'Namespace', 'ns1')],
      finalizing: false,
    });
    assert.deepEqual(Object.keys(request.children['Pod.v1']!), ['ns1/a', 'ns2/a']);
    assert.deepEqual(Object.keys(request.children['Namespace.v1']!), ['ns1']);
  });

  test('v1 with a namespaced parent shows only objects of its namespace; v2 shows related objects from anywhere', () => {
    const related = [object('v1', 'ConfigMap', 'shared', 'other'), object('v1', 'ConfigMap', 'local', 'prod')];
    const configMaps: ResolvedResource = { apiVersion: 'v1', resource: 'configmaps', kind: 'ConfigMap', namespaced: true };
    const v1 = buildHookRequest({
      controller,
      parent: parentIn('prod'),
      version: 'v1',
      childRules: [],
      children: [],
      relatedRules: [configMaps],
      related,
      finalizing: false,
    });
    assert.deepEqual(Object.keys(v1.related['ConfigMap.v1']!), ['local']);
    const v2 = buildHookRequest({
      controller,
      parent: parentIn('prod'),
      version: 'v2',
      childRules: [],
      children: [],
      relatedRules: [configMaps],
      related,
      finalizing: false,
    });
    assert.deepEqual(Object.keys(v2.related['ConfigMap.v1']!), ['other/shared', 'prod/local']);
  });

  test('objectKey for each version and scope', () => {
    assert.equal(objectKey('v1', parentIn('ns'), object('v1', 'Pod', 'x', 'ns')), 'x');
    assert.equal(objectKey('v1', parentIn(), object('v1', 'Pod', 'x', 'ns')), 'ns/x');
    assert.equal(objectKey('v1', parentIn(), object('v1', 'Namespace', 'x')), 'x');
    assert.equal(objectKey('v2', parentIn('ns'), object('v1', 'Pod', 'x', 'ns')), 'ns/x');
    assert.equal(objectKey('v2', parentIn('ns'), object('v1', 'Namespace', 'x')), 'x');
  });

  test('thousands of children with 60-character names stay keyed one by one', () => {
    const children = Array.from({ length: 3000 }, (_, index) =>
      object('v1', 'Pod', `${'p'.repeat(55)}${String(index).padStart(5, '0')}`, 'prod'),
    );
    const request = buildHookRequest({
      controller,
      parent: parentIn('prod'),
      version: 'v2',
      childRules: [pods],
      children,
      finalizing: false,
    });
    assert.equal(Object.keys(request.children['Pod.v1']!).length, 3000);
  });
});
