// The ImmortalContainer sync hook as a pure function, and served over HTTP
// (examples/immortal-container-hook/hook.ts, functions/composite/metacontroller/serve-hook.ts).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { callCompositeHook } from '../../../functions/composite/metacontroller/hook-client.ts';
import { buildHookRequest } from '../../../functions/composite/metacontroller/hook-request.ts';
import { sync } from '../../../examples/immortal-container-hook/hook.ts';
import { planChildren } from '../../../functions/composite/metacontroller/manage-children.ts';
import { serveHooks, type HookServer } from '../../../functions/composite/metacontroller/serve-hook.ts';
import { HookRequestError, type CompositeController } from '../../../functions/composite/metacontroller/types.ts';
import { type KubeObject } from '../../../functions/runtime/index.ts';

const manifests = parseAllDocuments(
  readFileSync(new URL('../../../crds/examples/immortalcontainer-metacontroller.yaml', import.meta.url), 'utf8'),
).map((doc) => doc.toJS());
const controller = manifests.find((object) => object.kind === 'CompositeController') as CompositeController;
const example = manifests.find((object) => object.kind === 'ImmortalContainer') as KubeObject;

const parent = (image = 'nginx:latest'): KubeObject => ({
  apiVersion: 'immortalcontainers.flugel.it/v1alpha1',
  kind: 'ImmortalContainer',
  metadata: { name: 'web', namespace: 'prod', uid: 'uid-1' },
  spec: { image },
});
const podOf = (phase?: string, name = 'web-immortalpod'): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace: 'prod', uid: `${name}-uid` },
  spec: { restartPolicy: 'OnFailure', containers: [{ name: 'acontainer', image: 'nginx:latest' }] },
  ...(phase ? { status: { phase } } : {}),
});
const requestWith = (pods: KubeObject[], version: 'v1' | 'v2' = 'v1', p = parent()) =>
  buildHookRequest({
    controller,
    parent: p,
    version,
    childRules: [{ apiVersion: 'v1', resource: 'pods', kind: 'Pod', namespaced: true }],
    children: pods,
    finalizing: false,
  });

describe('ImmortalContainer sync hook (pure)', () => {
  test("no pod yet: the seed's pod is desired and currentPod is empty", () => {
    const response = sync(requestWith([]));
    assert.deepEqual(response.status, { currentPod: '' });
    assert.deepEqual(response.children, [
      {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'web-immortalpod', namespace: 'prod' },
        spec: { restartPolicy: 'OnFailure', containers: [{ name: 'acontainer', image: 'nginx:latest' }] },
      },
    ]);
  });

  test('a running pod is kept and named in the status, for v1 and v2 keys alike', () => {
    for (const version of ['v1', 'v2'] as const) {
      const response = sync(requestWith([podOf('Running')], version));
      assert.deepEqual(response.status, { currentPod: 'web-immortalpod' }, version);
      assert.equal(response.children.length, 1);
    }
  });

  test('a pod that exited 0 (Succeeded) or failed is left out, so it is deleted and then recreated', () => {
    for (const phase of ['Succeeded', 'Failed']) {
      const response = sync(requestWith([podOf(phase)]));
      assert.deepEqual(response.children, [], phase);
      assert.deepEqual(response.status, { currentPod: '' });
      // What Metacontroller does with that answer: the finished pod is deleted…
      const operations = planChildren({
        parent: parent(),
        parentApiVersion: 'immortalcontainers.flugel.it/v1alpha1',
        parentKind: 'ImmortalContainer',
        observed: [podOf(phase)],
        desired: response.children,
        strategies: { 'Pod.': 'Recreate' },
      });
      assert.deepEqual(
        operations.map((op) => op.action),
        ['delete'],
      );
      // …and the next sync, with the pod gone, creates it again.
      const next = sync(requestWith([]));
      assert.equal(next.children.length, 1);
    }
  });

  test('an image change only changes the desired spec (the Recreate strategy replaces the pod)', () => {
    const response = sync(requestWith([podOf('Running')], 'v1', parent('nginx:2')));
    assert.equal((response.children[0]!.spec as { containers: { image: string }[] }).containers[0]!.image, 'nginx:2');
  });

  test('a parent without spec.image is a request error, not a crash', () => {
    assert.throws(() => sync({ parent: { metadata: { name: 'x' }, spec: {} } }), HookRequestError);
    assert.throws(() => sync({ parent: { metadata: {} } as KubeObject }), /parent.metadata.name is missing/);
  });

  test("the seed's manifest is a CompositeController for this hook", () => {
    assert.equal(controller.spec.parentResource.apiVersion, 'immortalcontainers.flugel.it/v1alpha1');
    assert.equal(controller.spec.childResources?.[0]?.updateStrategy?.method, 'Recreate');
    assert.equal(sync({ parent: example }).children[0]!.metadata.name, 'example-immortalcontainer-immortalpod');
  });
});

