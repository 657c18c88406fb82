// Trigger filtering, checked against Knative Eventing's behaviour (knative/eventing
// pkg/eventfilter/attributes/filter.go, pkg/eventfilter/subscriptionsapi/*.go,
// pkg/broker/filter/filter_handler.go filterEvent, pkg/apis/eventing/v1/trigger_validation.go).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CloudEventV1 } from 'cloudevents';
import {
  evaluateTrigger,
  lookupAttribute,
  matchesTrigger,
  validateTriggerFilters,
  type FilterResult,
  type SubscriptionsApiFilter,
  type Trigger,
} from '../../eventing/filters.ts';

// An ApiServerSource event (Reference mode) for a namespaced Pod, plus a numeric extension.
const podEvent: CloudEventV1<unknown> = {
  specversion: '1.0',
  id: '5c1f6a0e-0000-4000-8000-000000000001',
  source: 'https://10.96.0.1:443',
  type: 'dev.knative.apiserver.ref.add',
  subject: '/apis/v1/namespaces/default/pods/web-0',
  datacontenttype: 'application/json; charset=utf-8',
  time: '2024-05-01T10:00:00Z',
  kind: 'Pod',
  apiversion: 'v1',
  name: 'web-0',
  namespace: 'default',
  attempt: 3,
  data: { kind: 'Pod', namespace: 'default', name: 'web-0', apiVersion: 'v1' },
};

// A cluster-scoped object: the namespace extension is present but empty.
const namespaceEvent: CloudEventV1<unknown> = {
  specversion: '1.0',
  id: '5c1f6a0e-0000-4000-8000-000000000002',
  source: 'https://10.96.0.1:443',
  type: 'dev.knative.apiserver.ref.update',
  subject: '/apis/v1/namespaces//namespaces/team-a',
  kind: 'Namespace',
  apiversion: 'v1',
  name: 'team-a',
  namespace: '',
};

// No subject, no datacontenttype, no extensions.
const bareEvent: CloudEventV1<unknown> = { specversion: '1.0', id: 'x', source: '/s', type: 'com.example.bare' };

interface Case {
  name: string;
  event: CloudEventV1<unknown>;
  trigger: Pick<Trigger, 'filter' | 'filters'>;
  want: FilterResult;
}

const attrs = (attributes: Record<string, string>): Pick<Trigger, 'filter'> => ({ filter: { attributes } });
const filters = (...list: unknown[]): Pick<Trigger, 'filters'> => ({ filters: list as SubscriptionsApiFilter[] });

