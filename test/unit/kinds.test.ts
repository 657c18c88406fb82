// Names and versions as the API server reads them (functions/runtime/kinds.ts): what may reach a URL.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  isValidGroupVersion,
  isValidName,
  isValidNameOf,
  isValidNamespace,
  keyProblem,
  kindKeyString,
  objectPath,
  parseApiVersion,
  parseKindKey,
  rfc3339,
  sameKind,
  type ResourceKind,
} from '../../functions/runtime/index.ts';
import { ClusterRoleBinding, Role } from '../support/tenant.ts';

test('apiVersion: no slash is the core group; the rest after the first slash is the version', () => {
  assert.deepEqual(parseApiVersion('v1'), { group: '', version: 'v1' });
  assert.deepEqual(parseApiVersion('apps/v1'), { group: 'apps', version: 'v1' });
  assert.deepEqual(parseApiVersion('a/b/c'), { group: 'a', version: 'b/c' });
});

test('only a group and version that are safe in a discovery path are valid', () => {
  for (const valid of ['v1', 'apps/v1', 'immortalcontainer.flugel.it/v1alpha1'])
    assert.equal(isValidGroupVersion(parseApiVersion(valid)), true, valid);
  for (const invalid of ['', 'a/b/c', 'v1/..', '../v1', 'apps/', 'a b/v1', 'apps/v1?x=1'])
    assert.equal(isValidGroupVersion(parseApiVersion(invalid)), false, invalid);
});

test('sameKind compares group and kind, never the version', () => {
  const kind: ResourceKind = { group: 'apps', version: 'v1', kind: 'Deployment', plural: 'deployments', namespaced: true };
  assert.equal(sameKind(kind, 'apps/v1beta1', 'Deployment'), true);
  assert.equal(sameKind(kind, 'extensions/v1beta1', 'Deployment'), false);
  assert.equal(sameKind(kind, undefined, 'Deployment'), false);
  assert.equal(sameKind({ ...kind, group: '' }, 'v1', 'Deployment'), true);
});

test('names and namespaces as the API server allows them; never . or ..', () => {
  assert.equal(isValidName('web-1.example'), true);
  for (const bad of ['', '.', '..', 'a/b', 'A', 'x'.repeat(254)]) assert.equal(isValidName(bad), false, bad);
  assert.equal(isValidNamespace('team-a'), true);
  for (const bad of ['', '.', 'a.b', 'x'.repeat(64)]) assert.equal(isValidNamespace(bad), false, bad);
});

test('metav1.Time: RFC 3339, UTC, whole seconds', () => {
  assert.equal(rfc3339(new Date('2026-11-24T17:54:37.123Z')), '2026-11-24T17:54:37Z');
  assert.equal(rfc3339(0), '1970-01-01T00:00:00Z');
});

test('names per kind: RBAC kinds (and a few others) take any path segment, as the API server does; every other kind a DNS subdomain', () => {
  for (const name of ['system:controller:foo', 'adv:adv-colon', 'Upper_Case', 'rôle', 'a b', 'x'.repeat(253)]) {
    assert.equal(isValidNameOf('rbac.authorization.k8s.io', 'ClusterRoleBinding', name), true, name);
  }
  for (const name of ['', '.', '..', 'a/b', '50%', '%2e%2e', 'x'.repeat(254)])
    assert.equal(isValidNameOf('rbac.authorization.k8s.io', 'ClusterRoleBinding', name), false, name);
  assert.equal(isValidNameOf('networking.k8s.io', 'IPAddress', '2001:db8::1'), true);
  assert.equal(isValidNameOf('certificates.k8s.io', 'CertificateSigningRequest', 'csr:node:a'), true);
  // The same name in another group, a core kind or a custom resource: a DNS subdomain.
  for (const [group, kind] of [
    ['', 'ConfigMap'],
    ['example.com', 'ClusterRoleBinding'],
    ['rbac.authorization.k8s.io', 'Widget'],
    ['', 'ServiceAccount'],
  ]) {
    assert.equal(isValidNameOf(group!, kind!, 'system:foo'), false, `${group}/${kind}`);
    assert.equal(isValidNameOf(group!, kind!, 'web-1.example'), true, `${group}/${kind}`);
  }
});

test("keys of a kind with path-segment names: parsed at the first colon, checked by the kind's rule, addressed encoded", () => {
  const key = { kind: ClusterRoleBinding, namespace: '', name: 'system:controller:foo' };
  assert.equal(kindKeyString(key), 'rbac.authorization.k8s.io/ClusterRoleBinding:system:controller:foo');
  assert.deepEqual(parseKindKey(kindKeyString(key), [ClusterRoleBinding]), key);
  assert.deepEqual(parseKindKey('rbac.authorization.k8s.io/Role:team-a/adv:x', [Role]), { kind: Role, namespace: 'team-a', name: 'adv:x' });
  assert.equal(keyProblem(ClusterRoleBinding, key), undefined);
  assert.match(String(keyProblem(ClusterRoleBinding, { namespace: '', name: '..' })), /a ClusterRoleBinding name is a path segment/);
  assert.match(String(keyProblem(Role, { namespace: 'Team', name: 'r' })), /invalid namespace/);
  assert.equal(objectPath(ClusterRoleBinding, key), '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/system%3Acontroller%3Afoo');
});
