// ExchangeRate reconcile: refresh the rate when due (one shared provider request per refresh
// slot), keep the ConfigMap equal to the last good rate, write status, ask to be called again at
// the next refresh.
import {
  type ReconcileContext,
  ConfigMap,
  type ObjectKey,
  boundedMessage,
  applyChild,
  getNoOlderThan,
  isAlreadyExists,
  jsonEqual,
  isControlledBy,
  updateStatus,
  type ConditionInput,
  FORBIDDEN_RETRY_SECONDS,
  refusedWrite,
} from '../runtime/index.ts';
import { ConfigError, parseConfig, type ProviderConfig } from './config.ts';
import {
  configMapAction,
  configMapNameFor,
  ExchangeRateKind,
  OWNER_LABEL,
  fromQuote,
  nextStatus,
  providerProblem,
  refreshDue,
  scheduledRefresh,
  slotEnd,
  slotOf,
  lastRefreshFailure,
  standingProblem,
  valuesFor,
  type ExchangeRate,
  type RateConfigMap,
  type RateValues,
} from './desired.ts';
import { frankfurter, httpGet, ProviderError, SlotCache, type HttpGet } from './provider.ts';

/** Attempts of one provider call (first try included); exported for the tests that count requests. */
export const PROVIDER_ATTEMPTS = 3;
const PROVIDER_BACKOFF_MS = 500;
/** Ready's reason when the API server forbids the ConfigMap (a ResourceQuota, a policy): tried again after FORBIDDEN_RETRY_SECONDS. */
const CONFIGMAP_FORBIDDEN = 'ConfigMapForbidden';

/** One provider (and its slot cache) per process and configuration. */
let shared: { key: string; cache: SlotCache } | undefined;

function slotCacheFor(config: ProviderConfig, get: HttpGet): SlotCache {
  const key = JSON.stringify(config);
  if (shared?.key !== key) {
    const provider = frankfurter({ ...config, attempts: PROVIDER_ATTEMPTS, backoffMs: PROVIDER_BACKOFF_MS, get });
    shared = { key, cache: new SlotCache(provider, config.retrySeconds) };
  }
  return shared.cache;
}

/** Whole seconds from now until the next refresh, at least one. */
const secondsUntil = (at: Date, now: Date): number => Math.max(1, Math.ceil((at.getTime() - now.getTime()) / 1000));

