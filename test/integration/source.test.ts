// The local ApiServerSource against a real kube-apiserver: the events it sends are the ones
// Knative's ApiServerSource sends (type, source, subject, extensions, data in both modes), and it
// closes Knative's gaps — objects that exist at start get `add`, changes missed while a watch
// was down are found by a re-list, a periodic resync re-announces every object, a sink that
// fails is retried until it accepts, an API server restart loses nothing. ConfigMaps keep the
// test free of CRDs; every test works in its own namespace and only looks at events from it
// (each source watches all namespaces). Waits have a deadline so a bug fails instead of
// hanging; nothing is asserted about how long anything took.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { CloudEventV1 } from 'cloudevents';
import { pino, type Logger } from 'pino';
import { startControlPlane, type ControlPlane } from '../../cluster/index.ts';
import { ConfigMap, type KubeObject, type ResourceKind, ApiError, KubeClient, type WatchEvent } from '../../functions/runtime/index.ts';
import { ApiServerSource, type SourceOptions, type SourceSpec } from '../../eventing/source/index.ts';

const WAIT_LIMIT_MS = 90_000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const FUNCTION_TAG = { opfnfunction: 'immortal-container' };

/** Polls `check` until it holds; fails with `what` (and its current state) after a generous deadline. */
async function until(what: () => string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + WAIT_LIMIT_MS;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`gave up waiting: ${what()}`);
    await sleep(20);
  }
}

interface LogLine {
  level: number;
  msg: string;
  reason?: string;
  [field: string]: unknown;
}

/** A pino logger whose lines are kept for assertions (warn = 40). */
function capturingLogger(): { log: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line) as LogLine) });
  return { log, lines };
}

/**
 * A TCP proxy in front of the API server that a test can cut: `drop()` destroys every open
 * connection (a watch included) and `refuse` turns new connections away, like a network blip.
 */
