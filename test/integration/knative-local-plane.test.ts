// The local plane runs the generated Knative objects: they are applied to a real API server
// (with Knative 1.23's own CRDs, as `opfn dev` does on its own control plane), and the EventPlane runs
// them (`knativeObjects`): the controllers of eventing/knative/ turn them into the broker's routes
// and local sources (each source authenticated as its own generated ServiceAccount; the function
// process runs as its own) and report readiness as Knative does. A Trigger's subscriber is
// patched to a second implementation while the plane runs: the next event reaches it; patched
// back, the function gets them again. A Service's scaling edited with kubectl is applied to the
// running function by the activator. ApiServerSources report the namespaces they watch
// (`status.namespaces`), and one with a label namespaceSelector follows namespaces as they are
// labelled.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { serviceAccountClients } from '../../bin/dev.ts';
import {
  ApiServerSource,
  applyGeneratedObjects,
  KnativeService,
  PingSource,
  PLANE_CRD_NAMES,
  STAND_IN_LABEL,
  Trigger,
} from '../../eventing/knative/index.ts';
import { DEFAULT_OPTIONS, serviceAccountName } from '../../eventing/manifests/index.ts';
import { EventPlane } from '../../eventing/plane.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind } from '../../functions/immortal-container/desired.ts';
import { ConfigMap, Namespace, Pod, type KubeObject, type ResourceKind, KubeClient } from '../../functions/runtime/index.ts';
import { eventually, quietLog, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { createObjects } from '../support/rbac.ts';

const NS = DEFAULT_OPTIONS.namespace;
const say = (line: string) => console.log(`# ${line}`);
let cluster: TestCluster;
let plane: EventPlane;
let functionUrl: string;
let other: { server: Server; url: string; events: { name: string; type: string }[] };
const stateDir = mkdtempSync(join(tmpdir(), 'opfn-knative-'));

const conditionOf = async (kind: ResourceKind, name: string, type = 'Ready') => {
  const object = await cluster.kube.get<
    KubeObject & { status?: { conditions?: { type: string; status: string; reason?: string; message?: string }[] } }
  >(kind, { namespace: NS, name });
  return { object, condition: object?.status?.conditions?.find((c) => c.type === type) };
};
const readyReason = async (kind: ResourceKind, name: string) => {
  const { condition } = await conditionOf(kind, name);
  return condition ? `${condition.status} ${condition.reason}` : 'none';
};

const createImmortal = (name: string) =>
  cluster.kube.create<KubeObject>(ImmortalContainerKind, {
    apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
    kind: 'ImmortalContainer',
    metadata: { name, namespace: 'default' },
    spec: { image: 'nginx:1.27' },
  });

before(async () => {
  cluster = await startTestCluster();
  // Resync hourly: an object that existed before the start must reach the function by its add event.
  const { objects, crdsInstalled } = await applyGeneratedObjects(cluster.kube, [immortalContainer], {}, 3_600_000);
  await createImmortal('existed-before-start');
  // Its status says all was done (as the plane left it), but its pod was deleted while no plane ran.
  const settled = await createImmortal('settled-without-pod');
  await cluster.kube.replace(
    ImmortalContainerKind,
    {
      ...settled,
      status: {
        currentPod: 'settled-without-pod-immortalpod',
        startTimes: 1,
        observedGeneration: settled.metadata.generation,
        conditions: [
          {
            type: 'Ready',
            status: 'False',
            reason: 'PodPending',
            message: 'pod settled-without-pod-immortalpod is Pending',
            lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
          },
        ],
      },
    },
    'status',
  );
  assert.equal(crdsInstalled, PLANE_CRD_NAMES.length, "Knative's CRDs of the five kinds the plane runs");
  say(`${crdsInstalled} Knative CRDs installed; ${objects.length} generated objects applied`);
  const events: { name: string; type: string }[] = [];
  const server = createServer((req, res) => {
    req.resume().on('end', () => {
      events.push({ name: String(req.headers['ce-name'] ?? ''), type: String(req.headers['ce-type'] ?? '') });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  other = { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, events };
  plane = new EventPlane({
    functions: [immortalContainer],
    kube: cluster.kube,
    // The function process runs as its generated ServiceAccount, with exactly its generated role.
    kubeconfigPath: await cluster.cp.serviceAccountKubeconfig(NS, serviceAccountName(immortalContainer)),
    log: quietLog,
    stateDir,
    idleTimeoutMs: 60_000,
    env: { LOG_LEVEL: 'warn' },
    knativeObjects: { clientFor: serviceAccountClients(cluster.cp) },
  });
  await plane.start();
  functionUrl = plane.activator.urlFor(immortalContainer.name);
});

after(async () => {
  await plane?.stop({ drainTimeoutMs: 1000 });
  other?.server.close();
  await cluster?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

const podExists = async (name: string) => Boolean(await cluster.kube.get(Pod, { namespace: 'default', name: `${name}-immortalpod` }));
const patchSubscriber = (subscriber: unknown) =>
  cluster.kube.mergePatch(
    Trigger,
    { namespace: NS, name: immortalContainer.name },
    { spec: { subscriber: { ref: null, uri: null, ...(subscriber as object) } } },
  );

describe('the generated objects run on the local plane', () => {
  test('every object reports Ready as Knative does', async () => {
    const expected: [ResourceKind, string, string][] = [
      [KnativeService, immortalContainer.name, 'True Ready'],
      [KnativeService, 'opfn-dead-letters', 'True DeadLetterFile'],
      [Trigger, immortalContainer.name, 'True Ready'],
      [PingSource, `${immortalContainer.name}-resync`, 'True Ready'],
      [ApiServerSource, `${immortalContainer.name}-objects`, 'True Ready'],
      [ApiServerSource, `${immortalContainer.name}-related`, 'True Ready'],
    ];
    for (const [kind, name, want] of expected) {
      await eventually(
        async () => (await readyReason(kind, name)) === want,
        20_000,
        `${kind.kind} ${name} ${want}`,
        async () => readyReason(kind, name),
      );
      say(`${kind.kind.padEnd(15)} ${name.padEnd(28)} Ready=${want}`);
    }
    const trigger = (await conditionOf(Trigger, immortalContainer.name)).object as KubeObject & { status: { subscriberUri: string } };
    assert.equal(trigger.status.subscriberUri, functionUrl);
  });

  test("the CRDs are Knative's own, and the generated objects are stored whole (namespaceSelector, filters, delivery timeout)", async () => {
    for (const name of PLANE_CRD_NAMES) {
      const crd = await cluster.cp.request('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`);
      assert.equal(crd.status, 200, name);
      assert.equal(crd.body.metadata.labels?.[STAND_IN_LABEL], undefined, `${name} is not a stand-in`);
      assert.equal(
        crd.body.metadata.labels?.['app.kubernetes.io/name'],
        name.includes('serving') ? 'knative-serving' : 'knative-eventing',
        name,
      );
    }
    const source = (await cluster.kube.get<KubeObject>(ApiServerSource, { namespace: NS, name: `${immortalContainer.name}-related` }))!;
    assert.deepEqual((source.spec as { namespaceSelector?: object }).namespaceSelector, {});
    const trigger = (await cluster.kube.get<KubeObject>(Trigger, { namespace: NS, name: immortalContainer.name }))!;
    const spec = trigger.spec as { filters: object[]; delivery: { timeout: string } };
    assert.deepEqual(spec.filters[0], { exact: { opfnfunction: immortalContainer.name } });
    assert.equal(spec.delivery.timeout, 'PT300S');
  });

  test('a generated source (namespaceSelector {}) reports every namespace it watches in status.namespaces, a namespace created later too', async () => {
    const watched = async () =>
      (
        (await cluster.kube.get<KubeObject>(ApiServerSource, { namespace: NS, name: `${immortalContainer.name}-related` }))?.status as
          { namespaces?: string[] } | undefined
      )?.namespaces;
    const all = async () => (await cluster.kube.list(Namespace)).items.map((item) => item.metadata.name!).sort();
    await eventually(
      async () => JSON.stringify(await watched()) === JSON.stringify(await all()),
      20_000,
      'status.namespaces = every namespace',
      async () => JSON.stringify(await watched()),
    );
    await cluster.kube.create(Namespace, { metadata: { name: 'created-later' } });
    await eventually(
      async () => (await watched())?.includes('created-later'),
      20_000,
      'the new namespace in status.namespaces',
      async () => JSON.stringify(await watched()),
    );
    say(`ApiServerSource ${immortalContainer.name}-related status.namespaces: ${(await watched())!.join(', ')}`);
  });

  test('an ImmortalContainer that existed before the plane started reaches the function at start, not at the next resync', async () => {
    // The Knative objects are listed side by side; applied as listed, the ApiServerSource sent the
    // add events of existing objects before its Trigger existed, and the broker dropped them.
    await eventually(() => podExists('existed-before-start'), 20_000, 'pod of existed-before-start');
    say('ImmortalContainer existed-before-start, created before the plane started → pod created at start');
  });

  test('a settled ImmortalContainer whose pod went while no plane ran is repaired by the resync at start, not at the next scheduled one', async () => {
    // Its add event is skipped (its status says all is done); the plane resyncs each function that has objects once at start.
    await eventually(() => podExists('settled-without-pod'), 20_000, 'pod of settled-without-pod');
    // The status is written just after the pod is created: read it once that reconcile is done.
    const startTimes = async () =>
      (
        await cluster.kube.get<KubeObject & { status?: { startTimes?: number } }>(ImmortalContainerKind, {
          namespace: 'default',
          name: 'settled-without-pod',
        })
      )?.status?.startTimes;
    await eventually(async () => (await startTimes()) !== 1, 10_000, 'the status write after the new pod');
    assert.equal(await startTimes(), 2);
    say('ImmortalContainer settled-without-pod, its pod deleted while no plane ran → pod recreated at start, startTimes 2');
  });

  test('an ImmortalContainer created now reaches the function through source, broker and Trigger', async () => {
    await createImmortal('before-swap');
    await eventually(() => podExists('before-swap'), 20_000, 'pod of before-swap');
    say('kubectl apply ImmortalContainer before-swap → pod before-swap-immortalpod created by the function');
  });

  test("kubectl patch of the Trigger's subscriber: the next events reach the second implementation; patched back, the function again", async () => {
    await patchSubscriber({ uri: other.url });
    await eventually(
      async () =>
        ((await conditionOf(Trigger, immortalContainer.name)).object?.status as { subscriberUri?: string })?.subscriberUri === other.url,
      20_000,
      'Trigger subscriberUri = the second implementation',
    );
    say(
      `kubectl patch trigger ${immortalContainer.name} --type merge -p '{"spec":{"subscriber":{"uri":"${other.url}"}}}' → status.subscriberUri ${other.url}`,
    );
    await createImmortal('during-swap');
    await eventually(
      async () => other.events.find((e) => e.name === 'during-swap'),
      20_000,
      'the second implementation received during-swap',
    );
    say(
      `kubectl apply ImmortalContainer during-swap → the second implementation received ${other.events
        .filter((e) => e.name === 'during-swap')
        .map((e) => e.type)
        .join(', ')}`,
    );
    assert.equal(await podExists('during-swap'), false, 'the function did not get it');

    const received = other.events.length;
    await patchSubscriber({ ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: immortalContainer.name } });
    await eventually(
      async () =>
        ((await conditionOf(Trigger, immortalContainer.name)).object?.status as { subscriberUri?: string })?.subscriberUri === functionUrl,
      20_000,
      'Trigger subscriberUri = the function again',
    );
    say(
      `kubectl patch trigger ${immortalContainer.name} back to ref Service ${immortalContainer.name} → status.subscriberUri ${functionUrl}`,
    );
    await createImmortal('after-swap');
    await eventually(() => podExists('after-swap'), 20_000, 'pod of after-swap');
    say('kubectl apply ImmortalContainer after-swap → pod after-swap-immortalpod created by the function');
    assert.ok(!other.events.slice(received).some((e) => e.name === 'after-swap'), 'the second implementation got nothing of after-swap');
  });

  test("kubectl patch of the Service's scaling, containerConcurrency and timeoutSeconds: the activator runs with them at once, Ready; an unusable one is refused with the reason", async () => {
    const name = immortalContainer.name;
    const patchService = (annotations: Record<string, string>, spec: Record<string, unknown> = {}) =>
      cluster.kube.mergePatch(KnativeService, { namespace: NS, name }, { spec: { template: { metadata: { annotations }, spec } } });
    const before = plane.activator.configurationOf(name);
    assert.deepEqual(before.scaling, immortalContainer.scaling, "started with the generated Service's scaling (the declaration's)");

    await patchService(
      { 'autoscaling.knative.dev/min-scale': '1', 'autoscaling.knative.dev/max-scale': '2' },
      { containerConcurrency: 7, timeoutSeconds: 45 },
    );
    await eventually(async () => plane.activator.configurationOf(name).scaling.minScale === 1, 20_000, 'the activator runs min-scale 1');
    assert.deepEqual(plane.activator.configurationOf(name), {
      scaling: { ...immortalContainer.scaling, minScale: 1, maxScale: 2, containerConcurrency: 7 },
      timeoutSeconds: 45,
      deliveryBudgetSeconds: 30,
    });
    await eventually(async () => plane.activator.instances(name) >= 1, 20_000, 'min-scale 1 starts an instance without any event');
    await eventually(
      async () => (await readyReason(KnativeService, name)) === 'True Ready',
      20_000,
      'the Service is Ready',
      () => readyReason(KnativeService, name),
    );
    say(
      `kubectl patch ksvc ${name} --type merge -p '{"spec":{"template":{"metadata":{"annotations":{"autoscaling.knative.dev/min-scale":"1","autoscaling.knative.dev/max-scale":"2"}},"spec":{"containerConcurrency":7,"timeoutSeconds":45}}}}' → activator ${JSON.stringify(plane.activator.configurationOf(name))}, ${plane.activator.instances(name)} instance(s), Ready=True`,
    );
    // The Trigger's deliveries follow the new capacity (containerConcurrency × max-scale).
    await createImmortal('after-scaling-edit');
    await eventually(() => podExists('after-scaling-edit'), 20_000, 'pod of after-scaling-edit');

    const configured = plane.activator.configurationOf(name);
    await patchService({ 'autoscaling.knative.dev/min-scale': '3' });
    await eventually(
      async () => (await readyReason(KnativeService, name)) === 'False InvalidScaling',
      20_000,
      'Ready False InvalidScaling',
      () => readyReason(KnativeService, name),
    );
    const { condition } = await conditionOf(KnativeService, name);
    say(`kubectl patch ksvc ${name} … min-scale "3" (above max-scale 2) → Ready=False InvalidScaling: ${condition?.message}`);
    assert.deepEqual(plane.activator.configurationOf(name), configured, 'the refused configuration was not applied');

    // An autoscaling annotation the plane does not implement is refused by name, not ignored.
    await patchService({ 'autoscaling.knative.dev/min-scale': '1', 'autoscaling.knative.dev/initial-scale': '2' });
    await eventually(
      async () => (await readyReason(KnativeService, name)) === 'False UnsupportedAnnotation',
      20_000,
      'Ready False UnsupportedAnnotation',
      () => readyReason(KnativeService, name),
    );
    say(
      `kubectl patch ksvc ${name} … initial-scale "2" → Ready=False UnsupportedAnnotation: ${(await conditionOf(KnativeService, name)).condition?.message}`,
    );
    assert.deepEqual(plane.activator.configurationOf(name), configured, 'nor applied');
    await cluster.kube.mergePatch(
      KnativeService,
      { namespace: NS, name },
      { spec: { template: { metadata: { annotations: { 'autoscaling.knative.dev/initial-scale': null } } } } },
    );

    const instances = plane.activator.instances(name);
    const started = plane.activator.stats()[name].started;
    await patchService(
      { 'autoscaling.knative.dev/min-scale': '0', 'autoscaling.knative.dev/max-scale': String(immortalContainer.scaling.maxScale) },
      { containerConcurrency: immortalContainer.scaling.containerConcurrency, timeoutSeconds: 300 },
    );
    // Ready was already True after the initial-scale removal: wait for the status of this very edit.
    await eventually(
      async () => {
        const { object, condition } = await conditionOf(KnativeService, name);
        const observed = (object?.status as { observedGeneration?: number } | undefined)?.observedGeneration;
        return observed === object?.metadata.generation && condition?.status === 'True';
      },
      20_000,
      'Ready again, for the last edit',
    );
    assert.deepEqual(plane.activator.configurationOf(name), before, 'back to the generated scaling');
    assert.equal(plane.activator.instances(name), instances, 'the running instance is not stopped by the edit (it goes when idle)');
    assert.equal(plane.activator.stats()[name].started, started, 'and none was restarted for it');
    say(`kubectl patch ksvc ${name} back to the generated scaling → Ready=True; ${instances} instance(s) kept running until idle`);
  });

  test('a Trigger naming a Service that does not exist is not Ready, with the reason', async () => {
    await patchSubscriber({ ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: 'no-such-service' } });
    await eventually(
      async () => (await readyReason(Trigger, immortalContainer.name)) === 'False ServiceNotFound',
      20_000,
      'Ready False ServiceNotFound',
      () => readyReason(Trigger, immortalContainer.name),
    );
    const { condition } = await conditionOf(Trigger, immortalContainer.name, 'SubscriberResolved');
    assert.match(condition?.message ?? '', /no-such-service does not exist/);
    assert.equal(
      ((await conditionOf(Trigger, immortalContainer.name)).object?.status as { subscriberUri?: string }).subscriberUri,
      undefined,
      'no subscriberUri while unresolved',
    );
    await patchSubscriber({ ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: immortalContainer.name } });
    await eventually(async () => (await readyReason(Trigger, immortalContainer.name)) === 'True Ready', 20_000, 'Ready again');
  });

  test('a PingSource and a Trigger created with kubectl: pings arrive on schedule; deleted, they stop', async () => {
    const broker = { ref: { apiVersion: 'eventing.knative.dev/v1', kind: 'Broker', name: DEFAULT_OPTIONS.brokerName } };
    await cluster.kube.create(Trigger, {
      apiVersion: 'eventing.knative.dev/v1',
      kind: 'Trigger',
      metadata: { name: 'pinged', namespace: NS },
      spec: { broker: DEFAULT_OPTIONS.brokerName, filter: { attributes: { opfnfunction: 'pinged' } }, subscriber: { uri: other.url } },
    });
    await cluster.kube.create(PingSource, {
      apiVersion: 'sources.knative.dev/v1',
      kind: 'PingSource',
      metadata: { name: 'fast-ping', namespace: NS },
      spec: {
        schedule: '@every 1s',
        contentType: 'application/json',
        data: '{}',
        ceOverrides: { extensions: { opfnfunction: 'pinged' } },
        sink: broker,
      },
    });
    const pings = () => other.events.filter((e) => e.type === 'dev.knative.sources.ping').length;
    await eventually(async () => pings() >= 2, 20_000, 'two pings at the other implementation');
    say(`PingSource fast-ping (@every 1s) + Trigger pinged created: ${pings()} pings received`);
    await cluster.kube.delete(PingSource, { namespace: NS, name: 'fast-ping' });
    await sleep(1500);
    const after = pings();
    await sleep(2500);
    assert.equal(pings(), after, 'no ping after the PingSource was deleted');
    await cluster.kube.delete(Trigger, { namespace: NS, name: 'pinged' });
  });

  test('idle, the plane writes nothing: a status written once is not written again when its watch event comes back', async () => {
    const writes = async () => {
      const answer = await cluster.cp.request('GET', '/metrics');
      // Every write of a Knative object's status, by the API server's own count.
      return String(answer.body)
        .split('\n')
        .filter(
          (line) =>
            line.startsWith('apiserver_request_total{') &&
            /verb="(PATCH|PUT)"/.test(line) &&
            /subresource="status"/.test(line) &&
            /group="(eventing|sources|serving)\.knative\.dev"/.test(line),
        )
        .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
    };
    await sleep(1000);
    const before = await writes();
    await sleep(3000);
    assert.equal(await writes(), before, 'no status writes while nothing changes');
  });

  test('an ApiServerSource whose ServiceAccount may not list its kind is not Ready: InsufficientPermissions', async () => {
    await cluster.kube.create(ApiServerSource, {
      apiVersion: 'sources.knative.dev/v1',
      kind: 'ApiServerSource',
      metadata: { name: 'secrets-without-rights', namespace: NS },
      spec: {
        mode: 'Reference',
        resources: [{ apiVersion: 'v1', kind: 'Secret' }],
        serviceAccountName: `opfn-${immortalContainer.name}-objects-source`,
        sink: { ref: { apiVersion: 'eventing.knative.dev/v1', kind: 'Broker', name: DEFAULT_OPTIONS.brokerName } },
      },
    });
    await eventually(
      async () => (await readyReason(ApiServerSource, 'secrets-without-rights')) === 'False InsufficientPermissions',
      30_000,
      'Ready False InsufficientPermissions',
      () => readyReason(ApiServerSource, 'secrets-without-rights'),
    );
    say(`ApiServerSource secrets-without-rights (as opfn-${immortalContainer.name}-objects-source) Ready=False InsufficientPermissions`);
  });

  test("an ApiServerSource without namespaceSelector, its ServiceAccount bound in its namespace only: Ready, and it sends that namespace's changes; a bad ceOverrides edit is refused and later edits still apply", async () => {
    const name = 'configmaps-here';
    const broker = { ref: { apiVersion: 'eventing.knative.dev/v1', kind: 'Broker', name: DEFAULT_OPTIONS.brokerName } };
    // Rights in its own namespace only: Knative's adapter lists and watches there, never cluster-wide.
    await createObjects(cluster.cp, [
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name, namespace: NS } },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'Role',
        metadata: { name, namespace: NS },
        rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list', 'watch'] }],
      },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: { name, namespace: NS },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
        subjects: [{ kind: 'ServiceAccount', name, namespace: NS }],
      },
    ]);
    await cluster.kube.create(Trigger, {
      apiVersion: 'eventing.knative.dev/v1',
      kind: 'Trigger',
      metadata: { name, namespace: NS },
      spec: { broker: DEFAULT_OPTIONS.brokerName, filter: { attributes: { opfnfunction: name } }, subscriber: { uri: other.url } },
    });
    const source = {
      apiVersion: 'sources.knative.dev/v1',
      kind: 'ApiServerSource',
      metadata: { name, namespace: NS },
      spec: {
        mode: 'Resource',
        resources: [{ apiVersion: 'v1', kind: 'ConfigMap' }],
        serviceAccountName: name,
        ceOverrides: { extensions: { opfnfunction: name } },
        sink: broker,
      },
    };
    await cluster.kube.create(ApiServerSource, source);
    try {
      await eventually(
        async () => (await readyReason(ApiServerSource, name)) === 'True Ready',
        30_000,
        'Ready True',
        () => readyReason(ApiServerSource, name),
      );
      await cluster.kube.create(ConfigMap, { metadata: { name: 'elsewhere-cm', namespace: 'default' } });
      await cluster.kube.create(ConfigMap, { metadata: { name: 'here-cm', namespace: NS } });
      await eventually(async () => other.events.some((e) => e.name === 'here-cm'), 20_000, 'the add of here-cm');
      assert.ok(!other.events.some((e) => e.name === 'elsewhere-cm'), 'nothing from another namespace');
      say(`ApiServerSource ${name} (no namespaceSelector, a Role in ${NS} only) Ready; here-cm's add delivered, elsewhere-cm's not`);

      // An extension name Knative's webhook refuses: reported on the object, not sent (the broker would refuse every event).
      await cluster.kube.mergePatch(
        ApiServerSource,
        { namespace: NS, name },
        { spec: { ceOverrides: { extensions: { opfnfunction: null, 'Opfn-Function': name } } } },
      );
      await eventually(
        async () => (await readyReason(ApiServerSource, name)) === 'False InvalidCEOverrides',
        20_000,
        'Ready False InvalidCEOverrides',
        () => readyReason(ApiServerSource, name),
      );
      await cluster.kube.mergePatch(
        ApiServerSource,
        { namespace: NS, name },
        { spec: { ceOverrides: { extensions: { 'Opfn-Function': null, opfnfunction: name } } } },
      );
      await eventually(
        async () => (await readyReason(ApiServerSource, name)) === 'True Ready',
        20_000,
        'Ready True again after the fix',
        () => readyReason(ApiServerSource, name),
      );
      say(`kubectl patch apiserversource ${name} with extension "Opfn-Function" → Ready=False InvalidCEOverrides; patched back → Ready`);
      assert.deepEqual(
        ((await cluster.kube.get<KubeObject>(ApiServerSource, { namespace: NS, name }))?.status as { namespaces?: string[] }).namespaces,
        [NS],
        'status.namespaces: its own',
      );
    } finally {
      await cluster.kube.delete(ApiServerSource, { namespace: NS, name });
      await cluster.kube.delete(Trigger, { namespace: NS, name });
    }
  });

  test('an ApiServerSource with a label namespaceSelector sends the changes of the namespaces it selects, one labelled later too, and lists them in status.namespaces', async () => {
    const name = 'team-configmaps';
    const broker = { ref: { apiVersion: 'eventing.knative.dev/v1', kind: 'Broker', name: DEFAULT_OPTIONS.brokerName } };
    for (const [namespace, labels] of [
      ['team-x', { team: 'x' }],
      ['team-y', {}],
    ] as const)
      await cluster.kube.create(Namespace, { metadata: { name: namespace, labels } });
    await cluster.kube.create(Trigger, {
      apiVersion: 'eventing.knative.dev/v1',
      kind: 'Trigger',
      metadata: { name, namespace: NS },
      spec: {
        broker: DEFAULT_OPTIONS.brokerName,
        filters: [{ exact: { opfnfunction: name } }, { prefix: { type: 'dev.knative.apiserver.resource.' } }],
        subscriber: { uri: other.url },
      },
    });
    // Without serviceAccountName: the adapter's "default" account, given read on ConfigMaps everywhere.
    await createObjects(cluster.cp, [
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRole',
        metadata: { name },
        rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list', 'watch'] }],
      },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
        subjects: [{ kind: 'ServiceAccount', name: 'default', namespace: NS }],
      },
    ]);
    await cluster.kube.create(ApiServerSource, {
      apiVersion: 'sources.knative.dev/v1',
      kind: 'ApiServerSource',
      metadata: { name, namespace: NS },
      spec: {
        mode: 'Resource',
        resources: [{ apiVersion: 'v1', kind: 'ConfigMap' }],
        namespaceSelector: { matchLabels: { team: 'x' } },
        serviceAccountName: 'default',
        ceOverrides: { extensions: { opfnfunction: name } },
        sink: broker,
      },
    });
    const watched = async () =>
      ((await cluster.kube.get<KubeObject>(ApiServerSource, { namespace: NS, name }))?.status as { namespaces?: string[] } | undefined)
        ?.namespaces;
    try {
      await eventually(
        async () => (await readyReason(ApiServerSource, name)) === 'True Ready',
        30_000,
        'Ready True',
        () => readyReason(ApiServerSource, name),
      );
      assert.deepEqual(await watched(), ['team-x']);
      await cluster.kube.create(ConfigMap, { metadata: { name: 'x-cm', namespace: 'team-x' } });
      await cluster.kube.create(ConfigMap, { metadata: { name: 'y-cm-before', namespace: 'team-y' } });
      await eventually(async () => other.events.some((e) => e.name === 'x-cm'), 20_000, 'the add of x-cm');
      assert.ok(!other.events.some((e) => e.name === 'y-cm-before'), 'nothing from an unselected namespace');

      await cluster.kube.mergePatch(Namespace, { namespace: '', name: 'team-y' }, { metadata: { labels: { team: 'x' } } });
      await eventually(
        async () => JSON.stringify(await watched()) === '["team-x","team-y"]',
        20_000,
        'team-y selected once labelled',
        async () => JSON.stringify(await watched()),
      );
      await cluster.kube.create(ConfigMap, { metadata: { name: 'y-cm-after', namespace: 'team-y' } });
      await eventually(async () => other.events.some((e) => e.name === 'y-cm-after'), 20_000, 'the add of y-cm-after');
      say(
        `ApiServerSource ${name} (namespaceSelector team=x): x-cm sent, y-cm-before not; team-y labelled → status.namespaces ${(await watched())!.join(', ')}, y-cm-after sent`,
      );
    } finally {
      await cluster.kube.delete(ApiServerSource, { namespace: NS, name });
      await cluster.kube.delete(Trigger, { namespace: NS, name });
    }
  });

  test("kubectl delete of the function's Service: its instances stop and its address answers 404, its Trigger is not Ready; created again, it runs again", async () => {
    const key = { namespace: NS, name: immortalContainer.name };
    const service = (await cluster.kube.get<KubeObject>(KnativeService, key))!;
    await fetch(functionUrl, { method: 'POST' }); // wakes an instance (the empty request itself is refused)
    await eventually(async () => plane.activator.instances(immortalContainer.name) > 0, 20_000, 'an instance running');
    await cluster.kube.delete(KnativeService, key);
    await eventually(async () => plane.activator.instances(immortalContainer.name) === 0, 30_000, 'no instance left');
    assert.equal((await fetch(functionUrl, { method: 'POST' })).status, 404);
    await eventually(
      async () => (await readyReason(Trigger, immortalContainer.name)).startsWith('False'),
      20_000,
      'Trigger not Ready',
      () => readyReason(Trigger, immortalContainer.name),
    );
    say(
      `kubectl delete ksvc ${immortalContainer.name} → 0 instances, its address answers 404, Trigger ${await readyReason(Trigger, immortalContainer.name)}`,
    );

    await cluster.kube.create(KnativeService, {
      apiVersion: service.apiVersion,
      kind: service.kind,
      metadata: { name: service.metadata.name, namespace: NS, labels: service.metadata.labels },
      spec: service.spec,
    });
    await eventually(
      async () => (await readyReason(Trigger, immortalContainer.name)) === 'True Ready',
      30_000,
      'Trigger Ready again',
      () => readyReason(Trigger, immortalContainer.name),
    );
    await createImmortal('after-service-back');
    await eventually(() => podExists('after-service-back'), 30_000, 'pod of after-service-back');
    say('kubectl apply the Service again → Trigger Ready; ImmortalContainer after-service-back → its pod created by the function');
  });
});

