// CopyratorRule against a real API server, the function running as its own ServiceAccount with
// exactly the RBAC its declaration generates. Events are delivered by hand, as the plane would
// send them (rules in Reference mode; ConfigMaps and Namespaces in Resource mode; Secrets in
// Reference mode); test/e2e/functions.test.ts runs the same through the whole plane.
import assert from 'node:assert/strict';
import { CloudEvent } from 'cloudevents';
import { after, before, describe, test } from 'node:test';
import { apiServerSourceEvent, type ChangeAction, type SourceMode } from '../../eventing/apiserver-events.ts';
import { resyncEvent } from '../../eventing/plane.ts';
import { readManifests, CRD_DIR } from '../../eventing/crds.ts';
import { join } from 'node:path';
import copyrator, { copyratorFunction } from '../../functions/copyrator/index.ts';
import {
  ANY_SOURCE_LABEL,
  CopyratorRuleKind,
  DISTRIBUTE_LABEL,
  EXCLUDE_LABEL,
  FINALIZER,
  RULE_ANNOTATION,
  SOURCE_ANNOTATION,
  targetNamespaces,
  type CopyableObject,
  type CopyratorRule,
} from '../../functions/copyrator/desired.ts';
import {
  ConfigMap,
  CoreEvent,
  Namespace,
  Pod,
  Secret,
  type KubeObject,
  type ObjectKey,
  type ResourceKind,
  ApiError,
  type KubeClient,
  PART_OF,
} from '../../functions/runtime/index.ts';
import { createFunctionHost } from '../../functions/runtime/host/index.ts';
import {
  deliver,
  eventually,
  kubeFor,
  quietLog,
  serveFunction,
  startTestCluster,
  untilWatchCacheForgets,
  untilWatchCacheHolds,
  type RunningFunction,
  type TestCluster,
} from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

let cluster: TestCluster;
let kube: KubeClient;
let fn: RunningFunction;
let functionKube: KubeClient;
/** The function's own identity (the RBAC its declaration generates). */
let functionKubeconfig: string;

const event = (kind: ResourceKind, object: KubeObject, action: ChangeAction, mode: SourceMode = 'Resource') =>
  apiServerSourceEvent({ server: cluster.cp.server, kind, object, action, mode });

async function send(kind: ResourceKind, object: KubeObject, action: ChangeAction, mode: SourceMode = 'Resource') {
  const answer = await deliver(fn.url, event(kind, object, action, mode));
  assert.equal(
    answer.status,
    200,
    `${action} ${kind.kind} ${object.metadata.namespace}/${object.metadata.name}: ${JSON.stringify(answer.body)}`,
  );
  return answer;
}

const ruleEvent = (rule: KubeObject, action: ChangeAction = 'update') => send(CopyratorRuleKind, rule, action, 'Reference');

async function createNamespace(name: string): Promise<KubeObject> {
  try {
    return await kube.create(Namespace, { metadata: { name } });
  } catch (error) {
    if (error instanceof ApiError && error.code === 409) return (await kube.get(Namespace, { namespace: '', name }))!;
    throw error;
  }
}

/**
 * A namespace whose objects rules may copy out (DISTRIBUTE_LABEL, which only who may update
 * Namespaces can set; `default` distributes without it).
 */
async function createSourceNamespace(name: string): Promise<KubeObject> {
  await createNamespace(name);
  return kube.mergePatch(Namespace, { namespace: '', name }, { metadata: { labels: { [DISTRIBUTE_LABEL]: 'true' } } });
}

/** An administrator lets the rules of `name` name another source namespace (ANY_SOURCE_LABEL). */
const allowAnySource = (name: string) =>
  kube.mergePatch(Namespace, { namespace: '', name }, { metadata: { labels: { [ANY_SOURCE_LABEL]: 'true' } } });

const configMap = (
  namespace: string,
  name: string,
  labels: Record<string, string>,
  data: Record<string, string> = { greeting: 'hello' },
): CopyableObject => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, namespace, labels },
  data,
});

const newRule = (
  namespace: string,
  name: string,
  source: string,
  selector: Record<string, string>,
  ruleType: 'configmap' | 'secret' = 'configmap',
): CopyratorRule => ({
  apiVersion: 'flant.com/v1',
  kind: 'CopyratorRule',
  metadata: { name, namespace },
  ruleType,
  selector,
  namespace: source,
});

const getRule = (key: ObjectKey) => kube.get<CopyratorRule>(CopyratorRuleKind, key);
const getCm = (namespace: string, name: string) => kube.get<CopyableObject>(ConfigMap, { namespace, name });
const activeNamespaces = async () =>
  (await kube.list(Namespace)).items.filter((ns) => (ns.status as { phase?: string })?.phase === 'Active').map((ns) => ns.metadata.name!);
const ready = (rule: CopyratorRule | undefined) => rule?.status?.conditions?.find((condition) => condition.type === 'Ready');

interface RecordedAnswer {
  path: string;
  query: Record<string, string | undefined>;
  accept?: string;
  bytes: number;
  items?: KubeObject[];
}

/**
 * A client of the function's identity that records every answer it reads (a real client
 * against the real API server, observed, not a stand-in).
 */
function recordingKube(): { kube: KubeClient; answers: RecordedAnswer[] } {
  const recorded = kubeFor(functionKubeconfig);
  const answers: RecordedAnswer[] = [];
  const request = recorded.request.bind(recorded);
  recorded.request = async <T>(method: string, path: string, options: Parameters<KubeClient['request']>[2] = {}): Promise<T> => {
    const answer = await request<T>(method, path, options);
    // A metadata-only list without items says `"items": null`.
    const list =
      answer && typeof answer === 'object' && 'items' in answer ? { items: (answer as { items: KubeObject[] | null }).items ?? [] } : {};
    if (method === 'GET')
      answers.push({ path, query: options.query ?? {}, accept: options.accept, bytes: JSON.stringify(answer ?? '').length, ...list });
    return answer;
  };
  return { kube: recorded, answers };
}

before(async () => {
  cluster = await startTestCluster();
  kube = cluster.kube;
  functionKubeconfig = await kubeconfigWithDeclaredRbac(cluster.cp, copyrator);
  functionKube = kubeFor(functionKubeconfig);
  fn = await serveFunction(copyrator, functionKubeconfig);
  for (const name of ['team-a', 'team-b']) await createNamespace(name);
});

after(async () => {
  await fn?.close();
  await cluster?.stop();
});

