// ExchangeRate against a real API server and the loopback Frankfurter stand-in, the function
// running as its own ServiceAccount with exactly the RBAC its declaration generates. The
// function's clock is the test's: a refresh slot (an hour) passes by moving it.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CloudEvent, HTTP } from 'cloudevents';
import { apiServerSourceEvent, type ChangeAction, type SourceMode } from '../../eventing/apiserver-events.ts';
import { CRD_DIR, readManifests } from '../../eventing/crds.ts';
import exchangeRate from '../../functions/exchange-rate/index.ts';
import { PROVIDER_ATTEMPTS } from '../../functions/exchange-rate/reconcile.ts';
import {
  CURRENCY_ANNOTATION,
  desiredConfigMap,
  ExchangeRateKind,
  OWNER_LABEL,
  type ExchangeRate,
  type RateConfigMap,
} from '../../functions/exchange-rate/desired.ts';
import {
  resolveConfig,
  NOT_BEFORE_EXTENSION,
  PING_TYPE,
  FORBIDDEN_RETRY_SECONDS,
  ConfigMap,
  CoreEvent,
  Namespace,
  Secret,
  type KubeObject,
  type ObjectKey,
  type ResourceKind,
  ApiError,
  type KubeClient,
} from '../../functions/runtime/index.ts';
import { deliver, kubeFor, serveFunction, startTestCluster, type RunningFunction, type TestCluster } from '../support/cluster.ts';
import { startRateProvider, type StandInProvider } from '../support/rate-provider.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';

let cluster: TestCluster;
let kube: KubeClient;
let functionKube: KubeClient;
let fn: RunningFunction;
let standIn: StandInProvider;
let kubeconfig: string;
let functionConfig: Record<string, string>;
/** The function's clock: ten past an hour, so a whole refresh slot lies ahead. */
let clock = Date.parse('2026-11-23T10:10:00Z');
const HOUR = 3600_000;

const send = async (kind: ResourceKind, object: KubeObject, action: ChangeAction, mode: SourceMode) => {
  const answer = await deliver(fn.url, apiServerSourceEvent({ server: cluster.cp.server, kind, object, action, mode }));
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer;
};
const touch = (rate: KubeObject, action: ChangeAction = 'update') => send(ExchangeRateKind, rate, action, 'Reference');
const resync = async () => {
  const answer = await deliver(
    fn.url,
    new CloudEvent({ type: PING_TYPE, source: '/apis/v1/namespaces/default/pingsources/exchange-rate-resync', data: {} }),
  );
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
};

const getRate = (key: ObjectKey) => kube.get<ExchangeRate>(ExchangeRateKind, key);
const getCm = (key: ObjectKey) => kube.get<RateConfigMap>(ConfigMap, key);
/** Warnings of `reason` posted on an ExchangeRate so far (the recorder's counts, after its queue is written). */
const warnings = async (key: ObjectKey, reason: string) => {
  await fn.host.flushEvents();
  const events = (
    await kube.list<KubeObject & { involvedObject?: { name?: string }; reason?: string; count?: number }>(CoreEvent, {
      namespace: key.namespace,
    })
  ).items;
  return events
    .filter((event) => event.involvedObject?.name === key.name && event.reason === reason)
    .reduce((sum, event) => sum + (event.count ?? 1), 0);
};
const providerWarnings = (key: ObjectKey) => warnings(key, 'ProviderError');
const ready = (rate: ExchangeRate | undefined) => rate?.status?.conditions?.find((condition) => condition.type === 'Ready');
const newRate = (namespace: string, name: string, currency: string, labels?: Record<string, string>): ExchangeRate => ({
  apiVersion: 'operators.brennerm.github.io/v1',
  kind: 'ExchangeRate',
  metadata: { name, namespace, ...(labels ? { labels } : {}) },
  spec: { currency },
});

before(async () => {
  [cluster, standIn] = await Promise.all([startTestCluster(), startRateProvider()]);
  kube = cluster.kube;
  kubeconfig = await kubeconfigWithDeclaredRbac(cluster.cp, exchangeRate);
  functionKube = kubeFor(kubeconfig);
  functionConfig = {
    EXCHANGE_RATE_PROVIDER_URL: standIn.url,
    EXCHANGE_RATE_API_KEY: 'test-api-key',
    EXCHANGE_RATE_API_KEY_HEADER: 'X-Api-Key',
    EXCHANGE_RATE_TIMEOUT_MS: '400',
    EXCHANGE_RATE_RETRY_SECONDS: '30',
  };
  const config = resolveConfig(exchangeRate.name, exchangeRate.config, functionConfig);
  fn = await serveFunction(exchangeRate, kubeconfig, { config, now: () => new Date(clock) });
  await kube.create(Namespace, { metadata: { name: 'many' } });
  await kube.create(Namespace, { metadata: { name: 'herd' } });
});