const cases: Case[] = [
  // ---- no filter --------------------------------------------------------------------------
  { name: 'no filter at all passes everything (NoFilter)', event: podEvent, trigger: {}, want: 'none' },
  { name: 'filter.attributes {} passes', event: podEvent, trigger: attrs({}), want: 'pass' },

  // ---- filter.attributes ------------------------------------------------------------------
  { name: 'attributes: exact type match', event: podEvent, trigger: attrs({ type: 'dev.knative.apiserver.ref.add' }), want: 'pass' },
  { name: 'attributes: type mismatch', event: podEvent, trigger: attrs({ type: 'dev.knative.apiserver.ref.delete' }), want: 'fail' },
  { name: 'attributes: values are case-sensitive', event: podEvent, trigger: attrs({ kind: 'pod' }), want: 'fail' },
  {
    name: 'attributes: names are case-sensitive (Kind is not the kind extension)',
    event: podEvent,
    trigger: attrs({ Kind: 'Pod' }),
    want: 'fail',
  },
  {
    name: 'attributes: all listed attributes must match',
    event: podEvent,
    trigger: attrs({ kind: 'Pod', apiversion: 'apps/v1' }),
    want: 'fail',
  },
  {
    name: 'attributes: several matching attributes',
    event: podEvent,
    trigger: attrs({ kind: 'Pod', apiversion: 'v1', type: 'dev.knative.apiserver.ref.add' }),
    want: 'pass',
  },
  { name: 'attributes: "" = present and non-empty (extension set)', event: podEvent, trigger: attrs({ kind: '' }), want: 'pass' },
  { name: 'attributes: "" fails for a missing extension', event: bareEvent, trigger: attrs({ kind: '' }), want: 'fail' },
  { name: 'attributes: "" fails for an extension set to ""', event: namespaceEvent, trigger: attrs({ namespace: '' }), want: 'fail' },
  { name: 'attributes: "" fails for an unset optional context attribute', event: bareEvent, trigger: attrs({ subject: '' }), want: 'fail' },
  { name: 'attributes: "" passes for a set optional context attribute', event: podEvent, trigger: attrs({ subject: '' }), want: 'pass' },
  { name: 'attributes: missing extension with a value fails', event: bareEvent, trigger: attrs({ kind: 'Pod' }), want: 'fail' },
  { name: 'attributes: unset subject compared to a value fails', event: bareEvent, trigger: attrs({ subject: '/x' }), want: 'fail' },
  {
    name: 'attributes: datamediatype is derived from datacontenttype',
    event: podEvent,
    trigger: attrs({ datamediatype: 'application/json' }),
    want: 'pass',
  },
  { name: 'attributes: non-string extension compares in string form', event: podEvent, trigger: attrs({ attempt: '3' }), want: 'pass' },
  { name: 'attributes: data is not an attribute', event: podEvent, trigger: attrs({ data: '' }), want: 'fail' },

  // ---- filters: exact / prefix / suffix ---------------------------------------------------
  { name: 'exact: match', event: podEvent, trigger: filters({ exact: { kind: 'Pod' } }), want: 'pass' },
  { name: 'exact: mismatch', event: podEvent, trigger: filters({ exact: { kind: 'Deployment' } }), want: 'fail' },
  { name: 'exact: case-sensitive', event: podEvent, trigger: filters({ exact: { kind: 'POD' } }), want: 'fail' },
  { name: 'exact: unknown attribute fails', event: podEvent, trigger: filters({ exact: { color: 'red' } }), want: 'fail' },
  {
    name: 'exact: empty value is invalid and skipped (matches everything)',
    event: podEvent,
    trigger: filters({ exact: { kind: '' } }),
    want: 'none',
  },
  {
    name: 'exact: several keys all must match (runtime; the webhook allows one)',
    event: podEvent,
    trigger: filters({ exact: { kind: 'Pod', name: 'other' } }),
    want: 'fail',
  },
  { name: 'prefix: type prefix', event: podEvent, trigger: filters({ prefix: { type: 'dev.knative.apiserver.' } }), want: 'pass' },
  { name: 'prefix: no match', event: podEvent, trigger: filters({ prefix: { type: 'dev.knative.sources.ping' } }), want: 'fail' },
  { name: 'prefix: case-sensitive', event: podEvent, trigger: filters({ prefix: { type: 'Dev.' } }), want: 'fail' },
  { name: 'prefix: unknown attribute fails', event: bareEvent, trigger: filters({ prefix: { kind: 'P' } }), want: 'fail' },
  { name: 'prefix: unset subject fails', event: bareEvent, trigger: filters({ prefix: { subject: '/' } }), want: 'fail' },
  { name: 'prefix: empty value skipped', event: podEvent, trigger: filters({ prefix: { type: '' } }), want: 'none' },
  { name: 'prefix: whole value is a prefix of itself', event: podEvent, trigger: filters({ prefix: { kind: 'Pod' } }), want: 'pass' },
  { name: 'suffix: match', event: podEvent, trigger: filters({ suffix: { type: '.add' } }), want: 'pass' },
  { name: 'suffix: no match', event: podEvent, trigger: filters({ suffix: { type: '.delete' } }), want: 'fail' },
  { name: 'suffix: case-sensitive', event: podEvent, trigger: filters({ suffix: { type: '.ADD' } }), want: 'fail' },
  { name: 'suffix: unknown attribute fails', event: bareEvent, trigger: filters({ suffix: { name: '0' } }), want: 'fail' },
  { name: 'suffix: on subject path', event: podEvent, trigger: filters({ suffix: { subject: '/pods/web-0' } }), want: 'pass' },

  // ---- filters: all / any / not -----------------------------------------------------------
  {
    name: 'all: every child passes',
    event: podEvent,
    trigger: filters({ all: [{ exact: { kind: 'Pod' } }, { prefix: { type: 'dev.knative.' } }] }),
    want: 'pass',
  },
  {
    name: 'all: one child fails',
    event: podEvent,
    trigger: filters({ all: [{ exact: { kind: 'Pod' } }, { exact: { name: 'db-0' } }] }),
    want: 'fail',
  },
  { name: 'all: empty list is skipped (NoFilter)', event: podEvent, trigger: filters({ all: [] }), want: 'none' },
  { name: 'all: only invalid children → NoFilter', event: podEvent, trigger: filters({ all: [{ exact: { kind: '' } }] }), want: 'none' },
  {
    name: 'all: NoFilter children are neutral',
    event: podEvent,
    trigger: filters({ all: [{ exact: { kind: '' } }, { exact: { kind: 'Pod' } }] }),
    want: 'pass',
  },
  {
    name: 'any: one child passes',
    event: podEvent,
    trigger: filters({ any: [{ exact: { kind: 'Namespace' } }, { exact: { kind: 'Pod' } }] }),
    want: 'pass',
  },
  {
    name: 'any: no child passes',
    event: podEvent,
    trigger: filters({ any: [{ exact: { kind: 'Namespace' } }, { exact: { kind: 'Secret' } }] }),
    want: 'fail',
  },
  { name: 'any: empty list is skipped (NoFilter)', event: podEvent, trigger: filters({ any: [] }), want: 'none' },
  {
    name: 'any: NoFilter and Fail → Fail',
    event: podEvent,
    trigger: filters({ any: [{ exact: { kind: '' } }, { exact: { kind: 'Secret' } }] }),
    want: 'fail',
  },
  { name: 'not: inverts a pass', event: podEvent, trigger: filters({ not: { exact: { kind: 'Pod' } } }), want: 'fail' },
  { name: 'not: inverts a fail', event: podEvent, trigger: filters({ not: { exact: { kind: 'Secret' } } }), want: 'pass' },
  { name: 'not: of an unknown attribute passes', event: bareEvent, trigger: filters({ not: { exact: { kind: 'Pod' } } }), want: 'pass' },
  { name: 'not: of NoFilter stays NoFilter', event: podEvent, trigger: filters({ not: { all: [] } }), want: 'none' },
  { name: 'not: of an empty object is NoFilter', event: podEvent, trigger: filters({ not: {} }), want: 'none' },
  { name: 'not(not(x)) = x', event: podEvent, trigger: filters({ not: { not: { exact: { kind: 'Secret' } } } }), want: 'fail' },
  {
    name: 'nested: apiserver Pod or Namespace events outside kube-system',
    event: podEvent,
    trigger: filters({
      all: [
        { prefix: { type: 'dev.knative.apiserver.' } },
        { any: [{ exact: { kind: 'Pod' } }, { exact: { kind: 'Namespace' } }] },
        { not: { exact: { namespace: 'kube-system' } } },
      ],
    }),
    want: 'pass',
  },
  {
    name: 'nested: same filter rejects kube-system',
    event: { ...podEvent, namespace: 'kube-system' },
    trigger: filters({
      all: [
        { prefix: { type: 'dev.knative.apiserver.' } },
        { any: [{ exact: { kind: 'Pod' } }, { exact: { kind: 'Namespace' } }] },
        { not: { exact: { namespace: 'kube-system' } } },
      ],
    }),
    want: 'fail',
  },

  // ---- filters list semantics -------------------------------------------------------------
  {
    name: 'filters: top-level list is ANDed',
    event: podEvent,
    trigger: filters({ exact: { kind: 'Pod' } }, { exact: { name: 'db-0' } }),
    want: 'fail',
  },
  { name: 'filters: an object without dialect is skipped', event: podEvent, trigger: filters({}), want: 'none' },
  {
    name: 'filters replace filter when non-empty',
    event: podEvent,
    trigger: { filter: { attributes: { kind: 'Secret' } }, filters: [{ exact: { kind: 'Pod' } }] },
    want: 'pass',
  },
  {
    name: 'empty filters fall back to filter',
    event: podEvent,
    trigger: { filter: { attributes: { kind: 'Secret' } }, filters: [] },
    want: 'fail',
  },
  { name: 'garbage entries never throw (NoFilter)', event: podEvent, trigger: filters(null, 42, 'x', [1]), want: 'none' },
  // exact_filter.go checks every entry of its map: several attributes in one expression all must match.
  {
    name: 'exact with several attributes: all match',
    event: podEvent,
    trigger: filters({ exact: { kind: 'Pod', name: 'web-0' } }),
    want: 'pass',
  },
  {
    name: 'exact with several attributes: one differs',
    event: podEvent,
    trigger: filters({ exact: { kind: 'Pod', name: 'web-1' } }),
    want: 'fail',
  },
  {
    name: 'prefix with several attributes: one missing',
    event: podEvent,
    trigger: filters({ prefix: { kind: 'Po', owner: 'x' } }),
    want: 'fail',
  },
];

