// Whom a CopyratorRule acts for, without an API server: the namespace labels that let a rule copy
// (sourceRefusal), and the admission policy `opfn manifests` generates from the declaration.
// test/integration/copyrator-hostile-tenant.test.ts runs both against a real API server.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { admissionObjects, admissionPolicyName, DEFAULT_OPTIONS } from '../../eventing/manifests/index.ts';
import { READ_VERBS, WRITE_VERBS } from '../../functions/copyrator/admission.ts';
import { ANY_SOURCE_LABEL, DISTRIBUTE_LABEL, distributes, sourceRefusal, type CopyratorRule } from '../../functions/copyrator/desired.ts';
import copyrator from '../../functions/copyrator/index.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import type { KubeObject } from '../../functions/runtime/index.ts';

const namespace = (name: string, labels: Record<string, string> = {}): KubeObject =>
  ({ metadata: { name, labels }, status: { phase: 'Active' } }) as KubeObject;
const rule = (ruleNamespace: string, source: string): CopyratorRule => ({
  apiVersion: 'flant.com/v1',
  kind: 'CopyratorRule',
  metadata: { namespace: ruleNamespace, name: 'r' },
  ruleType: 'secret',
  selector: {},
  namespace: source,
});
const reason = (ruleNamespace: string, source: string, namespaces: KubeObject[]) =>
  sourceRefusal(rule(ruleNamespace, source), namespaces)?.reason;

describe('sourceRefusal', () => {
  test("the seed's sample (a rule in default copying out of default) is allowed out of the box", () => {
    assert.equal(sourceRefusal(rule('default', 'default'), [namespace('default')]), undefined);
  });

  test('default stops distributing when an administrator labels it false; any other namespace distributes only when labelled true', () => {
    assert.deepEqual(
      [distributes(namespace('default')), distributes(namespace('default', { [DISTRIBUTE_LABEL]: 'false' }))],
      [true, false],
    );
    assert.deepEqual(
      [
        distributes(namespace('platform')),
        distributes(namespace('platform', { [DISTRIBUTE_LABEL]: 'true' })),
        distributes(namespace('platform', { [DISTRIBUTE_LABEL]: 'yes' })),
      ],
      [false, true, false],
    );
    assert.equal(reason('default', 'default', [namespace('default', { [DISTRIBUTE_LABEL]: 'false' })]), 'SourceNotDistributing');
    assert.equal(reason('attacker', 'attacker', [namespace('attacker')]), 'SourceNotDistributing');
    assert.equal(reason('platform', 'platform', [namespace('platform', { [DISTRIBUTE_LABEL]: 'true' })]), undefined);
  });

  test("another source namespace needs ANY_SOURCE_LABEL=true on the rule's namespace, and says nothing about the source before", () => {
    const victim = namespace('victim', { [DISTRIBUTE_LABEL]: 'true' });
    const refusal = sourceRefusal(rule('attacker', 'victim'), [namespace('attacker'), victim]);
    assert.deepEqual(refusal, {
      type: 'Ready',
      status: 'False',
      reason: 'SourceNotOwnNamespace',
      message: `a rule copies out of its own namespace (attacker), not victim, unless an administrator labels namespace attacker ${ANY_SOURCE_LABEL}=true`,
    });
    // The same answer whether the other namespace exists or not: no tenant learns which do.
    assert.deepEqual(sourceRefusal(rule('attacker', 'ghost'), [namespace('attacker')]), {
      ...refusal,
      message: refusal!.message.replace('not victim', 'not ghost'),
    });
    assert.equal(
      reason('attacker', 'victim', [namespace('attacker', { [ANY_SOURCE_LABEL]: 'yes' }), victim]),
      'SourceNotOwnNamespace',
      'only "true"',
    );
    // The label on the source namespace is not the one that counts.
    assert.equal(
      reason('attacker', 'victim', [
        namespace('attacker'),
        namespace('victim', { [DISTRIBUTE_LABEL]: 'true', [ANY_SOURCE_LABEL]: 'true' }),
      ]),
      'SourceNotOwnNamespace',
    );
  });

  test('allowed to name another namespace: it must exist and distribute', () => {
    const ops = namespace('ops', { [ANY_SOURCE_LABEL]: 'true' });
    assert.deepEqual(sourceRefusal(rule('ops', 'ghost'), [ops]), {
      type: 'Ready',
      status: 'False',
      reason: 'SourceNamespaceNotFound',
      message: 'source namespace ghost does not exist',
    });
    assert.deepEqual(sourceRefusal(rule('ops', 'kube-system'), [ops, namespace('kube-system')]), {
      type: 'Ready',
      status: 'False',
      reason: 'SourceNotDistributing',
      message: `namespace kube-system does not distribute: its ConfigMaps and Secrets are copied into other namespaces only once an administrator labels it ${DISTRIBUTE_LABEL}=true`,
    });
    assert.equal(reason('ops', 'platform', [ops, namespace('platform', { [DISTRIBUTE_LABEL]: 'true' })]), undefined);
    assert.equal(reason('ops', 'default', [ops, namespace('default')]), undefined);
  });
});