after(async () => {
  await fn?.close();
  await standIn?.close();
  await cluster?.stop();
});

describe('the seed example', () => {
  const key = { namespace: 'default', name: 'exchange-rate-usd' };

  test("creating it makes a ConfigMap with the stand-in's rate, owned by it, with its labels", async () => {
    const example = readManifests(join(CRD_DIR, 'examples')).find((object) => object.kind === 'ExchangeRate') as ExchangeRate;
    const created = await kube.create<ExchangeRate>(
      ExchangeRateKind,
      { ...example, metadata: { ...example.metadata, labels: { team: 'treasury' } } },
      'default',
    );
    const before = standIn.requests.length;
    await touch(created, 'add');
    assert.equal(standIn.requests.length - before, 1);
    assert.equal(standIn.requests.at(-1)!.headers['x-api-key'], 'test-api-key', 'the API key is sent');

    const cm = (await getCm(key))!;
    assert.deepEqual(cm.data, { rate: '1.0523', base: 'EUR', date: '2026-11-20' });
    assert.equal(cm.metadata.labels?.team, 'treasury');
    assert.equal(cm.metadata.labels?.[OWNER_LABEL], 'exchange-rate-usd');
    const [owner] = cm.metadata.ownerReferences!;
    assert.deepEqual([owner.kind, owner.name, owner.uid, owner.controller], ['ExchangeRate', key.name, created.metadata.uid, true]);

    const status = (await getRate(key))!.status!;
    assert.equal(status.rate, '1.0523');
    assert.equal(status.configMap, key.name);
    assert.equal(status.nextRefreshAt, '2026-11-23T11:00:00Z', 'refreshes fall on the hour');
    assert.equal(status.observedGeneration, 1);
    assert.deepEqual([ready((await getRate(key))!)?.status, ready((await getRate(key))!)?.reason], ['True', 'RateCurrent']);
  });

  test('a deleted or edited ConfigMap comes back from status, without asking the provider', async () => {
    const before = standIn.requests.length;
    const cm = (await getCm(key))!;
    await kube.delete(ConfigMap, key);
    await send(ConfigMap, cm, 'delete', 'Resource');
    assert.equal((await getCm(key))?.data?.rate, '1.0523');

    const edited = await kube.mergePatch<RateConfigMap>(ConfigMap, key, { data: { rate: '0' } });
    await send(ConfigMap, edited, 'update', 'Resource');
    assert.equal((await getCm(key))?.data?.rate, '1.0523');
    assert.equal(standIn.requests.length, before);
  });

  test('an early reconcile changes nothing', async () => {
    const before = (await getRate(key))!;
    await touch(before);
    assert.equal((await getRate(key))!.metadata.resourceVersion, before.metadata.resourceVersion);
  });

  test('the provider changes the rate: the next refresh updates it', async () => {
    standIn.rates.USD = 1.0611;
    standIn.date = '2026-11-23';
    await touch((await getRate(key))!);
    assert.equal((await getCm(key))?.data?.rate, '1.0523', 'not due yet');
    clock += HOUR;
    await touch((await getRate(key))!);
    assert.deepEqual((await getCm(key))?.data, { rate: '1.0611', base: 'EUR', date: '2026-11-23' });
    assert.equal((await getRate(key))!.status!.nextRefreshAt, '2026-11-23T12:00:00Z');
  });

  test('a spec change refreshes at once', async () => {
    const before = standIn.requests.length;
    await touch(await kube.mergePatch(ExchangeRateKind, key, { spec: { currency: 'CHF' } }));
    assert.equal((await getCm(key))?.data?.rate, '0.93');
    assert.equal(standIn.requests.length, before, 'the refresh slot already holds every currency');
    await touch(await kube.mergePatch(ExchangeRateKind, key, { spec: { currency: 'USD' } }));
  });
});

