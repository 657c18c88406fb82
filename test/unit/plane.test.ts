// A declaration's wiring (which ApiServerSources it gets) and the generated objects the plane runs in memory.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { defineFunction, ConfigMap, Namespace, Pod, Secret, type KubeObject, type ResourceKind } from '../../functions/runtime/index.ts';
import { ServiceDirectory } from '../../eventing/knative/services.ts';
import { StatusBoard } from '../../eventing/knative/index.ts';
import { brokerTriggerFor, type Resolvers } from '../../eventing/knative/triggers.ts';
import { DEFAULT_OPTIONS, functionObjects } from '../../eventing/manifests/index.ts';
import { EventPlane, planeObjects, sourcesFor } from '../../eventing/plane.ts';
import { quietLog, unreachableKube } from '../support/cluster.ts';
import { tempDir } from '../support/temp.ts';

const Widget: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };
const reconcile = async (): Promise<void> => undefined;

describe('sourcesFor', () => {
  it('watches the primary kind in Resource mode (the runtime can skip status-only updates by the body)', () => {
    const fn = defineFunction({
      name: 'widgets',
      description: '',
      reconciles: Widget,
      rbac: [],
      reconcile,
      owns: [{ kind: Pod, ownerNameLabel: 'widget' }],
    });
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
      owns: [
        { kind: Secret, ownerNameLabel: 'copier' },
        { kind: ConfigMap, ownerNameLabel: 'copier' },
      ],
      watches: [
        { kind: Namespace, keysFor },
        { kind: Secret, labelSelector: 'copy=yes', keysFor },
      ],
    });
    const byMode = (mode: string) =>
      sourcesFor(copier)
        .filter((s) => s.mode === mode)
        .flatMap((s) => s.resources.map((r) => r.kind.kind));
    assert.deepEqual(byMode('Resource').sort(), ['ConfigMap', 'Namespace', 'Widget']);
    assert.deepEqual(byMode('Reference'), ['Secret', 'Secret']);
    const secretsOnly = defineFunction({ name: 'secrets', description: '', reconciles: Secret, rbac: [], reconcile });
    assert.deepEqual(
      sourcesFor(secretsOnly).map((s) => s.mode),
      ['Reference'],
    );
  });
});

describe('the generated objects the plane runs in memory (planeObjects)', () => {
  const resolversFor = async (objects: KubeObject[]): Promise<Resolvers> => {
    const services = new ServiceDirectory(new StatusBoard(), {
      urlFor: (name) => `http://x/${name}`,
      configure: () => {},
      withdraw: () => {},
    });
    for (const service of objects.filter((o) => o.kind === 'Service')) await services.apply(service);
    return { brokers: { has: () => true }, services };
  };
  const routeOf = async (objects: KubeObject[], name: string) =>
    brokerTriggerFor(
      objects.find((o) => o.kind === 'Trigger' && o.metadata.name === name)!,
      await resolversFor(objects),
    ).trigger;

  it("bounds each Trigger's deliveries by its Service's capacity at full scale", async () => {
    const soft = defineFunction({
      name: 'soft',
      description: '',
      reconciles: Widget,
      rbac: [],
      reconcile,
      scaling: { minScale: 0, maxScale: 4, target: 100, containerConcurrency: 0 },
    });
    const hard = defineFunction({
      name: 'hard',
      description: '',
      reconciles: Widget,
      rbac: [],
      reconcile,
      scaling: { minScale: 0, maxScale: 3, target: 100, containerConcurrency: 5 },
    });
    const unbounded = defineFunction({
      name: 'unbounded',
      description: '',
      reconciles: Widget,
      rbac: [],
      reconcile,
      scaling: { minScale: 0, maxScale: 0, target: 100, containerConcurrency: 0 },
    });
    const objects = planeObjects([soft, hard, unbounded]);
    assert.equal((await routeOf(objects, 'soft'))?.maxInFlight, 400);
    assert.equal((await routeOf(objects, 'hard'))?.maxInFlight, 15);
    assert.equal((await routeOf(objects, 'unbounded'))?.maxInFlight, undefined, "unbounded scale: the broker's default");
  });

  it("are exactly the generated Knative objects (no identities, no CRDs), with the plane's delivery and replace", async () => {
    const fn = defineFunction({
      name: 'widgets',
      description: '',
      reconciles: Widget,
      rbac: [],
      reconcile,
      owns: [{ kind: Pod, ownerNameLabel: 'widget' }],
    });
    const objects = planeObjects([fn], { delivery: { retry: 2, backoffDelay: 'PT0.05S' }, replace: { widgets: 'http://elsewhere/' } });
    assert.deepEqual(
      objects.map((o) => `${o.kind} ${o.metadata.name}`),
      [
        'Broker operator-functions',
        'Service opfn-dead-letters',
        'Service widgets',
        'Trigger widgets',
        'PingSource widgets-resync',
        'ApiServerSource widgets-objects',
        'ApiServerSource widgets-related',
      ],
    );
    const generated = functionObjects(fn, {
      ...DEFAULT_OPTIONS,
      replace: { widgets: 'http://elsewhere/' },
      delivery: { retry: 2, backoffPolicy: 'exponential', backoffDelay: 'PT0.05S' },
    });
    for (const object of objects.filter((o) => o.metadata.name?.startsWith('widgets')))
      assert.deepEqual(
        object,
        generated.find((g) => g.kind === object.kind && g.metadata.name === object.metadata.name),
      );
    const route = await routeOf(objects, 'widgets');
    assert.equal(route?.subscriber, 'http://elsewhere/');
    assert.deepEqual(route?.delivery, { timeout: 'PT300S', retry: 2, backoffPolicy: 'exponential', backoffDelay: 'PT0.05S' });
  });

  it('resyncIntervalMs replaces the PingSource schedule, 0 drops the PingSource', () => {
    const fn = defineFunction({ name: 'widgets', description: '', reconciles: Widget, rbac: [], reconcile });
    const ping = (objects: KubeObject[]) =>
      objects.find((o) => o.kind === 'PingSource') as (KubeObject & { spec: { schedule: string } }) | undefined;
    assert.equal(ping(planeObjects([fn]))?.spec.schedule, fn.resyncSchedule);
    assert.equal(ping(planeObjects([fn], { resyncIntervalMs: 1500 }))?.spec.schedule, '@every 1500ms');
    assert.equal(ping(planeObjects([fn], { resyncIntervalMs: 0 })), undefined);
  });
});

describe('EventPlane.start', () => {
  it('stops what it had started when a part fails to start: no listener or instance outlives the failed start', async () => {
    const widgets = defineFunction({
      name: 'widgets',
      description: '',
      reconciles: Widget,
      rbac: [],
      reconcile,
      scaling: { minScale: 1, maxScale: 1, target: 10, containerConcurrency: 0 },
    });
    const stateDir = tempDir('opfn-plane-start-');
    // min-scale 1, and the instance exits at once: the activator's start fails after the broker and activator listen.
    const plane = new EventPlane({
      functions: [widgets],
      kube: unreachableKube(),
      kubeconfigPath: undefined,
      log: quietLog,
      stateDir,
      command: () => ({ command: process.execPath, args: ['-e', 'process.exit(3)'] }),
    });
    await assert.rejects(plane.start(), /failed to start/);
    const activatorUrl = plane.activator.urlFor('widgets');
    await assert.rejects(fetch(activatorUrl, { method: 'POST' }), /fetch failed/, 'the activator no longer listens');
    assert.equal(plane.activator.instances('widgets'), 0);
  });
});
