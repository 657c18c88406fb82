// copyrator and exchange-rate end to end through the whole local plane: real API server →
// ApiServerSource-compatible source → broker → scale-from-zero activator → function process
// (under its own generated least-privilege identity) → real API server. Nothing is delivered by
// hand except the malformed events, which go through the broker's ingress like any other.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { CloudEvent } from 'cloudevents';
import { pino } from 'pino';
import { readDeadLetterFile } from '../../eventing/broker/index.ts';
import { EventPlane, FUNCTION_EXTENSION, resyncEvent } from '../../eventing/plane.ts';
import copyrator from '../../functions/copyrator/index.ts';
import {
  CopyratorRuleKind,
  DISTRIBUTE_LABEL,
  RULE_ANNOTATION,
  type CopyableObject,
  type CopyratorRule,
} from '../../functions/copyrator/desired.ts';
import exchangeRate from '../../functions/exchange-rate/index.ts';
import { ExchangeRateKind, type ExchangeRate, type RateConfigMap } from '../../functions/exchange-rate/desired.ts';
import { ConfigMap, CoreEvent, Namespace, Secret, type ObjectKey, type KubeClient } from '../../functions/runtime/index.ts';
import { eventually, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { startRateProvider, type StandInProvider } from '../support/rate-provider.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';
import { tempDir } from '../support/temp.ts';

const SECRET_VALUE = 'e2e-very-secret-p4ssw0rd';
const SECRET_B64 = Buffer.from(SECRET_VALUE).toString('base64');
const CONVERGE_MS = 60_000;

let cluster: TestCluster;
let kube: KubeClient;
let standIn: StandInProvider;
const planes: EventPlane[] = [];
const brokers: Record<string, string> = {};
const stateDirs: string[] = [];
/** Everything the plane logged, everything the function processes wrote, every event a function got. */
const written: string[] = [];
let recorder: Server;
const restoreStderr = process.stderr.write.bind(process.stderr);

const captureLog = () =>
  pino(
    { level: 'debug' },
    new Writable({
      write(chunk, _encoding, done) {
        written.push(chunk.toString());
        done();
      },
    }),
  );

/** A subscriber that records every event routed to the copyrator (a second Trigger on the same filter). */
async function startRecorder(): Promise<string> {
  recorder = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      written.push(JSON.stringify(request.headers), Buffer.concat(chunks).toString());
      response.writeHead(202).end();
    });
  });
  recorder.listen(0, '127.0.0.1');
  await new Promise((resolve) => recorder.once('listening', resolve));
  return `http://127.0.0.1:${(recorder.address() as AddressInfo).port}/`;
}

async function startPlane(
  declaration: typeof copyrator,
  env: Record<string, string>,
  triggers: ConstructorParameters<typeof EventPlane>[0]['triggers'] = [],
) {
  const stateDir = tempDir(`opfn-e2e-${declaration.name}-`);
  stateDirs.push(stateDir);
  const plane = new EventPlane({
    functions: [declaration],
    kube,
    kubeconfigPath: await kubeconfigWithDeclaredRbac(cluster.cp, declaration),
    log: captureLog(),
    stateDir,
    idleTimeoutMs: 1500,
    resyncIntervalMs: 0,
    env: { LOG_LEVEL: 'debug', ...env },
    delivery: { retry: 12, backoffPolicy: 'exponential', backoffDelay: 'PT0.2S' },
    triggers,
  });
  planes.push(plane);
  brokers[declaration.name] = (await plane.start()).brokerUrl;
  return plane;
}

