// The pure parts of "mistakes shown on the object": which failures retrying cannot mend, the
// rule a 403 names, the answer for refused keys, and the declared kinds checked against the CRDs
// an install carries. The parts that talk to the API server are in
// test/integration/mistakes-on-object.test.ts.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { declaredKindProblems } from '../../eventing/manifests/index.ts';
import { runManifests } from '../../bin/manifests.ts';
import { loadAllFunctions } from '../../functions/index.ts';
import { ImmortalContainerKind } from '../../functions/immortal-container/desired.ts';
import { answerFor } from '../../functions/runtime/host/answers.ts';
import { allows, missingRuleMessage } from '../../functions/runtime/host/unmendable.ts';
import {
  ApiError,
  ConfigMap,
  defineFunction,
  NOT_SERVED,
  refusedRequest,
  statusForError,
  unmendableReason,
  type ResourceKind,
} from '../../functions/runtime/index.ts';

const Widget: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };

const widgets = (kind: ResourceKind = Widget) =>
  defineFunction({
    name: 'widgets',
    description: 'reconciles Widgets',
    reconciles: kind,
    owns: [],
    rbac: [{ apiGroups: ['example.com'], resources: ['widgets'], verbs: ['update'] }],
    reconcile: async () => undefined,
  });

const forbidden = (message: string) => new ApiError(403, 'Forbidden', `PUT /x: ${message}`, { message, reason: 'Forbidden', code: 403 });

