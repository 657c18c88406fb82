// Privileged children (functions/composite/metacontroller/privileged.ts): a hook's answer may not hand out the
// composite function's rights unless its CompositeController allows the kind by name.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { desiredChildren } from '../../functions/composite/metacontroller/hook-response.ts';
import { ALLOW_PRIVILEGED_ANNOTATION, PRIVILEGED_CHILD_REASON, privilegeOf } from '../../functions/composite/metacontroller/privileged.ts';
import { compileSelector, type Selector } from '../../functions/runtime/index.ts';
import type { CompositeController, ResolvedResource } from '../../functions/composite/metacontroller/types.ts';
import { type KubeObject } from '../../functions/runtime/index.ts';

const everything = (compileSelector({}) as { selector: Selector }).selector;
const rule = (apiVersion: string, resource: string, kind: string, namespaced: boolean): ResolvedResource => ({
  apiVersion,
  resource,
  kind,
  namespaced,
});
const clusterRoleBindings = rule('rbac.authorization.k8s.io/v1', 'clusterrolebindings', 'ClusterRoleBinding', false);
const roleBindings = rule('rbac.authorization.k8s.io/v1', 'rolebindings', 'RoleBinding', true);
const secrets = rule('v1', 'secrets', 'Secret', true);
const pods = rule('v1', 'pods', 'Pod', true);
const deployments = rule('apps/v1', 'deployments', 'Deployment', true);
const configMaps = rule('v1', 'configmaps', 'ConfigMap', true);

const clusterParent: KubeObject = { apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'w', uid: 'u-w' } };
const namespacedParent: KubeObject = {
  apiVersion: 'example.com/v1',
  kind: 'Thing',
  metadata: { name: 't', namespace: 'team-a', uid: 'u-t' },
};
const controller = (annotation?: string): CompositeController =>
  ({
    apiVersion: 'metacontroller.k8s.io/v1alpha1',
    kind: 'CompositeController',
    metadata: { name: 'adv', ...(annotation === undefined ? {} : { annotations: { [ALLOW_PRIVILEGED_ANNOTATION]: annotation } }) },
    spec: { parentResource: { apiVersion: 'example.com/v1', resource: 'widgets' }, childResources: [] },
  }) as CompositeController;
const evesBinding: KubeObject = {
  apiVersion: 'rbac.authorization.k8s.io/v1',
  kind: 'ClusterRoleBinding',
  metadata: { name: 'eve-admin' },
  roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'opfn-composite' },
  subjects: [{ kind: 'User', name: 'eve', apiGroup: 'rbac.authorization.k8s.io' }],
};
const desired = (parent: KubeObject, children: KubeObject[], childRules: ResolvedResource[], cc?: CompositeController) =>
  desiredChildren({ parent, children, childRules, selector: everything, generateSelector: false, controller: cc });

describe('privileged children', () => {
  test('a ClusterRoleBinding child is refused, the whole answer with it, with its own Event reason and what to do', () => {
    const result = desired(
      clusterParent,
      [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'ok', namespace: 'ns1' } }, evesBinding],
      [configMaps, clusterRoleBindings],
      controller(),
    );
    assert.equal(result.ok, false);
    assert.ok(!result.ok);
    assert.equal(result.eventReason, PRIVILEGED_CHILD_REASON);
    assert.equal(
      result.reason,
      'desired child ClusterRoleBinding eve-admin: ClusterRoleBinding grants API rights: refused unless CompositeController "adv" names "clusterrolebindings.rbac.authorization.k8s.io" in its annotation operator-functions.dev/allow-privileged-children',
    );
  });

  test('allowed by name (or *): written; another privileged kind is still refused', () => {
    for (const annotation of [
      'clusterrolebindings.rbac.authorization.k8s.io',
      ' pods , clusterrolebindings.rbac.authorization.k8s.io',
      '*',
    ]) {
      assert.ok(desired(clusterParent, [evesBinding], [clusterRoleBindings], controller(annotation)).ok, annotation);
    }
    const binding: KubeObject = { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'b' } };
    const other = desired(namespacedParent, [binding], [roleBindings], controller('clusterrolebindings.rbac.authorization.k8s.io'));
    assert.ok(!other.ok);
    assert.match(other.reason, /RoleBinding grants API rights: refused unless .* names "rolebindings.rbac.authorization.k8s.io"/);
    assert.ok(
      !desired(clusterParent, [evesBinding], [clusterRoleBindings], controller('clusterrolebindings')).ok,
      'the group is part of the name',
    );
    assert.ok(!desired(clusterParent, [evesBinding], [clusterRoleBindings]).ok, 'no controller, nothing allowed');
  });

  test('which children bear privilege', () => {
    const webhook = rule('admissionregistration.k8s.io/v1', 'mutatingwebhookconfigurations', 'MutatingWebhookConfiguration', false);
    const policy = rule('admissionregistration.k8s.io/v1', 'validatingadmissionpolicybindings', 'ValidatingAdmissionPolicyBinding', false);
    const crds = rule('apiextensions.k8s.io/v1', 'customresourcedefinitions', 'CustomResourceDefinition', false);
    const apiServices = rule('apiregistration.k8s.io/v1', 'apiservices', 'APIService', false);
    const child = (kind: string, namespace?: string, extra: Record<string, unknown> = {}): KubeObject => ({
      kind,
      metadata: { name: 'x', ...(namespace ? { namespace } : {}) },
      ...extra,
    });
    assert.match(String(privilegeOf(child('MutatingWebhookConfiguration'), webhook, '')), /every API request/);
    assert.match(String(privilegeOf(child('ValidatingAdmissionPolicyBinding'), policy, '')), /every API request/);
    assert.match(String(privilegeOf(child('CustomResourceDefinition'), crds, '')), /changes the API/);
    assert.match(String(privilegeOf(child('APIService'), apiServices, '')), /routes an API group/);
    assert.match(
      String(privilegeOf(child('Secret', 'team-a', { type: 'kubernetes.io/service-account-token' }), secrets, 'team-a')),
      /ServiceAccount's token/,
    );
    assert.equal(privilegeOf(child('Secret', 'team-a', { type: 'Opaque' }), secrets, 'team-a'), undefined);
    // Pods and their makers: in the parent's namespace as Metacontroller always did; elsewhere (a cluster-scoped parent's) they run as that namespace's ServiceAccounts.
    assert.equal(privilegeOf(child('Pod', 'team-a'), pods, 'team-a'), undefined);
    assert.match(String(privilegeOf(child('Pod', 'kube-system'), pods, '')), /runs pods outside the parent's namespace/);
    assert.match(String(privilegeOf(child('Deployment', 'kube-system'), deployments, '')), /runs pods outside/);
    assert.equal(privilegeOf(child('ConfigMap', 'kube-system'), configMaps, ''), undefined);
  });
});