describe('the seed example rule', () => {
  const key = { namespace: 'default', name: 'main-rule' };
  let rule: CopyratorRule;

  test('copies every matching ConfigMap of the source namespace into every other active namespace', async () => {
    await kube.create(ConfigMap, configMap('default', 'shared-settings', { copyrator: 'true', tier: 'web' }, { mode: 'blue' }));
    await kube.create(ConfigMap, { ...configMap('default', 'shared-binary', { copyrator: 'true' }), binaryData: { blob: 'AAECAw==' } });
    await kube.create(ConfigMap, configMap('default', 'private', { copyrator: 'false' }));
    const example = readManifests(join(CRD_DIR, 'examples')).find((object) => object.kind === 'CopyratorRule') as CopyratorRule;
    rule = await kube.create<CopyratorRule>(CopyratorRuleKind, example, 'default');
    await ruleEvent(rule, 'add');

    const targets = (await activeNamespaces()).filter((ns) => ns !== 'default');
    assert.ok(targets.includes('team-a') && targets.includes('kube-system'));
    for (const namespace of targets) {
      const copy = await getCm(namespace, 'shared-settings');
      assert.ok(copy, `copy in ${namespace}`);
      assert.deepEqual(copy.data, { mode: 'blue' });
      assert.equal(copy.metadata.labels?.tier, 'web', 'source labels are kept');
      assert.equal(copy.metadata.labels?.copyrator, 'true');
      assert.equal(copy.metadata.annotations?.[RULE_ANNOTATION], 'default/main-rule');
      assert.equal(copy.metadata.annotations?.[SOURCE_ANNOTATION], 'default/shared-settings');
      assert.equal(copy.metadata.ownerReferences, undefined, 'no ownerReference across namespaces');
      assert.deepEqual((await getCm(namespace, 'shared-binary'))?.binaryData, { blob: 'AAECAw==' });
      assert.equal(await getCm(namespace, 'private'), undefined);
    }
    const current = (await getRule(key))!;
    assert.ok(current.metadata.finalizers?.includes(FINALIZER), 'the rule holds the clean-up finalizer');
    assert.equal(current.status?.matched, 2);
    assert.equal(current.status?.copies, targets.length * 2);
    assert.equal(current.status?.observedGeneration, current.metadata.generation);
    assert.deepEqual([ready(current)?.status, ready(current)?.reason], ['True', 'CopiesInPlace']);
  });

  test('a redelivered event writes nothing', async () => {
    const before = (await getRule(key))!;
    const copy = (await getCm('team-a', 'shared-settings'))!;
    await ruleEvent(before);
    assert.equal((await getRule(key))!.metadata.resourceVersion, before.metadata.resourceVersion);
    assert.equal((await getCm('team-a', 'shared-settings'))!.metadata.resourceVersion, copy.metadata.resourceVersion);
  });

  test("the echo of the rule's own write wakes nothing; a copy that differs wakes the rule", async () => {
    const written = (await getCm('team-a', 'shared-settings'))!;
    // The runtime skips the version it wrote itself; another replica's write has another version.
    const copy = { ...written, metadata: { ...written.metadata, resourceVersion: '1' } };
    const echo = await send(ConfigMap, copy, 'update');
    assert.match(JSON.stringify(echo.body), /concerns no CopyratorRule/);
    const differs = await send(ConfigMap, { ...copy, data: { mode: 'stale' } }, 'update');
    assert.doesNotMatch(JSON.stringify(differs.body), /ignored/);
  });

  test('a namespace created later gets the copies', async () => {
    const namespace = await createNamespace('late-comer');
    await send(Namespace, namespace, 'add');
    assert.deepEqual((await getCm('late-comer', 'shared-settings'))?.data, { mode: 'blue' });
  });

  test("a namespace labelled copyrator.flant.com/exclude=true loses its copies; operator-functions' own namespace never gets any", async () => {
    const optedOut = await createNamespace('opted-out');
    await send(Namespace, optedOut, 'add');
    assert.ok(await getCm('opted-out', 'shared-settings'), 'copied before the label');
    const labelled = await kube.mergePatch(
      Namespace,
      { namespace: '', name: 'opted-out' },
      { metadata: { labels: { [EXCLUDE_LABEL]: 'true' } } },
    );
    await send(Namespace, labelled, 'update');
    assert.equal(await getCm('opted-out', 'shared-settings'), undefined, 'its copy is removed');
    // Where the functions run, a copy could plant a Secret a function reads as its own configuration.
    const install = await kube.create(Namespace, { metadata: { name: 'opfn-install', labels: PART_OF } });
    await send(Namespace, install, 'add');
    assert.equal(await getCm('opfn-install', 'shared-settings'), undefined);
    assert.ok(await getCm('team-a', 'shared-settings'), 'the other namespaces keep theirs');
  });

  test('a source update reaches every copy', async () => {
    const source = await kube.mergePatch<CopyableObject>(
      ConfigMap,
      { namespace: 'default', name: 'shared-settings' },
      { data: { mode: 'green' } },
    );
    await send(ConfigMap, source, 'update');
    for (const namespace of ['team-a', 'team-b', 'late-comer', 'kube-system'])
      assert.deepEqual((await getCm(namespace, 'shared-settings'))?.data, { mode: 'green' }, namespace);
  });

  test('a copy deleted or edited by hand is restored by the next resync: no event of a copy reaches the function', async () => {
    await kube.delete(ConfigMap, { namespace: 'team-a', name: 'shared-settings' });
    const edited = await kube.mergePatch<CopyableObject>(
      ConfigMap,
      { namespace: 'team-b', name: 'shared-settings' },
      { data: { mode: 'hacked' }, metadata: { labels: { extra: 'by-hand' } } },
    );
    await untilWatchCacheForgets(kube, ConfigMap, { namespace: 'team-a', name: 'shared-settings' });
    await untilWatchCacheHolds(kube, ConfigMap, edited);
    assert.equal((await deliver(fn.url, resyncEvent(copyrator))).status, 200);
    assert.deepEqual((await getCm('team-a', 'shared-settings'))?.data, { mode: 'green' }, 'the deleted copy is back');
    const restored = (await getCm('team-b', 'shared-settings'))!;
    assert.deepEqual(restored.data, { mode: 'green' });
    assert.equal(restored.metadata.labels?.extra, undefined);
  });

  test("a settled rule's resync reads only the watch cache, as metadata, and writes nothing; a copy edited by hand keeping its labels is restored by it", async () => {
    const { kube: recorded, answers } = recordingKube();
    const host = createFunctionHost(copyrator, { kube: recorded, log: quietLog });
    const resync = async () => {
      answers.length = 0;
      const writesBefore = (await kube.list(ConfigMap, { labelSelector: 'copyrator.flant.com/rule=main-rule' })).items.map(
        (copy) => copy.metadata.resourceVersion,
      );
      await host.handle({ type: 'resync', id: `resync-${Date.now()}` });
      return writesBefore;
    };
    // The first resync after the writes above may judge the copies once more (the watch cache
    // catching up); then the rule is settled with the digest of what it found in place.
    await resync();
    const settled = (await getRule(key))!;
    assert.match(settled.status?.inPlace ?? '', /^[0-9a-f]{64}$/);
    const copiesBefore = await resync();
    const configMapReads = answers.filter((answer) => answer.path.includes('/configmaps'));
    assert.ok(configMapReads.length > 0, 'the resync read the copies');
    // The orphan sweep reads the copies of every rule from etcd, as metadata (orphans.ts); the rule itself only the watch cache.
    const ruleReads = configMapReads.filter((answer) => answer.query.labelSelector !== 'copyrator.flant.com/rule');
    assert.ok(ruleReads.length > 0, "the rule's own reads");
    for (const read of ruleReads) {
      assert.equal(read.query.resourceVersion, '0', `from the watch cache: ${read.path} ${JSON.stringify(read.query)}`);
      assert.match(read.accept ?? '', /PartialObjectMetadataList/, `metadata only: ${read.path}`);
    }
    assert.equal((await getRule(key))!.metadata.resourceVersion, settled.metadata.resourceVersion, 'no status write');
    assert.deepEqual(
      (await kube.list(ConfigMap, { labelSelector: 'copyrator.flant.com/rule=main-rule' })).items.map(
        (copy) => copy.metadata.resourceVersion,
      ),
      copiesBefore,
      'no copy written',
    );

    // An edit that keeps the rule labels is no event the plane delivers (index.ts): the resync restores it.
    const edited = await kube.mergePatch(ConfigMap, { namespace: 'team-b', name: 'shared-settings' }, { data: { mode: 'hacked' } });
    await untilWatchCacheHolds(kube, ConfigMap, edited);
    await resync();
    assert.deepEqual((await getCm('team-b', 'shared-settings'))?.data, { mode: 'green' });
  });

  test('a ConfigMap change outside every source namespace costs one rule LIST and no reconcile', async () => {
    const requests = async () => (await fn.metrics.apiRequests.get()).values.reduce((sum, value) => sum + value.value, 0);
    const reconciles = async () => (await fn.metrics.reconciles.get()).values.reduce((sum, value) => sum + value.value, 0);
    const unrelated = await kube.create(ConfigMap, configMap('team-b', 'unrelated', { app: 'x' }));
    const [beforeRequests, beforeReconciles] = [await requests(), await reconciles()];
    const answer = await send(ConfigMap, unrelated, 'update');
    assert.match(JSON.stringify(answer.body), /concerns no CopyratorRule/);
    assert.equal((await requests()) - beforeRequests, 1, 'one LIST of CopyratorRules');
    assert.equal((await reconciles()) - beforeReconciles, 0);
  });

  test("a ConfigMap in the rule's source namespace that it neither selects nor copies wakes no rule", async () => {
    const reconciles = async () => (await fn.metrics.reconciles.get()).values.reduce((sum, value) => sum + value.value, 0);
    const before = await reconciles();
    const unrelated = await kube.create(ConfigMap, configMap('default', 'unrelated', { app: 'x' }));
    const answer = await send(ConfigMap, unrelated, 'add');
    assert.match(JSON.stringify(answer.body), /concerns no CopyratorRule/);
    assert.equal((await reconciles()) - before, 0);
    // Selected: wakes the rule.
    const selected = await kube.mergePatch<CopyableObject>(
      ConfigMap,
      { namespace: 'default', name: 'unrelated' },
      { metadata: { labels: { copyrator: 'true' } } },
    );
    assert.equal((await send(ConfigMap, selected, 'update')).body.reconciled, 1);
    assert.ok(await getCm('team-a', 'unrelated'));
    await kube.delete(ConfigMap, { namespace: 'default', name: 'unrelated' });
    await send(ConfigMap, selected, 'delete');
    assert.equal(await getCm('team-a', 'unrelated'), undefined);
  });

  test('a source that loses its label loses its copies; a deleted source too', async () => {
    const unlabelled = await kube.mergePatch<CopyableObject>(
      ConfigMap,
      { namespace: 'default', name: 'shared-binary' },
      { metadata: { labels: { copyrator: null } } },
    );
    await send(ConfigMap, unlabelled, 'update');
    for (const namespace of ['team-a', 'late-comer']) assert.equal(await getCm(namespace, 'shared-binary'), undefined, namespace);
    assert.ok(await getCm('team-a', 'shared-settings'), 'the other copies stay');

    const source = (await getCm('default', 'shared-settings'))!;
    await kube.delete(ConfigMap, { namespace: 'default', name: 'shared-settings' });
    await send(ConfigMap, source, 'delete');
    for (const namespace of ['team-a', 'team-b', 'late-comer'])
      assert.equal(await getCm(namespace, 'shared-settings'), undefined, namespace);
    const status = (await getRule(key))!.status!;
    assert.deepEqual([status.matched, status.copies], [0, 0]);
  });
});

