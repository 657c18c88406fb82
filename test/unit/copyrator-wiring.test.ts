// How the copyrator's events reach it: every ConfigMap and Secret but the copies, with all their
// changes; the copies (they carry the rule-name label) not at all. So no echo of the function's
// own writes of copies reaches it; the resync undoes what is done to a copy by hand.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { apiServerSourceAttributes } from '../../eventing/apiserver-events.ts';
import { evaluateTrigger, type SubscriptionsApiFilter } from '../../eventing/filters.ts';
import { DEFAULT_OPTIONS, functionObjects, sourcesFor } from '../../eventing/manifests/index.ts';
import { copyratorFunction } from '../../functions/copyrator/index.ts';
import { RULE_ANNOTATION, RULE_NAME_LABEL } from '../../functions/copyrator/desired.ts';
import { ConfigMap, Secret, type ChangeAction, type KubeObject, type ResourceKind } from '../../functions/runtime/index.ts';

const copyrator = copyratorFunction({ secrets: true });
const sources = sourcesFor(copyrator);
const trigger = functionObjects(copyrator, DEFAULT_OPTIONS).find((object) => object.kind === 'Trigger')!;
const filters = (trigger.spec as { filters: SubscriptionsApiFilter[] }).filters;

const copy: KubeObject = {
  metadata: {
    name: 'settings',
    namespace: 'team-a',
    labels: { [RULE_NAME_LABEL]: 'rule' },
    annotations: { [RULE_ANNOTATION]: 'default/rule' },
  },
};
const source: KubeObject = { metadata: { name: 'settings', namespace: 'default', labels: { share: 'yes' } } };

/** Does the Trigger deliver this change as the named source sends it? */
function delivered(sourceName: string, kind: ResourceKind, object: KubeObject, action: ChangeAction): boolean {
  const spec = sources.find((candidate) => candidate.name === sourceName)!;
  const event = apiServerSourceAttributes({ server: 'https://api', kind, object, action, mode: spec.mode, extensions: spec.extensions });
  return evaluateTrigger({ filters }, event) !== 'fail';
}

describe('the copyrator hears every change but those of its own copies', () => {
  test('sources: the other objects of each kind with every change; no source selects the copies', () => {
    assert.deepEqual(
      sources.map((spec) => [
        spec.name,
        spec.mode,
        spec.resources.map((resource) => `${resource.kind.kind} ${resource.labelSelector ?? ''}`.trim()),
        spec.extensions?.opfnsource,
      ]),
      [
        ['copyrator-objects', 'Resource', ['CopyratorRule'], undefined],
        ['copyrator-related', 'Resource', ['Namespace', `ConfigMap !${RULE_NAME_LABEL}`], undefined],
        ['copyrator-secrets', 'Reference', [`Secret !${RULE_NAME_LABEL}`], undefined],
      ],
    );
  });

  test('the Trigger delivers every change of another object; a copy whose rule labels were removed by hand enters that selection', () => {
    for (const [others, kind] of [
      ['copyrator-related', ConfigMap],
      ['copyrator-secrets', Secret],
    ] as const) {
      for (const action of ['add', 'update', 'delete'] as const)
        assert.equal(delivered(others, kind, source, action), true, `${kind.kind}: ${action} of a source`);
      assert.equal(delivered(others, kind, { metadata: { ...copy.metadata, labels: {} } }, 'add'), true);
    }
  });

  test('without Secrets, no Secret source', () => {
    assert.deepEqual(
      sourcesFor(copyratorFunction({ secrets: false })).map((spec) => spec.name),
      ['copyrator-objects', 'copyrator-related'],
    );
  });
});