describe('provider failures', () => {
  const key = { namespace: 'default', name: 'exchange-rate-usd' };
  const failingRefresh = async (mode: StandInProvider['mode']) => {
    standIn.mode = mode;
    clock += HOUR;
    await touch((await getRate(key))!);
    return (await getRate(key))!;
  };

  test('provider down: Ready=False with its error, the old rate kept; recovery when it is back', async () => {
    const rate = await failingRefresh({ type: 'error', status: 503, body: '{"message":"maintenance"}' });
    assert.deepEqual([ready(rate)?.status, ready(rate)?.reason], ['False', 'ProviderError']);
    assert.match(ready(rate)!.message, /provider answered 503: "maintenance"/);
    assert.equal(rate.status!.rate, '1.0611');
    assert.equal((await getCm(key))?.data?.rate, '1.0611');
    assert.equal(Date.parse(rate.status!.nextRefreshAt!), clock + 30_000, 'asks again after EXCHANGE_RATE_RETRY_SECONDS');

    standIn.mode = { type: 'rates' };
    standIn.rates.USD = 1.07;
    clock += 31_000;
    await touch((await getRate(key))!);
    const recovered = (await getRate(key))!;
    assert.deepEqual([ready(recovered)?.status, recovered.status!.rate], ['True', '1.07']);
    assert.equal((await getCm(key))?.data?.rate, '1.07');
  });

  test('a slow answer past the timeout, and malformed JSON, are reported the same way', async () => {
    const slow = await failingRefresh({ type: 'slow', delayMs: 5000 });
    assert.match(ready(slow)!.message, /no answer within 400 ms/);
    assert.equal(slow.status!.rate, '1.07');
    const malformed = await failingRefresh({ type: 'malformed' });
    assert.match(ready(malformed)!.message, /malformed JSON/);
    assert.equal((await getCm(key))?.data?.rate, '1.07');
    standIn.mode = { type: 'rates' };
  });

  test('a currency missing from rates fails that ExchangeRate only', async () => {
    delete standIn.rates.PLN;
    clock += HOUR;
    const pln = await kube.create<ExchangeRate>(ExchangeRateKind, newRate('default', 'zloty', 'PLN'));
    await touch(pln, 'add');
    await touch((await getRate(key))!);
    assert.deepEqual(
      [ready(await getRate({ namespace: 'default', name: 'zloty' }))?.reason, await getCm({ namespace: 'default', name: 'zloty' })],
      ['CurrencyNotQuoted', undefined],
    );
    assert.equal(ready(await getRate(key))?.status, 'True');
    standIn.rates.PLN = 4.3;
  });

  test('a currency missing from the answer is asked again after the retry interval, not at the next slot', async () => {
    const zloty = { namespace: 'default', name: 'zloty' };
    const before = standIn.requests.length;
    clock += 31_000;
    await touch((await getRate(zloty))!);
    assert.equal(standIn.requests.length - before, 1, 'one new request');
    assert.deepEqual([ready(await getRate(zloty))?.reason, (await getCm(zloty))?.data?.rate], ['RateCurrent', '4.3']);
  });

  test('an oversized answer, a malformed date and an absurd rate are provider errors; nothing of them is written', async () => {
    const kept = (await getCm(key))!.data;
    const cases: [() => void, RegExp][] = [
      [() => (standIn.date = 'x'.repeat(2_000_000)), /provider answered 200 with more than 65536 bytes; not read/],
      [() => (standIn.date = 'x'.repeat(1000)), /provider answered date "x{40}"… \(1000 characters\), not YYYY-MM-DD/],
      [() => (standIn.rates.USD = 1e21), /provider answered rate 1e\+21 for USD, not a positive decimal number/],
    ];
    for (const [breakProvider, message] of cases) {
      breakProvider();
      try {
        const rate = await failingRefresh({ type: 'rates' });
        assert.deepEqual([ready(rate)?.status, ready(rate)?.reason], ['False', 'ProviderError'], String(message));
        assert.match(ready(rate)!.message, message);
        assert.equal(rate.status!.rate, kept!.rate);
        assert.deepEqual((await getCm(key))?.data, kept);
      } finally {
        standIn.date = '2026-11-23';
        standIn.rates.USD = 1.07;
      }
    }
  });

  test("a currency change while the provider fails: neither status nor ConfigMap shows the old currency's rate", async () => {
    standIn.mode = { type: 'error', status: 503, body: '{"message":"maintenance"}' };
    clock += HOUR;
    await touch(await kube.mergePatch(ExchangeRateKind, key, { spec: { currency: 'JPY' } }));
    const failing = (await getRate(key))!;
    assert.deepEqual(
      [ready(failing)?.reason, ready(failing)?.message],
      ['ProviderError', 'provider answered 503: "maintenance"; no rate for JPY yet'],
    );
    assert.deepEqual([failing.status!.rate, failing.status!.currency, failing.status!.date], [undefined, undefined, undefined]);
    assert.deepEqual((await getCm(key))?.data ?? {}, {}, 'emptied, not the USD rate');

    standIn.mode = { type: 'rates' };
    clock += 31_000;
    await touch((await getRate(key))!);
    const recovered = (await getRate(key))!;
    assert.deepEqual([ready(recovered)?.status, recovered.status!.rate, recovered.status!.currency], ['True', '162.5', 'JPY']);
    assert.equal((await getCm(key))?.data?.rate, '162.5');
    await touch(await kube.mergePatch(ExchangeRateKind, key, { spec: { currency: 'USD' } }));
    assert.equal((await getCm(key))?.data?.rate, '1.07');
  });

  test('after the refresh interval was lowered, a due time set under the old one is pulled in', async () => {
    const hourly = (await getRate(key))!;
    assert.ok(Date.parse(hourly.status!.nextRefreshAt!) - clock > 60_000, 'due later than one minute from now');
    const everyMinute = await serveFunction(exchangeRate, kubeconfig, {
      config: resolveConfig(exchangeRate.name, exchangeRate.config, { ...functionConfig, EXCHANGE_RATE_REFRESH_SECONDS: '60' }),
      now: () => new Date(clock),
    });
    try {
      const answer = await deliver(
        everyMinute.url,
        apiServerSourceEvent({ server: cluster.cp.server, kind: ExchangeRateKind, object: hourly, action: 'update', mode: 'Reference' }),
      );
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      const pulledIn = Date.parse((await getRate(key))!.status!.nextRefreshAt!);
      assert.equal(pulledIn, (Math.floor(clock / 60_000) + 1) * 60_000, 'the end of the current minute');

      const before = standIn.requests.length;
      clock = pulledIn;
      await deliver(
        everyMinute.url,
        apiServerSourceEvent({
          server: cluster.cp.server,
          kind: ExchangeRateKind,
          object: (await getRate(key))!,
          action: 'update',
          mode: 'Reference',
        }),
      );
      assert.equal(standIn.requests.length - before, 1, 'refreshed when due');
      assert.equal(Date.parse((await getRate(key))!.status!.nextRefreshAt!), pulledIn + 60_000);
    } finally {
      await everyMinute.close();
    }
  });
});

