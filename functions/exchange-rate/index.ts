// ExchangeRate: keep a ConfigMap, owned by each ExchangeRate, holding the EUR → currency rate
// (seed: brennerm's kopf example operator, with its defects fixed: configurable provider with a
// timeout, scheduled refresh, a deleted or edited ConfigMap comes back).
import { defineFunction, ConfigMap } from '../runtime/index.ts';
import { CONFIG } from './config.ts';
import { ExchangeRateKind, OWNER_LABEL } from './desired.ts';
import { reconcileExchangeRate } from './reconcile.ts';

export default defineFunction({
  name: 'exchange-rate',
  description:
    'Keeps a ConfigMap per ExchangeRate with the EUR exchange rate of its currency, refreshed from an HTTP provider (default Frankfurter).',
  reconciles: ExchangeRateKind,
  owns: [{ kind: ConfigMap, ownerNameLabel: OWNER_LABEL }],
  config: CONFIG,
  // What reconcile itself does; reading ExchangeRates and ConfigMaps, Events, and update on
  // exchangerates/finalizers (the ConfigMap's blockOwnerDeletion) follow from the declaration
  // (functions/runtime/rbac.ts).
  rbac: [
    { apiGroups: ['operators.brennerm.github.io'], resources: ['exchangerates/status'], verbs: ['update'] },
    // list: a resync reads each namespace's ConfigMaps of ours once, not one by one.
    { apiGroups: [''], resources: ['configmaps'], verbs: ['create', 'update', 'list'] },
  ],
  // Reads each object at its event's version: from a watch while a burst lasts.
  watchDuringBursts: true,
  reconcile: reconcileExchangeRate,
});
