// ExchangeRate: desired state and refresh timing (pure), configuration, and the Frankfurter
// client against the loopback stand-in (errors, timeout, malformed JSON, missing currency).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, parseConfig } from '../../functions/exchange-rate/config.ts';
import {
  configMapAction,
  desiredConfigMap,
  fromQuote,
  nextStatus,
  OWNER_LABEL,
  refreshDue,
  slotEnd,
  slotOf,
  valuesFor,
  type ExchangeRate,
} from '../../functions/exchange-rate/desired.ts';
import { CURRENCIES, frankfurter, httpGet, parseQuote, ProviderError, SlotCache, type RateProvider } from '../../functions/exchange-rate/provider.ts';
import { httpClient } from '../../functions/runtime/http.ts';
import { startRateProvider, type StandInProvider } from '../support/rate-provider.ts';

const rate = (overrides: { currency?: string; generation?: number; status?: ExchangeRate['status']; labels?: Record<string, string> } = {}): ExchangeRate => ({
  apiVersion: 'operators.brennerm.github.io/v1',
  kind: 'ExchangeRate',
  metadata: { name: 'exchange-rate-usd', namespace: 'default', uid: 'er-uid', generation: overrides.generation ?? 1, labels: overrides.labels ?? { team: 'fx' } },
  spec: { currency: overrides.currency ?? 'USD' },
  ...(overrides.status ? { status: overrides.status } : {}),
});

const values = { rate: '1.0523', base: 'EUR', date: '2026-11-20' };
const at = (iso: string) => new Date(iso);

describe('refresh timing', () => {
  test('slots are wall-clock multiples of the interval: every object is due at the same moment', () => {
    const slot = slotOf(at('2026-11-23T10:17:03Z'), 3600);
    assert.equal(slotEnd(slot, 3600).toISOString(), '2026-11-23T11:00:00.000Z');
    assert.equal(slotOf(at('2026-11-23T10:59:59Z'), 3600), slot);
    assert.equal(slotOf(at('2026-11-23T11:00:00Z'), 3600), slot + 1);
  });

  test('due without a rate, after a spec change, and once nextRefreshAt has come; not before', () => {
    const fresh = { rate: '1.05', currency: 'USD', nextRefreshAt: '2026-11-23T11:00:00Z', observedGeneration: 1 };
    assert.ok(refreshDue(rate(), at('2026-11-23T10:00:00Z')), 'no rate yet');
    assert.equal(refreshDue(rate({ status: fresh }), at('2026-11-23T10:30:00Z')), false);
    assert.ok(refreshDue(rate({ status: fresh }), at('2026-11-23T11:00:00Z')));
    assert.ok(refreshDue(rate({ currency: 'CHF', generation: 2, status: fresh }), at('2026-11-23T10:30:00Z')), 'currency changed');
  });

  test('between refreshes the ConfigMap is restored from status; a rate of another currency is never used', () => {
    const status = { rate: '1.05', currency: 'USD', base: 'EUR', date: '2026-11-20' };
    assert.deepEqual(valuesFor(rate({ status }), undefined), { rate: '1.05', base: 'EUR', date: '2026-11-20' });
    assert.equal(valuesFor(rate({ currency: 'CHF', status }), undefined), undefined);
    assert.deepEqual(valuesFor(rate({ status }), values), values);
  });
});

describe('the ConfigMap', () => {
  test('holds rate, base and date, carries the owner labels and a controller ownerReference', () => {
    const cm = desiredConfigMap(rate(), values);
    assert.equal(cm.metadata.name, 'exchange-rate-usd');
    assert.deepEqual(cm.data, { rate: '1.0523', base: 'EUR', date: '2026-11-20' });
    assert.deepEqual(cm.metadata.labels, { team: 'fx', [OWNER_LABEL]: 'exchange-rate-usd' });
    const [owner] = cm.metadata.ownerReferences!;
    assert.deepEqual([owner.kind, owner.name, owner.uid, owner.controller], ['ExchangeRate', 'exchange-rate-usd', 'er-uid', true]);
  });

  test('is created when missing, kept when right, corrected when edited, never taken from someone else', () => {
    const er = rate();
    assert.equal(configMapAction(er, undefined, values).type, 'create');
    const ours = { ...desiredConfigMap(er, values), metadata: { ...desiredConfigMap(er, values).metadata, resourceVersion: '5', uid: 'cm' } };
    assert.equal(configMapAction(er, ours, values).type, 'keep');
    const edited = { ...ours, data: { rate: '999' } };
    const action = configMapAction(er, edited, values);
    assert.equal(action.type, 'update');
    assert.equal(action.type === 'update' && action.desired.metadata.resourceVersion, '5', 'update keeps the read resourceVersion');
    assert.equal(configMapAction(er, { metadata: { name: 'exchange-rate-usd', namespace: 'default' }, data: {} }, values).type, 'blocked');
  });
});

