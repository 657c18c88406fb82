// Which functions make the in-memory plane run CompositeControllers' sources itself, and what it
// tells the composite function (eventing/knative/derived-sources.ts, from the declaration's derivedSources); the sources themselves
// are tested against a real API server in test/integration/composite-memory-plane.test.ts.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { derivedSourcesFor, inMemoryConfig } from '../../eventing/knative/index.ts';
import { DEFAULT_OPTIONS } from '../../eventing/manifests/index.ts';
import composite from '../../functions/composite/index.ts';
import { EVENT_SOURCES_CONFIG } from '../../functions/composite/event-sources.ts';
import { resolveConfig } from '../../functions/runtime/index.ts';
import copyrator from '../../functions/copyrator/index.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { quietLog, unreachableKube } from '../support/cluster.ts';

describe('the in-memory plane and the composite function', () => {
  test('the composite function is told to leave its sources to the plane; its declared parameter takes the value', () => {
    const env = inMemoryConfig(composite);
    assert.deepEqual(env, { [EVENT_SOURCES_CONFIG]: 'plane' });
    assert.equal(resolveConfig(composite.name, composite.config, env)[EVENT_SOURCES_CONFIG], 'plane');
    assert.equal(
      resolveConfig(composite.name, composite.config, {})[EVENT_SOURCES_CONFIG],
      'managed',
      'without the plane it writes them (Knative)',
    );
  });

  test('other functions get nothing', () => {
    for (const declaration of [immortalContainer, copyrator]) assert.deepEqual(inMemoryConfig(declaration), {});
  });

  test('CompositeControllers are watched only when the plane runs the composite function', () => {
    const options = { kube: unreachableKube(), log: quietLog, placement: DEFAULT_OPTIONS };
    assert.equal(derivedSourcesFor([immortalContainer, copyrator], options), undefined);
    assert.equal(typeof derivedSourcesFor([immortalContainer, composite], options), 'function');
  });
});
