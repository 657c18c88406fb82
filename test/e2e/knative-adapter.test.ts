// The functions fed by Knative's own ApiServerSource receive adapter (Knative 1.23.0, built from
// knative.dev/eventing v0.50.0) instead of the plane's source: the generated Knative objects are
// applied to the API server, the plane runs the Broker, Triggers and Services but leaves every
// ApiServerSource and PingSource alone (externalSources), and test/support/knative-adapters.ts
// runs one receive adapter process per ApiServerSource object, as Knative's controller runs one
// Deployment per source, each as the source's generated ServiceAccount and sending to the
// Broker's address. The composite function's own ApiServerSources (one pair per
// CompositeController) get their adapters the same way when the function writes them.
//
// Knative's adapter sends nothing for objects that exist when it starts, so everything here is
// created after the adapters watch. No kubelet runs: nothing here needs a pod phase.
//
// First, Knative's PingSource adapter (cmd/mtping) shows the generated resync PingSource at work:
// with the ImmortalContainer source's adapter gone, an object nobody announced is reconciled
// through the ping alone.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { serviceAccountClients } from '../../bin/dev.ts';
import { ApiServerSource, applyGeneratedObjects, applyObjects } from '../../eventing/knative/index.ts';
import { DEFAULT_OPTIONS, serviceAccountName } from '../../eventing/manifests/index.ts';
import { EventPlane } from '../../eventing/plane.ts';
import { sync } from '../../examples/immortal-container-hook/hook.ts';
import { serveHooks, type HookServer } from '../../functions/composite/metacontroller/serve-hook.ts';
import { sourceName } from '../../functions/composite/event-sources.ts';
import composite from '../../functions/composite/index.ts';
import { CompositeControllerKind } from '../../functions/composite/kinds.ts';
import copyrator from '../../functions/copyrator/index.ts';
import { CopyratorRuleKind, DISTRIBUTE_LABEL, RULE_ANNOTATION, type CopyableObject } from '../../functions/copyrator/desired.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind, podNameFor, type ImmortalContainer, type PodObject } from '../../functions/immortal-container/desired.ts';
import { ConfigMap, Namespace, Pod, type KubeObject } from '../../functions/runtime/index.ts';
import { eventually, quietLog, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { MetaImmortalContainer, metacontrollerExample, SEED_HOOK_URL } from '../support/examples.ts';
import {
  installPingAdapterIdentity,
  knativeAdapterBinaries,
  markPingSourcesReady,
  ReceiveAdapters,
  startPingAdapter,
  type AdapterProcess,
} from '../support/knative-adapters.ts';

const NS = DEFAULT_OPTIONS.namespace;
const COUNT = 500;
const COPY_NAMESPACES = 20;
const SEED = 'immortalcontainer-controller';
const CONVERGE_MS = 60_000;
const say = (line: string) => console.log(`# ${line}`);
const functions = [immortalContainer, copyrator, composite];

let cluster: TestCluster;
let plane: EventPlane;
let adapters: ReceiveAdapters;
let hooks: HookServer;
let binDir: string;
let pingAdapter: AdapterProcess | undefined;
let generated: KubeObject[];
const stateDir = mkdtempSync(join(tmpdir(), 'opfn-knative-adapter-'));

/** The adapters' last lines, for a failure message. */
const adapterOutput = async () =>
  [...adapters.adapters()]
    .map(
      ([key, adapter]) =>
        `${key} (pid ${adapter.pid}, ${adapter.running ? 'running' : 'exited'}):\n    ${adapter.output.slice(-5).join('\n    ')}`,
    )
    .join('\n  ');

before(async () => {
  const started = performance.now();
  [cluster, binDir] = await Promise.all([startTestCluster(), knativeAdapterBinaries()]);
  const kube = cluster.kube;
  hooks = await serveHooks({ hooks: { '/sync': sync } });
  // Resyncs every second, for the PingSource test at the end; until then nothing fires them.
  const { objects } = await applyGeneratedObjects(kube, functions, {}, 1000);
  generated = objects;
  plane = new EventPlane({
    functions,
    kube,
    kubeconfigPath: cluster.cp.kubeconfigPath,
    // Each function as its generated ServiceAccount, as on a cluster.
    functionKubeconfigs: Object.fromEntries(
      await Promise.all(
        functions.map(async (fn) => [fn.name, await cluster.cp.serviceAccountKubeconfig(NS, serviceAccountName(fn))] as const),
      ),
    ),
    log: quietLog,
    stateDir,
    idleTimeoutMs: 60_000,
    env: { LOG_LEVEL: 'warn', COMPOSITE_HOOK_URLS: `${SEED_HOOK_URL}=${hooks.url}/` },
    delivery: { retry: 12, backoffPolicy: 'exponential', backoffDelay: 'PT0.2S' },
    knativeObjects: { clientFor: serviceAccountClients(cluster.cp) },
    externalSources: true,
  });
  await plane.start();
  adapters = new ReceiveAdapters({ binDir, kube, cp: cluster.cp });
  await adapters.start();
  const sources = objects.filter((object) => object.kind === 'ApiServerSource').length;
  assert.equal(adapters.adapters().size, sources, 'one receive adapter per generated ApiServerSource');
  say(
    `${objects.length} generated objects applied; ${sources} receive adapters watching after ${Math.round(performance.now() - started)} ms`,
  );
});

after(async () => {
  await pingAdapter?.stop();
  await adapters?.stop();
  await plane?.stop({ drainTimeoutMs: 1000 });
  await hooks?.close();
  await cluster?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

describe("Knative's PingSource adapter (mtping)", () => {
  test('delivers the generated resync ping, which the function accepts: an object no ApiServerSource told about is reconciled', async () => {
    const kube = cluster.kube;
    // Without the ImmortalContainer source's adapter, a new object is told to no one.
    await kube.delete(ApiServerSource, { namespace: NS, name: `${immortalContainer.name}-objects` });
    await eventually(
      async () => !adapters.adapters().has(`${NS}/${immortalContainer.name}-objects`),
      10_000,
      'the adapter of the deleted source stopped',
    );
    await kube.create(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name: 'unannounced', namespace: 'default' },
      spec: { image: 'nginx' },
    });
    await sleep(1500);
    assert.equal(await kube.get(Pod, { namespace: 'default', name: 'unannounced-immortalpod' }), undefined, 'no event, no pod');

    const started = performance.now();
    const pings = await markPingSourcesReady(kube);
    assert.ok(pings.some((ping) => ping.metadata.name === `${immortalContainer.name}-resync`));
    pingAdapter = await startPingAdapter(binDir, await installPingAdapterIdentity(cluster.cp));
    await eventually(
      () => kube.get(Pod, { namespace: 'default', name: 'unannounced-immortalpod' }),
      CONVERGE_MS,
      'the pod, through the ping',
      async () => pingAdapter!.output.slice(-20).join('\n  '),
    );
    const ic = await kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'default', name: 'unannounced' });
    await eventually(
      async () =>
        (await kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'default', name: 'unannounced' }))?.status?.startTimes === 1,
      CONVERGE_MS,
      'startTimes 1',
    );
    assert.ok(ic);
    say(
      `mtping: the resync ping reconciled an unannounced object ${Math.round(performance.now() - started)} ms after the PingSources were Ready`,
    );

    // No more pings (each one is a resync of every object) and the source back, for what follows.
    await pingAdapter.stop();
    await applyObjects(
      kube,
      generated.filter((object) => object.kind === 'ApiServerSource' && object.metadata.name === `${immortalContainer.name}-objects`),
    );
    await adapters.ready(NS, `${immortalContainer.name}-objects`);
  });
});