describe('status', () => {
  test('after a fetch: rate, provider date, currency, lastUpdated, nextRefreshAt and Ready=True', () => {
    const now = at('2026-11-23T10:17:03Z');
    const status = nextStatus(rate(), rate(), { fetched: values, now, nextRefreshAt: at('2026-11-23T11:00:00Z') })!;
    assert.equal(status.rate, '1.0523');
    assert.equal(status.date, '2026-11-20');
    assert.equal(status.currency, 'USD');
    assert.equal(status.lastUpdated, '2026-11-23T10:17:03Z');
    assert.equal(status.nextRefreshAt, '2026-11-23T11:00:00Z');
    assert.equal(status.conditions![0].status, 'True');
  });

  test('while the provider fails: Ready=False with its words, the last good rate kept', () => {
    const before = { rate: '1.05', currency: 'USD', lastUpdated: '2026-11-23T09:00:00Z' };
    const problem = { type: 'Ready', status: 'False' as const, reason: 'ProviderError', message: 'provider answered 503: down' };
    const status = nextStatus(rate({ status: before }), rate({ status: before }), { problem, now: at('2026-11-23T10:00:00Z'), nextRefreshAt: at('2026-11-23T10:01:00Z') })!;
    assert.equal(status.rate, '1.05');
    assert.equal(status.lastUpdated, '2026-11-23T09:00:00Z');
    assert.deepEqual([status.conditions![0].status, status.conditions![0].reason, status.conditions![0].message], ['False', 'ProviderError', 'provider answered 503: down']);
  });

  test('a currency missing from the answer is reported for that object only', () => {
    const quote = { base: 'EUR', date: '2026-11-20', rates: { USD: '1.05' } };
    assert.deepEqual(fromQuote(rate(), quote), { values: { rate: '1.05', base: 'EUR', date: '2026-11-20' } });
    const missing = fromQuote(rate({ currency: 'PLN' }), quote);
    assert.ok('problem' in missing && missing.problem.reason === 'CurrencyNotQuoted');
  });
});

describe('configuration', () => {
  test('defaults to the real Frankfurter, hourly, no key', () => {
    const config = parseConfig({});
    assert.deepEqual(config, { baseUrl: 'https://api.frankfurter.dev', headers: {}, refreshSeconds: 3600, timeoutMs: 5000, retrySeconds: 60 });
  });

  test('an API key goes into its header beside extra headers', () => {
    const config = parseConfig({ EXCHANGE_RATE_PROVIDER_HEADERS: '{"X-Client":"ops"}', EXCHANGE_RATE_API_KEY: 'k-123', EXCHANGE_RATE_API_KEY_HEADER: 'X-Api-Key' });
    assert.deepEqual(config.headers, { 'X-Client': 'ops', 'X-Api-Key': 'k-123' });
  });

  test('bad values name the variable', () => {
    for (const [name, value] of [['EXCHANGE_RATE_PROVIDER_URL', 'not a url'], ['EXCHANGE_RATE_PROVIDER_URL', 'file:///etc/passwd'], ['EXCHANGE_RATE_PROVIDER_HEADERS', '[1]'], ['EXCHANGE_RATE_PROVIDER_HEADERS', '{"a":1}'], ['EXCHANGE_RATE_REFRESH_SECONDS', '-5'], ['EXCHANGE_RATE_TIMEOUT_MS', 'soon']]) {
      assert.throws(() => parseConfig({ [name]: value }), (error: Error) => error instanceof ConfigError && error.message.includes(name), `${name}=${value}`);
    }
  });
});