describe('a resync of many rules', () => {
  test('the first rules list their copies on their own, the others share one list of every copy (watch cache, metadata); settled, none writes', async () => {
    const names = Array.from({ length: 12 }, (_, i) => `many-${i}`);
    for (const name of names) {
      const rule = await kube.create(CopyratorRuleKind, newRule('default', name, 'default', { many: name }));
      await ruleEvent(rule, 'add');
    }
    const { kube: recorded, answers } = recordingKube();
    const host = createFunctionHost(copyrator, { kube: recorded, log: quietLog });
    // The first resync may judge rules once more (the watch cache catching up with their status).
    await host.handle({ type: 'resync', id: 'many-1' });
    const settled = await Promise.all(names.map((name) => getRule({ namespace: 'default', name })));
    answers.length = 0;
    await host.handle({ type: 'resync', id: 'many-2' });
    const rules = (await kube.list(CopyratorRuleKind)).items.length;
    const copyLists = answers.filter((answer) => answer.path.endsWith('/configmaps') && answer.query.resourceVersion === '0');
    const own = copyLists.filter((answer) => answer.query.labelSelector?.startsWith('copyrator.flant.com/rule-namespace='));
    const shared = copyLists.filter((answer) => answer.query.labelSelector === 'copyrator.flant.com/rule');
    assert.ok(rules > 8, `${rules} rules`);
    assert.equal(own.length, 8, 'eight rules list their own copies');
    assert.equal(shared.length, 1, 'the others share one list of every copy');
    assert.match(shared[0]!.accept ?? '', /PartialObjectMetadataList/);
    for (const [index, name] of names.entries())
      assert.equal(
        (await getRule({ namespace: 'default', name }))!.metadata.resourceVersion,
        settled[index]!.metadata.resourceVersion,
        `${name}: no write`,
      );
    for (const name of names) {
      await kube.delete(CopyratorRuleKind, { namespace: 'default', name });
      await ruleEvent((await getRule({ namespace: 'default', name }))!);
    }
  });
});

describe('a new rule', () => {
  const key = { namespace: 'src-new', name: 'fresh-rule' };
  const ruleChange = (object: KubeObject, action: 'add' | 'update', id: string) =>
    ({
      type: 'change',
      action,
      mode: 'resource',
      ref: { apiVersion: 'flant.com/v1', kind: 'CopyratorRule', namespace: key.namespace, name: key.name },
      object,
      id,
    }) as const;
  const copyLists = (answers: RecordedAnswer[]) =>
    answers.filter((answer) => answer.query.labelSelector?.includes('copyrator.flant.com/rule')).map((answer) => answer.path);

  test('its first reconcile lists no copies, of either kind (it has none yet); the echoes of its finalizer and status writes wake nothing', async () => {
    await createSourceNamespace('src-new');
    await kube.create(ConfigMap, configMap('src-new', 'fresh', { fresh: 'yes' }));
    const rule = await kube.create<CopyratorRule>(CopyratorRuleKind, newRule('src-new', 'fresh-rule', 'src-new', { fresh: 'yes' }));
    const { kube: recorded, answers } = recordingKube();
    // The rule as each of the function's writes left it: what the echo of that write carries.
    const written: KubeObject[] = [];
    const request = recorded.request.bind(recorded);
    recorded.request = async <T>(method: string, path: string, options: Parameters<KubeClient['request']>[2] = {}): Promise<T> => {
      const answer = await request<T>(method, path, options);
      if (method === 'PUT' && path.includes('/copyrators/')) written.push(answer as KubeObject);
      return answer;
    };
    const host = createFunctionHost(copyrator, { kube: recorded, log: quietLog });
    assert.equal((await host.handle(ruleChange(rule, 'add', 'fresh-1'))).status, 200);
    for (const namespace of ['team-a', 'team-b']) assert.deepEqual((await getCm(namespace, 'fresh'))?.data, { greeting: 'hello' });
    assert.deepEqual(copyLists(answers), [], 'no list of copies');
    assert.equal(written.length, 2, 'the finalizer, then the status');
    assert.ok(written[0]!.metadata.finalizers?.includes(FINALIZER));
    assert.equal(ready((await getRule(key))!)?.reason, 'CopiesInPlace');

    // The finalizer's echo comes after the status write as often as not: each is the function's own.
    const requests = answers.length;
    for (const [index, echo] of [written[1]!, written[0]!].entries()) {
      const answer = await host.handle(ruleChange(echo, 'update', `fresh-echo-${index}`));
      assert.match(JSON.stringify(answer.body), /at the version this function wrote/);
    }
    assert.equal(answers.length, requests, 'no request for either echo');
  });

  test('a copy it has all the same (its finalizer removed by hand) is kept where wanted and, unwanted, removed by the next resync', async () => {
    const stray = await kube.create(ConfigMap, {
      metadata: {
        name: 'stray',
        namespace: 'team-a',
        labels: { 'copyrator.flant.com/rule-namespace': 'src-new', 'copyrator.flant.com/rule': 'fresh-rule' },
        annotations: { [RULE_ANNOTATION]: 'src-new/fresh-rule', [SOURCE_ANNOTATION]: 'src-new/stray' },
      },
      data: { stale: 'yes' },
    });
    await untilWatchCacheHolds(kube, ConfigMap, stray);
    const wanted = (await getCm('team-b', 'fresh'))!;
    await kube.mergePatch(ConfigMap, { namespace: 'team-b', name: 'fresh' }, { data: { greeting: 'edited by hand' } });
    const bare = await kube.mergePatch<CopyratorRule>(CopyratorRuleKind, key, { metadata: { finalizers: null } });
    assert.equal(bare.metadata.finalizers, undefined);
    await ruleEvent(bare);
    assert.ok((await getRule(key))!.metadata.finalizers?.includes(FINALIZER), 'the finalizer is back');
    const restored = (await getCm('team-b', 'fresh'))!;
    assert.equal(restored.metadata.uid, wanted.metadata.uid, 'the wanted copy is kept, not replaced');
    assert.deepEqual(restored.data, { greeting: 'hello' }, "and restored by its create's 409");
    assert.ok(await getCm('team-a', 'stray'), 'this reconcile listed no copies: the unwanted one waits for the resync');
    const settled = (await getRule(key))!;
    await untilWatchCacheHolds(kube, CopyratorRuleKind, settled);
    assert.equal((await deliver(fn.url, resyncEvent(copyrator))).status, 200);
    assert.equal(await getCm('team-a', 'stray'), undefined, 'the resync removed it');
    await kube.delete(CopyratorRuleKind, key);
    await ruleEvent((await getRule(key))!);
  });
});