describe('schema and privileges', () => {
  test('an invalid currency is refused by the schema', async () => {
    for (const currency of ['EUR', 'usd', 'XYZ', '']) {
      await assert.rejects(
        kube.create(ExchangeRateKind, newRate('default', `bad-${currency.toLowerCase() || 'empty'}`, currency)),
        (error: ApiError) => error.code === 422,
        currency,
      );
    }
  });

  test('the generated role allows what reconcile needs and nothing more', async () => {
    await assert.rejects(functionKube.list(Secret, { namespace: 'default' }), (error: ApiError) => error.code === 403);
    await assert.rejects(
      functionKube.delete(ConfigMap, { namespace: 'default', name: 'exchange-rate-usd' }),
      (error: ApiError) => error.code === 403,
    );
    await assert.rejects(
      functionKube.mergePatch(ExchangeRateKind, { namespace: 'default', name: 'exchange-rate-usd' }, { spec: { currency: 'GBP' } }),
      (error: ApiError) => error.code === 403,
    );
  });

  test('an event for an ExchangeRate that does not exist writes nothing and asks no provider', async () => {
    const before = standIn.requests.length;
    await touch(newRate('default', 'ghost', 'USD'), 'add');
    assert.equal(await getCm({ namespace: 'default', name: 'ghost' }), undefined);
    assert.equal(standIn.requests.length, before);
  });

  test('a ConfigMap of the same name that is not ours is left alone and reported, warned once', async () => {
    const key = { namespace: 'default', name: 'squatted' };
    await kube.create(ConfigMap, { metadata: { name: 'squatted', namespace: 'default' }, data: { rate: 'mine' } });
    await touch(await kube.create(ExchangeRateKind, newRate('default', 'squatted', 'GBP')), 'add');
    assert.equal((await getCm(key))?.data?.rate, 'mine');
    assert.equal(ready(await getRate(key))?.reason, 'ConfigMapNameTaken');
    // Every later reconcile (a resync, the next refresh) finds the name still taken: Ready says so already.
    await touch((await getRate(key))!);
    clock += HOUR;
    await touch((await getRate(key))!);
    assert.equal(ready(await getRate(key))?.reason, 'ConfigMapNameTaken');
    assert.equal(await warnings(key, 'ConfigMapNameTaken'), 1);
  });

  test('a ConfigMap the API server forbids (403: a ResourceQuota) is reported once, answered 200; created once the quota is gone', async () => {
    const Quota: ResourceKind = { group: '', version: 'v1', kind: 'ResourceQuota', plural: 'resourcequotas', namespaced: true };
    await kube.create(Namespace, { metadata: { name: 'fx-quota' } });
    const quotaKey = { namespace: 'fx-quota', name: 'no-configmaps' };
    const quota = await kube.create<KubeObject & { spec: unknown }>(Quota, { metadata: quotaKey, spec: { hard: { configmaps: '0' } } });
    // Admission counts against the quota's status, which the quota controller computes; the test
    // control plane runs no quota controller (nor the root CA publisher: no kube-root-ca.crt to
    // count), so the status is written as it would write it. A hard limit of 0 refuses every
    // ConfigMap, whatever else the namespace holds.
    await kube.replace(Quota, { ...quota, status: { hard: { configmaps: '0' }, used: { configmaps: '0' } } }, 'status');
    const key = { namespace: 'fx-quota', name: 'quota-bound' };
    standIn.mode = { type: 'rates' };
    // Tried again a minute later, not at the next hourly refresh: the reply event names its time.
    const message = HTTP.binary(
      apiServerSourceEvent({
        server: cluster.cp.server,
        kind: ExchangeRateKind,
        object: await kube.create(ExchangeRateKind, newRate(key.namespace, key.name, 'CHF')),
        action: 'add',
        mode: 'Reference',
      }),
    );
    const answer = await fetch(fn.url, {
      method: 'POST',
      headers: message.headers as Record<string, string>,
      body: message.body as string,
    });
    assert.equal(answer.status, 200, await answer.text());
    assert.equal(answer.headers.get(`ce-${NOT_BEFORE_EXTENSION}`), new Date(clock + FORBIDDEN_RETRY_SECONDS * 1000).toISOString());
    const refused = (await getRate(key))!;
    assert.deepEqual([ready(refused)?.status, ready(refused)?.reason], ['False', 'ConfigMapForbidden']);
    assert.match(ready(refused)!.message, /^the API server refused to write ConfigMap quota-bound: .*exceeded quota: no-configmaps/);
    assert.deepEqual(
      [refused.status?.rate, refused.status?.conditions?.find((condition) => condition.type === 'Refreshed')?.reason],
      [String(standIn.rates.CHF), 'RateFetched'],
      'status still written: the refresh itself succeeded',
    );
    assert.equal(await getCm(key), undefined);

    // Redeliveries and a resync meet the same refusal: answered 200 (touch and resync check), no second Warning.
    await touch(refused);
    await resync();
    assert.equal(ready(await getRate(key))?.reason, 'ConfigMapForbidden');
    assert.equal(await warnings(key, 'ConfigMapForbidden'), 1);

    await kube.delete(Quota, quotaKey);
    await touch((await getRate(key))!);
    assert.equal((await getCm(key))?.data?.rate, String(standIn.rates.CHF), 'the next delivery creates it');
    assert.deepEqual([ready((await getRate(key))!)?.status, ready((await getRate(key))!)?.reason], ['True', 'RateCurrent']);
  });
});

