// The runtime against a real API server: answers that stay small at 1500 objects, paginated
// resyncs, failed keys retried on their own, the declared finalizer, applyChild, aggregated
// Kubernetes Events, ownership across namespaces by label (hash form included), polls reconciling
// only what is not settled, and the echoes of the function's own writes costing no request.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { join } from 'node:path';
import { CloudEvent, HTTP, type CloudEventV1 } from 'cloudevents';
import { Broker } from '../../eventing/broker/index.ts';
import { resyncEvent } from '../../eventing/plane.ts';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind, type ImmortalContainer } from '../../functions/immortal-container/desired.ts';
import { ExchangeRateKind } from '../../functions/exchange-rate/desired.ts';
import { CopyratorRuleKind } from '../../functions/copyrator/desired.ts';
import {
  defineFunction,
  type FunctionDeclaration,
  type ReconcileContext,
  TransientError,
  POLL_DATA,
  ConfigMap,
  CoreEvent,
  Namespace,
  Pod,
  type KubeObject,
  type ObjectKey,
  KubeClient,
  matching,
  ownerLabelValue,
  applyChild,
  EventSink,
  ApiError,
  NOT_SERVED,
  keyOf,
  updateStatus,
} from '../../functions/runtime/index.ts';
import { type FunctionMetrics, OUTCOME_HEADER } from '../../functions/runtime/host/index.ts';
import { eventually, quietLog, serveFunction, startTestCluster, untilWatchCacheHolds, type TestCluster } from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';
import { tempDir } from '../support/temp.ts';

let cluster: TestCluster;
let kube: KubeClient;

before(async () => {
  cluster = await startTestCluster();
  kube = cluster.kube;
});
after(async () => {
  await cluster?.stop();
});

async function createNamespace(name: string) {
  const created = await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name } });
  assert.ok(created.status === 201 || created.status === 409, `namespace ${name}: ${created.status}`);
}

/** Serves `declaration` on loopback with the given kubeconfig; `requests()` counts its API requests. */
async function serve(declaration: FunctionDeclaration, kubeconfigPath = cluster.cp.kubeconfigPath) {
  const fn = await serveFunction(declaration, kubeconfigPath);
  return { ...fn, requests: async () => (await fn.metrics.apiRequests.get()).values.reduce((sum, value) => sum + value.value, 0) };
}

async function post(url: string, message: CloudEvent<unknown> | { headers: Record<string, string>; body: string }) {
  const { headers, body } =
    message instanceof CloudEvent ? (HTTP.binary(message) as { headers: Record<string, string>; body: string }) : message;
  const response = await fetch(url, { method: 'POST', headers, body });
  const text = await response.text();
  const outcome = response.headers.get(OUTCOME_HEADER);
  return { status: response.status, headers: response.headers, text, outcome: outcome ? JSON.parse(outcome) : undefined };
}

const ping = (data: object = {}) =>
  new CloudEvent<unknown>({
    type: 'dev.knative.sources.ping',
    source: '/apis/v1/namespaces/default/pingsources/x',
    datacontenttype: 'application/json',
    data,
  });
const replyOf = (answer: Awaited<ReturnType<typeof post>>) => ({
  headers: Object.fromEntries([...answer.headers].filter(([name]) => name.startsWith('ce-') || name === 'content-type')),
  body: answer.text,
});
const metricValue = async (metrics: FunctionMetrics, verb: string, resource: string) =>
  (await metrics.apiRequests.get()).values
    .filter((v) => v.labels.verb === verb && v.labels.resource === resource)
    .reduce((sum, v) => sum + v.value, 0);

