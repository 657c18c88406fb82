// Decoding and checking a hook's answer (functions/composite/metacontroller/hook-response.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  desiredChildren,
  isStrict,
  MAX_CHILDREN,
  objectNameProblem,
  parseHookResponse,
  withNamespaceDefaults,
} from '../../../functions/composite/metacontroller/hook-response.ts';
import { compileSelector, type Selector } from '../../../functions/runtime/index.ts';
import type { ResolvedResource } from '../../../functions/composite/metacontroller/types.ts';
import { type KubeObject } from '../../../functions/runtime/index.ts';

const loose = { version: 'v1' as const, strict: false, hookType: 'sync' };
const strict = { version: 'v2' as const, strict: true, hookType: 'sync' };

const reasonOf = (result: { ok: boolean; reason?: string }) => (result.ok ? '' : (result.reason ?? ''));

describe('parseHookResponse', () => {
  test('a full answer', () => {
    const result = parseHookResponse(
      JSON.stringify({
        status: { a: 1 },
        children: [{ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'x' } }],
        resyncAfterSeconds: 2.5,
        finalized: true,
      }),
      loose,
    );
    assert.ok(result.ok);
    assert.deepEqual(result.value.status, { a: 1 });
    assert.equal(result.value.children.length, 1);
    assert.equal(result.value.resyncAfterSeconds, 2.5);
    assert.equal(result.value.finalized, true);
  });

  test('absent and null fields take their zero values; a null body is the empty answer', () => {
    for (const body of ['{}', '{"status":null,"children":null,"resyncAfterSeconds":null,"finalized":null}', 'null']) {
      const result = parseHookResponse(body, loose);
      assert.ok(result.ok, body);
      assert.deepEqual(result.value, { status: null, children: [], resyncAfterSeconds: 0, finalized: false });
    }
  });

  test('malformed JSON is refused with the decoder message, version and hook type', () => {
    for (const body of ['', '{"status":', 'not json']) {
      const reason = reasonOf(parseHookResponse(body, loose));
      assert.match(reason, /^can't unmarshal webhookResponse \(version: v1, type: sync\): malformed JSON/, body);
    }
  });

  test('schema violations are refused, each with what is wrong', () => {
    const cases: [string, RegExp][] = [
      ['[]', /expected a JSON object, got array/],
      ['"x"', /expected a JSON object, got string/],
      ['{"status":[1]}', /"status" must be an object, got array/],
      ['{"children":{}}', /"children" must be a list, got object/],
      ['{"children":[1]}', /children\[0\] must be an object, got number/],
      ['{"children":[null]}', /children\[0\] must be an object, got null/],
      ['{"children":[{"apiVersion":"v1","metadata":{"name":"x"}}]}', /children\[0\]: Object 'Kind' is missing/],
      ['{"children":[{"kind":"Pod","apiVersion":1}]}', /children\[0\]: "apiVersion" must be a string/],
      ['{"children":[{"kind":"Pod","metadata":"x"}]}', /children\[0\]: "metadata" must be an object/],
      ['{"resyncAfterSeconds":"10"}', /"resyncAfterSeconds" must be a number, got string/],
      ['{"finalized":"true"}', /"finalized" must be a boolean, got string/],
    ];
    for (const [body, reason] of cases) assert.match(reasonOf(parseHookResponse(body, loose)), reason, body);
  });

  test('unknown fields: ignored when loose, refused when strict', () => {
    const body = '{"status":{},"Children":[],"extra":1}';
    assert.ok(parseHookResponse(body, loose).ok);
    assert.match(reasonOf(parseHookResponse(body, strict)), /strict validation failed: unknown fields "Children", "extra"/);
  });

  test('duplicate keys: refused when strict (top level and status), ignored inside children and when loose', () => {
    const topLevel = '{"status":{},"status":{"a":1}}';
    assert.ok(parseHookResponse(topLevel, loose).ok);
    assert.match(reasonOf(parseHookResponse(topLevel, strict)), /strict validation failed: duplicate field "status"/);
    assert.match(
      reasonOf(parseHookResponse('{"status":{"c":[{"x":1,"y":{"k":1,"k":2}}]}}', strict)),
      /duplicate field "status.c\[0\].y.k"/,
    );
    const inChild = '{"children":[{"apiVersion":"v1","kind":"Pod","kind":"Pod","metadata":{"name":"a"}}]}';
    assert.ok(parseHookResponse(inChild, strict).ok);
    assert.ok(parseHookResponse('{"status":{"a":"\\\"quoted\\\"","b":{}},"children":[]}', strict).ok);
    const deep = `{"status":${'{"a":'.repeat(20000)}1${'}'.repeat(20000)}}`;
    assert.match(reasonOf(parseHookResponse(deep, strict)), /nested too deeply|malformed JSON/);
  });

  test('v2 hooks default to strict, v1 to loose; responseUnMarshallMode wins', () => {
    assert.equal(isStrict('v1', undefined), false);
    assert.equal(isStrict('v2', {}), true);
    assert.equal(isStrict('v2', { responseUnMarshallMode: 'loose' }), false);
    assert.equal(isStrict('v1', { responseUnMarshallMode: 'strict' }), true);
  });
});

