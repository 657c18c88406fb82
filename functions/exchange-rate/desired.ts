// ExchangeRate's desired state, computed without any API call: when a refresh is due, the
// ConfigMap that should exist, what to do about the one that does, and the status.
//
// Upstream rule (kopf.timer(interval=…), kopf/_core/intents/handlers.py TimerHandler): a declared
// interval drives the refresh. A function that scales to zero keeps no timer: the due time lives
// in status (nextRefreshAt) and reconcile answers "again after D"; an early reconcile is a cheap
// no-op. Refreshes fall on multiples of the interval (wall clock), so every ExchangeRate is due at
// the same moment and one provider request per process serves them all.
import {
  rfc3339,
  type KubeObject,
  type ResourceKind,
  ownerLabelValue,
  controllerReference,
  isControlledBy,
  jsonEqual,
  setCondition,
  type Condition,
  type ConditionInput,
} from '../runtime/index.ts';
import { isProviderDate, type Quote } from './provider.ts';

export const ExchangeRateKind: ResourceKind = {
  group: 'operators.brennerm.github.io',
  version: 'v1',
  kind: 'ExchangeRate',
  plural: 'exchangerates',
  namespaced: true,
};

/** Label on each ConfigMap: the ExchangeRate's name (hashed when too long for a label value). */
export const OWNER_LABEL = 'operators.brennerm.github.io/exchangerate';

/**
 * Annotation on each ConfigMap holding a rate: the currency it is of (its data does not say). Only
 * with it can a ConfigMap's rate be told to be of the spec's currency (configMapAction keeps a
 * newer one); one written before it existed gets it at the next reconcile.
 */
export const CURRENCY_ANNOTATION = 'operators.brennerm.github.io/currency';

export interface ExchangeRateStatus {
  rate?: string;
  currency?: string;
  base?: string;
  /** The provider's date of the rate. */
  date?: string;
  configMap?: string;
  lastUpdated?: string;
  nextRefreshAt?: string;
  observedGeneration?: number;
  conditions?: Condition[];
}

export interface ExchangeRate extends KubeObject {
  spec: { currency: string };
  status?: ExchangeRateStatus;
}

export interface RateConfigMap extends KubeObject {
  data?: Record<string, string>;
  binaryData?: Record<string, string>;
  /** Once true, data, binaryData and immutable itself can no longer change: only a delete and a create can. */
  immutable?: boolean;
}

/** What the ConfigMap holds. */
export interface RateValues {
  rate: string;
  base: string;
  date: string;
}

/** Deterministic: the ExchangeRate's own name (valid and unique per namespace by construction). */
export const configMapNameFor = (rate: ExchangeRate): string => rate.metadata.name!;

/** The refresh slot `now` falls in: slots are multiples of the interval since the epoch. */
export const slotOf = (now: Date, intervalSeconds: number): number => Math.floor(now.getTime() / 1000 / intervalSeconds);
export const slotEnd = (slot: number, intervalSeconds: number): Date => new Date((slot + 1) * intervalSeconds * 1000);

/**
 * When the next refresh is due: status.nextRefreshAt, but never later than one interval from now.
 * It was computed under the interval configured then; after the interval was lowered, a due time
 * further away than the new interval is pulled in to the end of the current slot (not to
 * now + interval: slot ends are where every ExchangeRate is due at once and shares one request).
 * Undefined when status has none (or one that is not a time).
 */
export function scheduledRefresh(rate: ExchangeRate, now: Date, intervalSeconds: number): Date | undefined {
  const at = Date.parse(rate.status?.nextRefreshAt ?? '');
  if (Number.isNaN(at)) return undefined;
  return at > now.getTime() + intervalSeconds * 1000 ? slotEnd(slotOf(now, intervalSeconds), intervalSeconds) : new Date(at);
}

/** A refresh is due when there is no rate for the current spec yet, or its time has come. */
export function refreshDue(rate: ExchangeRate, now: Date, intervalSeconds: number): boolean {
  const status = rate.status ?? {};
  if (!status.rate || status.currency !== rate.spec.currency) return true;
  if ((status.observedGeneration ?? 0) !== (rate.metadata.generation ?? 0)) return true;
  const due = scheduledRefresh(rate, now, intervalSeconds);
  return !due || now.getTime() >= due.getTime();
}