describe('scale', () => {
  test('100 ExchangeRates cost one provider request per refresh', async () => {
    const currencies = ['CAD', 'CHF', 'GBP', 'JPY', 'PLN', 'USD'];
    await Promise.all(
      Array.from({ length: 100 }, (_, i) => kube.create(ExchangeRateKind, newRate('many', `rate-${i}`, currencies[i % currencies.length]))),
    );
    clock += HOUR;
    let before = standIn.requests.length;
    await resync();
    assert.equal(standIn.requests.length - before, 1, 'first refresh of all 100');
    const rates = (await kube.list<ExchangeRate>(ExchangeRateKind, { namespace: 'many' })).items;
    assert.equal(rates.filter((rate) => ready(rate)?.status === 'True').length, 100);
    assert.equal((await kube.list(ConfigMap, { namespace: 'many' })).items.filter((cm) => cm.metadata.labels?.[OWNER_LABEL]).length, 100);

    standIn.rates.JPY = 170.25;
    before = standIn.requests.length;
    await resync();
    assert.equal(standIn.requests.length, before, 'not due within the slot: no request');
    clock += HOUR;
    await resync();
    assert.equal(standIn.requests.length - before, 1, 'the next refresh of all 100: one request');
    assert.equal((await getCm({ namespace: 'many', name: 'rate-3' }))?.data?.rate, '170.25');
  });

  test('a resync of settled ExchangeRates writes nothing at under one API request per object; a ConfigMap changed without its event comes back', async () => {
    const requests = async () => (await fn.metrics.apiRequests.get()).values.reduce((sum, value) => sum + value.value, 0);
    const versions = async () =>
      JSON.stringify(
        [
          ...(await kube.list<ExchangeRate>(ExchangeRateKind, { namespace: 'many' })).items,
          ...(await kube.list(ConfigMap, { namespace: 'many' })).items,
        ].map((object) => [object.kind, object.metadata.name, object.metadata.resourceVersion]),
      );
    const everywhere = (await kube.list(ExchangeRateKind)).items.length;
    const unchanged = await versions();
    const before = await requests();
    await resync();
    const spent = (await requests()) - before;
    assert.ok(spent <= everywhere, `${spent} API requests for a resync of ${everywhere} ExchangeRates`);
    assert.equal(await versions(), unchanged, 'nothing of namespace many written');

    const providerBefore = standIn.requests.length;
    await kube.delete(ConfigMap, { namespace: 'many', name: 'rate-5' });
    await kube.mergePatch(ConfigMap, { namespace: 'many', name: 'rate-7' }, { data: { rate: '0' } });
    await resync();
    for (const name of ['rate-5', 'rate-7']) {
      const rate = (await getRate({ namespace: 'many', name }))!;
      assert.ok(rate.status?.rate);
      assert.equal((await getCm({ namespace: 'many', name }))?.data?.rate, rate.status.rate, name);
    }
    assert.equal(standIn.requests.length, providerBefore, 'restored from status');
  });
});