describe('the generated admission policy', () => {
  const [policy, binding] = admissionObjects(copyrator, DEFAULT_OPTIONS);
  const spec = policy.spec as {
    failurePolicy: string;
    matchConstraints: unknown;
    matchConditions: { expression: string }[];
    validations: { expression: string; messageExpression: string; reason: string }[];
  };

  test('a policy on CREATE and UPDATE of copyrators, and a binding that denies', () => {
    assert.deepEqual([policy.kind, binding.kind], ['ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding']);
    assert.equal(policy.metadata.name, admissionPolicyName(copyrator));
    assert.equal(policy.metadata.namespace, undefined, 'cluster-scoped');
    assert.equal(spec.failurePolicy, 'Fail');
    assert.deepEqual(spec.matchConstraints, {
      resourceRules: [{ apiGroups: ['flant.com'], apiVersions: ['*'], resources: ['copyrators'], operations: ['CREATE', 'UPDATE'] }],
    });
    assert.deepEqual(binding.spec, { policyName: policy.metadata.name, validationActions: ['Deny'] });
  });

  test('one check per right, reads in the source namespace first, then writes at cluster scope; each message names its right', () => {
    assert.deepEqual(
      spec.validations.map((v) => v.expression),
      [
        ...READ_VERBS.map((verb) => `variables.inSource.check('${verb}').allowed()`),
        ...WRITE_VERBS.map((verb) => `variables.everywhere.check('${verb}').allowed()`),
      ],
    );
    assert.deepEqual([...READ_VERBS, ...WRITE_VERBS], ['get', 'list', 'create', 'update', 'delete']);
    spec.validations.forEach((validation, index) => {
      assert.ok(
        validation.messageExpression.includes(`' may not ${[...READ_VERBS, ...WRITE_VERBS][index]} '`),
        validation.messageExpression,
      );
      // A message expression is evaluated without the authorizer (validator.go): it must not call it.
      assert.ok(!validation.messageExpression.includes('authorizer') && !validation.messageExpression.includes('check('));
      assert.equal(validation.reason, 'Forbidden');
    });
  });

  test("only the fields a rule acts on make an update checked (the function's finalizer writes are not)", () => {
    const condition = spec.matchConditions[0].expression;
    for (const field of ['ruleType', 'namespace', 'selector'])
      assert.ok(condition.includes(`object.${field} != oldObject.${field}`), field);
    assert.ok(!condition.includes('metadata'));
  });

  test('nothing for a namespace install, nor for a function without admission checks', () => {
    assert.deepEqual(admissionObjects(copyrator, { scope: 'namespace' }), []);
    assert.deepEqual(admissionObjects(immortalContainer, DEFAULT_OPTIONS), []);
  });
});