describe('fan-out at scale', () => {
  const namespace = 'fanout';
  const count = 1500;
  const failing = new Set<string>();
  const calls = new Map<string, number>();
  const declaration = defineFunction({
    name: 'configmap-fanout',
    description: 'test: reconciles ConfigMaps, failing for the names in `failing`',
    reconciles: ConfigMap,
    rbac: [],
    reconcile: async (key: ObjectKey) => {
      if (key.namespace !== namespace) return;
      calls.set(key.name, (calls.get(key.name) ?? 0) + 1);
      if (failing.has(key.name)) throw new TransientError(`${key.name} is not ready`);
    },
  });
  const name = (i: number) => `a-forty-character-long-configmap-name-${String(i).padStart(4, '0')}`;

  before(async () => {
    await createNamespace(namespace);
    let next = 0;
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        for (let i = next++; i < count; i = next++) await kube.create(ConfigMap, { metadata: { name: name(i), namespace } });
      }),
    );
  });

  test(`a resync of ${count} objects with 40-character names: 200, a small answer, paginated lists`, async () => {
    const fn = await serve(declaration);
    try {
      const answer = await post(fn.url, ping());
      assert.equal(answer.status, 200, answer.text);
      assert.ok(answer.outcome.reconciled >= count, JSON.stringify(answer.outcome));
      assert.equal(answer.outcome.failed, 0);
      assert.ok(JSON.stringify(answer.outcome).length < 200, 'counts, not keys');
      assert.ok((await metricValue(fn.metrics, 'get', 'configmaps')) >= Math.ceil(count / 500), 'the list was read page by page');
      assert.equal(calls.size, count);
    } finally {
      await fn.close();
    }
  });

  test('one failing key is retried on its own: a reply names only it; the others are not redone', async () => {
    calls.clear();
    failing.add(name(7));
    failing.add(name(1234));
    const fn = await serve(declaration, await kubeconfigWithDeclaredRbac(cluster.cp, declaration));
    try {
      const answer = await post(fn.url, ping());
      assert.equal(answer.status, 200, answer.text);
      assert.equal(answer.headers.get('ce-type'), 'dev.opfn.reconcile');
      assert.deepEqual(JSON.parse(answer.text).keys.sort(), [`ConfigMap:${namespace}/${name(7)}`, `ConfigMap:${namespace}/${name(1234)}`]);
      assert.equal(answer.outcome.failed, 2);

      // The broker routes the reply back: only the failed keys run; still failing → 503.
      const retry = await post(fn.url, replyOf(answer));
      assert.equal(retry.status, 503, retry.text);
      assert.match(retry.text, /is not ready/);
      failing.delete(name(7));
      const partly = await post(fn.url, replyOf(answer));
      assert.equal(partly.status, 200);
      assert.deepEqual(JSON.parse(partly.text).keys, [`ConfigMap:${namespace}/${name(1234)}`], 'what still fails is replied again');
      failing.clear();
      const done = await post(fn.url, replyOf(partly));
      assert.equal(done.status, 200);
      assert.equal(done.text, '', 'nothing left: no reply');
      assert.equal(calls.get(name(0)), 1, 'a key that succeeded ran once');
      assert.equal(calls.get(name(7)), 3);
      assert.equal(calls.get(name(1234)), 4);
    } finally {
      await fn.close();
    }
  });
});

describe('requeues of a fan-out, through the local broker', () => {
  test('keys asking to come back at different times each come back once, at its own time, never early', async () => {
    const namespace = 'requeue-fanout';
    const count = 60;
    const stepMs = 50;
    await createNamespace(namespace);
    for (let i = 0; i < count; i++)
      assert.equal(
        (await cluster.cp.request('POST', `/api/v1/namespaces/${namespace}/configmaps`, { metadata: { name: `cm-${i}` } })).status,
        201,
      );
    let start = 0;
    const calls = new Map<string, number>();
    const early = new Set<string>();
    const done = new Set<string>();
    const declaration = defineFunction({
      name: 'configmap-requeues',
      description: 'test: ConfigMap cm-<i> asks to come back (i + 1) × 50 ms after the first resync',
      reconciles: ConfigMap,
      rbac: [],
      reconcile: async (key: ObjectKey) => {
        if (key.namespace !== namespace) return;
        calls.set(key.name, (calls.get(key.name) ?? 0) + 1);
        const left = start + (Number(key.name.slice(3)) + 1) * stepMs - Date.now();
        if (left > 0) {
          if (calls.get(key.name)! > 1) early.add(key.name);
          return { requeueAfterSeconds: left / 1000 };
        }
        done.add(key.name);
      },
    });
    const fn = await serve(declaration);
    const broker = new Broker({
      deadLetterFile: join(tempDir('requeue-fanout-'), 'dead-letters.jsonl'),
      log: quietLog,
      triggers: [{ name: declaration.name, subscriber: fn.url, filter: { attributes: { opfnfunction: declaration.name } } }],
    });
    try {
      start = Date.now();
      await broker.publish(resyncEvent(declaration) as CloudEventV1<unknown>);
      await eventually(
        async () => done.size === count,
        30_000,
        'every key reconciled at its time',
        async () => `${done.size} of ${count}`,
      );
      await broker.idle();
      assert.deepEqual([...early], [], 'no key delivered before its time');
      const reconciles = [...calls.values()].reduce((sum, n) => sum + n, 0);
      // One reply due with its soonest key made a fan-out of N due times cost about N²/2 reconciles.
      assert.ok(reconciles <= 2 * count, `${reconciles} reconciles for ${count} keys: the resync's, and one each when due`);
    } finally {
      await broker.close();
      await fn.close();
    }
  });
});

