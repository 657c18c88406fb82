// Reads at the version an event announced (functions/runtime/reconciler.ts getNoOlderThan) against
// a real API server: served from its watch cache when the cache holds that version or a newer
// one, from etcd otherwise, during a burst from the function's own watch (kube/burst-watch.ts),
// and never taken from the event's body.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind, type ImmortalContainer, type PodObject } from '../../functions/immortal-container/desired.ts';
import {
  Pod,
  type KubeObject,
  type ObjectKey,
  type ResourceKind,
  ConnectionReusingKubeConfig,
  KubeClient,
  getNoOlderThan,
} from '../../functions/runtime/index.ts';
import {
  burstWatchReads,
  deliver,
  eventually,
  serveFunction,
  startTestCluster,
  untilWatchCacheHolds,
  type RunningFunction,
  type TestCluster,
} from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

/** A real client that also notes each object read and where it went (watch cache or etcd), and each request its metrics are told of. */
class ReadRecordingKube extends KubeClient {
  readonly reads: string[] = [];
  observed: string[] = [];
  static from(kubeconfigPath: string): ReadRecordingKube {
    const config = new ConnectionReusingKubeConfig();
    config.loadFromFile(kubeconfigPath);
    const observed: string[] = [];
    const kube = new ReadRecordingKube(config, (verb, resource, code) => observed.push(`${verb} ${resource} ${code}`));
    kube.observed = observed;
    return kube;
  }
  override get<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    key: ObjectKey,
    options: { cached?: boolean } = {},
  ): Promise<T | undefined> {
    this.reads.push(`${kind.kind} ${options.cached ? 'cache' : 'etcd'}`);
    return super.get<T>(kind, key, options);
  }
}

let cluster: TestCluster;
let kube: ReadRecordingKube;
let functionKube: ReadRecordingKube;
let fn: RunningFunction;

before(async () => {
  cluster = await startTestCluster();
  kube = ReadRecordingKube.from(cluster.cp.kubeconfigPath);
  const kubeconfig = await kubeconfigWithDeclaredRbac(cluster.cp, immortalContainer);
  functionKube = ReadRecordingKube.from(kubeconfig);
  fn = await serveFunction(immortalContainer, kubeconfig, { kube: functionKube });
});
after(async () => {
  await fn?.close();
  await cluster?.stop();
});

const create = (name: string, image = 'nginx:1.27') =>
  cluster.kube.create<ImmortalContainer>(ImmortalContainerKind, {
    apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
    kind: 'ImmortalContainer',
    metadata: { name, namespace: 'default' },
    spec: { image },
  });
const keyOf = (ic: ImmortalContainer) => ({ namespace: 'default', name: ic.metadata.name! });
const cached = (ic: ImmortalContainer) => untilWatchCacheHolds(cluster.kube, ImmortalContainerKind, ic);

describe('getNoOlderThan', () => {
  test('the announced version held by the watch cache: one read, from the cache', async () => {
    const ic = await create('announced-current');
    await cached(ic);
    kube.reads.length = 0;
    const read = await getNoOlderThan<ImmortalContainer>(kube, ImmortalContainerKind, keyOf(ic), ic.metadata.resourceVersion);
    assert.deepEqual(kube.reads, ['ImmortalContainer cache']);
    assert.equal(read?.metadata.resourceVersion, ic.metadata.resourceVersion);
  });

  test('an older announced version (a redelivered event): the cache holds a newer one, which serves', async () => {
    const ic = await create('announced-older');
    const updated = await cluster.kube.mergePatch<ImmortalContainer>(ImmortalContainerKind, keyOf(ic), { spec: { image: 'nginx:1.28' } });
    await cached(updated);
    kube.reads.length = 0;
    const read = await getNoOlderThan<ImmortalContainer>(kube, ImmortalContainerKind, keyOf(ic), ic.metadata.resourceVersion);
    assert.deepEqual(kube.reads, ['ImmortalContainer cache']);
    assert.equal(read?.spec.image, 'nginx:1.28');
    assert.equal(read?.metadata.resourceVersion, updated.metadata.resourceVersion);
  });

  test('a version newer than the cache holds (it lags, or the version is forged), or none, or one that is no integer: read from etcd', async () => {
    const ic = await create('announced-forged');
    await cached(ic);
    for (const announced of [String(Number(ic.metadata.resourceVersion) + 1_000_000), 'abc']) {
      kube.reads.length = 0;
      const read = await getNoOlderThan<ImmortalContainer>(kube, ImmortalContainerKind, keyOf(ic), announced);
      assert.deepEqual(kube.reads, ['ImmortalContainer cache', 'ImmortalContainer etcd'], `announced ${announced}`);
      assert.equal(read?.metadata.resourceVersion, ic.metadata.resourceVersion);
    }
    kube.reads.length = 0;
    assert.equal(
      (await getNoOlderThan<ImmortalContainer>(kube, ImmortalContainerKind, keyOf(ic), undefined))?.metadata.uid,
      ic.metadata.uid,
    );
    assert.deepEqual(kube.reads, ['ImmortalContainer etcd']);
  });

  test('an object that does not exist: undefined, whatever was announced', async () => {
    kube.reads.length = 0;
    assert.equal(await getNoOlderThan(kube, ImmortalContainerKind, { namespace: 'default', name: 'never-created' }, '1'), undefined);
    assert.deepEqual(kube.reads, ['ImmortalContainer cache', 'ImmortalContainer etcd']);
  });
});

