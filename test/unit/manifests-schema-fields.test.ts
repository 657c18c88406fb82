// undeclaredFields (eventing/manifests/schema-fields.ts): the fields of an object its CRD schema
// does not name, found where the schema is open (x-kubernetes-preserve-unknown-fields) as well as
// where it is closed, free-form maps and Knative's Go-type fields left alone.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { GO_TYPE_FIELDS, undeclaredFields } from '../../eventing/manifests/schema-fields.ts';
import type { KubeObject } from '../../functions/runtime/index.ts';

const open = { type: 'object', 'x-kubernetes-preserve-unknown-fields': true };
/** A Trigger-like CRD: an open spec with named properties, an open delivery, free-form maps. */
const crd: KubeObject = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'triggers.eventing.knative.dev' },
  spec: {
    group: 'eventing.knative.dev',
    names: { kind: 'Trigger', plural: 'triggers' },
    versions: [
      {
        name: 'v1',
        schema: {
          openAPIV3Schema: {
            type: 'object',
            properties: {
              spec: {
                ...open,
                properties: {
                  broker: { type: 'string' },
                  filters: { type: 'array', items: { type: 'object', properties: { exact: open, not: open } } },
                  delivery: { ...open, properties: { retry: { type: 'integer' } } },
                  labels: { type: 'object', additionalProperties: { type: 'object', properties: { value: { type: 'string' } } } },
                },
              },
            },
          },
        },
      },
    ],
  },
};
const trigger = (spec: Record<string, unknown>): KubeObject => ({
  apiVersion: 'eventing.knative.dev/v1',
  kind: 'Trigger',
  metadata: { name: 't', annotations: { anything: 'goes' } },
  spec,
});

describe('undeclaredFields', () => {
  test("a field the schema names, at any depth, is declared; free-form maps take any key; metadata is the API server's", () => {
    assert.deepEqual(
      undeclaredFields(
        trigger({
          broker: 'b',
          filters: [{ exact: { anyattribute: 'x' } }, { not: { all: [] } }],
          delivery: { retry: 1 },
          labels: { a: { value: 'x' } },
        }),
        [crd],
      ),
      [],
    );
  });

  test('a misspelled field under an open schema is found, with its path (the API server would keep it)', () => {
    assert.deepEqual(
      undeclaredFields(
        trigger({ brokr: 'b', filters: [{ exact: { type: 'x' } }, { nott: {} }], delivery: { retri: 1 }, labels: { a: { valeu: 'x' } } }),
        [crd],
      ),
      ['.spec.brokr', '.spec.filters[1].nott', '.spec.delivery.retri', '.spec.labels.a.valeu'],
    );
  });

  test("fields Knative's Go types have but its schemas leave open (delivery timeout, retryAfterMax) are declared", () => {
    assert.deepEqual(GO_TYPE_FIELDS.Trigger, ['.spec.delivery.timeout', '.spec.delivery.retryAfterMax']);
    assert.deepEqual(undeclaredFields(trigger({ delivery: { timeout: 'PT1S', retryAfterMax: 'PT1M', timeOut: 'PT1S' } }), [crd]), [
      '.spec.delivery.timeOut',
    ]);
  });

  test('an object no CRD serves is an error, not "nothing undeclared"', () => {
    assert.throws(
      () => undeclaredFields({ apiVersion: 'sources.knative.dev/v1', kind: 'PingSource', metadata: { name: 'p' }, spec: {} }, [crd]),
      /no CRD among those given serves sources\.knative\.dev\/v1 PingSource/,
    );
    assert.throws(
      () => undeclaredFields({ ...trigger({}), apiVersion: 'eventing.knative.dev/v2' }, [crd]),
      /serves eventing\.knative\.dev\/v2 Trigger/,
    );
  });
});