describe('declared finalizer', () => {
  const namespace = 'fin';
  const finalized: string[] = [];
  let ready = false;
  const reconciled: string[] = [];
  const declaration = defineFunction({
    name: 'configmap-finalizer',
    description: 'test: a finalizer on ConfigMaps in one namespace',
    reconciles: ConfigMap,
    rbac: [],
    finalizer: {
      name: 'example.com/cleanup',
      finalize: async (object: KubeObject) => {
        finalized.push(object.metadata.name!);
        return ready;
      },
    },
    reconcile: async (key: ObjectKey, ctx: ReconcileContext) => {
      reconciled.push(`${key.name}:${ctx.eventObject?.metadata.finalizers?.join(',')}`);
    },
  });

  test('added before reconcile, finalize on deletion (again later while it says no), removed when done', async () => {
    await createNamespace(namespace);
    const fn = await serve(declaration, await kubeconfigWithDeclaredRbac(cluster.cp, declaration));
    try {
      const cm = await kube.create(ConfigMap, { metadata: { name: 'guarded', namespace } });
      const add = apiServerSourceEvent({ server: cluster.cp.server, kind: ConfigMap, object: cm, action: 'add', mode: 'Reference' });
      assert.equal((await post(fn.url, add)).status, 200);
      assert.deepEqual((await kube.get(ConfigMap, { namespace, name: 'guarded' }))!.metadata.finalizers, ['example.com/cleanup']);
      assert.deepEqual(reconciled, ['guarded:example.com/cleanup'], 'reconcile ran after the finalizer was in place');

      await kube.delete(ConfigMap, { namespace, name: 'guarded' });
      const deleting = (await kube.get(ConfigMap, { namespace, name: 'guarded' }))!;
      const update = apiServerSourceEvent({
        server: cluster.cp.server,
        kind: ConfigMap,
        object: deleting,
        action: 'update',
        mode: 'Reference',
      });
      const notYet = await post(fn.url, update);
      assert.equal(notYet.status, 200);
      assert.ok(notYet.headers.get('ce-opfnnotbefore'), 'finalize said "not yet": asked again later');
      assert.ok(await kube.get(ConfigMap, { namespace, name: 'guarded' }), 'still held');
      ready = true;
      assert.equal((await post(fn.url, update)).status, 200);
      assert.equal(await kube.get(ConfigMap, { namespace, name: 'guarded' }), undefined, 'finalizer removed, object gone');
      assert.deepEqual(finalized, ['guarded', 'guarded']);
      assert.equal(reconciled.length, 1, 'reconcile is not called for an object being finalized');
    } finally {
      await fn.close();
    }
  });
});