describe('Trigger filters (Knative semantics)', () => {
  for (const c of cases) {
    it(c.name, () => {
      assert.equal(evaluateTrigger(c.trigger, c.event), c.want);
      // Everything but an explicit failure is delivered (filter_handler.go: only FailFilter drops).
      assert.equal(matchesTrigger({ name: 't', subscriber: 'http://127.0.0.1:1/', ...c.trigger }, c.event), c.want !== 'fail');
    });
  }
});

describe('lookupAttribute', () => {
  it('context attributes always exist, extensions only when set', () => {
    assert.deepEqual(lookupAttribute(bareEvent, 'subject'), { found: true, value: '' });
    assert.deepEqual(lookupAttribute(bareEvent, 'kind'), { found: false, value: '' });
    assert.deepEqual(lookupAttribute(namespaceEvent, 'namespace'), { found: true, value: '' });
    assert.deepEqual(lookupAttribute(podEvent, 'attempt'), { found: true, value: '3' });
    assert.deepEqual(lookupAttribute({ ...bareEvent, dataschema: 'https://s/1' }, 'schemaurl'), { found: true, value: 'https://s/1' });
  });
});

describe('validateTriggerFilters (what the Knative webhook rejects)', () => {
  const table: Array<{ name: string; trigger: Pick<Trigger, 'filter' | 'filters'>; error?: RegExp; warning?: RegExp; clean?: boolean }> = [
    { name: 'valid attributes filter', trigger: attrs({ type: 'a', kind: 'Pod' }), clean: true },
    {
      name: 'valid nested filters',
      trigger: filters({ all: [{ exact: { kind: 'Pod' } }, { not: { prefix: { type: 'x' } } }] }),
      clean: true,
    },
    { name: 'uppercase attribute name', trigger: attrs({ Kind: 'Pod' }), error: /must start with a letter and contain only lowercase/ },
    { name: 'attribute name starting with a digit', trigger: filters({ exact: { '1kind': 'Pod' } }), error: /must start with a letter/ },
    {
      name: 'several dialects in one filter',
      trigger: filters({ exact: { kind: 'Pod' }, prefix: { type: 'dev.' } }),
      error: /multiple dialects/,
    },
    {
      name: 'several keys in one exact map (accepted since Eventing 1.23 dropped the one-key rule)',
      trigger: filters({ exact: { kind: 'Pod', name: 'a' } }),
      clean: true,
    },
    { name: 'CESQL is not supported locally', trigger: filters({ sql: "type = 'x'" }), error: /CESQL/ },
    { name: 'unknown dialect', trigger: filters({ regex: { type: '.*' } }), error: /not a filter dialect/ },
    { name: 'nested errors are found', trigger: filters({ any: [{ exact: { Kind: 'Pod' } }] }), error: /filters\[0\]\.any\[0\]\.exact/ },
    { name: 'empty value warns (Knative skips it)', trigger: filters({ exact: { kind: '' } }), warning: /matches every event/ },
    { name: 'empty all warns', trigger: filters({ all: [] }), warning: /empty; Knative skips it/ },
    {
      name: 'filter and filters together warn',
      trigger: { filter: { attributes: { kind: 'a' } }, filters: [{ exact: { kind: 'b' } }] },
      warning: /applies only filters/,
    },
  ];
  for (const c of table) {
    it(c.name, () => {
      const result = validateTriggerFilters(c.trigger, 'trigger t');
      if (c.clean) {
        assert.deepEqual(result, { errors: [], warnings: [] });
      }
      if (c.error)
        assert.ok(
          result.errors.some((e) => c.error?.test(e)),
          `expected an error matching ${c.error}, got ${JSON.stringify(result.errors)}`,
        );
      else assert.deepEqual(result.errors, []);
      if (c.warning)
        assert.ok(
          result.warnings.some((w) => c.warning?.test(w)),
          `expected a warning matching ${c.warning}, got ${JSON.stringify(result.warnings)}`,
        );
    });
  }
});