describe("every event from Knative's ApiServerSource adapter", () => {
  test(`${COUNT} ImmortalContainers: one pod each, startTimes exactly 1`, async () => {
    const kube = cluster.kube;
    const started = performance.now();
    await kube.create(Namespace, { metadata: { name: 'burst' } });
    const names = Array.from({ length: COUNT }, (_, i) => `ic-${String(i).padStart(3, '0')}`);
    for (let i = 0; i < names.length; i += 32) {
      await Promise.all(
        names.slice(i, i + 32).map((name) =>
          kube.create(ImmortalContainerKind, {
            apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
            kind: 'ImmortalContainer',
            metadata: { name, namespace: 'burst' },
            spec: { image: 'nginx' },
          }),
        ),
      );
    }
    let report = '';
    await eventually(
      async () => {
        const ics = (await kube.list<ImmortalContainer>(ImmortalContainerKind, { namespace: 'burst' })).items;
        const pods = new Map((await kube.list<PodObject>(Pod, { namespace: 'burst' })).items.map((pod) => [pod.metadata.name!, pod]));
        const overCounted = ics.filter((ic) => (ic.status?.startTimes ?? 0) > 1);
        assert.equal(
          overCounted.length,
          0,
          `startTimes above 1: ${overCounted
            .slice(0, 5)
            .map((ic) => ic.metadata.name)
            .join(', ')}`,
        );
        const pending = ics.filter((ic) => {
          const pod = pods.get(podNameFor(ic));
          return (
            !pod ||
            pod.metadata.ownerReferences?.find((ref) => ref.controller)?.uid !== ic.metadata.uid ||
            ic.status?.startTimes !== 1 ||
            ic.status.currentPod !== podNameFor(ic)
          );
        });
        report = `${ics.length} objects, ${pods.size} pods, ${pending.length} not converged (${pending
          .slice(0, 5)
          .map((ic) => ic.metadata.name)
          .join(', ')})`;
        return ics.length === COUNT && pods.size === COUNT && pending.length === 0;
      },
      CONVERGE_MS,
      `${COUNT} ImmortalContainers converged`,
      async () => `${report}\n  ${await adapterOutput()}`,
    );
    say(`${COUNT} ImmortalContainers converged in ${Math.round(performance.now() - started)} ms (one pod each, startTimes 1)`);

    // A pod deleted: its delete event (the related source, Resource mode) brings it back, counted once more.
    const key = { namespace: 'burst', name: 'ic-000-immortalpod' };
    const pod = (await kube.get(Pod, key))!;
    await kube.delete(Pod, key);
    await eventually(
      async () => {
        const again = await kube.get(Pod, key);
        const ic = await kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'burst', name: 'ic-000' });
        return again && again.metadata.uid !== pod.metadata.uid && ic?.status?.startTimes === 2;
      },
      CONVERGE_MS,
      'the deleted pod recreated, startTimes 2',
    );
  });

  test(`a CopyratorRule copies into ${COPY_NAMESPACES} namespaces, one created later, and follows an update`, async () => {
    const kube = cluster.kube;
    const started = performance.now();
    const targets = Array.from({ length: COPY_NAMESPACES }, (_, i) => `copy-${String(i).padStart(2, '0')}`);
    // A source namespace other than `default` distributes only when an administrator says so.
    await kube.create(Namespace, { metadata: { name: 'copy-source', labels: { [DISTRIBUTE_LABEL]: 'true' } } });
    for (const name of targets.slice(0, -1)) await kube.create(Namespace, { metadata: { name } });
    await kube.create(ConfigMap, {
      metadata: { name: 'shared', namespace: 'copy-source', labels: { copyrator: 'true' } },
      data: { color: 'blue' },
    });
    await kube.create(CopyratorRuleKind, {
      apiVersion: 'flant.com/v1',
      kind: 'CopyratorRule',
      metadata: { name: 'rule', namespace: 'copy-source' },
      ruleType: 'configmap',
      selector: { copyrator: 'true' },
      namespace: 'copy-source',
    } as KubeObject);
    // The last namespace appears after the rule: only its add event (the related source) can bring the copy.
    await kube.create(Namespace, { metadata: { name: targets.at(-1)! } });
    const copies = async (color: string) => {
      const found = await Promise.all(targets.map((namespace) => kube.get<CopyableObject>(ConfigMap, { namespace, name: 'shared' })));
      lastMissing = targets.filter(
        (_, i) => found[i]?.data?.color !== color || found[i]?.metadata.annotations?.[RULE_ANNOTATION] !== 'copy-source/rule',
      );
      return lastMissing.length === 0;
    };
    let lastMissing: string[] = [];
    const diagnose = async () => `no up-to-date copy in ${lastMissing.join(', ')}\n  ${await adapterOutput()}`;
    await eventually(() => copies('blue'), CONVERGE_MS, `copies in all ${COPY_NAMESPACES} namespaces`, diagnose);
    await kube.mergePatch(ConfigMap, { namespace: 'copy-source', name: 'shared' }, { data: { color: 'green' } });
    await eventually(() => copies('green'), CONVERGE_MS, 'the update in every copy', diagnose);
    say(`CopyratorRule: ${COPY_NAMESPACES} copies made and updated in ${Math.round(performance.now() - started)} ms`);
  });

  test("the seed's Metacontroller ImmortalContainer: its sources get their own adapters, its parents their pods", async () => {
    const kube = cluster.kube;
    const started = performance.now();
    await kube.create(CompositeControllerKind, metacontrollerExample('CompositeController'));
    // The composite function writes the controller's two ApiServerSources; each gets an adapter.
    for (const role of ['parents', 'children'] as const) await adapters.ready(NS, sourceName(SEED, role), CONVERGE_MS);
    const parents = ['seed-a', 'seed-b', 'seed-c'];
    for (const name of parents)
      await kube.create(MetaImmortalContainer, { ...metacontrollerExample('ImmortalContainer'), metadata: { name, namespace: 'default' } });
    for (const name of parents) {
      const pod = await eventually(
        () => kube.get(Pod, { namespace: 'default', name: `${name}-immortalpod` }),
        CONVERGE_MS,
        `the pod of ${name}`,
        adapterOutput,
      );
      const parent = (await kube.get(MetaImmortalContainer, { namespace: 'default', name }))!;
      assert.equal(pod.metadata.ownerReferences?.[0]?.uid, parent.metadata.uid);
      // The pod's add event (the children's adapter) wakes the parent again: the hook then reports it.
      await eventually(
        async () =>
          ((await kube.get(MetaImmortalContainer, { namespace: 'default', name }))?.status as { currentPod?: string } | undefined)
            ?.currentPod === `${name}-immortalpod`,
        CONVERGE_MS,
        `status.currentPod of ${name}`,
      );
    }
    const pods = (await kube.list(Pod, { namespace: 'default' })).items.filter((pod) => pod.metadata.name!.startsWith('seed-'));
    assert.equal(pods.length, parents.length, 'one pod per parent');
    say(
      `CompositeController ${SEED}: 2 more adapters, ${parents.length} parents with their pods in ${Math.round(performance.now() - started)} ms`,
    );
  });

  test("the plane's own sources sent nothing: every ApiServerSource event came from Knative's adapters", () => {
    assert.equal(plane.source.stats().emitted, 0);
    assert.equal(
      adapters.adapters().size,
      generated.filter((object) => object.kind === 'ApiServerSource').length + 2,
      "the generated sources' adapters and the CompositeController's two",
    );
    for (const [key, adapter] of adapters.adapters()) assert.ok(adapter.running, `the adapter of ${key} still runs`);
  });
});