describe('helpers', () => {
  test('applyChild: created, unchanged, updated, conflict with a foreign object (left alone)', async () => {
    const desired = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'child', namespace: 'default', labels: { 'example.com/managed': 'yes' } },
      data: { a: '1' },
    };
    const isManaged = (existing: KubeObject) => existing.metadata.labels?.['example.com/managed'] === 'yes';
    assert.equal((await applyChild(kube, ConfigMap, desired, { isManaged })).result, 'created');
    assert.equal((await applyChild(kube, ConfigMap, desired, { isManaged })).result, 'unchanged');
    await kube.mergePatch(
      ConfigMap,
      { namespace: 'default', name: 'child' },
      { data: { a: 'edited by hand' }, metadata: { labels: { other: 'kept' } } },
    );
    assert.equal((await applyChild(kube, ConfigMap, desired, { isManaged })).result, 'updated');
    const child = (await kube.get(ConfigMap, { namespace: 'default', name: 'child' }))!;
    assert.deepEqual(child.data, { a: '1' });
    assert.equal(child.metadata.labels?.other, 'kept', 'labels others added survive');
    await kube.create(ConfigMap, { metadata: { name: 'foreign', namespace: 'default' }, data: { mine: 'yes' } });
    assert.equal(
      (await applyChild(kube, ConfigMap, { ...desired, metadata: { ...desired.metadata, name: 'foreign' } }, { isManaged })).result,
      'conflict',
    );
    assert.deepEqual((await kube.get(ConfigMap, { namespace: 'default', name: 'foreign' }))!.data, { mine: 'yes' });
  });

  test('updateStatus: an object deleted after it was read is gone, not a failure; a kind without the status subresource is one', async () => {
    const key = { namespace: 'default', name: 'status-after-delete' };
    const read = await kube.create<ImmortalContainer>(ImmortalContainerKind, {
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: key,
      spec: { image: 'nginx' },
    });
    await kube.delete(ImmortalContainerKind, key);
    const computed: string[] = [];
    const written = await updateStatus<ImmortalContainer>(
      kube,
      ImmortalContainerKind,
      key,
      (current) => {
        computed.push(current.metadata.uid!);
        return { currentPod: 'status-after-delete-immortalpod' };
      },
      read,
    );
    assert.equal(written, undefined);
    assert.deepEqual(computed, [read.metadata.uid], 'computed once, for the object as read');
    // A ConfigMap has no status subresource: its /status is a 404 while the ConfigMap exists.
    const configMap = await kube.create(ConfigMap, { metadata: { name: 'no-status-subresource', namespace: 'default' } });
    await assert.rejects(
      updateStatus(kube, ConfigMap, keyOf(configMap), () => ({ phase: 'x' }), configMap),
      (error: unknown) => error instanceof ApiError && error.reason === NOT_SERVED,
    );
  });

  /** A recorder on a new ConfigMap `name`, with a clock the test moves (`tick`), and the Events written about it. */
  async function recordingOn(name: string, start: string) {
    let now = new Date(start);
    const sink = new EventSink(kube, 'test-recorder', quietLog, () => now);
    const object = await kube.create(ConfigMap, { metadata: { name, namespace: 'default' } });
    return {
      sink,
      object,
      recorder: sink.recorder(),
      tick: (ms: number) => void (now = new Date(now.getTime() + ms)),
      events: async () => (await kube.list(CoreEvent, { namespace: 'default', fieldSelector: `involvedObject.name=${name}` })).items,
    };
  }

  test('Kubernetes Events are aggregated: the same reason and message patch count and lastTimestamp of one Event', async () => {
    const { sink, object, recorder, tick, events: written } = await recordingOn('noisy', '2025-06-01T10:00:00Z');
    for (let i = 0; i < 5; i++) {
      recorder.warning(object, ConfigMap, 'Flapping', 'it keeps failing');
      tick(1000);
      if (i === 2) await sink.flush();
    }
    recorder.normal(object, ConfigMap, 'Recovered', 'fine again');
    await sink.flush();
    const events = await written();
    const flapping = events.filter((e) => e.reason === 'Flapping');
    assert.equal(flapping.length, 1, 'one Event object');
    assert.equal(flapping[0].count, 5);
    assert.equal(flapping[0].firstTimestamp, '2025-06-01T10:00:00Z');
    assert.equal(flapping[0].lastTimestamp, '2025-06-01T10:00:04Z');
    assert.equal(events.filter((e) => e.reason === 'Recovered').length, 1);
  });

  test('similar Events (same reason, ten different messages within ten minutes) are combined into one, as client-go aggregates them', async () => {
    const { sink, object, recorder, tick, events: written } = await recordingOn('varying', '2025-06-01T11:00:00Z');
    for (let i = 0; i < 15; i++) {
      recorder.warning(object, ConfigMap, 'SyncError', `conflict at 0xc000${i}`);
      tick(1000);
      await sink.flush();
    }
    const events = await written();
    const combined = events.filter((e) => String(e.message).startsWith('(combined from similar events): '));
    assert.equal(events.length, 10, `nine single Events and one combined: ${events.map((e) => e.message).join(' | ')}`);
    assert.equal(combined.length, 1);
    assert.equal(combined[0].count, 6, 'the tenth message and the five after it');
    assert.equal(combined[0].message, '(combined from similar events): conflict at 0xc00014', 'the latest message');
    // After ten quiet minutes the messages count afresh.
    tick(11 * 60_000);
    recorder.warning(object, ConfigMap, 'SyncError', 'conflict at 0xc00099');
    await sink.flush();
    assert.ok((await written()).some((e) => e.message === 'conflict at 0xc00099' && e.count === 1));
  });
});