describe('a failing provider, many ExchangeRates', () => {
  const HERD = 40;
  const currencies = ['CAD', 'CHF', 'GBP', 'JPY', 'PLN', 'USD'];
  const herd = async () => (await kube.list<ExchangeRate>(ExchangeRateKind, { namespace: 'herd' })).items;
  const requestsDuring = async (step: () => Promise<unknown>) => {
    const before = standIn.requests.length;
    await step();
    return standIn.requests.length - before;
  };

  before(async () => {
    await Promise.all(
      Array.from({ length: HERD }, (_, i) =>
        kube.create(ExchangeRateKind, newRate('herd', `herd-${i}`, currencies[i % currencies.length])),
      ),
    );
    standIn.mode = { type: 'rates' };
    clock += HOUR;
    await resync();
    assert.equal((await herd()).filter((rate) => ready(rate)?.status === 'True').length, HERD);
  });

  after(() => {
    standIn.mode = { type: 'rates' };
  });

  test('the provider down: one provider call per retry interval for all of them, the rest fail at once; one Warning each', async () => {
    standIn.mode = { type: 'error', status: 500, body: '{"message":"boom"}' };
    clock += HOUR;
    const failedAt = clock;
    assert.equal(await requestsDuring(resync), PROVIDER_ATTEMPTS, 'one call (its in-request attempts), not one per ExchangeRate');
    const failing = await herd();
    for (const rate of failing) {
      assert.deepEqual(
        [ready(rate)?.status, ready(rate)?.reason, ready(rate)?.message],
        ['False', 'ProviderError', 'provider answered 500: "boom"; keeping the last rate'],
        rate.metadata.name,
      );
      assert.equal(Date.parse(rate.status!.nextRefreshAt!), failedAt + 30_000, 'all due again when the cache asks again');
    }

    // Within the retry interval: a new ExchangeRate (due at once) fails without a call; the others are not due and stay as they are.
    clock += 10_000;
    const latecomer = await kube.create<ExchangeRate>(ExchangeRateKind, newRate('herd', 'latecomer', 'GBP'));
    assert.equal(await requestsDuring(() => touch(latecomer, 'add')), 0, 'the kept failure answers');
    const late = (await getRate({ namespace: 'herd', name: 'latecomer' }))!;
    assert.deepEqual([ready(late)?.reason, ready(late)?.message], ['ProviderError', 'provider answered 500: "boom"; no rate for GBP yet']);
    assert.equal(Date.parse(late.status!.nextRefreshAt!), failedAt + 30_000);
    assert.equal(await requestsDuring(resync), 0);
    const versions = (rates: ExchangeRate[]) =>
      rates
        .filter((rate) => rate.metadata.name !== 'latecomer')
        .map((rate) => `${rate.metadata.name}@${rate.metadata.resourceVersion}`)
        .sort();
    assert.deepEqual(versions(await herd()), versions(failing), 'a not-due reconcile writes nothing: Ready stays False');

    clock = failedAt + 30_000;
    assert.equal(await requestsDuring(resync), PROVIDER_ATTEMPTS, 'at the retry time: one call again');
    const again = await herd();
    assert.equal(again.filter((rate) => ready(rate)?.reason === 'ProviderError').length, HERD + 1);
    for (const rate of again)
      assert.equal(
        await providerWarnings({ namespace: 'herd', name: rate.metadata.name! }),
        1,
        `${rate.metadata.name}: one Warning for the outage`,
      );

    standIn.mode = { type: 'rates' };
    clock += 30_000;
    assert.equal(await requestsDuring(resync), 1, 'recovery: one request');
    assert.equal((await herd()).filter((rate) => ready(rate)?.status === 'True').length, HERD + 1);
  });

  test("a 429's Retry-After holds every ExchangeRate of the process, not only the one that got it", async () => {
    standIn.mode = { type: 'error', status: 429, body: '{"message":"slow down"}', retryAfter: '300' };
    clock += HOUR;
    const limitedAt = clock;
    assert.equal(await requestsDuring(resync), 1, 'one request; the hint ends the in-request retries');

    // Past our own retry interval, before the provider's: what is due anyway (a spec change, a new object) does not ask.
    clock = limitedAt + 61_000;
    assert.equal(
      await requestsDuring(async () =>
        touch(await kube.mergePatch(ExchangeRateKind, { namespace: 'herd', name: 'herd-0' }, { spec: { currency: 'JPY' } })),
      ),
      0,
    );
    assert.match(
      ready(await getRate({ namespace: 'herd', name: 'herd-0' }))!.message,
      /^provider answered 429: "slow down"; no rate for JPY yet$/,
    );
    const other = await kube.create<ExchangeRate>(ExchangeRateKind, newRate('herd', 'latecomer-2', 'USD'));
    assert.equal(await requestsDuring(() => touch(other, 'add')), 0);
    assert.equal(await requestsDuring(resync), 0);
    for (const rate of await herd())
      assert.equal(Date.parse(rate.status!.nextRefreshAt!), limitedAt + 300_000, `${rate.metadata.name}: due when the provider allows`);

    standIn.mode = { type: 'rates' };
    clock = limitedAt + 300_000;
    assert.equal(await requestsDuring(resync), 1, 'after the Retry-After: one request for all');
    assert.deepEqual(
      [
        ready(await getRate({ namespace: 'herd', name: 'herd-0' }))?.status,
        (await getCm({ namespace: 'herd', name: 'herd-0' }))?.data?.rate,
      ],
      ['True', String(standIn.rates.JPY)],
    );
  });
});