const pods: ResolvedResource = { apiVersion: 'v1', resource: 'pods', kind: 'Pod', namespaced: true };
const namespaces: ResolvedResource = { apiVersion: 'v1', resource: 'namespaces', kind: 'Namespace', namespaced: false };
const parent: KubeObject = { apiVersion: 'example.com/v1', kind: 'Thing', metadata: { name: 'p', namespace: 'prod', uid: 'uid-1' } };
const everything = (compileSelector({}) as { selector: Selector }).selector;
const pod = (name: string, extra: Partial<KubeObject['metadata']> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, ...extra },
});

describe('desiredChildren', () => {
  test('an answer of more than MAX_CHILDREN children is refused whole; MAX_CHILDREN are accepted', () => {
    const children = (count: number) => Array.from({ length: count }, (_, i) => pod(`p-${i}`));
    const input = { parent, childRules: [pods], selector: everything, generateSelector: false };
    const most = desiredChildren({ ...input, children: children(MAX_CHILDREN) });
    assert.ok(most.ok);
    assert.equal(most.value.length, MAX_CHILDREN);
    assert.equal(
      reasonOf(desiredChildren({ ...input, children: children(MAX_CHILDREN + 1) })),
      `the hook answered ${MAX_CHILDREN + 1} children, more than the ${MAX_CHILDREN} one parent may have here (the function's memory is bounded)`,
    );
  });

  test("children without a namespace get the parent's; others keep theirs", () => {
    const result = withNamespaceDefaults([pod('a'), pod('b', { namespace: 'other' })], parent);
    assert.deepEqual(
      result.map((child) => child.metadata.namespace),
      ['prod', 'other'],
    );
  });

  test('generateSelector adds controller-uid unless the hook set it', () => {
    const selector = (compileSelector({ matchLabels: { 'controller-uid': 'uid-1' } }) as { selector: Selector }).selector;
    const result = desiredChildren({
      parent,
      children: [pod('a', { labels: { app: 'x' } })],
      childRules: [pods],
      selector,
      generateSelector: true,
    });
    assert.ok(result.ok);
    assert.deepEqual(result.value[0]!.metadata.labels, { app: 'x', 'controller-uid': 'uid-1' });
    const mismatch = desiredChildren({
      parent,
      children: [pod('a', { labels: { 'controller-uid': 'someone-else' } })],
      childRules: [pods],
      selector,
      generateSelector: true,
    });
    assert.match(reasonOf(mismatch), /labels on desired child Pod prod\/a don't match parent selector/);
  });

  test("a child that does not match the parent's selector refuses the whole answer", () => {
    const selector = (compileSelector({ matchLabels: { app: 'web' } }) as { selector: Selector }).selector;
    const result = desiredChildren({
      parent,
      children: [pod('ok', { labels: { app: 'web' } }), pod('bad')],
      childRules: [pods],
      selector,
      generateSelector: false,
    });
    assert.match(reasonOf(result), /labels on desired child Pod prod\/bad don't match parent selector/);
  });

  test('labels that are not a string map are refused', () => {
    const result = desiredChildren({
      parent,
      children: [pod('a', { labels: { n: 1 as never } })],
      childRules: [pods],
      selector: everything,
      generateSelector: false,
    });
    assert.match(reasonOf(result), /invalid labels on desired child Pod prod\/a/);
  });

  test('a kind that is not a declared child rule is refused, naming the rules', () => {
    const result = desiredChildren({
      parent,
      children: [{ apiVersion: 'v1', kind: 'Secret', metadata: { name: 's' } }],
      childRules: [pods],
      selector: everything,
      generateSelector: false,
    });
    assert.match(reasonOf(result), /Secret prod\/s .* is not one of the controller's childResources \(Pod v1\)/);
    const otherVersion = desiredChildren({
      parent,
      children: [{ apiVersion: 'v2', kind: 'Pod', metadata: { name: 's' } }],
      childRules: [pods],
      selector: everything,
      generateSelector: false,
    });
    assert.equal(otherVersion.ok, false);
  });

  test('names that would reach a URL badly are refused', () => {
    for (const name of ['', '.', '..', 'a/b', '%2e', 'x'.repeat(254)]) {
      const result = desiredChildren({ parent, children: [pod(name)], childRules: [pods], selector: everything, generateSelector: false });
      assert.match(reasonOf(result), /metadata.name/, JSON.stringify(name));
    }
    assert.equal(objectNameProblem('system:controller'), undefined);
    const numeric = desiredChildren({
      parent,
      children: [pod('a', { namespace: 5 as never })],
      childRules: [pods],
      selector: everything,
      generateSelector: false,
    });
    assert.match(reasonOf(numeric), /metadata.namespace must be a string/);
    const badNamespace = desiredChildren({
      parent,
      children: [pod('a', { namespace: '..' })],
      childRules: [pods],
      selector: everything,
      generateSelector: false,
    });
    assert.match(reasonOf(badNamespace), /not a valid namespace name/);
  });

  test('scope: a namespaced child of a cluster-scoped parent needs a namespace; a cluster-scoped child has none', () => {
    const clusterParent: KubeObject = { apiVersion: 'example.com/v1', kind: 'Thing', metadata: { name: 'p', uid: 'u' } };
    const missing = desiredChildren({
      parent: clusterParent,
      children: [pod('a')],
      childRules: [pods],
      selector: everything,
      generateSelector: false,
    });
    assert.match(reasonOf(missing), /a namespaced Pod needs a namespace/);
    // (A ConfigMap: a Pod outside its parent's namespace is a privileged child, composite-privileged.test.ts.)
    const configMaps: ResolvedResource = { apiVersion: 'v1', resource: 'configmaps', kind: 'ConfigMap', namespaced: true };
    const withNs = desiredChildren({
      parent: clusterParent,
      children: [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'a', namespace: 'ns1' } }],
      childRules: [configMaps],
      selector: everything,
      generateSelector: false,
    });
    assert.ok(withNs.ok);
    const nsChild = desiredChildren({
      parent,
      children: [{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'n' } }],
      childRules: [namespaces],
      selector: everything,
      generateSelector: false,
    });
    assert.match(reasonOf(nsChild), /Namespace is cluster-scoped and cannot have a namespace/);
  });

  test("a namespaced parent's namespaced child in another namespace is refused: the garbage collector would delete it, and every sync create it again", () => {
    const elsewhere = desiredChildren({
      parent,
      children: [pod('a'), pod('b', { namespace: 'other' })],
      childRules: [pods],
      selector: everything,
      generateSelector: false,
    });
    assert.match(
      reasonOf(elsewhere),
      /desired child Pod other\/b: a child of a namespaced parent must be in the parent's namespace "prod"/,
    );
    const explicit = desiredChildren({
      parent,
      children: [pod('a', { namespace: 'prod' })],
      childRules: [pods],
      selector: everything,
      generateSelector: false,
    });
    assert.ok(explicit.ok, "the parent's own namespace, spelled out, is fine");
  });
});