describe('routing', () => {
  test('ownerLabels map a child in another namespace to its owner, a 70-character owner name through the hash form', async () => {
    await createNamespace('owners');
    await createNamespace('copies');
    const longName = `owner-${'x'.repeat(64)}`;
    const reconciled: string[] = [];
    const declaration = defineFunction({
      name: 'cross-namespace',
      description: 'test',
      reconciles: ImmortalContainerKind,
      owns: [{ kind: ConfigMap, ownerLabels: { namespace: 'example.com/owner-namespace', name: 'example.com/owner' } }],
      watches: [{ kind: Namespace, keysFor: matching<ImmortalContainer>(ImmortalContainerKind, (ic) => ic.spec.image === 'wanted') }],
      rbac: [{ apiGroups: [''], resources: ['namespaces'], verbs: ['get'] }],
      reconcile: async (key) => void reconciled.push(`${key.namespace}/${key.name}`),
    });
    for (const [name, image] of [
      [longName, 'wanted'],
      ['short', 'other'],
    ]) {
      await kube.create(ImmortalContainerKind, {
        apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
        kind: 'ImmortalContainer',
        metadata: { name, namespace: 'owners' },
        spec: { image },
      });
    }
    const fn = await serve(declaration, await kubeconfigWithDeclaredRbac(cluster.cp, declaration));
    try {
      const copy = {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: {
          name: 'copy',
          namespace: 'copies',
          labels: { 'example.com/owner-namespace': 'owners', 'example.com/owner': ownerLabelValue(longName) },
        },
      };
      assert.equal(
        (
          await post(
            fn.url,
            apiServerSourceEvent({ server: cluster.cp.server, kind: ConfigMap, object: copy, action: 'delete', mode: 'Resource' }),
          )
        ).status,
        200,
      );
      assert.deepEqual(reconciled, [`owners/${longName}`]);
      // A forged label value that is not the hash form of any name costs no list of the owners.
      const requests = async () => (await fn.metrics.apiRequests.get()).values.reduce((sum, value) => sum + value.value, 0);
      const before = await requests();
      const forged = { ...copy, metadata: { ...copy.metadata, labels: { ...copy.metadata.labels, 'example.com/owner': 'forged_value' } } };
      assert.equal(
        (
          await post(
            fn.url,
            apiServerSourceEvent({ server: cluster.cp.server, kind: ConfigMap, object: forged, action: 'delete', mode: 'Resource' }),
          )
        ).status,
        200,
      );
      assert.deepEqual([reconciled.length, await requests()], [1, before]);
      // A mapper result is validated like everything else; `matching` lists (paginated) and filters.
      const namespaceAdded = apiServerSourceEvent({
        server: cluster.cp.server,
        kind: Namespace,
        object: { metadata: { name: 'copies' } },
        action: 'add',
        mode: 'Resource',
      });
      assert.equal((await post(fn.url, namespaceAdded)).status, 200);
      assert.deepEqual(reconciled, [`owners/${longName}`, `owners/${longName}`]);
    } finally {
      await fn.close();
    }
  });
});

