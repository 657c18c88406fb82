// The customize hook's answer and the related lists (functions/composite/metacontroller/related.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  parseCustomizeResponse,
  relatedQueries,
  selectRelated,
  type RelatedContext,
} from '../../../functions/composite/metacontroller/related.ts';
import type { RelatedResourceRule, ResolvedResource } from '../../../functions/composite/metacontroller/types.ts';
import { type KubeObject } from '../../../functions/runtime/index.ts';

const configMaps: ResolvedResource = { apiVersion: 'v1', resource: 'configmaps', kind: 'ConfigMap', namespaced: true };
const namespaces: ResolvedResource = { apiVersion: 'v1', resource: 'namespaces', kind: 'Namespace', namespaced: false };
const parent: KubeObject = { apiVersion: 'example.com/v1', kind: 'Thing', metadata: { name: 'p', namespace: 'prod' } };
const v1: RelatedContext = { version: 'v1', parent, parentNamespaced: true };
const v2: RelatedContext = { version: 'v2', parent, parentNamespaced: true };
const cm = (rule: Partial<RelatedResourceRule>): RelatedResourceRule => ({ apiVersion: 'v1', resource: 'configmaps', ...rule });
const reasonOf = (result: { ok: boolean; reason?: string }) => (result.ok ? '' : (result.reason ?? ''));

describe('parseCustomizeResponse', () => {
  test('rules decode; null and {} mean no related objects', () => {
    const result = parseCustomizeResponse(
      '{"relatedResources":[{"apiVersion":"v1","resource":"configmaps","labelSelector":{"matchLabels":{"a":"b"}}}]}',
      { version: 'v1', strict: false },
    );
    assert.ok(result.ok);
    assert.equal(result.value.relatedResources.length, 1);
    for (const body of ['null', '{}'])
      assert.deepEqual(parseCustomizeResponse(body, { version: 'v1', strict: false }), { ok: true, value: { relatedResources: [] } });
  });

  test('malformed or schema-violating answers are refused with the reason', () => {
    const loose = { version: 'v1' as const, strict: false };
    assert.match(reasonOf(parseCustomizeResponse('{', loose)), /type: customize\): malformed JSON/);
    assert.match(reasonOf(parseCustomizeResponse('{"relatedResources":{}}', loose)), /must be a list/);
    assert.match(
      reasonOf(parseCustomizeResponse('{"relatedResources":[{"resource":"x"}]}', loose)),
      /needs string "apiVersion" and "resource"/,
    );
    assert.match(
      reasonOf(parseCustomizeResponse('{"relatedResources":[{"apiVersion":"v1","resource":"x","names":"a"}]}', loose)),
      /names must be a list of strings/,
    );
  });

  test('strict mode refuses unknown fields at every level; loose mode ignores them', () => {
    const body = '{"relatedResources":[{"apiVersion":"v1","resource":"x","labelSelector":{"matchLabel":{"a":"b"}}}]}';
    assert.ok(parseCustomizeResponse(body, { version: 'v1', strict: false }).ok);
    assert.match(
      reasonOf(parseCustomizeResponse(body, { version: 'v2', strict: true })),
      /unknown field "relatedResources\[0\].labelSelector.matchLabel"/,
    );
    assert.match(reasonOf(parseCustomizeResponse('{"related":[]}', { version: 'v2', strict: true })), /unknown field "related"/);
    const duplicate = '{"relatedResources":[{"apiVersion":"v1","resource":"a","resource":"b"}]}';
    assert.match(
      reasonOf(parseCustomizeResponse(duplicate, { version: 'v2', strict: true })),
      /duplicate field "relatedResources\[0\].resource"/,
    );
    assert.ok(parseCustomizeResponse(duplicate, { version: 'v1', strict: false }).ok);
  });
});