describe('Ready during an outage', () => {
  const key = { namespace: 'default', name: 'exchange-rate-usd' };

  test('stays False across reconciles that are not due, until a refresh succeeds; the outage is warned once', async () => {
    standIn.mode = { type: 'rates' };
    clock += HOUR;
    await touch((await getRate(key))!);
    assert.equal(ready((await getRate(key))!)?.status, 'True', 'the provider answers before the outage');
    standIn.mode = { type: 'error', status: 503, body: '{"message":"maintenance"}' };
    clock += HOUR;
    const warned = await providerWarnings(key);
    await touch((await getRate(key))!);
    const failed = (await getRate(key))!;
    assert.deepEqual([ready(failed)?.status, ready(failed)?.reason], ['False', 'ProviderError']);
    assert.equal(await providerWarnings(key), warned + 1);

    clock += 10_000;
    assert.equal(await requestsAfterTouch(key), 0, 'not due');
    const notDue = (await getRate(key))!;
    assert.deepEqual(
      [ready(notDue)?.status, ready(notDue)?.reason],
      ['False', 'ProviderError'],
      'not back to RateCurrent while the provider is down',
    );
    assert.equal(notDue.metadata.resourceVersion, failed.metadata.resourceVersion, 'no status write');

    clock += 20_000;
    assert.equal(await requestsAfterTouch(key), PROVIDER_ATTEMPTS, 'due: asked again');
    assert.deepEqual(
      [ready((await getRate(key))!)?.status, await providerWarnings(key)],
      ['False', warned + 1],
      'still down: no second Warning',
    );
    clock += 10_000;
    assert.equal(await requestsAfterTouch(key), 0);
    assert.equal(ready((await getRate(key))!)?.status, 'False');

    standIn.mode = { type: 'rates' };
    clock += 20_000;
    assert.equal(await requestsAfterTouch(key), 1);
    assert.deepEqual([ready((await getRate(key))!)?.status, ready((await getRate(key))!)?.reason], ['True', 'RateCurrent']);
  });

  const requestsAfterTouch = async (rateKey: ObjectKey) => {
    const before = standIn.requests.length;
    await touch((await getRate(rateKey))!);
    return standIn.requests.length - before;
  };
});