describe('poll (a kind no ApiServerSource can watch)', () => {
  test('one list; only objects that are not settled are reconciled, where a resync reconciles all', async () => {
    // ExchangeRates: no other test here makes any, so the listing is this test's alone.
    const namespace = 'poll';
    const finalizer = 'example.com/poll';
    await createNamespace(namespace);
    const seen: string[] = [];
    const declaration = defineFunction({
      name: 'rate-poll',
      description: 'test: records what a poll reconciles',
      reconciles: ExchangeRateKind,
      rbac: [],
      readsMetadata: false,
      finalizer: { name: finalizer, finalize: async (object: KubeObject) => (seen.push(`finalize ${object.metadata.name}`), true) },
      reconcile: async (key: ObjectKey) => void seen.push(`reconcile ${key.name}`),
    });
    const observe = async (object: KubeObject) =>
      kube.replace(ExchangeRateKind, { ...object, status: { observedGeneration: object.metadata.generation } }, 'status');
    const make = async (name: string, options: { observed?: boolean; finalizers?: string[] }) => {
      const created = await kube.create<KubeObject>(ExchangeRateKind, {
        apiVersion: 'operators.brennerm.github.io/v1',
        kind: 'ExchangeRate',
        metadata: { name, namespace, finalizers: options.finalizers },
        spec: { currency: 'USD' },
      });
      return options.observed ? observe(created) : created;
    };
    await make('settled', { observed: true, finalizers: [finalizer] });
    await make('new', {});
    const edited = await make('edited', { observed: true, finalizers: [finalizer] });
    await kube.replace(ExchangeRateKind, { ...edited, spec: { currency: 'CAD' } });
    await make('no-finalizer', { observed: true });
    await make('deleting', { observed: true, finalizers: [finalizer] });
    await kube.delete(ExchangeRateKind, { namespace, name: 'deleting' });
    const fn = await serve(declaration, await kubeconfigWithDeclaredRbac(cluster.cp, declaration));
    try {
      const answer = await post(fn.url, ping(POLL_DATA));
      assert.equal(answer.status, 200, answer.text);
      assert.deepEqual(seen.sort(), ['finalize deleting', 'reconcile edited', 'reconcile new', 'reconcile no-finalizer']);
      assert.equal(await kube.get(ExchangeRateKind, { namespace, name: 'deleting' }), undefined, 'finalized and gone');
      // The reconciles added the finalizer; once their generations are observed, a poll costs one list and reconciles nothing...
      for (const name of ['new', 'edited', 'no-finalizer']) {
        const current = (await kube.get(ExchangeRateKind, { namespace, name }))!;
        assert.deepEqual(current.metadata.finalizers, [finalizer], name);
        await observe(current);
      }
      seen.length = 0;
      const before = await fn.requests();
      const settled = await post(fn.url, ping(POLL_DATA));
      assert.equal(settled.status, 200);
      assert.match(settled.outcome.ignored, /^poll: all 4 ExchangeRate objects settled$/);
      assert.deepEqual(seen, []);
      assert.equal((await fn.requests()) - before, 1, 'one request: the list');
      // ...where a resync reconciles every one.
      assert.equal((await post(fn.url, ping())).status, 200);
      assert.deepEqual(seen.sort(), ['reconcile edited', 'reconcile new', 'reconcile no-finalizer', 'reconcile settled']);
    } finally {
      await fn.close();
    }
  });
});

describe('a declared sweep', () => {
  test('runs once per resync, before the reconciles and even with nothing to reconcile, never on a poll; its failure fails nothing', async () => {
    // CopyratorRules: no other test here makes any.
    const calls: string[] = [];
    let failing = false;
    const declaration = defineFunction({
      name: 'sweeper',
      description: 'test: records its sweeps',
      reconciles: CopyratorRuleKind,
      rbac: [],
      sweep: async (ctx: ReconcileContext) => {
        calls.push(`sweep ${ctx.deadline > Date.now() ? 'with time left' : 'late'}`);
        if (failing) throw new Error('the API server is away');
      },
      reconcile: async (key: ObjectKey) => void calls.push(`reconcile ${key.name}`),
    });
    const fn = await serve(declaration, await kubeconfigWithDeclaredRbac(cluster.cp, declaration));
    try {
      assert.equal((await post(fn.url, ping())).status, 200);
      assert.deepEqual(calls, ['sweep with time left'], 'no object, still a sweep');
      assert.equal((await post(fn.url, ping(POLL_DATA))).status, 200);
      assert.deepEqual(calls, ['sweep with time left'], 'a poll does not sweep');
      await createNamespace('sweeping');
      await kube.create(CopyratorRuleKind, {
        apiVersion: 'flant.com/v1',
        kind: 'CopyratorRule',
        metadata: { name: 'one', namespace: 'sweeping' },
        ruleType: 'configmap',
        namespace: 'sweeping',
        selector: { copy: 'yes' },
      });
      failing = true;
      calls.length = 0;
      const answer = await post(fn.url, ping());
      assert.equal(answer.status, 200, answer.text);
      assert.deepEqual(calls, ['sweep with time left', 'reconcile one'], 'the failed sweep is logged; the reconciles run');
    } finally {
      await fn.close();
    }
  });
});

