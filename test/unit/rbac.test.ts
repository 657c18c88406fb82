// RBAC rules derived from declarations: declared plus implied, merged, in a stable order.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import immortalContainer from '../../functions/immortal-container/index.ts';
import {
  defineFunction,
  ConfigMap,
  Namespace,
  Pod,
  type ResourceKind,
  mergeRules,
  rulesFor,
  sourceRulesFor,
} from '../../functions/runtime/index.ts';

const Rule: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Rule', plural: 'rules', namespaced: true };
const base = { name: 'demo', description: 'd', reconciles: Rule, rbac: [], reconcile: async () => {} };

describe('rulesFor', () => {
  test('ImmortalContainer: owning pods by reference implies update on immortalcontainers/finalizers; watchDuringBursts, watch', () => {
    assert.deepEqual(rulesFor(immortalContainer), [
      { apiGroups: [''], resources: ['events'], verbs: ['create', 'patch'] },
      { apiGroups: [''], resources: ['pods'], verbs: ['get', 'create', 'delete'] },
      { apiGroups: ['immortalcontainer.flugel.it'], resources: ['immortalcontainers'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: ['immortalcontainer.flugel.it'], resources: ['immortalcontainers/finalizers'], verbs: ['update'] },
      { apiGroups: ['immortalcontainer.flugel.it'], resources: ['immortalcontainers/status'], verbs: ['update'] },
    ]);
  });

  test('children owned by label only (across namespaces) imply no finalizers rule; a declared finalizer implies update and patch', () => {
    const rules = rulesFor(
      defineFunction({
        ...base,
        owns: [{ kind: ConfigMap, ownerLabels: { namespace: 'example.com/rule-namespace', name: 'example.com/rule' } }],
        finalizer: { name: 'example.com/cleanup', finalize: async () => true },
      }),
    );
    assert.equal(
      rules.some((r) => r.resources[0] === 'rules/finalizers'),
      false,
    );
    assert.deepEqual(rules.find((r) => r.resources[0] === 'rules')?.verbs, ['get', 'list', 'update', 'patch']);
    assert.deepEqual(rules.find((r) => r.resources[0] === 'configmaps')?.verbs, ['get']);
  });

  test('merging unites verbs per group and resource, splits multi-resource rules, keeps resourceNames apart, and is deterministic', () => {
    const merged = mergeRules([
      { apiGroups: [''], resources: ['secrets', 'configmaps'], verbs: ['delete', 'get'] },
      { apiGroups: [''], resources: ['configmaps'], verbs: ['list', 'get'] },
      { apiGroups: [''], resources: ['secrets'], verbs: ['get'], resourceNames: ['b', 'a'] },
    ]);
    assert.deepEqual(merged, [
      { apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list', 'delete'] },
      { apiGroups: [''], resources: ['secrets'], verbs: ['get', 'delete'] },
      { apiGroups: [''], resources: ['secrets'], verbs: ['get'], resourceNames: ['a', 'b'] },
    ]);
    assert.deepEqual(mergeRules([...merged].reverse()), merged);
  });

  test('the source identity gets get, list and watch on every watched kind', () => {
    const declaration = defineFunction({ ...base, owns: [{ kind: Pod }], watches: [{ kind: Namespace, keysFor: async () => [] }] });
    assert.deepEqual(
      sourceRulesFor(declaration).map((r) => `${r.apiGroups[0]}/${r.resources[0]}:${r.verbs.join(',')}`),
      ['/namespaces:get,list,watch', '/pods:get,list,watch', 'example.com/rules:get,list,watch'],
    );
  });
});