describe('the ImmortalContainer function reads at the announced version', () => {
  const resourceEvent = (object: KubeObject) =>
    apiServerSourceEvent({ server: cluster.cp.server, kind: ImmortalContainerKind, object, action: 'add', mode: 'Resource' });
  /** Delivers a Resource-mode add carrying `body`; asserts the function read the object once, from the cache; gives the image of the pod it made. */
  async function podImageAfterOneCachedRead(body: KubeObject): Promise<string | undefined> {
    functionKube.reads.length = 0;
    assert.equal((await deliver(fn.url, resourceEvent(body))).status, 200);
    assert.deepEqual(
      functionKube.reads.filter((read) => read.startsWith('ImmortalContainer')),
      ['ImmortalContainer cache'],
    );
    const pod = await cluster.kube.get<PodObject>(Pod, { namespace: 'default', name: `${body.metadata.name}-immortalpod` });
    return pod?.spec?.containers?.[0].image;
  }

  test('a Resource-mode add: the object is read once, from the cache, and its pod made from that read', async () => {
    const ic = await create('announced-add');
    await cached(ic);
    assert.equal(await podImageAfterOneCachedRead(ic), 'nginx:1.27');
    assert.equal((await cluster.kube.get<ImmortalContainer>(ImmortalContainerKind, keyOf(ic)))?.status?.startTimes, 1);
  });

  test('a forged body at the current version with another image: the pod gets the image the API server holds', async () => {
    const ic = await create('announced-forged-body', 'nginx:stable');
    await cached(ic);
    assert.equal(await podImageAfterOneCachedRead({ ...ic, spec: { image: 'attacker/miner:latest' } }), 'nginx:stable');
  });

  test('a body older than the object (a redelivery): one read, from the cache, and the pod follows the newest spec', async () => {
    const ic = await create('announced-stale-body', 'nginx:1.27');
    const updated = await cluster.kube.mergePatch<ImmortalContainer>(ImmortalContainerKind, keyOf(ic), { spec: { image: 'nginx:1.28' } });
    await cached(updated);
    assert.equal(await podImageAfterOneCachedRead(ic), 'nginx:1.28');
  });
});