describe('the lean path', () => {
  test("its pod's add, the echo of its own status write and status-only updates cost no request", async () => {
    const fn = await serve(immortalContainer, await kubeconfigWithDeclaredRbac(cluster.cp, immortalContainer));
    try {
      const ic = await kube.create<ImmortalContainer>(ImmortalContainerKind, {
        apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
        kind: 'ImmortalContainer',
        metadata: { name: 'lean', namespace: 'default' },
        spec: { image: 'nginx' },
      });
      const event = (kind: typeof Pod, object: KubeObject, action: 'add' | 'update') =>
        apiServerSourceEvent({ server: cluster.cp.server, kind, object, action, mode: 'Resource' });
      // As for a source's event, which comes from a watch: the announced read is then served by the cache.
      await untilWatchCacheHolds(kube, ImmortalContainerKind, ic);
      const before = await fn.requests();
      assert.equal((await post(fn.url, event(ImmortalContainerKind, ic, 'add'))).status, 200);
      await fn.host.flushEvents();
      const created = await fn.requests();
      assert.equal(created - before, 4, 'get, create pod, Event, status');

      const written = (await kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'default', name: 'lean' }))!;
      const pod = (await kube.get(Pod, { namespace: 'default', name: 'lean-immortalpod' }))!;
      // Its pod's add is one of the changes it leaves out (its Trigger does not deliver it);
      // its own status write comes back as an echo.
      const podAdded = await post(fn.url, event(Pod, pod, 'add'));
      assert.equal(podAdded.status, 200);
      assert.match(podAdded.outcome.ignored, /does not ask for add events of Pod/);
      const statusEcho = await post(fn.url, event(ImmortalContainerKind, written, 'update'));
      assert.equal(statusEcho.status, 200);
      assert.match(statusEcho.outcome.ignored, /at the version this function wrote/);
      assert.equal(await fn.requests(), created, 'no request for either');

      // No-op events cost one read: the add redelivered (a retrying sender, or a source's re-list),
      // and a pod event whose body shows nothing to do.
      const beforeNoOps = await fn.requests();
      assert.equal((await post(fn.url, event(ImmortalContainerKind, ic, 'add'))).status, 200);
      assert.equal(await fn.requests(), beforeNoOps + 1, 'redelivered add: one read');
      const relabelled = await kube.mergePatch(
        Pod,
        { namespace: 'default', name: 'lean-immortalpod' },
        { metadata: { labels: { seen: 'yes' } } },
      );
      assert.equal((await post(fn.url, event(Pod, relabelled, 'update'))).status, 200);
      assert.equal(await fn.requests(), beforeNoOps + 1, 'a pod event showing our pod as created (Pending): no request');
      const running = await kube.replace(Pod, { ...relabelled, status: { phase: 'Running' } }, 'status');
      assert.equal((await post(fn.url, event(Pod, running, 'update'))).status, 200);
      assert.equal(
        (await kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'default', name: 'lean' }))!.status?.conditions?.find(
          (c) => c.type === 'Ready',
        )?.reason,
        'PodRunning',
        'a real change is acted on',
      );
      const settledAt = await fn.requests();
      assert.equal((await post(fn.url, event(Pod, running, 'update'))).status, 200);
      assert.equal(await fn.requests(), settledAt + 1, 'the same Running pod again: one read');

      // Someone else's status-only change.
      const current = (await kube.get<ImmortalContainer>(ImmortalContainerKind, { namespace: 'default', name: 'lean' }))!;
      const afterReconcile = await fn.requests();
      const touched = await kube.replace<ImmortalContainer>(
        ImmortalContainerKind,
        { ...current, status: { ...current.status, conditions: [] } },
        'status',
      );
      const statusOnly = await post(fn.url, event(ImmortalContainerKind, touched, 'update'));
      assert.match(statusOnly.outcome.ignored, /only its status changed/);
      assert.equal(await fn.requests(), afterReconcile);
    } finally {
      await fn.close();
    }
  });
});

test('authentication is prepared once, not per request', async () => {
  const client = KubeClient.fromFile(cluster.cp.kubeconfigPath);
  let prepared = 0;
  const original = client.config.applySecurityAuthentication.bind(client.config);
  client.config.applySecurityAuthentication = async (context) => {
    prepared++;
    return original(context);
  };
  for (let i = 0; i < 20; i++) await client.get(Namespace, { namespace: '', name: 'default' });
  assert.equal(prepared, 1);
});