describe('opfn dev against a configured cluster', () => {
  test('runs the generated objects in memory: only the identities are installed there, nothing Knative; the function gets its events', async () => {
    const { runDev } = await import('../../bin/dev.ts');
    // A cluster of its own, without Knative: only the plane in memory can make its function act.
    const configured = await startTestCluster();
    const knativeCrds = async () =>
      (await configured.kube.request<{ items: KubeObject[] }>('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions')).items
        .map((crd) => crd.metadata.name!)
        .filter((name) => name.endsWith('knative.dev'));
    const lines: string[] = [];
    const devState = mkdtempSync(join(tmpdir(), 'opfn-dev-'));
    const previous = process.env.KUBECONFIG;
    process.env.KUBECONFIG = configured.cp.kubeconfigPath;
    let running: Awaited<ReturnType<typeof runDev>> | undefined;
    try {
      running = await runDev({
        only: [immortalContainer.name],
        bundle: false,
        idleSeconds: 30,
        stateDir: devState,
        log: quietLog,
        say: (line) => lines.push(line),
        env: { LOG_LEVEL: 'warn' },
      });
      const said = lines.join('\n');
      assert.match(said, /Using the cluster at /);
      assert.match(
        said,
        /run in memory \(nothing else installed on the cluster\): 1 Broker, 2 Service, 1 Trigger, 1 PingSource, 2 ApiServerSource/,
        said,
      );
      assert.match(said, /ServiceAccounts and roles .* installed in namespace operator-functions: each function runs as its own/);
      assert.deepEqual(running.plane.status?.problems(), [], 'every object in memory is Ready');
      assert.equal(running.plane.status?.ready(`Trigger ${NS}/${immortalContainer.name}`)?.status, 'True');
      await configured.kube.create(ImmortalContainerKind, {
        apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
        kind: 'ImmortalContainer',
        metadata: { name: 'from-configured-dev', namespace: 'default' },
        spec: { image: 'nginx:1.27' },
      });
      await eventually(
        () => configured.kube.get(Pod, { namespace: 'default', name: 'from-configured-dev-immortalpod' }),
        30_000,
        'pod of from-configured-dev',
      );
      await eventually(
        async () => running!.plane.stats().broker[immortalContainer.name].delivered > 0,
        20_000,
        'deliveries counted on the Trigger route named after the function',
        async () => JSON.stringify(running!.plane.stats().broker),
      );
      assert.deepEqual(await knativeCrds(), [], 'no Knative CRD installed on the configured cluster');
      say(`opfn dev against a configured cluster: ${lines.find((line) => line.includes('in memory'))}`);
    } finally {
      await running?.stop();
      if (previous === undefined) delete process.env.KUBECONFIG;
      else process.env.KUBECONFIG = previous;
      rmSync(devState, { recursive: true, force: true });
      await configured.stop();
    }
  });
});