export async function reconcileExchangeRate(key: ObjectKey, ctx: ReconcileContext): Promise<{ requeueAfterSeconds: number } | void> {
  const { kube, log, events } = ctx;
  // A resync or poll: what its listing shows settled costs no read of its own.
  const settled = ctx.listed && (await settledInListing(ctx.listed as ExchangeRate, ctx));
  if (settled) return settled;
  // At the version the event announced, if it did (from the watch cache when it holds it).
  const rate = await getNoOlderThan<ExchangeRate>(kube, ExchangeRateKind, key, ctx.eventObject);
  // Gone, or going: the garbage collector removes the ConfigMap through its ownerReference.
  if (!rate || rate.metadata.deletionTimestamp) return;
  const now = ctx.now();

  let config: ProviderConfig;
  try {
    config = parseConfig(ctx.config);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    const problem: ConditionInput = { type: 'Ready', status: 'False', reason: 'ConfigInvalid', message: error.message };
    await updateStatus<ExchangeRate>(
      kube,
      ExchangeRateKind,
      key,
      (current) => nextStatus(current, rate, { problem, now, nextRefreshAt: now }),
      rate,
    );
    return;
  }

  let fetched: RateValues | undefined;
  let refreshProblem: ConditionInput | undefined;
  let nextRefreshAt: Date;
  if (refreshDue(rate, now, config.refreshSeconds)) {
    const slot = slotOf(now, config.refreshSeconds);
    let retryAt = new Date(now.getTime() + config.retrySeconds * 1000);
    try {
      const result = fromQuote(rate, await slotCacheFor(config, httpGet(ctx.http)).latest(slot, rate.spec.currency, now));
      if ('values' in result) fetched = result.values;
      else refreshProblem = result.problem;
    } catch (error) {
      if (!(error instanceof ProviderError)) throw error;
      refreshProblem = providerProblem(rate, error.message);
      // The slot cache's retry time: every ExchangeRate failing on the same request is due again
      // when the cache asks the provider again, not before (it would fail at once) nor one by one.
      retryAt = error.retryAt ?? retryAt;
    }
    // After a failure, ask again at the retry time (within one interval), else at the slot's end.
    nextRefreshAt = refreshProblem
      ? new Date(Math.min(retryAt.getTime(), now.getTime() + config.refreshSeconds * 1000))
      : slotEnd(slot, config.refreshSeconds);
    if (refreshProblem) {
      log.warn({ reason: refreshProblem.reason }, refreshProblem.message);
      // Once per outage and object: the next failures (the cache's fail-fast ones, each retry) find
      // Refreshed already False for the same reason, which a not-due reconcile keeps (standingProblem).
      if (refreshProblem.reason !== lastRefreshFailure(rate)?.reason)
        await events.warning(rate, ExchangeRateKind, refreshProblem.reason, refreshProblem.message);
    }
  } else {
    // Not due: refreshDue found a due time. While it is a retry time, the failed refresh's
    // condition stands: the last refresh failed and nothing new is known.
    nextRefreshAt = scheduledRefresh(rate, now, config.refreshSeconds)!;
    refreshProblem = standingProblem(rate);
  }

  // Without values (a new currency, no rate of it yet) the ConfigMap is emptied, never left
  // holding the former currency's rate. A ConfigMap problem is Ready's reason; the refresh's
  // failure stays in Refreshed, so the next reconcile still knows it (standingProblem). Values
  // from status never overwrite a newer rate of ours (configMapAction: a reconcile killed between
  // its ConfigMap write and its status write left it).
  const configMapProblem = await ensureConfigMap(ctx, rate, valuesFor(rate, fetched), !fetched);
  const problem = configMapProblem ?? refreshProblem;
  await updateStatus<ExchangeRate>(
    kube,
    ExchangeRateKind,
    key,
    (current) => nextStatus(current, rate, { fetched, problem, refreshProblem, now, nextRefreshAt }),
    rate,
  );
  const untilRefresh = secondsUntil(nextRefreshAt, now);
  // A forbidden ConfigMap is tried again soon (from status: no request to the provider), not an hour later.
  return {
    requeueAfterSeconds: configMapProblem?.reason === CONFIGMAP_FORBIDDEN ? Math.min(untilRefresh, FORBIDDEN_RETRY_SECONDS) : untilRefresh,
  };
}

/**
 * The requeue when the listing's object needs nothing: no refresh due, its ConfigMap (in the
 * namespace's listing of ours, read once per resync from the watch cache) as it should be, and a
 * status that reconciling would leave as it is. Undefined when anything may need doing: the
 * reconcile then reads both afresh, as for an event. Listings may be older than a change another
 * run has handled since; they only ever make this reconcile do less, never write.
 */
async function settledInListing(listed: ExchangeRate, ctx: ReconcileContext): Promise<{ requeueAfterSeconds: number } | undefined> {
  if (listed.metadata.deletionTimestamp) return undefined;
  let config: ProviderConfig;
  try {
    config = parseConfig(ctx.config);
  } catch {
    return undefined;
  }
  const now = ctx.now();
  if (refreshDue(listed, now, config.refreshSeconds)) return undefined;
  const namespace = listed.metadata.namespace!;
  const configMaps = await ctx.readOnce(`exchange-rate ConfigMaps of ${namespace}`, async () => {
    const list = await ctx.kube.list<RateConfigMap>(ConfigMap, { namespace, labelSelector: OWNER_LABEL, cached: true });
    return new Map(list.items.map((configMap) => [configMap.metadata.name!, configMap]));
  });
  const existing = configMaps.get(configMapNameFor(listed));
  if (configMapAction(listed, existing, valuesFor(listed, undefined), true).type !== 'keep') return undefined;
  const nextRefreshAt = scheduledRefresh(listed, now, config.refreshSeconds)!;
  const refreshProblem = standingProblem(listed);
  const status = nextStatus(listed, listed, { problem: refreshProblem, refreshProblem, now, nextRefreshAt });
  return jsonEqual(status, listed.status) ? { requeueAfterSeconds: secondsUntil(nextRefreshAt, now) } : undefined;
}

