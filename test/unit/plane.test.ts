// The plane's derived wiring: which ApiServerSources and Trigger a declaration gets.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { defineFunction } from '../../functions/runtime/declaration.ts';
import { ConfigMap, Namespace, Pod, Secret, type ResourceKind } from '../../functions/runtime/kinds.ts';
import { sourcesFor, triggerFor } from '../../eventing/plane.ts';

const Widget: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };
const reconcile = async (): Promise<void> => undefined;

describe('sourcesFor', () => {
  it('watches the primary kind in Resource mode (the runtime can skip status-only updates by the body)', () => {
    const fn = defineFunction({ name: 'widgets', description: '', reconciles: Widget, rbac: [], reconcile, owns: [{ kind: Pod, ownerNameLabel: 'widget' }] });
    const sources = sourcesFor(fn);
    assert.deepEqual(
      sources.map((s) => [s.name, s.mode, s.resources.map((r) => r.kind.plural)]),
      [
        ['widgets-objects', 'Resource', ['widgets']],
        ['widgets-related', 'Resource', ['pods']],
      ],
    );
    assert.equal(sources[1]?.resources[0]?.labelSelector, 'widget');
    assert.deepEqual(sources[0]?.extensions, { opfnfunction: 'widgets' });
  });

  it('never watches Secrets in Resource mode, whether reconciled, owned or watched', () => {
    const keysFor = async () => [];
    const copier = defineFunction({
      name: 'copier',
      description: '',
      reconciles: Widget,
      rbac: [],
      reconcile,
      owns: [{ kind: Secret, ownerNameLabel: 'copier' }, { kind: ConfigMap, ownerNameLabel: 'copier' }],
      watches: [{ kind: Namespace, keysFor }, { kind: Secret, labelSelector: 'copy=yes', keysFor }],
    });
    const byMode = (mode: string) => sourcesFor(copier).filter((s) => s.mode === mode).flatMap((s) => s.resources.map((r) => r.kind.kind));
    assert.deepEqual(byMode('Resource').sort(), ['ConfigMap', 'Namespace', 'Widget']);
    assert.deepEqual(byMode('Reference'), ['Secret', 'Secret']);
    const secretsOnly = defineFunction({ name: 'secrets', description: '', reconciles: Secret, rbac: [], reconcile });
    assert.deepEqual(sourcesFor(secretsOnly).map((s) => s.mode), ['Reference']);
  });
});

describe('triggerFor', () => {
  it("bounds the trigger's deliveries by the function's capacity at full scale", () => {
    const soft = defineFunction({ name: 'soft', description: '', reconciles: Widget, rbac: [], reconcile, scaling: { minScale: 0, maxScale: 4, target: 100, containerConcurrency: 0 } });
    const hard = defineFunction({ name: 'hard', description: '', reconciles: Widget, rbac: [], reconcile, scaling: { minScale: 0, maxScale: 3, target: 100, containerConcurrency: 5 } });
    const unbounded = defineFunction({ name: 'unbounded', description: '', reconciles: Widget, rbac: [], reconcile, scaling: { minScale: 0, maxScale: 0, target: 100, containerConcurrency: 0 } });
    assert.equal(triggerFor(soft, 'http://x/soft').maxInFlight, 400);
    assert.equal(triggerFor(hard, 'http://x/hard').maxInFlight, 15);
    assert.equal(triggerFor(unbounded, 'http://x/u').maxInFlight, undefined, "unbounded scale: the broker's default");
  });
});