describe('relatedQueries', () => {
  test('by labels: a v1 hook of a namespaced parent lists its own namespace, a v2 hook everywhere', () => {
    const rule = cm({ labelSelector: { matchLabels: { shared: 'yes' } } });
    assert.deepEqual(relatedQueries([rule], [configMaps], v1), {
      ok: true,
      value: [{ rule: configMaps, namespace: 'prod', labelSelector: 'shared=yes', names: [] }],
    });
    assert.deepEqual(relatedQueries([rule], [configMaps], v2), {
      ok: true,
      value: [{ rule: configMaps, namespace: undefined, labelSelector: 'shared=yes', names: [] }],
    });
  });

  test('by namespace and labels, or by namespace and names: another namespace works for v2, is refused for v1', () => {
    const byLabels = cm({ namespace: 'other', labelSelector: { matchLabels: { a: 'b' } } });
    const byNames = cm({ namespace: 'other', names: ['x', 'y'] });
    assert.deepEqual(relatedQueries([byLabels, byNames], [configMaps, configMaps], v2), {
      ok: true,
      value: [
        { rule: configMaps, namespace: 'other', labelSelector: 'a=b', names: [] },
        { rule: configMaps, namespace: 'other', labelSelector: '', names: ['x', 'y'] },
      ],
    });
    assert.match(
      reasonOf(relatedQueries([byNames], [configMaps], v1)),
      /requested related object namespace other differs from parent object namespace prod/,
    );
  });

  test('names without a namespace list every namespace (then filter by name)', () => {
    const result = relatedQueries([cm({ names: ['x'] })], [configMaps], v2);
    assert.deepEqual(result, { ok: true, value: [{ rule: configMaps, namespace: undefined, labelSelector: '', names: ['x'] }] });
  });

  test('namespaceSelector: v2 only for a namespaced parent, and only for namespaced kinds', () => {
    const rule = cm({ namespaceSelector: { matchLabels: { team: 'a' } } });
    assert.deepEqual(relatedQueries([rule], [configMaps], v2), {
      ok: true,
      value: [{ rule: configMaps, labelSelector: '', namespaceSelector: 'team=a', names: [] }],
    });
    assert.match(
      reasonOf(relatedQueries([rule], [configMaps], v1)),
      /namespaceSelector is not supported for namespaced parent in v1 hook version/,
    );
    assert.match(
      reasonOf(relatedQueries([{ ...rule, resource: 'namespaces' }], [namespaces], v2)),
      /only supported for namespaced related resources/,
    );
  });

  test('conflicting fields are refused', () => {
    assert.match(
      reasonOf(relatedQueries([cm({ names: ['x'], labelSelector: {} })], [configMaps], v2)),
      /cannot have both names and labelSelector/,
    );
    assert.match(
      reasonOf(relatedQueries([cm({ namespace: 'a', namespaceSelector: {} })], [configMaps], v2)),
      /cannot have both namespace and namespaceSelector/,
    );
    assert.match(reasonOf(relatedQueries([cm({})], [], v2)), /can't find related resource "configmaps" in v1/);
    assert.match(
      reasonOf(relatedQueries([cm({ labelSelector: { matchExpressions: [{ key: 'a', operator: 'In', values: [] }] } })], [configMaps], v2)),
      /invalid label selector/,
    );
  });

  test('a cluster-scoped related kind ignores the namespace; no selector selects everything', () => {
    assert.deepEqual(relatedQueries([{ apiVersion: 'v1', resource: 'namespaces', namespace: 'x' }], [namespaces], v1), {
      ok: true,
      value: [{ rule: namespaces, namespace: undefined, labelSelector: '', names: [] }],
    });
    assert.deepEqual(relatedQueries([cm({})], [configMaps], v2), {
      ok: true,
      value: [{ rule: configMaps, namespace: undefined, labelSelector: '', names: [] }],
    });
  });

  test('selectRelated keeps only the named objects', () => {
    const objects: KubeObject[] = ['x', 'y', 'z'].map((name) => ({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name, namespace: 'other' },
    }));
    assert.deepEqual(
      selectRelated({ rule: configMaps, labelSelector: '', names: ['x', 'z'] }, objects).map((o) => o.metadata.name),
      ['x', 'z'],
    );
    assert.equal(selectRelated({ rule: configMaps, labelSelector: '', names: [] }, objects).length, 3);
  });
});