describe('an immutable ConfigMap', () => {
  const key = { namespace: 'default', name: 'frozen' };

  test('is reported (Ready=False, one Warning, answered 200), not written; status has the new rate; deleting it brings it back with that rate', async () => {
    standIn.mode = { type: 'rates' };
    await touch(await kube.create(ExchangeRateKind, newRate('default', 'frozen', 'USD', { team: 'fx' })), 'add');
    const made = (await getCm(key))!;
    assert.equal(made.data?.rate, String(standIn.rates.USD));
    // Frozen by hand (or by a policy); before the fix, every reconcile after the next rate change answered 500.
    await kube.replace(ConfigMap, { ...made, immutable: true });
    const usd = standIn.rates.USD;
    standIn.rates.USD = 1.2;
    try {
      clock += HOUR;
      await touch((await getRate(key))!);
      const reported = (await getRate(key))!;
      assert.deepEqual([ready(reported)?.status, ready(reported)?.reason], ['False', 'ConfigMapImmutable']);
      assert.equal(
        ready(reported)?.message,
        `ConfigMap frozen is immutable and still holds rate ${usd} (provider date ${made.data?.date}) where it should hold rate 1.2 (provider date ${standIn.date}); delete it and it is recreated with that rate`,
      );
      assert.deepEqual(
        [reported.status?.rate, reported.status?.conditions?.find((condition) => condition.type === 'Refreshed')?.reason],
        ['1.2', 'RateFetched'],
        'the refresh itself succeeded',
      );
      assert.ok(Date.parse(reported.status!.nextRefreshAt!) > clock, 'next refresh ahead, not in the past');
      assert.equal((await getCm(key))?.data?.rate, String(usd), 'the ConfigMap is left as it is');
      assert.equal(await warnings(key, 'ConfigMapImmutable'), 1);

      // Its labels are metadata, still writable: they follow the ExchangeRate's; the report stands, warned once.
      await touch(await kube.mergePatch(ExchangeRateKind, key, { metadata: { labels: { team: 'treasury' } } }));
      const relabelled = (await getCm(key))!;
      assert.deepEqual([relabelled.metadata.labels?.team, relabelled.immutable, relabelled.data?.rate], ['treasury', true, String(usd)]);
      assert.equal(ready((await getRate(key))!)?.reason, 'ConfigMapImmutable');
      assert.equal(await warnings(key, 'ConfigMapImmutable'), 1, 'not warned again for the same report');

      // The remedy the message names: delete it; it comes back, mutable, from status, without asking the provider.
      const before = standIn.requests.length;
      await kube.delete(ConfigMap, key);
      await send(ConfigMap, relabelled, 'delete', 'Resource');
      const remade = (await getCm(key))!;
      assert.deepEqual([remade.data?.rate, remade.immutable, remade.metadata.labels?.team], ['1.2', undefined, 'treasury']);
      assert.deepEqual([ready((await getRate(key))!)?.status, ready((await getRate(key))!)?.reason], ['True', 'RateCurrent']);
      assert.equal(standIn.requests.length, before);
    } finally {
      standIn.rates.USD = usd;
    }
  });
});

describe('a reconcile killed between its ConfigMap write and its status write', () => {
  const key = { namespace: 'default', name: 'crashed' };

  test('the retry, the provider down, keeps the newer rate in the ConfigMap instead of writing the older one of status over it', async () => {
    let rate = await kube.create<ExchangeRate>(ExchangeRateKind, newRate('default', 'crashed', 'USD'));
    // Before the killed reconcile: the last good rate 1.00 of 2024-01-01 in status, a refresh due.
    rate = await kube.replace<ExchangeRate>(
      ExchangeRateKind,
      {
        ...rate,
        status: {
          rate: '1.00',
          base: 'EUR',
          date: '2024-01-01',
          currency: 'USD',
          configMap: 'crashed',
          nextRefreshAt: '2024-01-01T00:00:00Z',
          observedGeneration: rate.metadata.generation,
        },
      },
      'status',
    );
    // It fetched 2.00 of 2024-01-02 and wrote the ConfigMap as the function does, then was killed before its status write.
    const written = await kube.create<RateConfigMap>(ConfigMap, desiredConfigMap(rate, { rate: '2.00', base: 'EUR', date: '2024-01-02' }));
    assert.equal(written.metadata.annotations?.[CURRENCY_ANNOTATION], 'USD');
    standIn.mode = { type: 'error', status: 503, body: '{"message":"maintenance"}' };
    try {
      clock += HOUR; // a new refresh slot: the provider is asked (not the slot's kept answer), and is down
      await touch(rate);
      assert.deepEqual((await getCm(key))?.data, { rate: '2.00', base: 'EUR', date: '2024-01-02' }, 'not rolled back to 1.00');
      const failed = (await getRate(key))!;
      assert.deepEqual([ready(failed)?.status, ready(failed)?.reason], ['False', 'ProviderError']);
      // Status is not taken from the ConfigMap (whoever may edit ConfigMaps could write it): it keeps the last rate it fetched.
      assert.deepEqual([failed.status?.rate, failed.status?.date], ['1.00', '2024-01-01']);

      // A reconcile that is not due (the ConfigMap's own event) keeps it too.
      clock += 10_000;
      await send(ConfigMap, (await getCm(key))!, 'update', 'Resource');
      assert.equal((await getCm(key))?.data?.rate, '2.00');
    } finally {
      standIn.mode = { type: 'rates' };
    }
    // The provider back: the next refresh writes both, and they agree.
    clock += 31_000;
    await touch((await getRate(key))!);
    const recovered = (await getRate(key))!;
    assert.deepEqual(
      [ready(recovered)?.status, recovered.status?.rate, recovered.status?.date],
      ['True', String(standIn.rates.USD), standIn.date],
    );
    assert.deepEqual((await getCm(key))?.data, { rate: String(standIn.rates.USD), base: 'EUR', date: standIn.date });
  });
});