describe('opfn dev on a control plane of its own', () => {
  test("applies the generated objects and runs them; --replace sends a function's events to another implementation, the function never starts", async () => {
    const { runDev } = await import('../../bin/dev.ts');
    const lines: string[] = [];
    const devState = mkdtempSync(join(tmpdir(), 'opfn-dev-'));
    const running = await runDev({
      local: true,
      bundle: false,
      idleSeconds: 30,
      stateDir: devState,
      log: quietLog,
      say: (line) => lines.push(line),
      env: { LOG_LEVEL: 'warn' },
      replace: { [immortalContainer.name]: other.url },
    });
    try {
      assert.ok(
        lines.some((line) => /Knative objects generated by `opfn manifests` applied \(\d+\)/.test(line)),
        lines.join('\n'),
      );
      const kubeconfig = /export KUBECONFIG=(\S+)/.exec(lines.join('\n'))![1];
      const kube = KubeClient.fromFile(kubeconfig);
      const trigger = await eventually(
        async () => {
          const object = await kube.get<KubeObject & { status?: { subscriberUri?: string } }>(Trigger, {
            namespace: NS,
            name: immortalContainer.name,
          });
          return object?.status?.subscriberUri === other.url && object;
        },
        20_000,
        'the generated Trigger, replaced, Ready with the other implementation',
      );
      assert.deepEqual((trigger.spec as { subscriber: unknown }).subscriber, { uri: other.url });
      await kube.create(ImmortalContainerKind, {
        apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
        kind: 'ImmortalContainer',
        metadata: { name: 'to-the-replacement', namespace: 'default' },
        spec: { image: 'nginx:1.27' },
      });
      await eventually(async () => other.events.some((e) => e.name === 'to-the-replacement'), 20_000, 'the replacement received the event');
      assert.equal(running.plane.activator.instances(immortalContainer.name), 0, 'the replaced function was never started');
      say(
        `opfn dev --local --replace ${immortalContainer.name}=${other.url}: the replacement received to-the-replacement; ${immortalContainer.name} has 0 instances`,
      );
    } finally {
      await running.stop();
      rmSync(devState, { recursive: true, force: true });
    }
  });
});