describe('conflicts', () => {
  test('an object of the same name that is not a copy is left alone and reported', async () => {
    await createSourceNamespace('src-conflict');
    await kube.create(ConfigMap, configMap('team-a', 'app-config', { mine: 'yes' }, { owner: 'team-a' }));
    await kube.create(ConfigMap, configMap('src-conflict', 'app-config', { share: 'yes' }, { owner: 'platform' }));
    const rule = await kube.create<CopyratorRule>(CopyratorRuleKind, newRule('src-conflict', 'share', 'src-conflict', { share: 'yes' }));
    await ruleEvent(rule, 'add');
    const foreign = (await getCm('team-a', 'app-config'))!;
    assert.deepEqual(foreign.data, { owner: 'team-a' }, 'never touched');
    assert.equal(foreign.metadata.annotations?.[RULE_ANNOTATION], undefined);
    assert.deepEqual((await getCm('team-b', 'app-config'))?.data, { owner: 'platform' }, 'copied elsewhere');
    const status = (await getRule({ namespace: 'src-conflict', name: 'share' }))!.status!;
    assert.equal(status.conflictCount, 1);
    assert.deepEqual(
      status.conflicts?.map((c) => [c.namespace, c.name, c.reason]),
      [['team-a', 'app-config', 'NotManaged']],
    );
    assert.deepEqual([ready({ status } as CopyratorRule)?.status, ready({ status } as CopyratorRule)?.reason], ['False', 'CopyConflicts']);
    // Events are posted off the critical path: they may land just after the answer.
    await eventually(
      async () =>
        (await kube.list(CoreEvent, { namespace: 'src-conflict', fieldSelector: 'involvedObject.name=share' })).items.some(
          (e) => e.reason === 'CopyConflict',
        ),
      10_000,
      'a CopyConflict Event',
    );
  });

  test('deleting the object that blocked a copy wakes the rule at once (its status listed it), and the copy appears', async () => {
    const blocker = (await getCm('team-a', 'app-config'))!;
    await kube.delete(ConfigMap, { namespace: 'team-a', name: 'app-config' });
    await untilWatchCacheForgets(kube, ConfigMap, { namespace: 'team-a', name: 'app-config' });
    const answer = await send(ConfigMap, blocker, 'delete');
    assert.equal(answer.body.reconciled, 1, JSON.stringify(answer.body));
    const copy = (await getCm('team-a', 'app-config'))!;
    assert.equal(copy.metadata.annotations?.[RULE_ANNOTATION], 'src-conflict/share', 'the copy is there without a resync');
    assert.equal((await getRule({ namespace: 'src-conflict', name: 'share' }))!.status!.conflictCount, 0);
    // Put the foreign object back for the next test: delete the copy, the foreign one takes the name.
    await kube.delete(ConfigMap, { namespace: 'team-a', name: 'app-config' });
    await kube.create(ConfigMap, configMap('team-a', 'app-config', {}, { owner: 'team-a' }));
    await ruleEvent((await getRule({ namespace: 'src-conflict', name: 'share' }))!);
  });

  test('two overlapping rules: the first keeps its copies, the second reports them', async () => {
    await allowAnySource('team-b');
    const second = await kube.create<CopyratorRule>(CopyratorRuleKind, newRule('team-b', 'share-again', 'src-conflict', { share: 'yes' }));
    await ruleEvent(second, 'add');
    const copy = (await getCm('team-b', 'app-config'))!;
    assert.equal(copy.metadata.annotations?.[RULE_ANNOTATION], 'src-conflict/share', "still the first rule's copy");
    const status = (await getRule({ namespace: 'team-b', name: 'share-again' }))!.status!;
    assert.equal(status.copies, 0);
    assert.ok(
      status.conflicts?.some((c) => c.namespace === 'team-b' && c.reason === 'OtherRule'),
      JSON.stringify(status.conflicts),
    );
    assert.ok(status.conflicts?.some((c) => c.namespace === 'team-a' && c.reason === 'NotManaged'));
    // The first rule, reconciled again, still finds everything in place.
    await ruleEvent((await getRule({ namespace: 'src-conflict', name: 'share' }))!);
    assert.equal((await getRule({ namespace: 'src-conflict', name: 'share' }))!.status!.conflictCount, 1);
    // Known conflicts cost no write: the names are read (one list per name), not tried.
    const creates = async () =>
      (await fn.metrics.apiRequests.get()).values
        .filter((v) => v.labels.verb === 'post' && v.labels.resource === 'configmaps')
        .reduce((sum, v) => sum + v.value, 0);
    const before = await creates();
    await ruleEvent((await getRule({ namespace: 'team-b', name: 'share-again' }))!);
    assert.equal((await creates()) - before, 0);
    const again = (await getRule({ namespace: 'team-b', name: 'share-again' }))!.status!;
    assert.deepEqual(again.conflicts, status.conflicts, 'the same conflicts reported');
  });

  test("a resync of every rule lists the namespaces once, and reads each rule once (the finalizer's read is the reconcile's)", async () => {
    const count = async (resource: string, verb?: string) =>
      (await fn.metrics.apiRequests.get()).values
        .filter((v) => v.labels.resource === resource && (!verb || v.labels.verb === verb))
        .reduce((sum, v) => sum + v.value, 0);
    const rules = (await kube.list(CopyratorRuleKind)).items.length;
    assert.ok(rules >= 3, `${rules} rules`);
    const [namespaceLists, ruleReads] = [await count('namespaces'), await count(CopyratorRuleKind.plural, 'get')];
    const answer = await deliver(fn.url, resyncEvent(copyrator));
    assert.equal(answer.status, 200);
    assert.equal(answer.body.reconciled, rules);
    assert.equal((await count('namespaces')) - namespaceLists, 1, `${rules} rules, one list of namespaces`);
    assert.equal(
      (await count(CopyratorRuleKind.plural, 'get')) - ruleReads,
      2 + rules,
      `the sweep's list of rules (orphans.ts), the resync's list, then ${rules} rules read once each`,
    );
  });
});