/**
 * The values the ConfigMap should hold: freshly fetched ones, else the last good ones in status,
 * for the same currency only (after a currency change, the old currency's rate is no rate at all).
 */
export function valuesFor(rate: ExchangeRate, fetched: RateValues | undefined): RateValues | undefined {
  if (fetched) return fetched;
  const status = rate.status ?? {};
  if (status.rate && status.currency === rate.spec.currency)
    return { rate: status.rate, base: status.base ?? 'EUR', date: status.date ?? '' };
  return undefined;
}

export type QuoteResult = { values: RateValues } | { problem: ConditionInput };

/** What a failed refresh leaves in place, in words for the condition message. */
const whatIsKept = (rate: ExchangeRate): string =>
  valuesFor(rate, undefined) ? 'keeping the last rate' : `no rate for ${rate.spec.currency} yet`;

/** This ExchangeRate's values from a provider quote, or why there are none. */
export function fromQuote(rate: ExchangeRate, quote: Quote): QuoteResult {
  const value = quote.rates[rate.spec.currency];
  if (value === undefined) {
    return {
      problem: {
        type: 'Ready',
        status: 'False',
        reason: 'CurrencyNotQuoted',
        message: `the provider's answer of ${quote.date} has no rate for ${rate.spec.currency}; ${whatIsKept(rate)}`,
      },
    };
  }
  return { values: { rate: value, base: quote.base, date: quote.date } };
}

/** Ready=False after the provider failed (its words), saying what stays in place meanwhile. */
export const providerProblem = (rate: ExchangeRate, message: string): ConditionInput => ({
  type: 'Ready',
  status: 'False',
  reason: 'ProviderError',
  message: `${message}; ${whatIsKept(rate)}`,
});

/**
 * The condition of the last refresh, beside Ready (as Knative's resources keep one condition per
 * part beside the Ready that sums them up): True (`RateFetched`) or False with the failure's
 * reason. Ready says one thing at a time, and a ConfigMap problem takes precedence there, so it
 * cannot also remember that the refresh failed.
 */
export const REFRESHED = 'Refreshed';
/** Reasons of a failed refresh: status.nextRefreshAt is then a retry time, not a slot end. */
const FAILED_REFRESH = new Set(['ProviderError', 'CurrencyNotQuoted']);

/** The last refresh's failure, if it failed: its Refreshed condition (or, written before there was one, its Ready). */
export function lastRefreshFailure(rate: ExchangeRate): Condition | undefined {
  const conditions = rate.status?.conditions ?? [];
  const failed =
    conditions.find((condition) => condition.type === REFRESHED) ??
    conditions.find((condition) => condition.type === 'Ready' && FAILED_REFRESH.has(condition.reason));
  return failed?.status === 'False' ? failed : undefined;
}

/**
 * The Ready condition a reconcile that does not refresh (not due yet) must keep: the failed
 * refresh's, until the retry. Otherwise such a reconcile would set Ready=True (RateCurrent) while
 * the provider is still down, write status for it, and the next failure would warn again.
 * Undefined when the last refresh succeeded (Ready=True is then recomputed from status).
 */
export function standingProblem(rate: ExchangeRate): ConditionInput | undefined {
  const failed = lastRefreshFailure(rate);
  return failed && { type: 'Ready', status: 'False', reason: failed.reason, message: failed.message };
}

/**
 * The ConfigMap for these values; without values (the currency changed and no rate of the new
 * one came yet) it holds no data at all, so that no reader takes the old currency's rate for the
 * new one: a missing key fails loudly where a wrong number would not.
 */
export function desiredConfigMap(rate: ExchangeRate, values: RateValues | undefined): RateConfigMap {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: configMapNameFor(rate),
      namespace: rate.metadata.namespace,
      // As the seed's kopf.adopt did: the owner's labels, plus ours for routing.
      labels: { ...rate.metadata.labels, [OWNER_LABEL]: ownerLabelValue(rate.metadata.name!) },
      ...(values ? { annotations: { [CURRENCY_ANNOTATION]: rate.spec.currency } } : {}),
      ownerReferences: [controllerReference(rate, ExchangeRateKind)],
    },
    data: values ? { rate: values.rate, base: values.base, date: values.date } : {},
  };
}