async function cuttableProxy(target: URL): Promise<{ url: string; drop(): void; refuse: boolean; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const state = { refuse: false };
  const server = net.createServer((client) => {
    if (state.refuse) return client.destroy();
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => undefined);
    }
    client.pipe(upstream).pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    drop: () => {
      for (const socket of sockets) socket.destroy();
    },
    get refuse() {
      return state.refuse;
    },
    set refuse(value: boolean) {
      state.refuse = value;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** Records what the sink accepted; `fail` makes it reject some calls (the source must retry them). */
function recordingSink(fail: (call: number, event: CloudEventV1<unknown>) => boolean = () => false) {
  const accepted: CloudEventV1<unknown>[] = [];
  const rejected: CloudEventV1<unknown>[] = [];
  let calls = 0;
  const sink = async (event: CloudEventV1<unknown>) => {
    calls++;
    if (fail(calls, event)) {
      rejected.push(event);
      throw new Error(`broker not ready (call ${calls})`);
    }
    accepted.push(event);
  };
  const inNamespace = (namespace: string) => accepted.filter((event) => event.namespace === namespace);
  const of = (namespace: string, name: string) => inNamespace(namespace).filter((event) => event.name === name);
  const actions = (namespace: string, name: string) => of(namespace, name).map((event) => event.type.split('.').pop());
  return { sink, accepted, rejected, inNamespace, of, actions };
}

/** The attributes every ApiServerSource event for a ConfigMap carries, whatever its mode and action. */
function assertConfigMapEvent(
  event: CloudEventV1<unknown>,
  server: string,
  mode: 'ref' | 'resource',
  action: string,
  namespace: string,
  name: string,
): void {
  assert.equal(event.specversion, '1.0');
  assert.equal(event.type, `dev.knative.apiserver.${mode}.${action}`);
  assert.equal(event.source, server);
  assert.equal(event.subject, `/apis/v1/namespaces/${namespace}/configmaps/${name}`);
  assert.match(event.id, UUID);
  assert.equal(event.datacontenttype, 'application/json');
  assert.equal(event.kind, 'ConfigMap');
  assert.equal(event.apiversion, 'v1');
  assert.equal(event.name, name);
  assert.equal(event.namespace, namespace);
  assert.equal(event.opfnfunction, 'immortal-container');
}

describe('ApiServerSource on a real kube-apiserver', { timeout: 10 * 60_000 }, () => {
  let cp: ControlPlane;
  let kube: KubeClient;
  const running: ApiServerSource[] = [];

  before(async () => {
    cp = await startControlPlane({ controllerManager: false });
    kube = KubeClient.fromFile(cp.kubeconfigPath);
  });

  after(async () => {
    await Promise.all(running.map((source) => source.stop()));
    await cp?.stop();
  });

  async function namespace(name: string): Promise<string> {
    const created = await cp.request('POST', '/api/v1/namespaces', { metadata: { name } });
    assert.ok(created.status === 201, `creating namespace ${name}: ${created.status} ${JSON.stringify(created.body)}`);
    return name;
  }

  /** Creates a ConfigMap through the admin REST API, retrying while the API server is away. */
  async function createConfigMap(
    ns: string,
    name: string,
    data: Record<string, string> = {},
    labels?: Record<string, string>,
  ): Promise<KubeObject> {
    const deadline = Date.now() + WAIT_LIMIT_MS;
    let last = '';
    while (Date.now() < deadline) {
      try {
        const response = await cp.request('POST', `/api/v1/namespaces/${ns}/configmaps`, { metadata: { name, labels }, data });
        if (response.status === 201) return response.body as KubeObject;
        // A create whose response was lost may have happened: the object is there, that is success.
        if (response.status === 409) return (await cp.request('GET', `/api/v1/namespaces/${ns}/configmaps/${name}`)).body as KubeObject;
        last = `${response.status} ${JSON.stringify(response.body).slice(0, 200)}`;
        if (response.status < 500 && response.status !== 429 && response.status !== 403) break;
      } catch (error) {
        last = (error as Error).message;
      }
      await sleep(100);
    }
    throw new Error(`creating ConfigMap ${ns}/${name}: ${last}`);
  }

  async function patchConfigMap(ns: string, name: string, patch: unknown): Promise<KubeObject> {
    return kube.mergePatch(ConfigMap, { namespace: ns, name }, patch);
  }

  async function deleteConfigMap(ns: string, name: string): Promise<void> {
    assert.ok(await kube.delete(ConfigMap, { namespace: ns, name }), `${ns}/${name} should have existed`);
  }

  async function startSource(
    spec: Partial<SourceSpec> & Pick<SourceSpec, 'mode'>,
    options: Partial<SourceOptions> & Pick<SourceOptions, 'sink'>,
  ): Promise<ApiServerSource> {
    const source = new ApiServerSource({
      kube,
      log: capturingLogger().log,
      resyncIntervalMs: 0,
      ...options,
      sources: [{ name: 'test', resources: [{ kind: ConfigMap }], extensions: FUNCTION_TAG, ...spec }],
    });
    running.push(source);
    await source.start();
    return source;
  }

  async function stopSource(source: ApiServerSource): Promise<void> {
    await source.stop();
    running.splice(running.indexOf(source), 1);
  }

  test('Reference mode: add for existing objects at start, then add/update/delete with the attributes Knative sends', async () => {
    const ns = await namespace('src-ref');
    await createConfigMap(ns, 'before-1', { a: '1' });
    await createConfigMap(ns, 'before-2', { a: '2' });
    const recorded = recordingSink();
    const source = await startSource({ mode: 'Reference' }, { sink: recorded.sink });
    try {
      // start() resolves once the initial events were accepted.
      for (const name of ['before-1', 'before-2']) {
        assert.deepEqual(recorded.actions(ns, name), ['add'], `events for ${name}`);
        const [event] = recorded.of(ns, name);
        assertConfigMapEvent(event!, cp.server, 'ref', 'add', ns, name);
        assert.deepEqual(event!.data, { kind: 'ConfigMap', namespace: ns, name, apiVersion: 'v1' });
      }

      await createConfigMap(ns, 'live', { v: '1' });
      await patchConfigMap(ns, 'live', { data: { v: '2' } });
      await deleteConfigMap(ns, 'live');
      await until(
        () => `add, update, delete for ${ns}/live; got ${JSON.stringify(recorded.actions(ns, 'live'))}`,
        () => recorded.actions(ns, 'live').includes('delete'),
      );
      assert.deepEqual(recorded.actions(ns, 'live'), ['add', 'update', 'delete'], 'one event per change, in order');
      for (const event of recorded.of(ns, 'live')) {
        assertConfigMapEvent(event, cp.server, 'ref', event.type.split('.').pop()!, ns, 'live');
        assert.deepEqual(event.data, { kind: 'ConfigMap', namespace: ns, name: 'live', apiVersion: 'v1' });
      }
      assert.equal(new Set(recorded.of(ns, 'live').map((event) => event.id)).size, 3, 'a new id per change');
      assert.deepEqual(recorded.actions(ns, 'before-1'), ['add'], 'untouched objects get no further event');
      assert.ok(source.stats().emitted >= 5);
    } finally {
      await stopSource(source);
    }
  });

  test('Resource mode: the data is the object (new state on update, last state on delete)', async () => {
    const ns = await namespace('src-res');
    await createConfigMap(ns, 'before', { a: '1' });
    const recorded = recordingSink();
    const source = await startSource({ mode: 'Resource' }, { sink: recorded.sink });
    try {
      const existing = (await kube.get(ConfigMap, { namespace: ns, name: 'before' }))!;
      const [initial] = recorded.of(ns, 'before');
      assertConfigMapEvent(initial!, cp.server, 'resource', 'add', ns, 'before');
      assert.deepEqual(initial!.data, existing, 'add data of an existing object is the object');

      const created = await createConfigMap(ns, 'live', { v: '1' });
      const patched = await patchConfigMap(ns, 'live', { data: { v: '2' } });
      await deleteConfigMap(ns, 'live');
      await until(
        () => `add, update, delete for ${ns}/live; got ${JSON.stringify(recorded.actions(ns, 'live'))}`,
        () => recorded.actions(ns, 'live').includes('delete'),
      );
      assert.deepEqual(recorded.actions(ns, 'live'), ['add', 'update', 'delete']);
      const [add, update, remove] = recorded.of(ns, 'live') as [CloudEventV1<unknown>, CloudEventV1<unknown>, CloudEventV1<unknown>];
      for (const event of [add, update, remove])
        assertConfigMapEvent(event, cp.server, 'resource', event.type.split('.').pop()!, ns, 'live');
      assert.deepEqual(add.data, created);
      assert.deepEqual(update.data, patched);
      const last = remove.data as KubeObject;
      assert.equal(last.kind, 'ConfigMap');
      assert.equal(last.apiVersion, 'v1');
      assert.equal(last.metadata.uid, created.metadata.uid);
      assert.deepEqual(last.data, { v: '2' }, 'delete carries the last state');
    } finally {
      await stopSource(source);
    }
  });

  test('labelSelector: only matching objects produce events; leaving the selection is a delete, entering it an add', async () => {
    const ns = await namespace('src-sel');
    const selected = { 'opfn-test': 'selected' };
    await createConfigMap(ns, 'pre-selected', {}, selected);
    await createConfigMap(ns, 'pre-other', {}, { 'opfn-test': 'other' });
    const recorded = recordingSink();
    const source = await startSource(
      { mode: 'Reference', resources: [{ kind: ConfigMap, labelSelector: 'opfn-test=selected' }] },
      { sink: recorded.sink },
    );
    try {
      assert.deepEqual(
        recorded.inNamespace(ns).map((event) => `${event.type} ${event.name}`),
        ['dev.knative.apiserver.ref.add pre-selected'],
      );

      await createConfigMap(ns, 'new-other', { x: '1' });
      await createConfigMap(ns, 'new-selected', {}, selected);
      await patchConfigMap(ns, 'new-selected', { metadata: { labels: { 'opfn-test': null } } });
      await patchConfigMap(ns, 'pre-other', { metadata: { labels: selected } });
      await until(
        () => `events for new-selected and pre-other; got ${JSON.stringify(recorded.inNamespace(ns).map((e) => `${e.type} ${e.name}`))}`,
        () => recorded.actions(ns, 'new-selected').includes('delete') && recorded.actions(ns, 'pre-other').includes('add'),
      );
      assert.deepEqual(recorded.actions(ns, 'new-selected'), ['add', 'delete']);
      assert.deepEqual(recorded.actions(ns, 'pre-other'), ['add']);
      assert.deepEqual(recorded.actions(ns, 'new-other'), [], 'an object outside the selector produces nothing');
    } finally {
      await stopSource(source);
    }
  });

  test('a re-list after 410 Gone emits add, update and delete for what changed while events were lost', async () => {
    const ns = await namespace('src-relist');
    for (const name of ['stays', 'changes', 'goes']) await createConfigMap(ns, name, { v: '1' });

    // The real API, with two faults a test can switch on: the watch silently loses events, and
    // the next event is replaced by 410 Gone (as when the watch cache has moved past our version).
    class LossyKube extends KubeClient {
      deaf = false;
      expire = false;
      override async *watch<T extends KubeObject = KubeObject>(
        kind: ResourceKind,
        options: Parameters<KubeClient['watch']>[1],
      ): AsyncGenerator<WatchEvent<T>> {
        for await (const event of super.watch<T>(kind, options)) {
          if (this.expire) {
            this.expire = false;
            this.deaf = false;
            throw new ApiError(410, 'Expired', 'watch configmaps: too old resource version (injected by the test)');
          }
          if (this.deaf) continue;
          yield event;
        }
      }
    }
    const lossy = new LossyKube(kube.config);
    const { log, lines } = capturingLogger();
    const recorded = recordingSink();
    const source = new ApiServerSource({
      kube: lossy,
      log,
      sink: recorded.sink,
      resyncIntervalMs: 0,
      sources: [{ name: 'relist', mode: 'Resource', resources: [{ kind: ConfigMap }], extensions: FUNCTION_TAG }],
    });
    running.push(source);
    await source.start();
    try {
      const original = (await kube.get(ConfigMap, { namespace: ns, name: 'goes' }))!;
      assert.deepEqual(
        ['stays', 'changes', 'goes'].map((name) => recorded.actions(ns, name)),
        [['add'], ['add'], ['add']],
      );

      lossy.deaf = true;
      await createConfigMap(ns, 'arrives', { v: '1' });
      const changed = await patchConfigMap(ns, 'changes', { data: { v: '2' } });
      await deleteConfigMap(ns, 'goes');
      lossy.expire = true;
      await createConfigMap(ns, 'trigger'); // the event that turns into 410 Gone

      await until(
        () => `events after the re-list; got ${JSON.stringify(recorded.inNamespace(ns).map((e) => `${e.type} ${e.name}`))}`,
        () =>
          recorded.actions(ns, 'arrives').length > 0 &&
          recorded.actions(ns, 'changes').length > 1 &&
          recorded.actions(ns, 'goes').length > 1 &&
          recorded.actions(ns, 'trigger').length > 0,
      );
      assert.deepEqual(recorded.actions(ns, 'arrives'), ['add']);
      assert.deepEqual(recorded.actions(ns, 'trigger'), ['add']);
      assert.deepEqual(recorded.actions(ns, 'changes'), ['add', 'update']);
      assert.deepEqual(recorded.actions(ns, 'goes'), ['add', 'delete']);
      assert.deepEqual(recorded.actions(ns, 'stays'), ['add'], 'an unchanged object is not re-announced by a re-list');
      assert.deepEqual(recorded.of(ns, 'changes')[1]!.data, changed, 'update carries the listed object');
      assert.deepEqual(recorded.of(ns, 'goes')[1]!.data, original, 'delete carries the last known state');
      assertConfigMapEvent(recorded.of(ns, 'goes')[1]!, cp.server, 'resource', 'delete', ns, 'goes');

      const stats = source.stats();
      assert.ok(stats.relists >= 1, `relists: ${JSON.stringify(stats)}`);
      assert.ok(stats.watchRestarts >= 1, `watchRestarts: ${JSON.stringify(stats)}`);
      assert.match(stats.lastError ?? '', /410/);
      assert.ok(
        lines.some((line) => line.level === 40 && /410/.test(line.reason ?? '')),
        'the failure is logged at warn with its reason',
      );
    } finally {
      await stopSource(source);
    }
  });

  test('a watch that times out resumes from its resourceVersion without a re-list or duplicates', async () => {
    const ns = await namespace('src-timeout');
    await createConfigMap(ns, 'pre');
    const recorded = recordingSink();
    const source = await startSource({ mode: 'Reference' }, { sink: recorded.sink, watchTimeoutSeconds: 1 });
    try {
      await until(
        () => `two watch restarts: ${JSON.stringify(source.stats())}`,
        () => source.stats().watchRestarts >= 2,
      );
      await createConfigMap(ns, 'later');
      await until(
        () => `an add for ${ns}/later`,
        () => recorded.actions(ns, 'later').length > 0,
      );
      assert.deepEqual(recorded.actions(ns, 'pre'), ['add']);
      assert.deepEqual(recorded.actions(ns, 'later'), ['add']);
      assert.equal(source.stats().relists, 0, 'a watch that ends normally is resumed, not re-listed');
    } finally {
      await stopSource(source);
    }
  });

  test('periodic resync emits update for every known object', async () => {
    const ns = await namespace('src-resync');
    await createConfigMap(ns, 'one');
    await createConfigMap(ns, 'two');
    const recorded = recordingSink();
    const source = await startSource({ mode: 'Reference' }, { sink: recorded.sink, resyncIntervalMs: 200 });
    try {
      await until(
        () => `resync updates; got ${JSON.stringify(recorded.inNamespace(ns).map((e) => `${e.type} ${e.name}`))}`,
        () => recorded.actions(ns, 'one').includes('update') && recorded.actions(ns, 'two').includes('update'),
      );
      for (const name of ['one', 'two']) {
        const actions = recorded.actions(ns, name);
        assert.equal(actions[0], 'add');
        assert.ok(
          actions.slice(1).every((action) => action === 'update'),
          `${name}: ${JSON.stringify(actions)}`,
        );
        const update = recorded.of(ns, name).find((event) => event.type.endsWith('.update'))!;
        assertConfigMapEvent(update, cp.server, 'ref', 'update', ns, name);
        assert.deepEqual(update.data, { kind: 'ConfigMap', namespace: ns, name, apiVersion: 'v1' });
      }
    } finally {
      await stopSource(source);
    }
  });

  test('a sink that rejects its first calls still receives every event (same event retried)', async () => {
    const ns = await namespace('src-flaky');
    const before = ['pre-1', 'pre-2', 'pre-3'];
    for (const name of before) await createConfigMap(ns, name);
    // Rejects the first 7 calls made for this namespace, whichever events they carry.
    let callsHere = 0;
    const recorded = recordingSink((_call, event) => event.namespace === ns && ++callsHere <= 7);
    const source = await startSource({ mode: 'Reference' }, { sink: recorded.sink });
    try {
      const later = ['new-1', 'new-2', 'new-3', 'new-4', 'new-5'];
      for (const name of later) await createConfigMap(ns, name);
      await until(
        () => `an add for every object; got ${JSON.stringify(recorded.inNamespace(ns).map((e) => e.name))}`,
        () => [...before, ...later].every((name) => recorded.actions(ns, name).includes('add')),
      );
      for (const name of [...before, ...later]) assert.deepEqual(recorded.actions(ns, name), ['add'], `${name}: delivered exactly once`);
      assert.ok(recorded.rejected.filter((event) => event.namespace === ns).length >= 7);
      const acceptedIds = new Set(recorded.accepted.map((event) => event.id));
      for (const event of recorded.rejected)
        assert.ok(acceptedIds.has(event.id), `rejected event ${event.id} (${event.subject}) was retried until accepted`);
      const stats = source.stats();
      assert.ok(stats.sinkRetries >= 7, JSON.stringify(stats));
      assert.equal(stats.emitted, recorded.accepted.length);
      assert.match(stats.lastError ?? '', /broker not ready/);
    } finally {
      await stopSource(source);
    }
  });

  test('a kind the API server does not serve makes start() fail with one clear line', async () => {
    const missing: ResourceKind = { group: 'example.opfn.dev', version: 'v1', kind: 'Missing', plural: 'missings', namespaced: true };
    const source = new ApiServerSource({
      kube,
      log: capturingLogger().log,
      sink: async () => {},
      sources: [{ name: 'broken', mode: 'Reference', resources: [{ kind: missing }] }],
    });
    await assert.rejects(
      source.start(),
      /source broken: listing missings failed: 404 NotServed\b.*is its CustomResourceDefinition installed/,
    );
    await source.stop();
  });

  test('a dropped watch connection resumes from its resourceVersion: no re-list, no change lost', async () => {
    const ns = await namespace('src-resume');
    await createConfigMap(ns, 'before');
    const proxy = await cuttableProxy(new URL(cp.server));
    const dir = await mkdtemp(join(tmpdir(), 'src-resume-'));
    const kubeconfig = join(dir, 'kubeconfig');
    await writeFile(kubeconfig, (await readFile(cp.kubeconfigPath, 'utf8')).replaceAll(cp.server, proxy.url));
    let lists = 0;
    const viaProxy = KubeClient.fromFile(kubeconfig, (verb, resource) => {
      if (verb === 'get' && resource === 'configmaps') lists++;
    });
    const recorded = recordingSink();
    const { log, lines } = capturingLogger();
    const source = new ApiServerSource({
      kube: viaProxy,
      log,
      sink: recorded.sink,
      resyncIntervalMs: 0,
      sources: [{ name: 'resume', mode: 'Reference', resources: [{ kind: ConfigMap }], extensions: FUNCTION_TAG }],
    });
    running.push(source);
    await source.start();
    try {
      assert.deepEqual(recorded.actions(ns, 'before'), ['add']);
      const listsAfterStart = lists;
      assert.ok(listsAfterStart >= 1);
      for (let round = 0; round < 3; round++) {
        // Cut the watch and keep the API away while objects change.
        proxy.refuse = true;
        proxy.drop();
        await createConfigMap(ns, `during-${round}`);
        await patchConfigMap(ns, 'before', { data: { round: String(round) } });
        await sleep(300);
        proxy.refuse = false;
        await until(
          () => `events of round ${round}: ${JSON.stringify(recorded.inNamespace(ns).map((e) => `${e.type} ${e.name}`))}`,
          () => recorded.actions(ns, `during-${round}`).length === 1 && recorded.actions(ns, 'before').length === round + 2,
        );
      }
      assert.equal(lists, listsAfterStart, `no LIST after a dropped watch (stats ${JSON.stringify(source.stats())})`);
      assert.equal(source.stats().relists, 0);
      assert.ok(source.stats().watchRestarts >= 3, `the watch was restarted: ${JSON.stringify(source.stats())}`);
      assert.deepEqual(recorded.actions(ns, 'before'), ['add', 'update', 'update', 'update'], 'every change exactly once');
      assert.ok(
        lines.some((line) => line.level === 40 && /resuming the watch from resourceVersion/.test(line.msg)),
        'the resume is logged',
      );
    } finally {
      await stopSource(source);
      await proxy.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('events carry the partitionkey of the object they reconcile: own key, the controller owner, none for a watched kind, owner-else-self by default', async () => {
    const ns = await namespace('src-partition');
    const Owner: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };
    const recorded = recordingSink();
    const source = new ApiServerSource({
      kube,
      log: capturingLogger().log,
      sink: recorded.sink,
      resyncIntervalMs: 0,
      sources: [
        { name: 'own', mode: 'Resource', resources: [{ kind: ConfigMap, labelSelector: 'role=own', partition: { by: 'self' } }] },
        {
          name: 'owned',
          mode: 'Resource',
          resources: [
            { kind: ConfigMap, labelSelector: 'role=owned', partition: { by: 'owner', owner: Owner, labels: { name: 'widget' } } },
          ],
        },
        { name: 'watched', mode: 'Resource', resources: [{ kind: ConfigMap, labelSelector: 'role=watched', partition: { by: 'none' } }] },
        { name: 'default', mode: 'Resource', resources: [{ kind: ConfigMap, labelSelector: 'role=default' }] },
      ],
    });
    running.push(source);
    await source.start();
    try {
      await createConfigMap(ns, 'mine', {}, { role: 'own' });
      await kube.create(ConfigMap, {
        metadata: {
          name: 'child',
          namespace: ns,
          labels: { role: 'owned' },
          ownerReferences: [
            { apiVersion: 'example.com/v1', kind: 'Widget', name: 'parent', uid: '00000000-0000-0000-0000-000000000001', controller: true },
          ],
        },
      });
      await createConfigMap(ns, 'labelled', {}, { role: 'owned', widget: 'by-label' });
      await createConfigMap(ns, 'other', {}, { role: 'watched' });
      await createConfigMap(ns, 'plain', {}, { role: 'default' });
      await until(
        () => 'the five adds',
        () => recorded.inNamespace(ns).length >= 5,
      );
      const keyOf = (name: string) => recorded.of(ns, name)[0]?.partitionkey;
      assert.equal(keyOf('mine'), `${ns}/mine`);
      assert.equal(keyOf('child'), `${ns}/parent`);
      assert.equal(keyOf('labelled'), `${ns}/by-label`);
      assert.equal(keyOf('other'), undefined);
      assert.equal(keyOf('plain'), `${ns}/plain`, 'no rule: the object itself when it has no controller owner');
    } finally {
      await stopSource(source);
    }
  });

  test('lists are paginated (limit/continue) and every listed object gets its add', async () => {
    const ns = await namespace('src-pages');
    const names = Array.from({ length: 7 }, (_, i) => `page-${i}`);
    for (const name of names) await createConfigMap(ns, name);
    let lists = 0;
    const counting = KubeClient.fromFile(cp.kubeconfigPath, (verb, resource) => {
      if (verb === 'get' && resource === 'configmaps') lists++;
    });
    const recorded = recordingSink();
    const source = new ApiServerSource({
      kube: counting,
      log: capturingLogger().log,
      sink: recorded.sink,
      resyncIntervalMs: 0,
      listPageSize: 2,
      sources: [{ name: 'pages', mode: 'Reference', resources: [{ kind: ConfigMap }], extensions: FUNCTION_TAG }],
    });
    running.push(source);
    await source.start();
    try {
      assert.deepEqual(
        names.map((name) => recorded.actions(ns, name)),
        names.map(() => ['add']),
      );
      assert.ok(lists >= 4, `7 objects in pages of 2 take at least 4 LIST requests, got ${lists}`);
      // The watch starts from the paginated list's resourceVersion. (Waiting for it also keeps an
      // undici HTTP/2 fault out of this file: a watch stream aborted before its headers leaves a
      // session that throws an uncaught "other side closed" when the API server restarts later.)
      await createConfigMap(ns, 'after-list');
      await until(
        () => 'the add of an object created after the list',
        () => recorded.actions(ns, 'after-list').length === 1,
      );
    } finally {
      await stopSource(source);
    }
  });

  test('kube-apiserver restart during a burst of 200 creations: every object gets its event', async (t) => {
    const ns = await namespace('src-burst');
    const recorded = recordingSink();
    const { log, lines } = capturingLogger();
    const source = await startSource({ mode: 'Reference' }, { sink: recorded.sink, log });
    try {
      const names = Array.from({ length: 200 }, (_, i) => `burst-${String(i).padStart(3, '0')}`);
      let next = 0;
      let created = 0;
      const writers = Array.from({ length: 8 }, async () => {
        while (next < names.length) {
          await createConfigMap(ns, names[next++]!, { i: String(next) });
          created++;
        }
      });
      await until(
        () => `some creations before the restart (${created})`,
        () => created >= 30,
      );
      await cp.restartApiServer();
      await Promise.all(writers);

      const seen = () =>
        new Set(
          recorded
            .inNamespace(ns)
            .filter((event) => event.type === 'dev.knative.apiserver.ref.add')
            .map((event) => event.name),
        );
      await until(
        () =>
          `add events for all 200; missing ${names
            .filter((name) => !seen().has(name))
            .slice(0, 10)
            .join(', ')}… (${JSON.stringify(source.stats())})`,
        () => names.every((name) => seen().has(name)),
      );
      const stats = source.stats();
      t.diagnostic(`after the restart: ${JSON.stringify(stats)}`);
      assert.ok(stats.watchRestarts >= 1, `a watch restart is counted: ${JSON.stringify(stats)}`);
      const warnings = lines.filter((line) => line.level === 40);
      if (stats.relists > 0)
        assert.ok(
          warnings.length > 0 && warnings.every((line) => typeof line.reason === 'string' && line.reason.length > 0),
          'every failure is logged at warn with its reason',
        );
    } finally {
      await stopSource(source);
    }
  });
});