describe('rule changes and deletion', () => {
  test('a changed selector and source namespace converge to the new set', async () => {
    await createSourceNamespace('src-one');
    await createSourceNamespace('src-two');
    await kube.create(ConfigMap, configMap('src-one', 'one-red', { color: 'red' }));
    await kube.create(ConfigMap, configMap('src-one', 'one-blue', { color: 'blue' }));
    await kube.create(ConfigMap, configMap('src-two', 'two-red', { color: 'red' }));
    await allowAnySource('default');
    const rule = await kube.create<CopyratorRule>(CopyratorRuleKind, newRule('default', 'colors', 'src-one', { color: 'red' }));
    await ruleEvent(rule, 'add');
    assert.ok(await getCm('team-a', 'one-red'));
    assert.equal(await getCm('team-a', 'one-blue'), undefined);

    await ruleEvent(await kube.mergePatch(CopyratorRuleKind, { namespace: 'default', name: 'colors' }, { selector: { color: 'blue' } }));
    assert.equal(await getCm('team-a', 'one-red'), undefined);
    assert.ok(await getCm('team-a', 'one-blue'));

    await ruleEvent(
      await kube.mergePatch(
        CopyratorRuleKind,
        { namespace: 'default', name: 'colors' },
        { namespace: 'src-two', selector: { color: 'red' } },
      ),
    );
    assert.equal(await getCm('team-a', 'one-blue'), undefined);
    assert.ok(await getCm('team-a', 'two-red'));
    assert.ok(await getCm('src-one', 'two-red'), 'the old source namespace is now a target');
    assert.equal(
      await getCm('src-two', 'two-red').then((cm) => cm?.metadata.annotations?.[RULE_ANNOTATION]),
      undefined,
      'the original is untouched',
    );
  });

  test('a rule whose type changes removes the copies of the former type', async () => {
    await kube.create(Secret, { metadata: { name: 'two-red', namespace: 'src-two', labels: { color: 'red' } }, stringData: { k: 'v' } });
    await ruleEvent(await kube.mergePatch(CopyratorRuleKind, { namespace: 'default', name: 'colors' }, { ruleType: 'secret' }));
    assert.equal(await getCm('team-a', 'two-red'), undefined, 'the ConfigMap copy is gone');
    assert.ok(await kube.get(Secret, { namespace: 'team-a', name: 'two-red' }), 'the Secret copy is there');
    await ruleEvent(await kube.mergePatch(CopyratorRuleKind, { namespace: 'default', name: 'colors' }, { ruleType: 'configmap' }));
    assert.equal(await kube.get(Secret, { namespace: 'team-a', name: 'two-red' }), undefined);
    assert.ok(await getCm('team-a', 'two-red'));
  });

  test('a resync removes the copies of a rule that no longer exists (ConfigMaps and Secrets), reading rules fresh; foreign objects and live copies stay', async () => {
    // The state a replica leaves when it creates a copy after the finalizer listed the copies, skips
    // its echo as its own write and dies before re-reading the rule: copies marked as a rule's, no rule.
    await createSourceNamespace('src-sweep');
    await kube.create(ConfigMap, configMap('src-sweep', 'swept-live', { sweep: 'live' }));
    const liveRule = await kube.create<CopyratorRule>(
      CopyratorRuleKind,
      newRule('src-sweep', 'sweep-live', 'src-sweep', { sweep: 'live' }),
    );
    await ruleEvent(liveRule, 'add');
    const liveCopy = (await getCm('team-a', 'swept-live'))!;
    assert.ok(liveCopy, 'the live rule made its copy');
    const marks = (name: string) => ({
      labels: { 'copyrator.flant.com/rule-namespace': 'src-sweep', 'copyrator.flant.com/rule': 'sweep-gone' },
      annotations: { [RULE_ANNOTATION]: 'src-sweep/sweep-gone', [SOURCE_ANNOTATION]: `src-sweep/${name}` },
    });
    await kube.create(ConfigMap, {
      metadata: { name: 'swept-orphan', namespace: 'team-a', ...marks('swept-orphan') },
      data: { stale: 'yes' },
    });
    await kube.create(Secret, {
      metadata: { name: 'swept-orphan', namespace: 'team-b', ...marks('swept-orphan') },
      stringData: { stale: 'yes' },
    });
    const foreign = await kube.create(ConfigMap, configMap('team-b', 'swept-orphan', { mine: 'yes' }));
    // The rule label alone, without the copyrator's annotation: not a copy.
    const labelledOnly = await kube.create(ConfigMap, configMap('team-b', 'swept-labelled', { 'copyrator.flant.com/rule': 'sweep-gone' }));
    // A rule cache that does not show the live rule yet (as one a moment old): the fresh read decides.
    const staleKube = kubeFor(functionKubeconfig);
    const request = staleKube.request.bind(staleKube);
    let staleRuleLists = 0;
    staleKube.request = async <T>(method: string, path: string, options: Parameters<KubeClient['request']>[2] = {}): Promise<T> => {
      const answer = await request<T>(method, path, options);
      if (method === 'GET' && path.endsWith(`/${CopyratorRuleKind.plural}`) && options.query?.resourceVersion === '0') {
        staleRuleLists++;
        const items = (answer as { items: KubeObject[] | null }).items ?? [];
        return { ...answer, items: items.filter((rule) => rule.metadata.name !== 'sweep-live') } as T;
      }
      return answer;
    };
    const replica = createFunctionHost(copyratorFunction({ secrets: true }), { kube: staleKube, log: quietLog });
    const answer = await replica.handle({ type: 'resync', id: 'sweep-resync' });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(await getCm('team-a', 'swept-orphan'), undefined, 'the orphan ConfigMap is gone');
    assert.equal(await kube.get(Secret, { namespace: 'team-b', name: 'swept-orphan' }), undefined, 'the orphan Secret is gone');
    assert.ok(staleRuleLists >= 1, 'the sweep listed the rules from the (stale) cache');
    assert.equal((await getCm('team-b', 'swept-orphan'))?.metadata.uid, foreign.metadata.uid, 'the foreign same-named object stays');
    assert.equal(
      (await getCm('team-b', 'swept-labelled'))?.metadata.uid,
      labelledOnly.metadata.uid,
      'an object with the label but not the marks stays',
    );
    assert.equal(
      (await getCm('team-a', 'swept-live'))?.metadata.uid,
      liveCopy.metadata.uid,
      "the live rule's copy stays, though the cache did not show its rule",
    );
    await kube.delete(CopyratorRuleKind, { namespace: 'src-sweep', name: 'sweep-live' });
    await ruleEvent((await getRule({ namespace: 'src-sweep', name: 'sweep-live' }))!);
  });

  test('a copy one replica creates while another runs the finalizer is removed by the replica that wrote it', async () => {
    await createSourceNamespace('src-race');
    await kube.create(ConfigMap, configMap('src-race', 'raced', { race: 'yes' }));
    const key = { namespace: 'src-race', name: 'race' };
    await ruleEvent(
      await kube.create<CopyratorRule>(CopyratorRuleKind, newRule(key.namespace, key.name, 'src-race', { race: 'yes' })),
      'add',
    );
    await kube.delete(ConfigMap, { namespace: 'team-a', name: 'raced' });
    // Replica B: its creates wait until the test lets them go.
    const kubeB = kubeFor(functionKubeconfig);
    const create = kubeB.create.bind(kubeB);
    let reached!: () => void;
    let release!: () => void;
    const creating = new Promise<void>((resolve) => (reached = resolve));
    const released = new Promise<void>((resolve) => (release = resolve));
    kubeB.create = async (kind, object, namespace) => {
      reached();
      await released;
      return create(kind, object, namespace);
    };
    const replicaB = createFunctionHost(copyrator, { kube: kubeB, log: quietLog });
    const ref = { apiVersion: 'flant.com/v1', kind: 'CopyratorRule', namespace: key.namespace, name: key.name };
    const converging = replicaB.handle({ type: 'change', action: 'update', mode: 'ref', ref, id: 'replica-b' });
    await creating;
    // Replica A (fn) runs the finalizer meanwhile: it lists the copies before B's create.
    await kube.delete(CopyratorRuleKind, key);
    await ruleEvent((await getRule(key))!);
    await eventually(async () => (await getRule(key)) === undefined, 10_000, 'the rule to be gone');
    release();
    assert.equal((await converging).status, 200);
    // Its add event would come back to B, which skips it as its own write: B itself removed it.
    assert.equal(await getCm('team-a', 'raced'), undefined, 'no orphan copy');
  });

  test('a deleted rule removes all its copies everywhere, then goes', async () => {
    const key = { namespace: 'default', name: 'colors' };
    assert.ok((await kube.list(ConfigMap, { labelSelector: 'copyrator.flant.com/rule=colors' })).items.length > 3);
    await kube.delete(CopyratorRuleKind, key);
    const deleting = (await getRule(key))!;
    assert.ok(deleting.metadata.deletionTimestamp, 'held by the finalizer');
    await ruleEvent(deleting);
    assert.equal((await kube.list(ConfigMap, { labelSelector: 'copyrator.flant.com/rule=colors' })).items.length, 0);
    await eventually(async () => (await getRule(key)) === undefined, 10_000, 'the rule to be gone');
    assert.ok(await getCm('src-two', 'two-red'), 'the source stays');
  });
});