describe('the Frankfurter client against the stand-in', () => {
  let standIn: StandInProvider;
  before(async () => {
    standIn = await startRateProvider();
  });
  after(() => standIn.close());

  const client = (overrides: { timeoutMs?: number; attempts?: number; headers?: Record<string, string> } = {}) =>
    frankfurter({ baseUrl: standIn.url, headers: overrides.headers ?? {}, timeoutMs: overrides.timeoutMs ?? 2000, attempts: overrides.attempts ?? 1, backoffMs: 10, get: httpGet(httpClient()) });

  test('one request for every supported currency, with the configured headers; rates as the JSON prints them', async () => {
    standIn.mode = { type: 'rates' };
    standIn.requests.length = 0;
    const quote = await client({ headers: { 'X-Api-Key': 'k' } }).latest();
    assert.equal(standIn.requests.length, 1);
    assert.equal(standIn.requests[0].path, `/v1/latest?from=EUR&to=${CURRENCIES.join(',')}`);
    assert.equal(standIn.requests[0].headers['x-api-key'], 'k');
    assert.deepEqual(quote, { base: 'EUR', date: '2026-11-20', rates: { CAD: '1.5', CHF: '0.93', GBP: '0.85', JPY: '162.5', PLN: '4.3', USD: '1.0523' } });
  });

  test("an error answer carries the provider's message and status", async () => {
    standIn.mode = { type: 'error', status: 422, body: '{"message":"invalid currency"}' };
    await assert.rejects(client().latest(), (error: Error) => error instanceof ProviderError && error.message === 'provider answered 422: invalid currency');
    standIn.mode = { type: 'error', status: 404, body: '{"message":"not found"}' };
    await assert.rejects(client().latest(), /provider answered 404: not found/);
    standIn.mode = { type: 'error', status: 502, body: '<html>bad gateway</html>' };
    await assert.rejects(client().latest(), /provider answered 502: <html>bad gateway/);
  });

  test('429 with Retry-After: the hint is kept for the next attempt', async () => {
    standIn.mode = { type: 'error', status: 429, body: '{"message":"slow down"}', retryAfter: '120' };
    await assert.rejects(client({ attempts: 3 }).latest(), (error: ProviderError) => error.retryAfterSeconds === 120);
  });

  test('a slow answer past the timeout fails within the timeout', async () => {
    standIn.mode = { type: 'slow', delayMs: 3000 };
    const started = Date.now();
    await assert.rejects(client({ timeoutMs: 300 }).latest(), /no answer within 300 ms/);
    assert.ok(Date.now() - started < 2500, `took ${Date.now() - started} ms`);
  });

  test('malformed JSON is an error, not a crash', async () => {
    standIn.mode = { type: 'malformed' };
    await assert.rejects(client().latest(), /malformed JSON/);
    assert.throws(() => parseQuote('[]'), /not a JSON object/);
    assert.throws(() => parseQuote('{"base":"USD","date":"d","rates":{}}'), /base USD/);
    assert.deepEqual(parseQuote('{"base":"EUR","date":"d","rates":{"USD":"1.1","CHF":-1,"GBP":0.8}}').rates, { GBP: '0.8' });
  });

  test('retries with backoff recover from a passing failure', async () => {
    standIn.mode = { type: 'error', status: 503, body: '' };
    standIn.requests.length = 0;
    setTimeout(() => (standIn.mode = { type: 'rates' }), 15);
    const quote = await client({ attempts: 4 }).latest();
    assert.equal(quote.rates.USD, '1.0523');
    assert.ok(standIn.requests.length >= 2, `${standIn.requests.length} requests`);
  });

  test('an unreachable provider is an error naming it', async () => {
    await assert.rejects(frankfurter({ baseUrl: 'http://127.0.0.1:1', headers: {}, timeoutMs: 1000, attempts: 1, backoffMs: 1, get: httpGet(httpClient()) }).latest(), /provider http:\/\/127.0.0.1:1 unreachable/);
  });
});

describe('the slot cache', () => {
  test('100 concurrent reconciles of one slot share one request; the next slot asks again; failures are not kept', async () => {
    let calls = 0;
    let fail = false;
    const provider: RateProvider = {
      latest: async () => {
        calls++;
        await sleep(20);
        if (fail) throw new ProviderError('down');
        return { base: 'EUR', date: 'd', rates: { USD: '1' } };
      },
    };
    const cache = new SlotCache(provider);
    await Promise.all(Array.from({ length: 100 }, () => cache.latest(7)));
    assert.equal(calls, 1);
    await cache.latest(7);
    assert.equal(calls, 1, 'kept for the rest of the slot');
    await cache.latest(8);
    assert.equal(calls, 2);
    fail = true;
    await assert.rejects(cache.latest(9));
    await assert.rejects(cache.latest(9));
    assert.equal(calls, 4, 'a failure is asked again');
  });
});
