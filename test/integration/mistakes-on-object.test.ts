// Mistakes shown where `kubectl describe` looks, on one real control plane: a reconcile refused
// for good (403 for a rule the declaration lacks, 422 from a child write) is answered 2xx, with a
// Warning Event and Ready=False on the object, and the 403 log names the missing rule; a host
// warns at start of the kinds the API server does not serve; a local ApiServerSource whose kind
// appears only later becomes Ready by itself.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { pino, type Logger } from 'pino';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import { applyCrds } from '../../eventing/crds.ts';
import { ApiServerSourceController } from '../../eventing/knative/api-server-sources.ts';
import { StatusBoard } from '../../eventing/knative/status.ts';
import { createFunctionHost, OUTCOME_HEADER } from '../../functions/runtime/host/index.ts';
import {
  ConfigMap,
  controllerReference,
  CoreEvent,
  defineFunction,
  updateStatus,
  type Condition,
  type KubeObject,
  type ResourceKind,
} from '../../functions/runtime/index.ts';
import { HTTP, type CloudEvent } from 'cloudevents';
import {
  deliver,
  eventually,
  quietLog,
  serveFunction,
  startTestCluster,
  type RunningFunction,
  type TestCluster,
} from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

const Widget: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };
const Gizmo: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Gizmo', plural: 'gizmos', namespaced: true };

type Widget = KubeObject & { spec?: { key?: string }; status?: { conditions?: Condition[]; seen?: boolean } };