describe('during a burst, reads come from a watch (watchDuringBursts)', () => {
  /** Twenty reads within a second open the watch (BURST_READS); the function's own client, with its generated RBAC. */
  const BURST = 20;
  const read = (ic: ImmortalContainer, version = ic.metadata.resourceVersion) =>
    getNoOlderThan<ImmortalContainer>(functionKube, ImmortalContainerKind, keyOf(ic), version);
  const burstWatch = () => functionKube.burstWatch(ImmortalContainerKind)!;
  const seenByWatch = (ic: ImmortalContainer) =>
    eventually(async () => burstWatch().read(keyOf(ic), ic.metadata.resourceVersion!), 5000, `the watch to see ${ic.metadata.name}`);

  test('a burst opens the watch; what it has seen is read without a request, and it closes when the reads stop', async () => {
    const ics = await Promise.all(Array.from({ length: BURST }, (_, i) => create(`burst-${i}`)));
    await Promise.all(ics.map(cached));
    assert.equal(burstWatch().watching, false);
    for (const ic of ics) assert.equal((await read(ic))?.metadata.uid, ic.metadata.uid);
    assert.equal(burstWatch().watching, true, `${BURST} reads within a second open the watch`);
    // Counted in the function's metrics like every other request, granted by its generated role.
    await eventually(async () => functionKube.observed.includes('watch immortalcontainers 200'), 5000, 'the watch to be counted');

    // Changes after the watch opened: it sees them, and answers for them.
    const changed = await Promise.all(
      ics.map((ic) =>
        cluster.kube.mergePatch<ImmortalContainer>(ImmortalContainerKind, keyOf(ic), { metadata: { labels: { round: '2' } } }),
      ),
    );
    for (const ic of changed) await seenByWatch(ic);
    functionKube.reads.length = 0;
    const before = await burstWatchReads(fn);
    const reads = await Promise.all(changed.map((ic) => read(ic)));
    assert.deepEqual(functionKube.reads, [], 'no GET while the watch has seen each version');
    assert.deepEqual(await burstWatchReads(fn), { watch: before.watch + BURST, api: before.api }, 'counted in the metrics');
    assert.deepEqual(
      reads.map((ic) => [ic?.metadata.resourceVersion, ic?.metadata.labels?.round]),
      changed.map((ic) => [ic.metadata.resourceVersion, '2']),
    );
    // An older announcement (a redelivery) is served the newest version the watch saw.
    assert.equal((await read(changed[0], ics[0].metadata.resourceVersion))?.metadata.labels?.round, '2');
    // Each read is the caller's own copy.
    reads[0]!.spec.image = 'changed-by-the-caller';
    assert.equal((await read(changed[0]))?.spec.image, 'nginx:1.27');
    assert.deepEqual(functionKube.reads, []);

    // A version the watch has not seen (forged, or not arrived yet) is read from the API server.
    const forged = String(Number(changed[1].metadata.resourceVersion) + 1_000_000);
    assert.equal((await read(changed[1], forged))?.metadata.resourceVersion, changed[1].metadata.resourceVersion);
    assert.deepEqual(functionKube.reads, ['ImmortalContainer cache', 'ImmortalContainer etcd']);
    assert.equal((await burstWatchReads(fn)).api, before.api + 1);

    // Deleted: gone, without a request.
    await cluster.kube.delete(ImmortalContainerKind, keyOf(changed[2]));
    await eventually(async () => burstWatch().read(keyOf(changed[2]), changed[2].metadata.resourceVersion!)?.object === undefined, 5000);
    functionKube.reads.length = 0;
    assert.equal(await read(changed[2]), undefined);
    assert.deepEqual(functionKube.reads, []);

    // No reads for IDLE_MS (5 s): the watch closes and forgets what it saw.
    await eventually(async () => !burstWatch().watching, 10_000, 'the watch to close once reads stop');
    assert.equal(await read(changed[3]).then((ic) => ic?.metadata.labels?.round), '2');
    assert.deepEqual(functionKube.reads, ['ImmortalContainer cache'], 'closed, it answers nothing');
  });

  test('the function in a burst: objects created after the watch opened are reconciled without reading them', async () => {
    const resourceEvent = (object: KubeObject) =>
      apiServerSourceEvent({ server: cluster.cp.server, kind: ImmortalContainerKind, object, action: 'add', mode: 'Resource' });
    const deliverAll = async (ics: ImmortalContainer[]) => {
      await Promise.all(ics.map(cached));
      const answers = await Promise.all(ics.map((ic) => deliver(fn.url, resourceEvent(ic))));
      assert.deepEqual(
        answers.map((answer) => answer.status),
        ics.map(() => 200),
      );
    };
    await deliverAll(await Promise.all(Array.from({ length: BURST }, (_, i) => create(`burst-first-${i}`))));
    assert.equal(burstWatch().watching, true);
    const later = await Promise.all(Array.from({ length: 10 }, (_, i) => create(`burst-later-${i}`, 'nginx:1.28')));
    for (const ic of later) await seenByWatch(ic);
    functionKube.reads.length = 0;
    await deliverAll(later);
    assert.deepEqual(
      functionKube.reads.filter((read) => read.startsWith('ImmortalContainer')),
      [],
    );
    for (const ic of later) {
      const pod = await cluster.kube.get<PodObject>(Pod, { namespace: 'default', name: `${ic.metadata.name}-immortalpod` });
      assert.equal(pod?.spec?.containers?.[0].image, 'nginx:1.28');
      assert.equal((await cluster.kube.get<ImmortalContainer>(ImmortalContainerKind, keyOf(ic)))?.status?.startTimes, 1);
    }
  });
});