before(async () => {
  // The function processes' output reaches the test's stderr: keep a copy to search.
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    written.push(chunk.toString());
    return (restoreStderr as (...args: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stderr.write;
  [cluster, standIn] = await Promise.all([startTestCluster(), startRateProvider()]);
  kube = cluster.kube;
  await kube.create(Namespace, { metadata: { name: 'team-a' } });
  await kube.create(ConfigMap, {
    metadata: { name: 'shared', namespace: 'default', labels: { copyrator: 'true' } },
    data: { color: 'blue' },
  });
  const recorderUrl = await startRecorder();
  await startPlane(copyrator, {}, [
    { name: 'record-copyrator', filter: { attributes: { [FUNCTION_EXTENSION]: copyrator.name } }, subscriber: recorderUrl },
  ]);
  await startPlane(exchangeRate, {
    EXCHANGE_RATE_PROVIDER_URL: standIn.url,
    EXCHANGE_RATE_REFRESH_SECONDS: '4',
    EXCHANGE_RATE_TIMEOUT_MS: '1000',
    EXCHANGE_RATE_RETRY_SECONDS: '2',
  });
});

after(async () => {
  for (const plane of planes) await plane.stop();
  process.stderr.write = restoreStderr;
  await new Promise((resolve) => recorder?.close(resolve));
  await standIn?.close();
  await cluster?.stop();
});

const getCm = (namespace: string, name: string) => kube.get<CopyableObject>(ConfigMap, { namespace, name });
const converge = <T>(what: string, check: () => Promise<T | undefined | false>) => eventually(check, CONVERGE_MS, what);

describe('copyrator through the plane', () => {
  // A rule's own changes come through its ApiServerSource, which names the kind `Copyrator` so
  // that Knative finds the seed CRD's resource `copyrators`: no poll is sent.
  test('the seed example rule copies into existing and later namespaces, follows updates and removals', async () => {
    await kube.create(CopyratorRuleKind, {
      apiVersion: 'flant.com/v1',
      kind: 'CopyratorRule',
      metadata: { name: 'main-rule', namespace: 'default' },
      ruleType: 'configmap',
      selector: { copyrator: 'true' },
      namespace: 'default',
    });
    await converge('copy in team-a', async () => (await getCm('team-a', 'shared'))?.data?.color === 'blue');
    await kube.create(Namespace, { metadata: { name: 'team-late' } });
    await converge('copy in a namespace created later', async () => (await getCm('team-late', 'shared'))?.data?.color === 'blue');

    await kube.mergePatch(ConfigMap, { namespace: 'default', name: 'shared' }, { data: { color: 'green' } });
    await converge(
      'the update everywhere',
      async () =>
        (await getCm('team-a', 'shared'))?.data?.color === 'green' && (await getCm('team-late', 'shared'))?.data?.color === 'green',
    );

    // What is done to a copy by hand, keeping its rule labels, is no event the copyrator hears
    // (its sources leave the copies out): the resync restores it.
    await kube.delete(ConfigMap, { namespace: 'team-a', name: 'shared' });
    await kube.mergePatch(ConfigMap, { namespace: 'team-late', name: 'shared' }, { data: { color: 'hacked' } });
    await planes[0]!.broker.publish(resyncEvent(copyrator));
    await converge(
      'the hand-deleted and the hand-edited copy restored by the resync',
      async () =>
        (await getCm('team-a', 'shared'))?.data?.color === 'green' && (await getCm('team-late', 'shared'))?.data?.color === 'green',
    );
    // One whose rule labels are removed by hand enters the selection of the other ConfigMaps: restored at once.
    await kube.mergePatch(
      ConfigMap,
      { namespace: 'team-late', name: 'shared' },
      { metadata: { labels: { 'copyrator.flant.com/rule': null } } },
    );
    await converge(
      'the copy whose rule label was removed restored',
      async () => (await getCm('team-late', 'shared'))?.metadata.labels?.['copyrator.flant.com/rule'] === 'main-rule',
    );

    await kube.mergePatch(ConfigMap, { namespace: 'default', name: 'shared' }, { metadata: { labels: { copyrator: null } } });
    await converge(
      'copies gone after the label was removed',
      async () => !(await getCm('team-a', 'shared')) && !(await getCm('team-late', 'shared')),
    );
  });

  test('a Secret rule copies, and the Secret value appears nowhere the plane or the function wrote', async () => {
    // A source namespace other than `default` distributes only when an administrator says so.
    await kube.create(Namespace, { metadata: { name: 'vault', labels: { [DISTRIBUTE_LABEL]: 'true' } } });
    await kube.create(Secret, {
      metadata: { name: 'db-password', namespace: 'vault', labels: { share: 'db' } },
      stringData: { password: SECRET_VALUE },
    });
    await kube.create(CopyratorRuleKind, {
      apiVersion: 'flant.com/v1',
      kind: 'CopyratorRule',
      metadata: { name: 'db', namespace: 'vault' },
      ruleType: 'secret',
      selector: { share: 'db' },
      namespace: 'vault',
    });
    await converge(
      'the Secret copied',
      async () => (await kube.get<CopyableObject>(Secret, { namespace: 'team-a', name: 'db-password' }))?.data?.password === SECRET_B64,
    );
    await kube.delete(Secret, { namespace: 'team-a', name: 'db-password' });
    await planes[0]!.broker.publish(resyncEvent(copyrator));
    await converge(
      'the hand-deleted Secret copy back after the resync',
      async () => (await kube.get<CopyableObject>(Secret, { namespace: 'team-a', name: 'db-password' }))?.data?.password === SECRET_B64,
    );
    await kube.mergePatch(Secret, { namespace: 'vault', name: 'db-password' }, { stringData: { password: `${SECRET_VALUE}-2` } });
    await converge(
      'the changed Secret copied',
      async () =>
        (await kube.get<CopyableObject>(Secret, { namespace: 'team-a', name: 'db-password' }))?.data?.password ===
        Buffer.from(`${SECRET_VALUE}-2`).toString('base64'),
    );

    const deadLetters = join(stateDirs[0], 'dead-letters.jsonl');
    const everything = [
      ...written,
      JSON.stringify(await readDeadLetterFile(deadLetters)),
      JSON.stringify(await kube.list(CoreEvent)),
      JSON.stringify(await kube.list(CopyratorRuleKind)),
    ].join('\n');
    assert.ok(
      written.some((entry) => entry.includes('db-password')),
      'the capture saw the Secret events (the search is not vacuous)',
    );
    for (const needle of [SECRET_VALUE, SECRET_B64, Buffer.from(`${SECRET_VALUE}-2`).toString('base64')]) {
      assert.ok(!everything.includes(needle), `found ${needle} in what the plane or the function wrote`);
    }
  });

  test('a deleted rule takes all its copies with it', async () => {
    await kube.mergePatch(ConfigMap, { namespace: 'default', name: 'shared' }, { metadata: { labels: { copyrator: 'true' } } });
    await converge(
      'copies back',
      async () => (await getCm('team-a', 'shared'))?.metadata.annotations?.[RULE_ANNOTATION] === 'default/main-rule',
    );
    await kube.delete(CopyratorRuleKind, { namespace: 'default', name: 'main-rule' });
    await converge(
      'no copy left and the rule gone',
      async () =>
        (await kube.list(ConfigMap, { labelSelector: 'copyrator.flant.com/rule=main-rule' })).items.length === 0 &&
        !(await kube.get<CopyratorRule>(CopyratorRuleKind, { namespace: 'default', name: 'main-rule' })),
    );
    assert.ok(await getCm('default', 'shared'), 'the source stays');
  });
});

describe('exchange-rate through the plane', () => {
  const key: ObjectKey = { namespace: 'default', name: 'exchange-rate-usd' };
  const rateOf = async () => (await kube.get<RateConfigMap>(ConfigMap, key))?.data?.rate;

  test('created → ConfigMap; the provider changes → the next refresh (a held requeue, function at zero meanwhile) updates it', async () => {
    await kube.create<ExchangeRate>(ExchangeRateKind, {
      apiVersion: 'operators.brennerm.github.io/v1',
      kind: 'ExchangeRate',
      metadata: { name: key.name, namespace: 'default' },
      spec: { currency: 'USD' },
    });
    await converge('the ConfigMap', async () => (await rateOf()) === '1.0523');
    standIn.rates.USD = 1.2345;
    // No resync ping runs in this plane: only the function's own "again after D" brings the refresh.
    await converge('the refreshed rate', async () => (await rateOf()) === '1.2345');
  });

  test('provider down → Ready=False, old rate kept; back → recovers', async () => {
    standIn.mode = { type: 'error', status: 500, body: '{"message":"boom"}' };
    await converge('Ready=False', async () =>
      (await kube.get<ExchangeRate>(ExchangeRateKind, key))?.status?.conditions?.find(
        (c) => c.type === 'Ready' && c.status === 'False' && /boom/.test(c.message),
      ),
    );
    assert.equal(await rateOf(), '1.2345');
    standIn.rates.USD = 1.3;
    standIn.mode = { type: 'rates' };
    await converge(
      'recovery',
      async () =>
        (await rateOf()) === '1.3' &&
        (await kube.get<ExchangeRate>(ExchangeRateKind, key))?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
    );
  });

  test('a deleted ConfigMap comes back', async () => {
    await kube.delete(ConfigMap, key);
    await converge('the ConfigMap back', async () => (await rateOf()) === '1.3');
  });
});

describe('malformed events through the broker', () => {
  const bad = (fn: string, overrides: Record<string, unknown>) =>
    new CloudEvent<unknown>({
      id: `bad-${Math.random().toString(16).slice(2)}`,
      source: 'https://forged.example',
      type: 'dev.knative.apiserver.ref.update',
      datacontenttype: 'application/json',
      kind: 'ConfigMap',
      apiversion: 'v1',
      name: 'x',
      namespace: 'default',
      [FUNCTION_EXTENSION]: fn,
      data: { kind: 'ConfigMap', apiVersion: 'v1', name: 'x', namespace: 'default' },
      ...overrides,
    });
  const cases = (fn: string, kind: string, apiversion: string) => [
    bad(fn, { kind, apiversion, name: '..' }),
    bad(fn, { kind, apiversion, namespace: '../kube-system' }),
    bad(fn, { kind, apiversion, name: 'UPPER' }),
    bad(fn, { kind, apiversion, type: 'dev.knative.apiserver.resource.add', data: { apiVersion: apiversion, kind } }),
    bad(fn, { type: 'com.example.unknown' }),
    bad(fn, { type: 'dev.opfn.reconcile', data: { keys: 'not-a-list' } }),
    bad(fn, { type: 'dev.opfn.reconcile', data: { keys: [`${kind}:default/../../x`] } }),
  ];

  for (const [fn, kind, apiversion] of [
    ['copyrator', 'CopyratorRule', 'flant.com/v1'],
    ['exchange-rate', 'ExchangeRate', 'operators.brennerm.github.io/v1'],
  ]) {
    test(`${fn}: each is refused (400, dead-lettered, never retried) and writes nothing`, async () => {
      const events = cases(fn, kind, apiversion);
      const stateDir = stateDirs[fn === 'copyrator' ? 0 : 1];
      const before = (await kube.list(ConfigMap)).items.length;
      for (const event of events) await planes[fn === 'copyrator' ? 0 : 1].broker.publish(event);
      const file = join(stateDir, 'dead-letters.jsonl');
      const lines = await eventually(
        async () => {
          const found = (await readDeadLetterFile(file)).map((entry) => entry.letter);
          const ours = found.filter((entry) => events.some((event) => JSON.stringify(entry).includes(event.id)));
          return ours.length === events.length ? ours : undefined;
        },
        CONVERGE_MS,
        `${events.length} dead letters for ${fn}`,
      );
      for (const line of lines) assert.match(JSON.stringify(line), /400/, JSON.stringify(line));
      assert.equal((await kube.list(ConfigMap)).items.length, before);
    });
  }
});
