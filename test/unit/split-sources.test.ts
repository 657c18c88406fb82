// A kind declared twice, with selectors that split its objects and fewer changes asked for one
// of them: that selection gets an ApiServerSource of its own, tagged with its name, and the
// Trigger leaves out the changes it does not ask for by that tag. The other selection keeps all.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { apiServerSourceAttributes } from '../../eventing/apiserver-events.ts';
import { evaluateTrigger, type SubscriptionsApiFilter } from '../../eventing/filters.ts';
import { DEFAULT_OPTIONS, functionObjects, sourcesFor } from '../../eventing/manifests/index.ts';
import { ConfigMap, defineFunction, type ChangeAction, type KubeObject } from '../../functions/runtime/index.ts';

const declaration = defineFunction({
  name: 'mirror',
  description: 'test',
  reconciles: { group: 'example.com', version: 'v1', kind: 'Mirror', plural: 'mirrors', namespaced: true },
  watches: [
    { kind: ConfigMap, labelSelector: '!example.com/mirror', keysFor: async () => [] },
    { kind: ConfigMap, labelSelector: 'example.com/mirror', changes: ['delete'], keysFor: async () => [] },
  ],
  rbac: [],
  reconcile: async () => {},
});
const sources = sourcesFor(declaration);
const trigger = functionObjects(declaration, DEFAULT_OPTIONS).find((object) => object.kind === 'Trigger')!;
const filters = (trigger.spec as { filters: SubscriptionsApiFilter[] }).filters;
const object: KubeObject = { metadata: { name: 'settings', namespace: 'team-a' } };

/** Does the Trigger deliver this change as the named source sends it? */
function delivered(sourceName: string, action: ChangeAction): boolean {
  const spec = sources.find((candidate) => candidate.name === sourceName)!;
  const event = apiServerSourceAttributes({
    server: 'https://api',
    kind: ConfigMap,
    object,
    action,
    mode: spec.mode,
    extensions: spec.extensions,
  });
  return evaluateTrigger({ filters }, event) !== 'fail';
}

describe('a selection asking for fewer changes of a kind than another', () => {
  test('gets a source of its own, named and tagged after its changes', () => {
    assert.deepEqual(
      sources.map((spec) => [
        spec.name,
        spec.resources.map((resource) => `${resource.kind.kind} ${resource.labelSelector ?? ''}`.trim()),
        spec.extensions?.opfnsource,
      ]),
      [
        ['mirror-objects', ['Mirror'], undefined],
        ['mirror-related', ['ConfigMap !example.com/mirror'], undefined],
        ['mirror-configmaps-delete', ['ConfigMap example.com/mirror'], 'mirror-configmaps-delete'],
      ],
    );
  });

  test('the Trigger leaves out the changes it does not ask for, from its source only', () => {
    assert.equal(delivered('mirror-configmaps-delete', 'add'), false);
    assert.equal(delivered('mirror-configmaps-delete', 'update'), false);
    assert.equal(delivered('mirror-configmaps-delete', 'delete'), true);
    for (const action of ['add', 'update', 'delete'] as const) assert.equal(delivered('mirror-related', action), true, action);
  });
});