describe('long names', () => {
  test('a rule with a 253-character name copies, labels its copies in hash form, and cleans up', async () => {
    const name = `${'long-rule.'.repeat(25)}end`;
    assert.equal(name.length, 253);
    await createSourceNamespace('src-long');
    const sourceName = `${'s'.repeat(62)}x`;
    await kube.create(ConfigMap, configMap('src-long', sourceName, { long: 'yes' }));
    const rule = await kube.create<CopyratorRule>(CopyratorRuleKind, newRule('src-long', name, 'src-long', { long: 'yes' }));
    await ruleEvent(rule, 'add');
    const copy = (await getCm('team-a', sourceName))!;
    assert.equal(copy.metadata.annotations?.[RULE_ANNOTATION], `src-long/${name}`);
    assert.ok(copy.metadata.labels!['copyrator.flant.com/rule'].length <= 63);
    assert.equal((await getRule({ namespace: 'src-long', name }))!.status?.conditions?.find((c) => c.type === 'Ready')?.status, 'True');

    // The copy's own events still find the rule (through the annotation), so a hand deletion heals.
    await kube.delete(ConfigMap, { namespace: 'team-a', name: sourceName });
    await send(ConfigMap, copy, 'delete');
    assert.ok(await getCm('team-a', sourceName));

    await kube.delete(CopyratorRuleKind, { namespace: 'src-long', name });
    await ruleEvent((await getRule({ namespace: 'src-long', name }))!);
    assert.equal(await getCm('team-a', sourceName), undefined);
    await eventually(async () => (await getRule({ namespace: 'src-long', name })) === undefined, 10_000, 'the rule to be gone');
  });
});

describe('a rule with more copies than a page of a list and a chunk of creates', () => {
  test('every copy is made; settled, a reconcile writes nothing; a deleted source takes its copies, across pages; deletion removes them all', async () => {
    await createSourceNamespace('bulk');
    const targets = targetNamespaces(newRule('bulk', 'bulk', 'bulk', {}), (await kube.list(Namespace)).items).length;
    // Past 1000 copies: a page of the copy list is 500, a chunk of creates 1000.
    const count = Math.ceil(1100 / targets);
    await Promise.all(Array.from({ length: count }, (_, i) => kube.create(ConfigMap, configMap('bulk', `bulk-${i}`, { bulk: 'yes' }))));
    const rule = await kube.create<CopyratorRule>(CopyratorRuleKind, newRule('bulk', 'bulk', 'bulk', { bulk: 'yes' }));
    const copiesNow = async () => (await kube.list(ConfigMap, { labelSelector: 'copyrator.flant.com/rule=bulk' })).items.length;
    const writes = async () =>
      (await fn.metrics.apiRequests.get()).values
        .filter((v) => v.labels.resource === 'configmaps' && v.labels.verb !== 'get')
        .reduce((sum, v) => sum + v.value, 0);

    await ruleEvent(rule, 'add');
    assert.equal(await copiesNow(), count * targets);
    assert.ok(count * targets > 1000, `${count * targets} copies`);
    assert.equal((await getRule({ namespace: 'bulk', name: 'bulk' }))!.status?.copies, count * targets);

    const before = await writes();
    await ruleEvent(rule);
    assert.equal((await writes()) - before, 0, 'settled: no write');

    // Its copies sit in every namespace, so on every page of the copy list.
    await kube.delete(ConfigMap, { namespace: 'bulk', name: 'bulk-0' });
    await ruleEvent(rule);
    assert.equal(await copiesNow(), (count - 1) * targets);
    assert.equal((await kube.list(ConfigMap, { fieldSelector: 'metadata.name=bulk-0' })).items.length, 0);

    await kube.delete(CopyratorRuleKind, { namespace: 'bulk', name: 'bulk' });
    await ruleEvent((await getRule({ namespace: 'bulk', name: 'bulk' }))!);
    assert.equal(await copiesNow(), 0);
  });
});

describe('a rule whose copies take longer than a delivery', () => {
  test('each delivery stops at its deadline once it wrote, says CopiesPending with the count so far, and hands the rule on in its reply; the next finishes', async () => {
    // Every delivery's deadline has passed as it starts: each stops after its first write of a page or chunk.
    const hurried = await serveFunction(copyrator, cluster.cp.kubeconfigPath, { deliveryBudgetMs: 0 });
    try {
      await createSourceNamespace('paced');
      const targets = targetNamespaces(newRule('paced', 'paced', 'paced', {}), (await kube.list(Namespace)).items).length;
      const count = Math.ceil(1100 / targets);
      await Promise.all(
        Array.from({ length: count }, (_, i) => kube.create(ConfigMap, configMap('paced', `paced-${i}`, { paced: 'yes' }))),
      );
      const rule = await kube.create<CopyratorRule>(CopyratorRuleKind, newRule('paced', 'paced', 'paced', { paced: 'yes' }));
      const ruleKey = 'flant.com/CopyratorRule:paced/paced';
      const reconcileEvent = new CloudEvent({
        type: 'dev.opfn.reconcile',
        source: '/test',
        opfnfunction: 'copyrator',
        datacontenttype: 'application/json',
        data: { keys: [ruleKey] },
      });

      const first = await deliver(hurried.url, reconcileEvent);
      assert.equal(first.status, 200, JSON.stringify(first.body));
      assert.deepEqual(first.body, { keys: [ruleKey] }, 'a reply handing the rule on (due at once)');
      const pending = (await getRule({ namespace: 'paced', name: 'paced' }))!.status!;
      assert.deepEqual(
        [ready({ status: pending } as CopyratorRule)?.reason, pending.copies],
        ['CopiesPending', 1000],
        'one chunk of creates, then the deadline',
      );

      const second = await deliver(hurried.url, reconcileEvent);
      assert.equal(second.status, 200, JSON.stringify(second.body));
      assert.deepEqual([second.body.keys, second.body.reconciled], [undefined, 1], 'done: no reply');
      const done = (await getRule({ namespace: 'paced', name: 'paced' }))!.status!;
      assert.deepEqual([ready({ status: done } as CopyratorRule)?.reason, done.copies], ['CopiesInPlace', count * targets]);
      assert.equal((await kube.list(ConfigMap, { labelSelector: 'copyrator.flant.com/rule=paced' })).items.length, count * targets);
      await kube.delete(CopyratorRuleKind, { namespace: 'paced', name: 'paced' });
      await ruleEvent(rule);
    } finally {
      await hurried.close();
    }
  });
});