/**
 * Creates or corrects the ConfigMap; returns a problem when it cannot: a foreign object holds its
 * name, ours is immutable (configMapAction says why it is reported, not replaced), or the API
 * server refuses the write for good (runtime/refusals.ts): as invalid (422), or forbidden (403: a
 * ResourceQuota on ConfigMaps, an admission policy). None of these is mended by retrying the same
 * write, so none is thrown (a 500, retried and dead-lettered while status still said
 * RateCurrent): each is Ready=False with a Warning when Ready did not already say it, and the
 * reconcile that follows a change of either object, the next refresh, or the next resync tries
 * again (which is what a lifted quota or a changed policy needs: no event of ours tells of it).
 */
async function ensureConfigMap(
  { kube, log, events }: ReconcileContext,
  rate: ExchangeRate,
  values: RateValues | undefined,
  fromStatus: boolean,
): Promise<ConditionInput | undefined> {
  const cmKey = { namespace: rate.metadata.namespace!, name: configMapNameFor(rate) };
  // Status names no ConfigMap: no reconcile made one yet, so it is created without a read first;
  // one that exists all the same (not ours, or left over) fails the create and is read and judged.
  const unknown = !rate.status?.configMap && values !== undefined;
  let existing = unknown ? undefined : await kube.get<RateConfigMap>(ConfigMap, cmKey);
  let action = configMapAction(rate, existing, values, fromStatus);
  /** Ready=False for a ConfigMap problem, warned when Ready did not already say it (as setCondition stored it: bounded). */
  const report = (reason: string, message: string): ConditionInput => {
    const ready = rate.status?.conditions?.find((condition) => condition.type === 'Ready');
    if (ready?.status !== 'False' || ready.reason !== reason || ready.message !== boundedMessage(message))
      events.warning(rate, ExchangeRateKind, reason, message);
    log.warn({ configMap: cmKey.name, reason }, message);
    return { type: 'Ready', status: 'False', reason, message };
  };
  /** A write the API server refused for good: its words, not a 500 retried forever; any other error is thrown. */
  const refused = (error: unknown): ConditionInput => {
    const refusal = refusedWrite(error);
    if (!refusal) throw error;
    return report(
      refusal.forbidden ? CONFIGMAP_FORBIDDEN : 'ConfigMapRejected',
      `the API server refused to write ConfigMap ${cmKey.name}: ${refusal.message}`,
    );
  };
  /**
   * Writes `object` as the ConfigMap: created when none was read, else over the one read. One
   * changed or made since by another writer is left: its event brings the next reconcile.
   */
  const write = async (object: RateConfigMap) => {
    try {
      return (
        await applyChild(kube, ConfigMap, object, {
          observed: existing,
          isManaged: (configMap) => isControlledBy(configMap, rate),
          merge: () => object,
          onRace: 'leave',
        })
      ).result;
    } catch (error) {
      return refused(error);
    }
  };
  if (unknown && action.type === 'create') {
    try {
      await kube.create(ConfigMap, action.desired);
      log.info({ configMap: cmKey.name, rate: values?.rate }, 'created ConfigMap');
      return undefined;
    } catch (error) {
      if (!isAlreadyExists(error)) return refused(error);
    }
    existing = await kube.get<RateConfigMap>(ConfigMap, cmKey);
    action = configMapAction(rate, existing, values, fromStatus);
  }
  switch (action.type) {
    case 'keep':
      return undefined;
    case 'blocked':
      return report('ConfigMapNameTaken', action.message);
    case 'frozen': {
      const written = action.relabel ? await write(action.relabel) : undefined;
      return typeof written === 'object' ? written : report('ConfigMapImmutable', action.message);
    }
    case 'create': {
      const written = await write(action.desired);
      if (written === 'created') log.info({ configMap: cmKey.name, rate: values?.rate }, 'created ConfigMap');
      return typeof written === 'object' ? written : undefined;
    }
    case 'update': {
      const written = await write(action.desired);
      if (written === 'updated')
        log.info(
          { configMap: cmKey.name, rate: action.desired.data?.rate },
          values ? 'updated ConfigMap' : 'emptied ConfigMap: no rate for the new currency yet',
        );
      return typeof written === 'object' ? written : undefined;
    }
  }
}