describe('serving hooks over HTTP', () => {
  let server: HookServer;
  before(async () => {
    server = await serveHooks({ hooks: { '/sync': sync } });
  });
  after(() => server.close());

  const post = (path: string, body: string, contentType = 'application/json') =>
    new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
      const request = http.request(
        `${server.url}${path}`,
        { method: 'POST', headers: { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(body) } },
        (response) => {
          const chunks: Buffer[] = [];
          response.on('data', (chunk: Buffer) => chunks.push(chunk));
          response.on('end', () =>
            resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks).toString('utf8') }),
          );
        },
      );
      request.on('error', reject);
      request.end(body);
    });

  test('binds loopback by default', () => {
    assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
  });

  test('the hook client gets the same answer as the pure function', async () => {
    const request = requestWith([podOf('Running')]);
    const result = await callCompositeHook({
      webhook: { url: `${server.url}/sync` },
      version: 'v1',
      strict: false,
      hookType: 'sync',
      request,
    });
    assert.ok(result.ok);
    assert.deepEqual(result.value.status, sync(request).status);
    assert.deepEqual(result.value.children, sync(request).children);
  });

  test('answers are JSON with a Content-Length', async () => {
    const answer = await post('/sync', JSON.stringify(requestWith([])));
    assert.equal(answer.status, 200);
    assert.equal(answer.headers['content-type'], 'application/json');
    assert.equal(answer.headers['content-length'], String(Buffer.byteLength(answer.body)));
  });

  test('bad requests get 4xx with the reason (the caller turns it into a SyncError Event)', async () => {
    const cases: [string, string, string, number, RegExp][] = [
      ['/sync', '{not json', 'application/json', 400, /malformed JSON request/],
      ['/sync', '[]', 'application/json', 400, /must be a JSON object/],
      [
        '/sync',
        JSON.stringify({ parent: { metadata: { name: 'x' }, spec: {} } }),
        'application/json',
        400,
        /spec.image must be a non-empty string/,
      ],
      ['/sync', '{}', 'text/plain', 415, /expected Content-Type application\/json/],
      ['/nope', '{}', 'application/json', 404, /no hook at \/nope/],
    ];
    for (const [path, body, type, status, reason] of cases) {
      const answer = await post(path, body, type);
      assert.equal(answer.status, status, `${path} ${body}`);
      assert.match(JSON.parse(answer.body).error, reason);
    }
  });

  test('a hook that throws unexpectedly answers 500, and the server keeps serving', async () => {
    const errors: unknown[] = [];
    const failing = await serveHooks({
      hooks: {
        '/sync': () => {
          throw new Error('boom');
        },
      },
      onError: (error) => errors.push(error),
    });
    try {
      const result = await callCompositeHook({
        webhook: { url: `${failing.url}/sync` },
        version: 'v1',
        strict: false,
        hookType: 'sync',
        request: {},
      });
      assert.ok(!result.ok && result.failure.type === 'SyncError' && result.failure.reason.startsWith('unsupported status code: 500'));
      assert.equal(errors.length, 1);
      const again = await callCompositeHook({
        webhook: { url: `${failing.url}/sync` },
        version: 'v1',
        strict: false,
        hookType: 'sync',
        request: {},
      });
      assert.equal(again.ok, false);
    } finally {
      await failing.close();
    }
  });

  test('a request body over the limit gets 413', async () => {
    const small = await serveHooks({ hooks: { '/sync': sync }, maxRequestBytes: 1000 });
    try {
      const result = await callCompositeHook({
        webhook: { url: `${small.url}/sync` },
        version: 'v1',
        strict: false,
        hookType: 'sync',
        request: { pad: 'x'.repeat(5000) },
      });
      assert.ok(!result.ok && result.failure.reason.startsWith('unsupported status code: 413'), JSON.stringify(result));
    } finally {
      await small.close();
    }
  });

  test('a hook that returns nothing answers 500, never a null that would delete every child', async () => {
    const empty = await serveHooks({ hooks: { '/sync': () => undefined } });
    try {
      const result = await callCompositeHook({
        webhook: { url: `${empty.url}/sync` },
        version: 'v1',
        strict: false,
        hookType: 'sync',
        request: {},
      });
      assert.ok(!result.ok && result.failure.reason.startsWith('unsupported status code: 500'), JSON.stringify(result));
    } finally {
      await empty.close();
    }
  });

  test('GET on a hook is 405; health endpoints answer', async () => {
    const get = (path: string) => fetch(`${server.url}${path}`).then((response) => response.status);
    assert.equal(await get('/sync'), 405);
    assert.equal(await get('/health/readiness'), 200);
    assert.equal(await get('/health/liveness'), 200);
  });
});