describe('Secrets', () => {
  const VALUE = 'hunter2-s3cr3t-value';
  test('a secret rule copies data and type; nothing of the value reaches status or Events', async () => {
    await createSourceNamespace('vault');
    await kube.create(Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'registry', namespace: 'vault', labels: { distribute: 'yes' } },
      type: 'kubernetes.io/basic-auth',
      stringData: { username: 'bot', password: VALUE },
    });
    const rule = await kube.create<CopyratorRule>(CopyratorRuleKind, newRule('vault', 'secrets', 'vault', { distribute: 'yes' }, 'secret'));
    await ruleEvent(rule, 'add');
    const copy = (await kube.get<CopyableObject>(Secret, { namespace: 'team-a', name: 'registry' }))!;
    assert.equal(copy.type, 'kubernetes.io/basic-auth');
    assert.equal(Buffer.from(copy.data!.password, 'base64').toString(), VALUE);

    // A hand-deleted copy comes back with the next resync.
    await kube.delete(Secret, { namespace: 'team-b', name: 'registry' });
    await untilWatchCacheForgets(kube, Secret, { namespace: 'team-b', name: 'registry' });
    assert.equal((await deliver(fn.url, resyncEvent(copyrator))).status, 200);
    assert.ok(await kube.get(Secret, { namespace: 'team-b', name: 'registry' }));

    const encoded = Buffer.from(VALUE).toString('base64');
    const written = JSON.stringify([
      await getRule({ namespace: 'vault', name: 'secrets' }),
      await kube.list(CoreEvent, { namespace: 'vault' }),
    ]);
    assert.ok(!written.includes(VALUE) && !written.includes(encoded), 'no Secret value in status or Events');
  });

  test('a Secret deleted anywhere reads each source namespace once and wakes only the rules that select a Secret of its name there', async () => {
    await createSourceNamespace('vault-fan');
    await kube.create(Secret, {
      metadata: { name: 'db-password', namespace: 'vault-fan', labels: { fan: 'yes' } },
      stringData: { password: VALUE },
    });
    // Never reconciled here: only the mapper is under test.
    const rules = [
      ['fan-a', { fan: 'yes' }],
      ['fan-b', { fan: 'yes' }],
      ['fan-other', { fan: 'no' }],
    ] as const;
    for (const [name, selector] of rules) await kube.create(CopyratorRuleKind, newRule('vault-fan', name, 'vault-fan', selector, 'secret'));
    await eventually(
      async () => (await kube.list(CopyratorRuleKind, { namespace: 'vault-fan', cached: true })).items.length === rules.length,
      5000,
      'the watch cache to hold the rules',
    );
    const { kube: recorded, answers } = recordingKube();
    const secretRules = (await kube.list<CopyratorRule>(CopyratorRuleKind)).items.filter((rule) => rule.ruleType === 'secret');
    assert.ok(new Set(secretRules.map((rule) => rule.namespace)).size < secretRules.length, 'several secret rules read from one namespace');
    const mapper = copyrator.watches.find((watched) => watched.kind === Secret)!.keysFor!;
    // Reference mode: a delete without a body, of a Secret no rule copied.
    const keys = await mapper({ key: { namespace: 'team-a', name: 'db-password' }, deleted: true }, { kube: recorded, log: quietLog });
    assert.deepEqual(keys.map((key) => `${key.namespace}/${key.name}`).sort(), ['vault-fan/fan-a', 'vault-fan/fan-b']);
    const secretReads = answers.filter((answer) => answer.path.includes('/secrets'));
    assert.equal(
      secretReads.length,
      new Set(secretRules.map((rule) => rule.namespace)).size,
      `one read per source namespace: ${secretReads.map((read) => read.path).join(', ')}`,
    );
    assert.ok(
      secretReads.every((read) => read.items!.every((item) => item.data === undefined) && read.accept),
      'no Secret data read',
    );
    for (const [name] of rules) await kube.delete(CopyratorRuleKind, { namespace: 'vault-fan', name });
  });

  test('without Secrets (COPYRATOR_SECRETS=false) the function may not touch any and says so', async () => {
    const noSecrets = copyratorFunction({ secrets: false });
    assert.ok(!noSecrets.rbac.some((rule) => rule.resources.includes('secrets')));
    assert.ok(!noSecrets.watches.some((watched) => watched.kind.kind === 'Secret'));
    assert.equal(noSecrets.name, copyrator.name);
  });
});

describe('immutable objects', () => {
  const settings = (namespace: string) => getCm(namespace, 'frozen-settings');
  const freezeByHand = (kind: ResourceKind, namespace: string, name: string) =>
    kube.mergePatch<CopyableObject>(kind, { namespace, name }, { immutable: true });

  test('a copy made immutable by hand is restored as its source is, and a source change still reaches it', async () => {
    await createSourceNamespace('src-frozen');
    await kube.create(ConfigMap, configMap('src-frozen', 'frozen-settings', { freeze: 'yes' }, { v: '1' }));
    const key = { namespace: 'src-frozen', name: 'frozen' };
    await ruleEvent(
      await kube.create<CopyratorRule>(CopyratorRuleKind, newRule(key.namespace, key.name, 'src-frozen', { freeze: 'yes' })),
      'add',
    );

    // Its event wakes the rule (an edit), which replaces it: a new object, mutable as the source.
    const frozen = await freezeByHand(ConfigMap, 'team-a', 'frozen-settings');
    await send(ConfigMap, frozen, 'update');
    const restored = (await settings('team-a'))!;
    assert.notEqual(restored.metadata.uid, frozen.metadata.uid, 'replaced');
    assert.deepEqual([restored.immutable, restored.data], [undefined, { v: '1' }]);

    // Made immutable again (its own event lost), then the source changes: the copy is replaced.
    await freezeByHand(ConfigMap, 'team-b', 'frozen-settings');
    await send(
      ConfigMap,
      await kube.mergePatch(ConfigMap, { namespace: 'src-frozen', name: 'frozen-settings' }, { data: { v: '2' } }),
      'update',
    );
    for (const namespace of ['team-a', 'team-b', 'late-comer']) assert.deepEqual((await settings(namespace))?.data, { v: '2' }, namespace);
    assert.equal((await settings('team-b'))!.immutable, undefined);
    assert.deepEqual([ready(await getRule(key))?.status, ready(await getRule(key))?.reason], ['True', 'CopiesInPlace']);
  });

  test('a rotated Secret reaches a copy made immutable by hand', async () => {
    await freezeByHand(Secret, 'team-a', 'registry');
    const rotated = await kube.mergePatch(Secret, { namespace: 'vault', name: 'registry' }, { stringData: { password: 'rotated-value' } });
    await send(Secret, rotated, 'update', 'Reference');
    const copy = (await kube.get<CopyableObject>(Secret, { namespace: 'team-a', name: 'registry' }))!;
    assert.equal(Buffer.from(copy.data!.password, 'base64').toString(), 'rotated-value');
    assert.equal(ready(await getRule({ namespace: 'vault', name: 'secrets' }))?.reason, 'CopiesInPlace');
  });

  test('an immutable source makes immutable copies; recreated mutable with new data, its copies follow', async () => {
    const source = await kube.create(ConfigMap, {
      ...configMap('src-frozen', 'frozen-source', { freeze: 'yes' }, { v: 'a' }),
      immutable: true,
    });
    await send(ConfigMap, source, 'add');
    assert.deepEqual(
      [(await getCm('team-a', 'frozen-source'))?.immutable, (await getCm('team-a', 'frozen-source'))?.data],
      [true, { v: 'a' }],
    );

    await kube.delete(ConfigMap, { namespace: 'src-frozen', name: 'frozen-source' });
    await send(ConfigMap, await kube.create(ConfigMap, configMap('src-frozen', 'frozen-source', { freeze: 'yes' }, { v: 'b' })), 'add');
    for (const namespace of ['team-a', 'team-b']) {
      const copy = (await getCm(namespace, 'frozen-source'))!;
      assert.deepEqual([copy.immutable, copy.data], [undefined, { v: 'b' }], namespace);
    }
    assert.equal(ready(await getRule({ namespace: 'src-frozen', name: 'frozen' }))?.reason, 'CopiesInPlace');
  });
});

describe('least privilege and forged events', () => {
  test('the generated role allows what reconcile needs and nothing more', async () => {
    await assert.rejects(functionKube.list(Pod, { namespace: 'default' }), (error: ApiError) => error.code === 403);
    await assert.rejects(functionKube.create(Namespace, { metadata: { name: 'not-allowed' } }), (error: ApiError) => error.code === 403);
    await assert.rejects(
      functionKube.mergePatch(Namespace, { namespace: '', name: 'team-a' }, { metadata: { labels: { x: 'y' } } }),
      (error: ApiError) => error.code === 403,
    );
  });

  test('a forged copy event naming a rule that does not exist writes nothing', async () => {
    const forged = {
      ...configMap('team-a', 'forged', {}),
      metadata: { name: 'forged', namespace: 'team-a', annotations: { [RULE_ANNOTATION]: 'default/ghost-rule' } },
    };
    await send(ConfigMap, forged, 'update');
    assert.equal(await getCm('team-a', 'forged'), undefined);
    assert.equal(await getRule({ namespace: 'default', name: 'ghost-rule' }), undefined);
  });

  test('a forged source event cannot make copies of content that is not in the API', async () => {
    const fake = configMap('default', 'injected', { copyrator: 'true' }, { evil: 'payload' });
    await send(ConfigMap, fake, 'add');
    assert.equal(await getCm('team-a', 'injected'), undefined);
  });
});