function crdFor(kind: ResourceKind): KubeObject {
  const open = { type: 'object', 'x-kubernetes-preserve-unknown-fields': true };
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${kind.plural}.${kind.group}` },
    spec: {
      group: kind.group,
      scope: 'Namespaced',
      names: { kind: kind.kind, plural: kind.plural, singular: kind.kind.toLowerCase(), listKind: `${kind.kind}List` },
      versions: [
        {
          name: kind.version,
          served: true,
          storage: true,
          subresources: { status: {} },
          schema: { openAPIV3Schema: { type: 'object', properties: { spec: open, status: open } } },
        },
      ],
    },
  };
}

/** Writes status: its declaration forgets the `widgets/status` rule. */
const forgetful = defineFunction({
  name: 'widget-status',
  description: 'marks each Widget seen',
  reconciles: Widget,
  owns: [],
  rbac: [],
  reconcile: async (key, ctx) => {
    await updateStatus<Widget>(ctx.kube, Widget, key, (widget) => ({ ...widget.status, seen: true }));
  },
});

/** Writes a ConfigMap whose data key comes from the Widget: an invalid key is refused with 422. */
const mapper = defineFunction({
  name: 'widget-maps',
  description: 'keeps a ConfigMap per Widget',
  reconciles: Widget,
  owns: [{ kind: ConfigMap }],
  rbac: [
    { apiGroups: [''], resources: ['configmaps'], verbs: ['create'] },
    { apiGroups: ['example.com'], resources: ['widgets/status'], verbs: ['update'] },
  ],
  reconcile: async (key, ctx) => {
    const widget = await ctx.kube.get<Widget>(Widget, key);
    if (!widget) return;
    const name = `${key.name}-map`;
    if (await ctx.kube.get(ConfigMap, { namespace: key.namespace, name })) return;
    await ctx.kube.create(ConfigMap, {
      metadata: { name, namespace: key.namespace, ownerReferences: [controllerReference(widget, Widget)] },
      data: { [widget.spec?.key ?? 'value']: 'x' },
    });
  },
});

const Doohickey: ResourceKind = { group: 'nothere.example.com', version: 'v1', kind: 'Doohickey', plural: 'doohickeys', namespaced: true };

/** Creates a child of a kind no CRD defines. */
const dreamer = defineFunction({
  name: 'widget-doohickeys',
  description: 'keeps a Doohickey per Widget',
  reconciles: Widget,
  owns: [{ kind: Doohickey }],
  rbac: [
    { apiGroups: ['nothere.example.com'], resources: ['doohickeys'], verbs: ['create'] },
    { apiGroups: ['example.com'], resources: ['widgets/status'], verbs: ['update'] },
  ],
  reconcile: async (key, ctx) => {
    await ctx.kube.create(Doohickey, { metadata: { name: key.name, namespace: key.namespace } });
  },
});

/** A logger whose lines (JSON) are kept. */
function capturingLog(): { log: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  return { log: pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line)) }), lines };
}

let cluster: TestCluster;

before(async () => {
  cluster = await startTestCluster({ install: (kube) => applyCrds(kube, [crdFor(Widget)]) });
});

after(async () => {
  await cluster?.stop();
});

async function warningsOn(name: string, reason: string): Promise<KubeObject[]> {
  const events = await cluster.kube.list(CoreEvent, { namespace: 'default' });
  return events.items.filter(
    (event) =>
      (event as { involvedObject?: { name?: string } }).involvedObject?.name === name &&
      (event as { reason?: string }).reason === reason &&
      (event as { type?: string }).type === 'Warning',
  );
}

/** Delivers in binary mode; the answer's status, its outcome (the header a 2xx reports in) and the reply's keys, if any. */
async function deliverForOutcome(url: string, event: CloudEvent<unknown>): Promise<{ status: number; outcome: any; replyKeys?: string[] }> {
  const message = HTTP.binary(event);
  const response = await fetch(url, { method: 'POST', headers: message.headers as Record<string, string>, body: message.body as string });
  const text = await response.text();
  return {
    status: response.status,
    outcome: JSON.parse(response.headers.get(OUTCOME_HEADER) ?? 'null'),
    ...(text ? { replyKeys: JSON.parse(text).keys } : {}),
  };
}

const readyOf = async (name: string) =>
  (await cluster.kube.get<Widget>(Widget, { namespace: 'default', name }))?.status?.conditions?.find((c) => c.type === 'Ready');

const addEvent = (object: KubeObject) =>
  apiServerSourceEvent({ server: cluster.cp.server, kind: Widget, object, action: 'add', mode: 'Reference' });

describe('a reconcile refused for good is shown on the object, not retried into a dead letter', () => {
  let forgetfulFn: RunningFunction;
  let mapperFn: RunningFunction;
  const logged = capturingLog();

  before(async () => {
    forgetfulFn = await serveFunction(forgetful, await kubeconfigWithDeclaredRbac(cluster.cp, forgetful), { log: logged.log });
    mapperFn = await serveFunction(mapper, await kubeconfigWithDeclaredRbac(cluster.cp, mapper));
  });

  after(async () => {
    await forgetfulFn?.close();
    await mapperFn?.close();
  });

  test('a child kind the API server does not serve: Ready=False KindNotServed, tried again after a while', async () => {
    const fn = await serveFunction(dreamer, await kubeconfigWithDeclaredRbac(cluster.cp, dreamer));
    try {
      const widget = await cluster.kube.create<Widget>(Widget, {
        apiVersion: 'example.com/v1',
        kind: 'Widget',
        metadata: { name: 'w3', namespace: 'default' },
      });
      const answer = await deliverForOutcome(fn.url, addEvent(widget));
      assert.equal(answer.status, 200, JSON.stringify(answer));
      assert.equal(answer.outcome.refusals?.[0]?.reason, 'KindNotServed', JSON.stringify(answer));
      assert.deepEqual(answer.replyKeys, ['example.com/Widget:default/w3']);
      const ready = await readyOf('w3');
      assert.equal(ready?.reason, 'KindNotServed');
      assert.match(ready!.message, /does not serve this resource/);
    } finally {
      await fn.close();
    }
  });

  test('403 on the status write: 2xx naming the reason, a Warning Event naming the missing rule, and the log line', async () => {
    const widget = await cluster.kube.create<Widget>(Widget, {
      apiVersion: 'example.com/v1',
      kind: 'Widget',
      metadata: { name: 'w1', namespace: 'default' },
    });
    const answer = await deliverForOutcome(forgetfulFn.url, addEvent(widget));
    assert.equal(answer.status, 200, JSON.stringify(answer));
    assert.equal(answer.outcome.refused, 1, JSON.stringify(answer));
    assert.equal(answer.outcome.refusals[0].reason, 'ReconcileForbidden');
    // Tried again after a while, in a reply of its own: a Role bound later brings no event of the object.
    assert.deepEqual(answer.replyKeys, ['example.com/Widget:default/w1']);

    const rule =
      "declaration of widget-status has no rule for update on example.com widgets/status; add { apiGroups: ['example.com'], resources: ['widgets/status'], verbs: ['update'] }";
    await forgetfulFn.host.flushEvents();
    const [event] = await eventually(async () => {
      const found = await warningsOn('w1', 'ReconcileForbidden');
      return found.length ? found : undefined;
    }, 10_000);
    assert.ok(String((event as { message?: string }).message).startsWith(rule), String((event as { message?: string }).message));
    assert.ok(
      logged.lines.some((line) => line.msg === rule && line.level === 40),
      `the log says which rule is missing: ${JSON.stringify(logged.lines.map((line) => line.msg))}`,
    );
    // The condition write needs the missing rule too: only the Event shows it.
    assert.equal(await readyOf('w1'), undefined);
  });

  test('422 from a child write: Ready=False with the reason and a Warning Event; once mended, the condition is taken away', async () => {
    const widget = await cluster.kube.create<Widget>(Widget, {
      apiVersion: 'example.com/v1',
      kind: 'Widget',
      metadata: { name: 'w2', namespace: 'default' },
      spec: { key: 'not a key!' },
    });
    const answer = await deliver(mapperFn.url, addEvent(widget));
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(answer.body.refusals?.[0]?.reason, 'ReconcileInvalid', JSON.stringify(answer.body));
    const ready = await readyOf('w2');
    assert.equal(ready?.status, 'False');
    assert.equal(ready?.reason, 'ReconcileInvalid');
    assert.match(ready!.message, /ConfigMap "w2-map" is invalid/);
    await mapperFn.host.flushEvents();
    assert.equal((await warningsOn('w2', 'ReconcileInvalid')).length, 1);

    const mended = await cluster.kube.mergePatch<Widget>(Widget, { namespace: 'default', name: 'w2' }, { spec: { key: 'value' } });
    const again = await deliver(mapperFn.url, addEvent(mended));
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.equal(again.body.refused, undefined, JSON.stringify(again.body));
    assert.ok(await cluster.kube.get(ConfigMap, { namespace: 'default', name: 'w2-map' }));
    assert.equal(await readyOf('w2'), undefined, 'the Ready=False the host set is gone');
  });
});

test('at start, a host warns of each declared kind the API server does not serve, with the reason', async () => {
  const { log, lines } = capturingLog();
  const confused = defineFunction({
    name: 'confused',
    description: 'names kinds that are not served',
    reconciles: { ...Widget, plural: 'widgts' },
    owns: [{ kind: { group: 'nothere.example.com', version: 'v1', kind: 'Doohickey', plural: 'doohickeys', namespaced: true } }],
    watches: [],
    rbac: [],
    reconcile: async () => undefined,
  });
  const host = createFunctionHost(confused, { kubeconfigPath: cluster.cp.kubeconfigPath, log });
  await host.checkKinds();
  const warnings = lines.filter((line) => line.level === 40).map((line) => String(line.msg));
  assert.deepEqual(warnings, [
    'declaration of confused: Widget (widgts.example.com, example.com/v1) is not served: example.com/v1 serves Widget as "widgets"; did you mean widgets?',
    'declaration of confused: Doohickey (doohickeys.nothere.example.com, nothere.example.com/v1) is not served: the API server serves no nothere.example.com/v1; is its CustomResourceDefinition applied (and Established)?',
  ]);
  const fine = capturingLog();
  await createFunctionHost(mapper, { kubeconfigPath: cluster.cp.kubeconfigPath, log: fine.log }).checkKinds();
  assert.deepEqual(
    fine.lines.filter((line) => line.level === 40),
    [],
  );
});

test('a local ApiServerSource whose kind is applied after it becomes Ready by itself, with no touch of the source', async () => {
  const board = new StatusBoard();
  const sources = new ApiServerSourceController({
    kube: cluster.kube,
    brokers: { has: () => true, url: 'http://127.0.0.1:1/' },
    publish: async () => {},
    log: quietLog,
    status: board,
  });
  const source: KubeObject = {
    apiVersion: 'sources.knative.dev/v1',
    kind: 'ApiServerSource',
    metadata: { name: 'gizmos', namespace: 'default' },
    spec: {
      mode: 'Reference',
      resources: [{ apiVersion: 'example.com/v1', kind: 'Gizmo' }],
      sink: { ref: { kind: 'Broker', name: 'default' } },
    },
  };
  try {
    await sources.apply(source);
    assert.equal(board.ready('ApiServerSource default/gizmos')?.reason, 'UnknownKind');
    await applyCrds(cluster.kube, [crdFor(Gizmo)]);
    await eventually(async () => board.ready('ApiServerSource default/gizmos')?.status === 'True' || undefined, 20_000);
  } finally {
    await sources.stop();
  }
});