export type ConfigMapAction =
  | { type: 'create'; desired: RateConfigMap }
  | { type: 'update'; desired: RateConfigMap }
  | { type: 'keep' }
  /** Someone else's ConfigMap holds the name: never touch what is not ours. */
  | { type: 'blocked'; message: string }
  /**
   * Ours, but made immutable (by hand or by a policy) and holding other data: reported, not
   * replaced. `relabel`, when set, is the object with only its labels corrected (metadata stays
   * mutable), so that the ConfigMap still routes to its ExchangeRate.
   */
  | { type: 'frozen'; message: string; relabel?: RateConfigMap };

/** What a ConfigMap holds, in words for a condition message. */
const holding = (data: Record<string, string> | undefined): string =>
  data?.rate ? `rate ${data.rate} (provider date ${data.date ?? 'unknown'})` : 'no rate';

/** The annotations with ours set to this currency, or removed (no rate, no currency); undefined when none is left. */
function withCurrency(annotations: Record<string, string> | undefined, currency: string | undefined): Record<string, string> | undefined {
  const { [CURRENCY_ANNOTATION]: _currency, ...others } = annotations ?? {};
  const result = currency ? { ...others, [CURRENCY_ANNOTATION]: currency } : others;
  return Object.keys(result).length ? result : undefined;
}

/**
 * The values our ConfigMap holds when they are newer than the ones from status: a rate of the
 * spec's currency (CURRENCY_ANNOTATION) and base, in our ConfigMap (controller reference and owner
 * label), whose provider date comes after status's. That is what a reconcile killed between its
 * ConfigMap write and its status write leaves: the fresh rate in the ConfigMap, the previous one
 * in status. Writing status's values over it would move the rate backwards for every reader.
 * Provider dates are YYYY-MM-DD (isProviderDate, as parseQuote requires), which compare as strings.
 * Undefined when anything of that does not hold: then status's values are written as before.
 *
 * They are kept in the ConfigMap only, never taken into status: whoever may update ConfigMaps in
 * the namespace can write this data, its annotation and its owner reference alike, and would then
 * write the ExchangeRate's status, which only the function (from the provider) does. The next
 * successful refresh writes both.
 */
export function newerHeld(rate: ExchangeRate, existing: RateConfigMap, fromStatus: RateValues): RateValues | undefined {
  const data = existing.data ?? {};
  if (!isControlledBy(existing, rate) || existing.metadata.labels?.[OWNER_LABEL] !== ownerLabelValue(rate.metadata.name!)) return undefined;
  if (existing.metadata.annotations?.[CURRENCY_ANNOTATION] !== rate.spec.currency || !data.rate || data.base !== fromStatus.base)
    return undefined;
  if (!isProviderDate(data.date) || !isProviderDate(fromStatus.date) || data.date <= fromStatus.date) return undefined;
  return { rate: data.rate, base: data.base, date: data.date };
}

/**
 * Without values, a missing ConfigMap is not made (an empty one would tell nobody anything).
 *
 * An immutable ConfigMap of ours whose data is wrong is reported (Ready=False, ConfigMapImmutable),
 * not deleted and recreated as copyrator does with its copies. Replacing it would need `delete` on
 * every ConfigMap the function's role reaches, a right this function otherwise never needs
 * (copyrator has it anyway, to remove copies), and it would undo a deliberate act: `immutable`
 * cannot be unset, so whoever set it (a person freezing the rate, a policy) chose to stop changes,
 * and the pods that mount it stopped watching it. The remedy is one `kubectl delete configmap`:
 * the delete brings a reconcile that recreates it, mutable, from the rate in status.
 *
 * `fromStatus`: the values are status's (nothing was fetched by this reconcile); a newer rate our
 * ConfigMap holds is then kept (newerHeld), never written over with older data.
 */