describe('answers stay small, whatever the size of the objects', () => {
  const payload = 'x'.repeat(64 * 1024);

  test('a metadata-only list carries metadata and no data, from etcd and from the watch cache; one without items has none', async () => {
    await createSourceNamespace('src-big');
    for (const name of ['big-0', 'big-1', 'big-2'])
      await kube.create(ConfigMap, configMap('src-big', name, { big: 'yes' }, { blob: payload }));
    await untilWatchCacheHolds(kube, ConfigMap, (await getCm('src-big', 'big-2'))!);
    for (const cached of [false, true]) {
      const { items } = await functionKube.list(ConfigMap, { namespace: 'src-big', labelSelector: 'big=yes', metadataOnly: true, cached });
      assert.deepEqual(items.map((item) => item.metadata.name).sort(), ['big-0', 'big-1', 'big-2'], `cached: ${cached}`);
      assert.ok(
        items.every(
          (item) => item.kind === 'PartialObjectMetadata' && item.metadata.uid && item.metadata.labels?.big === 'yes' && !('data' in item),
        ),
      );
      assert.deepEqual(
        (await functionKube.list(ConfigMap, { namespace: 'src-big', labelSelector: 'big=none', metadataOnly: true, cached })).items,
        [],
      );
    }
  });

  test('pages sized by bytes (pageBytes): 16 first, then as many as fit at the sizes seen (64 KiB objects: a few at a time; small ones: up to 500)', async () => {
    await createNamespace('pages');
    for (let i = 0; i < 40; i++)
      await kube.create(ConfigMap, {
        metadata: { name: `big-${i}`, namespace: 'pages', labels: { size: 'big' } },
        data: { blob: payload },
      });
    for (let i = 0; i < 40; i++)
      await kube.create(ConfigMap, {
        metadata: { name: `small-${i}`, namespace: 'pages', labels: { size: 'small' } },
        data: { n: String(i) },
      });
    const pageSizes = async (size: string) => {
      const sizes: number[] = [];
      for await (const page of functionKube.pages(ConfigMap, {
        namespace: 'pages',
        labelSelector: `size=${size}`,
        limit: 16,
        pageBytes: 256 * 1024,
      }))
        sizes.push(page.items.length);
      // A label-selected list that ends on a full page may be followed by an empty one.
      return sizes.filter((size) => size > 0);
    };
    // 256 KiB at about 64 KiB each: 3 a page after the first (each answer also holds some metadata).
    assert.deepEqual(await pageSizes('big'), [16, ...Array(8).fill(3)]);
    assert.deepEqual(await pageSizes('small'), [16, 24]);
  });

  test('lists by name ask for metadata only; lists that carry data come in pages of 16, then of about 4 MiB', async () => {
    // More namespaces than a page holds, whichever tests ran before.
    const targets = targetNamespaces(newRule('src-big', 'big', 'src-big', {}), (await kube.list(Namespace)).items).length;
    for (let i = 0; i < 18 - targets; i++) await createNamespace(`big-${i}`);
    const rule = await kube.create<CopyratorRule>(CopyratorRuleKind, newRule('src-big', 'big', 'src-big', { big: 'yes' }));
    await ruleEvent(rule, 'add');
    // Another rule reading src-big that selects nothing: a source change asks which rules copied it.
    await kube.create<CopyratorRule>(CopyratorRuleKind, newRule('src-big', 'big-other', 'src-big', { other: 'yes' }));
    const copies = (await kube.list(ConfigMap, { labelSelector: 'copyrator.flant.com/rule=big', metadataOnly: true })).items.length;
    assert.ok(copies > 32, `${copies} copies of 64 KiB`);
    const { kube: recorded, answers } = recordingKube();
    const host = createFunctionHost(copyrator, { kube: recorded, log: quietLog });

    const namespace = await createNamespace('big-late');
    assert.equal(
      (
        await host.handle({
          type: 'change',
          action: 'add',
          mode: 'resource',
          ref: { apiVersion: 'v1', kind: 'Namespace', namespace: '', name: 'big-late' },
          object: namespace,
          id: 'big-1',
        })
      ).status,
      200,
    );
    assert.deepEqual((await getCm('big-late', 'big-0'))?.data, { blob: payload });
    const source = await kube.mergePatch<CopyableObject>(
      ConfigMap,
      { namespace: 'src-big', name: 'big-0' },
      { data: { blob: payload.replaceAll('x', 'y') } },
    );
    await untilWatchCacheHolds(kube, ConfigMap, source);
    assert.equal(
      (
        await host.handle({
          type: 'change',
          action: 'update',
          mode: 'resource',
          ref: { apiVersion: 'v1', kind: 'ConfigMap', namespace: 'src-big', name: 'big-0' },
          object: source,
          id: 'big-2',
        })
      ).status,
      200,
    );
    assert.equal((await getCm('big-late', 'big-0'))?.data?.blob[0], 'y');

    const configMapLists = answers.filter((answer) => answer.path.endsWith('/configmaps'));
    const byName = configMapLists.filter((answer) => answer.query.fieldSelector?.startsWith('metadata.name=big-'));
    assert.ok(byName.length >= 2, 'converge and the mapper each listed a name');
    for (const answer of byName)
      assert.ok(
        answer.items!.length > 16 && answer.bytes < payload.length,
        `${answer.items!.length} objects named ${answer.query.fieldSelector} in ${answer.bytes} bytes`,
      );
    // A list with data asks for 16 objects first, then for about 4 MiB.
    for (const answer of configMapLists)
      assert.ok(
        answer.accept || answer.query.continue || answer.items!.length <= 16,
        `${answer.path}?${JSON.stringify(answer.query)}: ${answer.items!.length} objects with data in ${answer.bytes} bytes`,
      );
    const largest = Math.max(...answers.map((answer) => answer.bytes));
    assert.ok(largest < 4 * 1024 * 1024 + 2 * (payload.length + 4096), `largest answer ${largest} bytes`);
    for (const name of ['big', 'big-other']) {
      await kube.delete(CopyratorRuleKind, { namespace: 'src-big', name });
      const deleting = await getRule({ namespace: 'src-big', name });
      if (deleting) await ruleEvent(deleting);
    }
  });
});

describe('a namespace that refuses copies', () => {
  const Quota: ResourceKind = { group: '', version: 'v1', kind: 'ResourceQuota', plural: 'resourcequotas', namespaced: true };

  test('a 403 (here a ResourceQuota) is a Forbidden conflict in status, answered 2xx; the other namespaces get their copies', async () => {
    await createNamespace('quota-ns');
    const quota = await kube.create<KubeObject & { spec: unknown }>(Quota, {
      metadata: { name: 'no-configmaps', namespace: 'quota-ns' },
      spec: { hard: { 'count/configmaps': '0' } },
    });
    await kube.replace(Quota, { ...quota, status: { hard: { 'count/configmaps': '0' }, used: { 'count/configmaps': '0' } } }, 'status');
    await createSourceNamespace('src-quota');
    await kube.create(ConfigMap, configMap('src-quota', 'limited', { quota: 'yes' }));
    const key = { namespace: 'src-quota', name: 'quota' };
    try {
      // send() asserts a 200 answer.
      await ruleEvent(
        await kube.create<CopyratorRule>(CopyratorRuleKind, newRule(key.namespace, key.name, 'src-quota', { quota: 'yes' })),
        'add',
      );
      const status = (await getRule(key))!.status!;
      assert.deepEqual(
        status.conflicts?.map((conflict) => [conflict.namespace, conflict.name, conflict.reason]),
        [['quota-ns', 'limited', 'Forbidden']],
      );
      assert.match(status.conflicts![0]!.message, /exceeded quota/);
      assert.deepEqual(
        [ready({ status } as CopyratorRule)?.status, ready({ status } as CopyratorRule)?.reason],
        ['False', 'CopyConflicts'],
      );
      assert.ok(await getCm('team-a', 'limited'));
    } finally {
      // Out of every later rule's way.
      await kube.mergePatch(Namespace, { namespace: '', name: 'quota-ns' }, { metadata: { labels: { [EXCLUDE_LABEL]: 'true' } } });
      await kube.delete(CopyratorRuleKind, key);
      const deleting = await getRule(key);
      if (deleting) await ruleEvent(deleting);
    }
  });
});