describe('failures retrying cannot mend', () => {
  test('403, 422 and a kind not served are reported on the object; conflicts, 5xx and NotFound are not', () => {
    assert.equal(unmendableReason(forbidden('no')), 'ReconcileForbidden');
    assert.equal(unmendableReason(new ApiError(422, 'Invalid', 'bad')), 'ReconcileInvalid');
    assert.equal(unmendableReason(new ApiError(404, NOT_SERVED, 'not served')), 'KindNotServed');
    for (const error of [
      new ApiError(409, 'Conflict', 'c'),
      new ApiError(500, 'InternalError', 'i'),
      new ApiError(404, 'NotFound', 'gone'),
      new Error('a bug'),
    ])
      assert.equal(unmendableReason(error), undefined, error.message);
    // What reaches statusForError is unchanged: the host asks unmendable.ts first.
    assert.equal(statusForError(new ApiError(404, NOT_SERVED, 'not served')), 503);
  });

  test('an RBAC 403 names the request; the rule the declaration lacks is spelled out to add', () => {
    const error = forbidden(
      'widgets.example.com "w1" is forbidden: User "system:serviceaccount:default:opfn-widgets" cannot update resource "widgets/status" in API group "example.com" in the namespace "default"',
    );
    const request = refusedRequest(error);
    assert.deepEqual(request, { verb: 'update', group: 'example.com', resource: 'widgets/status', namespace: 'default' });
    assert.equal(
      missingRuleMessage(widgets(), request!),
      "declaration of widgets has no rule for update on example.com widgets/status; add { apiGroups: ['example.com'], resources: ['widgets/status'], verbs: ['update'] }",
    );
    const cluster = refusedRequest(
      forbidden('namespaces is forbidden: User "u" cannot list resource "namespaces" in API group "" at the cluster scope'),
    );
    assert.deepEqual(cluster, { verb: 'list', group: '', resource: 'namespaces' });
    assert.match(missingRuleMessage(widgets(), cluster!), /no rule for list on the core group namespaces; add \{ apiGroups: \[''\]/);
  });

  test('a 403 the declaration does allow points at the identity, not the declaration; a quota 403 names no rule', () => {
    const request = { verb: 'update', group: 'example.com', resource: 'widgets', namespace: 'default' };
    assert.ok(allows([{ apiGroups: ['example.com'], resources: ['*'], verbs: ['update'] }], request));
    assert.ok(!allows([{ apiGroups: ['example.com'], resources: ['widgets/status'], verbs: ['update'] }], request));
    assert.match(missingRuleMessage(widgets(), request), /allows update on example.com widgets, but the identity it runs as may not/);
    assert.equal(refusedRequest(forbidden('pods "p" is forbidden: exceeded quota: compute-resources')), undefined);
    assert.equal(refusedRequest(new ApiError(422, 'Invalid', 'cannot update resource "a" in API group "b"')), undefined);
  });
});

describe('the answer for refused keys', () => {
  const key = { kind: Widget, namespace: 'default', name: 'w1' };
  const other = { kind: Widget, namespace: 'default', name: 'w2' };

  test('a refused key alone is answered 200 with its reason, and comes back at its own time in a reply', () => {
    const now = new Date('2026-01-01T00:00:00Z');
    const outcome = answerFor(
      'widgets',
      [key],
      [{ type: 'refused', reason: 'ReconcileForbidden', error: 'declaration of widgets has no rule', requeueAt: now.getTime() + 60_000 }],
      now,
    );
    assert.equal(outcome.status, 200);
    assert.equal(outcome.body.refused, 1);
    assert.deepEqual(outcome.body.refusals, [
      { key: 'example.com/Widget:default/w1', reason: 'ReconcileForbidden', error: 'declaration of widgets has no rule' },
    ]);
    assert.deepEqual(JSON.parse(outcome.reply!.body).keys, ['example.com/Widget:default/w1']);
    assert.equal(outcome.reply!.headers['ce-opfnnotbefore'], new Date(now.getTime() + 60_000).toISOString());
  });

  test('a 422 asks for no requeue; beside a failed key only the failed one is retried', () => {
    const invalid = { type: 'refused' as const, reason: 'ReconcileInvalid', error: 'spec.x: Invalid value' };
    assert.equal(answerFor('widgets', [key], [invalid], new Date()).reply, undefined);
    const mixed = answerFor('widgets', [key, other], [invalid, { type: 'failed', status: 500, error: 'a bug' }], new Date());
    assert.equal(mixed.status, 200, 'not the whole event retried: the refused key is done');
    assert.deepEqual(JSON.parse(mixed.reply!.body).keys, ['example.com/Widget:default/w2']);
  });
});

describe('opfn manifests: declared kinds against the CRDs of the install', () => {
  const crd = (plural: string, versions = ['v1']) => ({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.example.com` },
    spec: { group: 'example.com', names: { kind: 'Widget', plural }, versions: versions.map((name) => ({ name, served: true })) },
  });

  test('the shipped functions name only kinds their CRDs serve', async () => {
    assert.deepEqual(declaredKindProblems(await loadAllFunctions()), { errors: [], warnings: [] });
  });

  test('a plural typo is an error naming the plural the CRD serves, not a note about polling', () => {
    const typo = widgets({ ...Widget, plural: 'widgts' });
    const problems = declaredKindProblems([typo], [crd('widgets')]);
    assert.deepEqual(problems.errors, [
      'widgets: Widget (widgts.example.com, example.com/v1): the CRD widgets.example.com serves Widget as "widgets", not "widgts": did you mean widgets?',
    ]);
    // opfn manifests checks against crds/: ImmortalContainer's CRD serves "immortalcontainers".
    const icTypo = widgets({ ...ImmortalContainerKind, plural: 'immortalcontainer' });
    assert.throws(() => runManifests({ target: 'knative' }, [icTypo], () => {}), /did you mean immortalcontainers\?/);
  });

  test('a version the CRD does not serve is an error; a CRD not among them is a warning, printed by opfn manifests', () => {
    assert.match(declaredKindProblems([widgets()], [crd('widgets', ['v1beta1'])]).errors[0]!, /serves v1beta1, not v1/);
    const missing = declaredKindProblems([widgets()], []);
    assert.deepEqual(missing.errors, []);
    assert.match(missing.warnings[0]!, /no CRD in crds\/ defines widgets\.example\.com, so the install carries none/);
    let printed = '';
    runManifests({ target: 'knative' }, [widgets()], (text) => (printed += text));
    assert.match(printed, /^# warning: widgets: Widget \(widgets\.example\.com, example\.com\/v1\): no CRD in crds\//m);
  });

  test('built-in kinds need no CRD; one under a plural Kubernetes does not use is a warning', () => {
    const fn = defineFunction({
      name: 'maps',
      description: 'reconciles ConfigMaps',
      reconciles: { ...ConfigMap, plural: 'configmap' },
      owns: [],
      rbac: [],
      reconcile: async () => undefined,
    });
    const problems = declaredKindProblems([fn], []);
    assert.deepEqual(problems.errors, []);
    assert.match(problems.warnings[0]!, /serves its kinds under the plural "configmaps", not "configmap"/);
    assert.deepEqual(declaredKindProblems([{ ...fn, reconciles: ConfigMap }], []), { errors: [], warnings: [] });
  });
});
