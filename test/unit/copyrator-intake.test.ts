// Intake of the copyrator and exchange-rate hosts (both functions, one table) whose Kubernetes
// API is unreachable: events that can never mean anything to them are refused with 400 and a
// reason, before any API call or provider request; well-formed events that need the API are
// answered 503 (retried), never 2xx. The generic corpus (test/unit/intake.test.ts) covers the
// intake every function shares; these are the cases that depend on each function's kinds.
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { CloudEvent } from 'cloudevents';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import copyrator from '../../functions/copyrator/index.ts';
import { CopyratorRuleKind, RULE_ANNOTATION } from '../../functions/copyrator/desired.ts';
import exchangeRate from '../../functions/exchange-rate/index.ts';
import { ExchangeRateKind } from '../../functions/exchange-rate/desired.ts';
import {
  resolveConfig,
  type FunctionDeclaration,
  ConfigMap,
  Secret,
  type KubeObject,
  type ResourceKind,
  type KubeClient,
} from '../../functions/runtime/index.ts';
import { createMetrics, createFunctionHost } from '../../functions/runtime/host/index.ts';
import { deliver, quietLog, unreachableKube } from '../support/cluster.ts';
import { startRateProvider, type StandInProvider } from '../support/rate-provider.ts';

let standIn: StandInProvider;
const apiRequests: string[] = [];

const countingKube = (): KubeClient => unreachableKube((verb, resource) => apiRequests.push(`${verb} ${resource}`));

async function serve(declaration: FunctionDeclaration): Promise<{ url: string; close(): Promise<void> }> {
  const config = resolveConfig(declaration.name, declaration.config, { EXCHANGE_RATE_PROVIDER_URL: standIn.url });
  const host = createFunctionHost(declaration, { kube: countingKube(), log: quietLog, metrics: createMetrics(declaration.name), config });
  const server = host.app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

const change = (
  kind: ResourceKind,
  metadata: KubeObject['metadata'],
  mode: 'Reference' | 'Resource' = 'Reference',
  extra: Record<string, unknown> = {},
) => apiServerSourceEvent({ server: 'https://10.96.0.1:443', kind, object: { metadata, ...extra }, action: 'update', mode });
const reconcileEvent = (data: unknown) =>
  new CloudEvent<unknown>({ type: 'dev.opfn.reconcile', source: 'opfn', datacontenttype: 'application/json', data });

interface Case {
  name: string;
  event: CloudEvent<unknown>;
  reason: RegExp;
}

const refused: Record<string, Case[]> = {
  copyrator: [
    { name: 'a rule named ".."', event: change(CopyratorRuleKind, { name: '..', namespace: 'default' }), reason: /no valid object name/ },
    {
      name: 'a rule in namespace "../kube-system"',
      event: change(CopyratorRuleKind, { name: 'r', namespace: '../kube-system' }),
      reason: /invalid namespace/,
    },
    { name: 'a Secret named "A/B"', event: change(Secret, { name: 'A/B', namespace: 'default' }), reason: /no valid object name/ },
    {
      name: 'a Resource-mode ConfigMap without metadata',
      event: new CloudEvent<unknown>({
        type: 'dev.knative.apiserver.resource.add',
        source: 'x',
        kind: 'ConfigMap',
        apiversion: 'v1',
        name: 'c',
        namespace: 'default',
        datacontenttype: 'application/json',
        data: { apiVersion: 'v1', kind: 'ConfigMap', data: { a: 'b' } },
      }),
      reason: /not a Kubernetes object \(no metadata\)/,
    },
    {
      name: 'a reconcile key of another kind',
      event: reconcileEvent({ keys: ['operators.brennerm.github.io/ExchangeRate:default/usd'] }),
      reason: /not a kind this function reconciles/,
    },
    {
      name: 'a reconcile key with a traversal',
      event: reconcileEvent({ keys: ['flant.com/CopyratorRule:default/../../x'] }),
      reason: /invalid object name/,
    },
    { name: 'a reconcile event without keys', event: reconcileEvent({ keys: [] }), reason: /at least one key/ },
  ],
  'exchange-rate': [
    {
      name: 'an ExchangeRate named "a..b"',
      event: change(ExchangeRateKind, { name: 'a..b', namespace: 'default' }),
      reason: /no valid object name/,
    },
    {
      name: 'an ExchangeRate in namespace "Default"',
      event: change(ExchangeRateKind, { name: 'usd', namespace: 'Default' }),
      reason: /invalid namespace/,
    },
    {
      name: 'a reconcile key of another kind',
      event: reconcileEvent({ keys: ['flant.com/CopyratorRule:default/r'] }),
      reason: /not a kind this function reconciles/,
    },
    {
      name: 'a reconcile key with an empty name',
      event: reconcileEvent({ keys: ['operators.brennerm.github.io/ExchangeRate:default/'] }),
      reason: /invalid object name/,
    },
    {
      name: 'a reconcile event with a bad due time',
      event: new CloudEvent<unknown>({
        type: 'dev.opfn.reconcile',
        source: 'opfn',
        opfnnotbefore: 'tomorrow',
        data: { keys: ['operators.brennerm.github.io/ExchangeRate:default/usd'] },
      }),
      reason: /not an RFC 3339 time/,
    },
  ],
};

const needsTheApi: Record<string, Case[]> = {
  copyrator: [
    { name: 'a rule change', event: change(CopyratorRuleKind, { name: 'main-rule', namespace: 'default' }), reason: /./ },
    {
      name: 'a ConfigMap claiming to be a copy of a rule with a traversal',
      event: change(ConfigMap, { name: 'c', namespace: 'team-a', annotations: { [RULE_ANNOTATION]: '../x' } }, 'Resource', { data: {} }),
      reason: /./,
    },
    { name: 'a Secret change (Reference mode)', event: change(Secret, { name: 's', namespace: 'vault' }), reason: /./ },
  ],
  'exchange-rate': [
    { name: 'an ExchangeRate change', event: change(ExchangeRateKind, { name: 'usd', namespace: 'default' }), reason: /./ },
    { name: 'a ConfigMap change', event: change(ConfigMap, { name: 'usd', namespace: 'default' }), reason: /./ },
  ],
};

before(async () => {
  standIn = await startRateProvider();
});
after(() => standIn.close());

for (const declaration of [copyrator, exchangeRate]) {
  describe(`${declaration.name} intake`, () => {
    let fn: Awaited<ReturnType<typeof serve>>;
    before(async () => {
      fn = await serve(declaration);
    });
    after(() => fn.close());

    for (const refusal of refused[declaration.name]) {
      test(`400 for ${refusal.name}, before any API call`, async () => {
        apiRequests.length = 0;
        const answer = await deliver(fn.url, refusal.event);
        assert.equal(answer.status, 400, JSON.stringify(answer.body));
        assert.match(String(answer.body.error), refusal.reason);
        assert.deepEqual(apiRequests, []);
      });
    }

    for (const retry of needsTheApi[declaration.name]) {
      test(`503 (retried) for ${retry.name} while the API is unreachable; the provider is never asked`, async () => {
        const before = standIn.requests.length;
        const answer = await deliver(fn.url, retry.event);
        assert.equal(answer.status, 503, JSON.stringify(answer.body));
        assert.equal(standIn.requests.length, before);
      });
    }
  });
}