export function configMapAction(
  rate: ExchangeRate,
  existing: RateConfigMap | undefined,
  values: RateValues | undefined,
  fromStatus = false,
): ConfigMapAction {
  if (existing && values && fromStatus) values = newerHeld(rate, existing, values) ?? values;
  const desired = desiredConfigMap(rate, values);
  if (!existing) return values ? { type: 'create', desired } : { type: 'keep' };
  if (!isControlledBy(existing, rate))
    return {
      type: 'blocked',
      message: `ConfigMap ${existing.metadata.name} exists and is not controlled by this ExchangeRate; delete or rename it`,
    };
  const sameData = jsonEqual(existing.data ?? {}, desired.data);
  // Ours names the currency of the rate held; an empty ConfigMap's is dropped when it is emptied, no write of its own.
  const annotations =
    values || !sameData ? withCurrency(existing.metadata.annotations, values && rate.spec.currency) : existing.metadata.annotations;
  const sameLabels =
    jsonEqual(existing.metadata.labels ?? {}, desired.metadata.labels) && jsonEqual(existing.metadata.annotations ?? {}, annotations ?? {});
  if (sameData && sameLabels) return { type: 'keep' };
  // Immutable: only metadata may change; a write must carry data, binaryData and immutable as they are.
  const metadata = { ...existing.metadata, labels: desired.metadata.labels, annotations };
  const relabelled: RateConfigMap = { ...existing, metadata };
  if (existing.immutable) {
    if (sameData) return { type: 'update', desired: relabelled };
    const wanted = values
      ? `rate ${values.rate} (provider date ${values.date}); delete it and it is recreated with that rate`
      : `no rate, there being none for ${rate.spec.currency} yet; delete it and it is recreated once there is one`;
    return {
      type: 'frozen',
      message: `ConfigMap ${existing.metadata.name} is immutable and still holds ${holding(existing.data)} where it should hold ${wanted}`,
      ...(sameLabels ? {} : { relabel: relabelled }),
    };
  }
  return { type: 'update', desired: { ...desired, metadata } };
}

export interface RefreshOutcome {
  /** Fresh values, when this reconcile fetched them. */
  fetched?: RateValues;
  /** Ready=False: the fetch failed (the provider's words), the ConfigMap is blocked, the configuration is invalid. */
  problem?: ConditionInput;
  /** The refresh's failure (fetched now, or standing until the retry): Refreshed=False; else fetched: Refreshed=True. */
  refreshProblem?: ConditionInput;
  now: Date;
  /** When to refresh next: the slot's end after a fetch, soon after a failure. */
  nextRefreshAt: Date;
}

export function nextStatus(current: ExchangeRate, actedOn: ExchangeRate, outcome: RefreshOutcome): ExchangeRateStatus | undefined {
  if (current.metadata.uid !== actedOn.metadata.uid) return undefined;
  const status = current.status ?? {};
  const generation = actedOn.metadata.generation ?? 0;
  const fetched = outcome.fetched;
  const condition: ConditionInput = outcome.problem ?? {
    type: 'Ready',
    status: 'True',
    reason: 'RateCurrent',
    message: `1 ${fetched?.base ?? status.base ?? 'EUR'} = ${fetched?.rate ?? status.rate} ${actedOn.spec.currency} (provider date ${fetched?.date ?? status.date})`,
  };
  // A rate in status always goes with its currency: a rate of another currency than the spec's
  // (the spec changed, no rate of the new one came yet) is dropped, never shown beside the new one.
  const { rate: _rate, base: _base, date: _date, currency: _currency, lastUpdated: _lastUpdated, ...withoutRate } = status;
  return {
    ...(status.currency === actedOn.spec.currency ? status : withoutRate),
    ...(fetched
      ? { rate: fetched.rate, base: fetched.base, date: fetched.date, currency: actedOn.spec.currency, lastUpdated: rfc3339(outcome.now) }
      : {}),
    configMap: configMapNameFor(actedOn),
    nextRefreshAt: rfc3339(outcome.nextRefreshAt),
    observedGeneration: generation,
    conditions: refreshedConditions(
      setCondition(status.conditions, { ...condition, observedGeneration: generation }, outcome.now),
      outcome,
      generation,
    ),
  };
}

/** The conditions with Refreshed set by this reconcile's refresh; unchanged when it neither fetched nor has a failure to keep. */
function refreshedConditions(
  conditions: Condition[],
  { fetched, refreshProblem, now }: RefreshOutcome,
  observedGeneration: number,
): Condition[] {
  if (refreshProblem) return setCondition(conditions, { ...refreshProblem, type: REFRESHED, observedGeneration }, now);
  if (fetched)
    return setCondition(
      conditions,
      { type: REFRESHED, status: 'True', reason: 'RateFetched', message: `provider date ${fetched.date}`, observedGeneration },
      now,
    );
  return conditions;
}
