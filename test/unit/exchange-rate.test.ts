// ExchangeRate: desired state and refresh timing (pure), configuration, and the Frankfurter
// client against the loopback stand-in (errors, timeout, malformed JSON, missing currency).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, parseConfig } from '../../functions/exchange-rate/config.ts';
import {
  configMapAction,
  CURRENCY_ANNOTATION,
  desiredConfigMap,
  fromQuote,
  nextStatus,
  OWNER_LABEL,
  providerProblem,
  refreshDue,
  scheduledRefresh,
  slotEnd,
  slotOf,
  standingProblem,
  valuesFor,
  type ExchangeRate,
  type ExchangeRateStatus,
} from '../../functions/exchange-rate/desired.ts';
import {
  CURRENCIES,
  frankfurter,
  httpGet,
  isProviderDate,
  MAX_ANSWER_BYTES,
  parseQuote,
  ProviderError,
  rateString,
  SlotCache,
  withoutSentHeaders,
  type Quote,
  type RateProvider,
} from '../../functions/exchange-rate/provider.ts';
import { httpClient } from '../../functions/runtime/index.ts';
import { startRateProvider, type StandInProvider } from '../support/rate-provider.ts';

const rate = (
  overrides: { currency?: string; generation?: number; status?: ExchangeRate['status']; labels?: Record<string, string> } = {},
): ExchangeRate => ({
  apiVersion: 'operators.brennerm.github.io/v1',
  kind: 'ExchangeRate',
  metadata: {
    name: 'exchange-rate-usd',
    namespace: 'default',
    uid: 'er-uid',
    generation: overrides.generation ?? 1,
    labels: overrides.labels ?? { team: 'fx' },
  },
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
    assert.ok(refreshDue(rate(), at('2026-11-23T10:00:00Z'), 3600), 'no rate yet');
    assert.equal(refreshDue(rate({ status: fresh }), at('2026-11-23T10:30:00Z'), 3600), false);
    assert.ok(refreshDue(rate({ status: fresh }), at('2026-11-23T11:00:00Z'), 3600));
    assert.ok(refreshDue(rate({ currency: 'CHF', generation: 2, status: fresh }), at('2026-11-23T10:30:00Z'), 3600), 'currency changed');
    assert.ok(
      refreshDue(rate({ status: { ...fresh, nextRefreshAt: 'garbage' } }), at('2026-11-23T10:30:00Z'), 3600),
      'an unreadable due time is due',
    );
  });

  test('after the interval was lowered, a due time further than one interval away is pulled in to the slot end', () => {
    // Written under the hourly interval; the interval is now 60 s.
    const hourly = rate({ status: { rate: '1.05', currency: 'USD', nextRefreshAt: '2026-11-23T11:00:00Z', observedGeneration: 1 } });
    assert.equal(scheduledRefresh(hourly, at('2026-11-23T10:17:03Z'), 60)?.toISOString(), '2026-11-23T10:18:00.000Z');
    assert.equal(refreshDue(hourly, at('2026-11-23T10:17:03Z'), 60), false, 'not before the pulled-in time');
    // Status then carries the pulled-in time, which is due when it comes.
    const pulledIn = nextStatus(hourly, hourly, {
      now: at('2026-11-23T10:17:03Z'),
      nextRefreshAt: scheduledRefresh(hourly, at('2026-11-23T10:17:03Z'), 60)!,
    })!;
    assert.equal(pulledIn.nextRefreshAt, '2026-11-23T10:18:00Z');
    assert.ok(refreshDue(rate({ status: pulledIn }), at('2026-11-23T10:18:00Z'), 60));
    // A due time within one interval (a retry, or the current slot's end) is kept as it is.
    assert.equal(scheduledRefresh(hourly, at('2026-11-23T10:17:03Z'), 3600)?.toISOString(), '2026-11-23T11:00:00.000Z');
    const retry = rate({ status: { rate: '1.05', currency: 'USD', nextRefreshAt: '2026-11-23T10:17:40Z', observedGeneration: 1 } });
    assert.equal(scheduledRefresh(retry, at('2026-11-23T10:17:03Z'), 60)?.toISOString(), '2026-11-23T10:17:40.000Z');
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
    const ours = {
      ...desiredConfigMap(er, values),
      metadata: { ...desiredConfigMap(er, values).metadata, resourceVersion: '5', uid: 'cm' },
    };
    assert.equal(configMapAction(er, ours, values).type, 'keep');
    const edited = { ...ours, data: { rate: '999' } };
    const action = configMapAction(er, edited, values);
    assert.equal(action.type, 'update');
    assert.equal(action.type === 'update' && action.desired.metadata.resourceVersion, '5', 'update keeps the read resourceVersion');
    assert.equal(configMapAction(er, { metadata: { name: 'exchange-rate-usd', namespace: 'default' }, data: {} }, values).type, 'blocked');
  });

  test("without a rate for the spec's currency it is emptied, never left with another currency's rate", () => {
    const er = rate();
    const ours = {
      ...desiredConfigMap(er, values),
      metadata: { ...desiredConfigMap(er, values).metadata, resourceVersion: '5', uid: 'cm' },
    };
    const chf = rate({ currency: 'CHF', generation: 2, status: { rate: '1.0523', currency: 'USD', base: 'EUR', date: '2026-11-20' } });
    const action = configMapAction(chf, ours, valuesFor(chf, undefined));
    assert.equal(action.type, 'update');
    assert.deepEqual(action.type === 'update' && action.desired.data, {});
    assert.equal(configMapAction(chf, { ...ours, data: {} }, undefined).type, 'keep', 'already empty');
    assert.equal(configMapAction(chf, undefined, undefined).type, 'keep', 'none is made empty');
  });
  test('carries the currency of its rate in an annotation, none without a rate; one without it gets it', () => {
    const er = rate();
    assert.deepEqual(desiredConfigMap(er, values).metadata.annotations, { [CURRENCY_ANNOTATION]: 'USD' });
    assert.equal(desiredConfigMap(er, undefined).metadata.annotations, undefined);
    const { annotations: _annotations, ...withoutAnnotation } = desiredConfigMap(er, values).metadata;
    const older = {
      ...desiredConfigMap(er, values),
      metadata: { ...withoutAnnotation, annotations: { kept: 'yes' }, resourceVersion: '5' },
    };
    const action = configMapAction(er, older, values);
    assert.deepEqual(
      action.type === 'update' && action.desired.metadata.annotations,
      { kept: 'yes', [CURRENCY_ANNOTATION]: 'USD' },
      "others' annotations stay",
    );
  });

  test('values from status never overwrite a newer rate our ConfigMap holds of the same currency (a reconcile killed before its status write)', () => {
    const er = rate({ status: { rate: '1.00', currency: 'USD', base: 'EUR', date: '2024-01-01' } });
    const fromStatus = valuesFor(er, undefined)!;
    const newer = { rate: '2.00', base: 'EUR', date: '2024-01-02' };
    const held = { ...desiredConfigMap(er, newer), metadata: { ...desiredConfigMap(er, newer).metadata, resourceVersion: '5', uid: 'cm' } };
    assert.equal(configMapAction(er, held, fromStatus, true).type, 'keep');
    assert.equal(configMapAction(er, held, fromStatus).type, 'update', 'fetched values are written whatever the date');
    assert.equal(configMapAction(er, held, newer, true).type, 'keep');
    // Its labels are still corrected; its data stays.
    const relabelled = configMapAction(rate({ labels: { team: 'treasury' }, status: er.status }), held, fromStatus, true);
    assert.deepEqual(relabelled.type === 'update' && [relabelled.desired.data, relabelled.desired.metadata.labels?.team], [
      newer,
      'treasury',
    ]);

    const written = (cm: typeof held) => {
      const action = configMapAction(er, cm, fromStatus, true);
      return action.type === 'update' && action.desired.data;
    };
    assert.deepEqual(written({ ...held, data: { ...newer, date: '2024-01-01' } }), fromStatus, 'the same date is no newer: corrected');
    assert.deepEqual(written({ ...held, data: { ...newer, date: '2023-12-31' } }), fromStatus, 'older: corrected');
    assert.deepEqual(written({ ...held, data: { ...newer, date: '2024-1-2' } }), fromStatus, 'not a provider date');
    assert.deepEqual(written({ ...held, data: { ...newer, base: 'USD' } }), fromStatus, 'another base');
    assert.deepEqual(
      written({ ...held, metadata: { ...held.metadata, annotations: { [CURRENCY_ANNOTATION]: 'JPY' } } }),
      fromStatus,
      "another currency's rate",
    );
    assert.deepEqual(written({ ...held, metadata: { ...held.metadata, annotations: undefined } }), fromStatus, 'currency unknown');
    assert.deepEqual(written({ ...held, metadata: { ...held.metadata, labels: { team: 'fx' } } }), fromStatus, 'without our owner label');
    assert.equal(
      configMapAction(er, { ...held, metadata: { ...held.metadata, ownerReferences: [] } }, fromStatus, true).type,
      'blocked',
      'not ours: never touched, nor kept as ours',
    );
    // After a currency change there are no values from status: the ConfigMap is emptied as before.
    const chf = rate({ currency: 'CHF', generation: 2, status: er.status });
    assert.deepEqual(((a) => a.type === 'update' && a.desired.data)(configMapAction(chf, held, valuesFor(chf, undefined), true)), {});
    // Status is not taken from the ConfigMap.
    assert.deepEqual(nextStatus(er, er, { now: at('2024-01-02T10:00:00Z'), nextRefreshAt: at('2024-01-02T11:00:00Z') })?.rate, '1.00');
  });

  test('an immutable one of ours is reported, not written, unless only its labels are wrong', () => {
    const er = rate();
    const old = { rate: '1.0', base: 'EUR', date: '2026-11-19' };
    const frozen = {
      ...desiredConfigMap(er, old),
      immutable: true,
      metadata: { ...desiredConfigMap(er, old).metadata, resourceVersion: '5', uid: 'cm' },
    };
    assert.equal(configMapAction(er, frozen, old).type, 'keep', 'right as it is');
    const action = configMapAction(er, frozen, values);
    assert.equal(action.type, 'frozen');
    assert.equal(
      action.type === 'frozen' && action.message,
      'ConfigMap exchange-rate-usd is immutable and still holds rate 1.0 (provider date 2026-11-19) where it should hold rate 1.0523 (provider date 2026-11-20); delete it and it is recreated with that rate',
    );
    assert.equal(action.type === 'frozen' && action.relabel, undefined, 'labels right: nothing to write');

    const relabelled = rate({ labels: { team: 'treasury' } });
    const both = configMapAction(relabelled, frozen, values);
    assert.equal(both.type, 'frozen');
    assert.deepEqual(
      both.type === 'frozen' && [
        both.relabel?.immutable,
        both.relabel?.data,
        both.relabel?.metadata.labels?.team,
        both.relabel?.metadata.resourceVersion,
      ],
      [true, old, 'treasury', '5'],
      'only the labels change',
    );
    const labelsOnly = configMapAction(relabelled, frozen, old);
    assert.deepEqual(
      labelsOnly.type === 'update' && [labelsOnly.desired.immutable, labelsOnly.desired.data],
      [true, old],
      'a labels-only write keeps immutable and data',
    );
    assert.match(
      (configMapAction(rate({ currency: 'CHF', generation: 2 }), frozen, undefined) as { message: string }).message,
      /should hold no rate, there being none for CHF yet; delete it and it is recreated once there is one$/,
    );
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

  test('a reconcile that learns nothing new computes the status it finds, conditions in their order: no write', () => {
    const fetchedAt = at('2026-11-23T10:17:03Z');
    const written = rate({
      status: nextStatus(rate(), rate(), { fetched: values, now: fetchedAt, nextRefreshAt: at('2026-11-23T11:00:00Z') }),
    });
    assert.deepEqual(
      written.status!.conditions!.map((condition) => condition.type),
      ['Ready', 'Refreshed'],
    );
    const later = at('2026-11-23T10:40:00Z');
    const again = nextStatus(written, written, { now: later, nextRefreshAt: scheduledRefresh(written, later, 3600)! });
    assert.equal(JSON.stringify(again), JSON.stringify(written.status));
  });

  test('while the provider fails: Ready=False with its words, the last good rate kept', () => {
    const before = { rate: '1.05', currency: 'USD', lastUpdated: '2026-11-23T09:00:00Z' };
    const problem = { type: 'Ready', status: 'False' as const, reason: 'ProviderError', message: 'provider answered 503: down' };
    const status = nextStatus(rate({ status: before }), rate({ status: before }), {
      problem,
      now: at('2026-11-23T10:00:00Z'),
      nextRefreshAt: at('2026-11-23T10:01:00Z'),
    })!;
    assert.equal(status.rate, '1.05');
    assert.equal(status.lastUpdated, '2026-11-23T09:00:00Z');
    assert.deepEqual(
      [status.conditions![0].status, status.conditions![0].reason, status.conditions![0].message],
      ['False', 'ProviderError', 'provider answered 503: down'],
    );
  });

  test("after a currency change while the provider fails: the old currency's rate leaves status; the same currency's stays", () => {
    const before = {
      rate: '0.93',
      currency: 'CHF',
      base: 'EUR',
      date: '2026-11-20',
      lastUpdated: '2026-11-23T09:00:00Z',
      configMap: 'exchange-rate-usd',
    };
    const jpy = rate({ currency: 'JPY', generation: 2, status: before });
    const problem = providerProblem(jpy, 'provider answered 503: down');
    assert.equal(problem.message, 'provider answered 503: down; no rate for JPY yet');
    const status = nextStatus(jpy, jpy, { problem, now: at('2026-11-23T10:00:00Z'), nextRefreshAt: at('2026-11-23T10:01:00Z') })!;
    for (const field of ['rate', 'currency', 'base', 'date', 'lastUpdated'] as const) assert.ok(!(field in status), `${field} dropped`);
    assert.equal(status.configMap, 'exchange-rate-usd');
    assert.equal(status.conditions![0].reason, 'ProviderError');

    const chf = rate({ currency: 'CHF', status: before });
    assert.equal(providerProblem(chf, 'provider answered 503: down').message, 'provider answered 503: down; keeping the last rate');
    assert.equal(
      nextStatus(chf, chf, { problem, now: at('2026-11-23T10:00:00Z'), nextRefreshAt: at('2026-11-23T10:01:00Z') })!.rate,
      '0.93',
    );
  });

  test("a reconcile that is not due keeps a failed refresh's Ready=False until the retry, and writes nothing", () => {
    const problem = providerProblem(rate({ status: { rate: '1.05', currency: 'USD' } }), 'provider answered 500: "boom"');
    const failed = rate({ status: { rate: '1.05', currency: 'USD', base: 'EUR', date: '2026-11-20', observedGeneration: 1 } });
    failed.status = nextStatus(failed, failed, { problem, now: at('2026-11-23T11:00:05Z'), nextRefreshAt: at('2026-11-23T11:01:05Z') })!;
    const notDue = at('2026-11-23T11:00:15Z');
    assert.equal(refreshDue(failed, notDue, 3600), false);
    assert.deepEqual(standingProblem(failed), {
      type: 'Ready',
      status: 'False',
      reason: 'ProviderError',
      message: 'provider answered 500: "boom"; keeping the last rate',
    });
    // What reconcile's not-due branch computes: the same status, so updateStatus writes nothing.
    const kept = nextStatus(failed, failed, {
      problem: standingProblem(failed),
      now: notDue,
      nextRefreshAt: scheduledRefresh(failed, notDue, 3600)!,
    });
    assert.deepEqual(kept, failed.status);

    const notQuoted = rate({
      status: {
        ...failed.status,
        conditions: [
          {
            type: 'Ready',
            status: 'False',
            reason: 'CurrencyNotQuoted',
            message: 'no USD; keeping the last rate',
            lastTransitionTime: '2026-11-23T11:00:05Z',
          },
        ],
      },
    });
    assert.equal(standingProblem(notQuoted)?.reason, 'CurrencyNotQuoted');
    // After a good refresh (or a problem a refresh does not cause) nothing stands: Ready is recomputed.
    const current = nextStatus(failed, failed, { fetched: values, now: notDue, nextRefreshAt: at('2026-11-23T12:00:00Z') })!;
    assert.equal(standingProblem(rate({ status: current })), undefined);
    const taken = rate({
      status: {
        ...current,
        conditions: [
          { type: 'Ready', status: 'False', reason: 'ConfigMapNameTaken', message: 'taken', lastTransitionTime: '2026-11-23T11:00:05Z' },
        ],
      },
    });
    assert.equal(standingProblem(taken), undefined);
  });

  test('a failed refresh beside a taken ConfigMap name: Ready says ConfigMapNameTaken, Refreshed keeps the failure, so once the name is free a reconcile not due keeps Ready=False, not RateCurrent', () => {
    const condition = (status: ExchangeRateStatus, type: string) => status.conditions?.find((found) => found.type === type);
    const failing = rate({ status: { rate: '1.05', currency: 'USD', base: 'EUR', date: '2026-11-20', observedGeneration: 1 } });
    const refreshProblem = providerProblem(failing, 'provider answered 500: "boom"');
    const taken = {
      type: 'Ready',
      status: 'False' as const,
      reason: 'ConfigMapNameTaken',
      message: 'ConfigMap exchange-rate-usd exists and is not controlled by this ExchangeRate',
    };
    failing.status = nextStatus(failing, failing, {
      problem: taken,
      refreshProblem,
      now: at('2026-11-23T11:00:05Z'),
      nextRefreshAt: at('2026-11-23T11:01:05Z'),
    })!;
    assert.equal(condition(failing.status, 'Ready')?.reason, 'ConfigMapNameTaken');
    assert.deepEqual(
      [condition(failing.status, 'Refreshed')?.status, condition(failing.status, 'Refreshed')?.reason],
      ['False', 'ProviderError'],
    );
    // The foreign ConfigMap is deleted; its event brings a reconcile before the retry time.
    const notDue = at('2026-11-23T11:00:15Z');
    assert.equal(refreshDue(failing, notDue, 3600), false);
    const standing = standingProblem(failing);
    const freed = nextStatus(failing, failing, {
      problem: standing,
      refreshProblem: standing,
      now: notDue,
      nextRefreshAt: scheduledRefresh(failing, notDue, 3600)!,
    })!;
    assert.deepEqual([condition(freed, 'Ready')?.status, condition(freed, 'Ready')?.reason], ['False', 'ProviderError']);
    // The retry succeeds: Refreshed=True, nothing stands any more.
    const refreshed = nextStatus(rate({ status: freed }), rate({ status: freed }), {
      fetched: values,
      now: at('2026-11-23T11:01:05Z'),
      nextRefreshAt: at('2026-11-23T12:00:00Z'),
    })!;
    assert.deepEqual(
      [condition(refreshed, 'Ready')?.reason, condition(refreshed, 'Refreshed')?.status, condition(refreshed, 'Refreshed')?.reason],
      ['RateCurrent', 'True', 'RateFetched'],
    );
    assert.equal(standingProblem(rate({ status: refreshed })), undefined);
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
    assert.deepEqual(config, {
      baseUrl: 'https://api.frankfurter.dev',
      headers: {},
      refreshSeconds: 3600,
      timeoutMs: 5000,
      retrySeconds: 60,
    });
  });

  test('an API key goes into its header beside extra headers', () => {
    const config = parseConfig({
      EXCHANGE_RATE_PROVIDER_HEADERS: '{"X-Client":"ops"}',
      EXCHANGE_RATE_API_KEY: 'k-123',
      EXCHANGE_RATE_API_KEY_HEADER: 'X-Api-Key',
    });
    assert.deepEqual(config.headers, { 'X-Client': 'ops', 'X-Api-Key': 'k-123' });
  });

  test('bad values name the variable', () => {
    for (const [name, value] of [
      ['EXCHANGE_RATE_PROVIDER_URL', 'not a url'],
      ['EXCHANGE_RATE_PROVIDER_URL', 'file:///etc/passwd'],
      ['EXCHANGE_RATE_PROVIDER_HEADERS', '[1]'],
      ['EXCHANGE_RATE_PROVIDER_HEADERS', '{"a":1}'],
      ['EXCHANGE_RATE_REFRESH_SECONDS', '-5'],
      ['EXCHANGE_RATE_TIMEOUT_MS', 'soon'],
    ]) {
      assert.throws(
        () => parseConfig({ [name]: value }),
        (error: Error) => error instanceof ConfigError && error.message.includes(name),
        `${name}=${value}`,
      );
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
    frankfurter({
      baseUrl: standIn.url,
      headers: overrides.headers ?? {},
      timeoutMs: overrides.timeoutMs ?? 2000,
      attempts: overrides.attempts ?? 1,
      backoffMs: 10,
      get: httpGet(httpClient()),
    });

  test('one request for every supported currency, with the configured headers; rates as the JSON prints them', async () => {
    standIn.mode = { type: 'rates' };
    standIn.requests.length = 0;
    const quote = await client({ headers: { 'X-Api-Key': 'k' } }).latest();
    assert.equal(standIn.requests.length, 1);
    assert.equal(standIn.requests[0].path, `/v1/latest?from=EUR&to=${CURRENCIES.join(',')}`);
    assert.equal(standIn.requests[0].headers['x-api-key'], 'k');
    assert.deepEqual(quote, {
      base: 'EUR',
      date: '2026-11-20',
      rates: { CAD: '1.5', CHF: '0.93', GBP: '0.85', JPY: '162.5', PLN: '4.3', USD: '1.0523' },
    });
  });

  test("an error answer carries the provider's message and status", async () => {
    standIn.mode = { type: 'error', status: 422, body: '{"message":"invalid currency"}' };
    await assert.rejects(
      client().latest(),
      (error: Error) => error instanceof ProviderError && error.message === 'provider answered 422: "invalid currency"',
    );
    standIn.mode = { type: 'error', status: 404, body: '{"message":"not found"}' };
    await assert.rejects(client().latest(), /provider answered 404: "not found"/);
    standIn.mode = { type: 'error', status: 502, body: '<html>bad gateway</html>' };
    await assert.rejects(client().latest(), /provider answered 502: "<html>bad gateway/);
  });

  test("a provider's message is quoted in a few hundred characters with its control characters escaped, and never repeats the key we sent", async () => {
    standIn.mode = { type: 'error', status: 503, body: JSON.stringify({ message: `${'M'.repeat(60_000)}\nINJECT\u001b[31m` }) };
    await assert.rejects(
      client().latest(),
      (error: Error) =>
        error instanceof ProviderError &&
        error.message.length < 300 &&
        /^provider answered 503: "M{200}"… \(60012 characters\)$/.test(error.message),
    );
    standIn.mode = { type: 'error', status: 503, body: JSON.stringify({ message: 'bad\u001b[31mred' }) };
    await assert.rejects(client().latest(), (error: Error) => error.message === 'provider answered 503: "bad\\u001b[31mred"');
    // The key comes from a Secret: a provider echoing it must not put it into status, Events, logs.
    const key = 'APIKEYMARK9-s3cr"et';
    for (const body of [JSON.stringify({ message: `invalid access key ${key}` }), `<html>invalid key ${key} for Bearer</html>`]) {
      standIn.mode = { type: 'error', status: 401, body };
      await assert.rejects(
        client({ headers: { Authorization: `Bearer ${key}` } }).latest(),
        (error: Error) => !error.message.includes('APIKEYMARK9') && /\[redacted\]/.test(error.message),
        body,
      );
    }
    assert.equal(
      withoutSentHeaders('rate 1.05 for token abc123def', { Authorization: 'Bearer abc123def', Accept: 'json' }),
      'rate 1.05 for token [redacted]',
    );
    assert.throws(
      () =>
        parseQuote(JSON.stringify({ base: 'EUR', date: 'key APIKEYMARK9-long', rates: {} }), (text) =>
          withoutSentHeaders(text, { 'X-Api-Key': 'APIKEYMARK9-long' }),
        ),
      /date "key \[redacted\]"/,
    );
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
    assert.throws(() => parseQuote('{"base":"USD","date":"2026-11-20","rates":{}}'), /base "USD"/);
    assert.deepEqual(
      parseQuote('{"base":"EUR","date":"2026-11-20","rates":{"GBP":0.8,"XAU":"gold"}}').rates,
      { GBP: '0.8' },
      'currencies not asked for are dropped',
    );
  });

  test('the date must be YYYY-MM-DD, a real day; a bad one is a provider error quoted in a few characters', () => {
    assert.ok(isProviderDate('2026-11-20') && isProviderDate('2024-02-29'));
    for (const bad of ['d', '2026-11-20T00:00:00Z', '2026-13-01', '2025-02-29', '20261120', ' 2026-11-20', 12, null])
      assert.equal(isProviderDate(bad), false, String(bad));
    const huge = 'x'.repeat(2_000_000);
    assert.throws(
      () => parseQuote(JSON.stringify({ base: 'EUR', date: huge, rates: { USD: 1.05 } })),
      (error: Error) =>
        error instanceof ProviderError &&
        error.message.length < 200 &&
        /date "x{40}"… \(2000000 characters\), not YYYY-MM-DD/.test(error.message),
    );
  });

  test('a rate that is not a plain positive decimal is a provider error, not a "1e+21" in the ConfigMap', () => {
    assert.equal(rateString(1.0523), '1.0523');
    assert.equal(rateString(162), '162');
    for (const bad of [1e21, 1e-7, 0, -1, '1.1', null, Number.NaN]) assert.equal(rateString(bad), undefined, String(bad));
    assert.throws(() => parseQuote('{"base":"EUR","date":"2026-11-20","rates":{"USD":1e999}}'), /rate Infinity for USD/, 'not "rate null"');
    for (const bad of ['1e21', '0', '-1', '"1.1"', 'null']) {
      assert.throws(
        () => parseQuote(`{"base":"EUR","date":"2026-11-20","rates":{"USD":1.05,"CHF":${bad}}}`),
        (error: Error) => error instanceof ProviderError && /for CHF, not a positive decimal number/.test(error.message),
        bad,
      );
    }
  });

  test('an answer over the bound is a provider error, naming status and bound, and is not read whole', async () => {
    standIn.mode = { type: 'rates' };
    standIn.date = 'x'.repeat(10 * MAX_ANSWER_BYTES);
    try {
      await assert.rejects(
        client().latest(),
        (error: Error) =>
          error instanceof ProviderError && error.message === `provider answered 200 with more than ${MAX_ANSWER_BYTES} bytes; not read`,
      );
    } finally {
      standIn.date = '2026-11-20';
    }
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
    await assert.rejects(
      frankfurter({
        baseUrl: 'http://127.0.0.1:1',
        headers: {},
        timeoutMs: 1000,
        attempts: 1,
        backoffMs: 1,
        get: httpGet(httpClient()),
      }).latest(),
      /provider http:\/\/127.0.0.1:1 unreachable/,
    );
  });
});

describe('the slot cache', () => {
  const t0 = at('2026-11-23T10:00:00Z');
  const later = (seconds: number) => new Date(t0.getTime() + seconds * 1000);
  const counting = (answers: () => Quote | Error) => {
    const provider = {
      calls: 0,
      latest: async () => {
        provider.calls++;
        await sleep(20);
        const answer = answers();
        if (answer instanceof Error) throw answer;
        return answer;
      },
    };
    return provider;
  };

  test('100 concurrent reconciles of one slot share one request; the next slot asks again', async () => {
    const provider = counting(() => ({ base: 'EUR', date: '2026-11-20', rates: { USD: '1' } }));
    const cache = new SlotCache(provider satisfies RateProvider, 60);
    await Promise.all(Array.from({ length: 100 }, () => cache.latest(7, 'USD', t0)));
    assert.equal(provider.calls, 1);
    await cache.latest(7, 'USD', later(3000));
    assert.equal(provider.calls, 1, 'kept for the rest of the slot');
    await cache.latest(8, 'USD', later(3600));
    assert.equal(provider.calls, 2);
  });

  test('a failure is kept until the retry interval: one request per interval, every other reconcile fails at once with the same words and retry time', async () => {
    let fail = true;
    const provider = counting(() =>
      fail ? new ProviderError('provider answered 500: "boom"') : { base: 'EUR', date: '2026-11-20', rates: { USD: '1', CHF: '0.9' } },
    );
    const cache = new SlotCache(provider, 60);
    const failures = async (count: number, at: Date, slot = 7) => {
      const outcomes = await Promise.allSettled(Array.from({ length: count }, (_, i) => cache.latest(slot, i % 2 ? 'USD' : 'CHF', at)));
      return outcomes.map((outcome) => (outcome.status === 'rejected' ? (outcome.reason as ProviderError) : assert.fail('answered')));
    };
    const first = await failures(100, t0);
    assert.equal(provider.calls, 1, 'concurrent reconciles share the failing request');
    const kept = await failures(100, later(59));
    assert.equal(provider.calls, 1, 'within the retry interval: no request, every currency fails at once');
    assert.equal((await failures(1, later(59), 8))[0].message, 'provider answered 500: "boom"', 'a new slot too');
    assert.equal(provider.calls, 1);
    for (const error of [...first, ...kept]) {
      assert.ok(error instanceof ProviderError);
      assert.equal(error.message, 'provider answered 500: "boom"');
      assert.equal(error.retryAt?.toISOString(), later(60).toISOString(), 'the time the cache asks again');
    }
    fail = false;
    await Promise.all(Array.from({ length: 10 }, () => cache.latest(7, 'USD', later(60))));
    assert.equal(provider.calls, 2, 'at the retry time: one request, shared');
    await cache.latest(7, 'CHF', later(61));
    assert.equal(provider.calls, 2, 'a good answer ends the failure');
  });

  test("a provider's Retry-After longer than the retry interval holds every reconcile, of any slot, until it passes; a shorter one does not shorten the interval", async () => {
    let retryAfterSeconds: number | undefined = 300;
    const provider = counting(() => new ProviderError('provider answered 429: "slow down"', { retryAfterSeconds }));
    const cache = new SlotCache(provider, 60);
    const errors: ProviderError[] = [];
    for (const [seconds, slot, count] of [
      [0, 7, 1],
      [61, 7, 50],
      [299, 7, 50],
      [299, 8, 50],
    ]) {
      const outcomes = await Promise.allSettled(Array.from({ length: count }, () => cache.latest(slot, 'JPY', later(seconds))));
      for (const outcome of outcomes) errors.push(outcome.status === 'rejected' ? outcome.reason : assert.fail('answered'));
    }
    assert.equal(provider.calls, 1, 'one request within the Retry-After, for all');
    assert.ok(
      errors.every((error) => /slow down/.test(error.message) && error.retryAt?.getTime() === later(300).getTime()),
      'each says when the provider allows',
    );
    retryAfterSeconds = 5;
    await assert.rejects(cache.latest(8, 'USD', later(300)), (error: ProviderError) => error.retryAt?.getTime() === later(360).getTime());
    await assert.rejects(cache.latest(8, 'USD', later(359)));
    assert.equal(provider.calls, 2, 'a hint shorter than the interval: the interval');
  });

  test('a failure asking again for a missing currency does not take the kept answer from the other currencies', async () => {
    let fail = false;
    const provider = counting(() => (fail ? new ProviderError('down') : { base: 'EUR', date: '2026-11-20', rates: { USD: '1.05' } }));
    const cache = new SlotCache(provider, 60);
    await cache.latest(7, 'PLN', t0);
    fail = true;
    await assert.rejects(cache.latest(7, 'PLN', later(60)), /down/);
    assert.equal((await cache.latest(7, 'USD', later(61))).rates.USD, '1.05');
    assert.equal(provider.calls, 2);
  });

  test('a currency missing from the kept answer is asked again after the retry interval, by one request for all', async () => {
    const rates: Record<string, string> = { USD: '1.05' };
    const provider = counting(() => ({ base: 'EUR', date: '2026-11-20', rates: { ...rates } }));
    const cache = new SlotCache(provider, 60);
    assert.equal((await cache.latest(7, 'PLN', t0)).rates.PLN, undefined);
    await Promise.all(Array.from({ length: 10 }, () => cache.latest(7, 'PLN', later(59))));
    assert.equal(provider.calls, 1, 'within the retry interval: the kept answer');
    rates.PLN = '4.3';
    const again = await Promise.all(Array.from({ length: 10 }, () => cache.latest(7, 'PLN', later(60))));
    assert.equal(provider.calls, 2, 'after it: one request, shared');
    assert.ok(again.every((quote) => quote.rates.PLN === '4.3'));
    await cache.latest(7, 'USD', later(3000));
    await cache.latest(7, 'PLN', later(3000));
    assert.equal(provider.calls, 2, 'the new answer has both: kept for the rest of the slot');
  });
});
