// What an incoming CloudEvent means, for events built exactly as ApiServerSource and PingSource
// send them, through both HTTP content modes.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CloudEvent, HTTP } from 'cloudevents';
import { apiServerSourceEvent, type ChangeAction, type SourceMode } from '../../eventing/apiserver-events.ts';
import { CopyratorRuleKind } from '../../functions/copyrator/desired.ts';
import { ImmortalContainerKind, type ImmortalContainer } from '../../functions/immortal-container/desired.ts';
import {
  BadEventError,
  decodeCloudEvent,
  interpretEvent,
  metadataProblem,
  PING_TYPE,
  POLL_DATA,
  type FunctionEvent,
  ConfigMap,
  kindKeyString,
  Namespace,
  type KubeObject,
} from '../../functions/runtime/index.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { binaryHeaders, malformedEvents, referenceData } from '../support/malformed-events.ts';
import { ClusterRoleBinding } from '../support/tenant.ts';

const SERVER = 'https://10.96.0.1:443';
const IC_API_VERSION = 'immortalcontainer.flugel.it/v1alpha1';

const ic: ImmortalContainer = {
  metadata: { name: 'web', namespace: 'prod', uid: 'uid-web-1', generation: 3, resourceVersion: '812' },
  spec: { image: 'nginx:1.27' },
};

/** Over the wire in binary mode (as Knative delivers), then decoded and interpreted. */
function viaBinary(event: CloudEvent<unknown>): FunctionEvent {
  const message = HTTP.binary(event);
  return interpretEvent(decodeCloudEvent(message.headers, Buffer.from((message.body as string | undefined) ?? '')));
}

function viaStructured(event: CloudEvent<unknown>): FunctionEvent {
  const message = HTTP.structured(event);
  return interpretEvent(decodeCloudEvent(message.headers, Buffer.from(message.body as string)));
}

const change = (result: FunctionEvent) => {
  assert.equal(result.type, 'change');
  return result as Extract<FunctionEvent, { type: 'change' }>;
};

describe('ApiServerSource events, all six types', () => {
  const cases: { mode: SourceMode; action: ChangeAction; type: string }[] = [];
  for (const mode of ['Reference', 'Resource'] as const) {
    for (const action of ['add', 'update', 'delete'] as const) {
      cases.push({ mode, action, type: `dev.knative.apiserver.${mode === 'Reference' ? 'ref' : 'resource'}.${action}` });
    }
  }
  assert.equal(new Set(cases.map((c) => c.type)).size, 6);

  for (const { mode, action, type } of cases) {
    test(type, () => {
      const event = apiServerSourceEvent({ server: SERVER, kind: ImmortalContainerKind, object: ic, action, mode });
      assert.equal(event.type, type);
      assert.equal(event.subject, '/apis/immortalcontainer.flugel.it/v1alpha1/namespaces/prod/immortalcontainers/web');

      for (const result of [interpretEvent(event), viaBinary(event), viaStructured(event)]) {
        const interpreted = change(result);
        assert.equal(interpreted.action, action);
        assert.equal(interpreted.mode, mode === 'Reference' ? 'ref' : 'resource');
        assert.equal(interpreted.id, event.id);
        assert.deepEqual(interpreted.ref, { apiVersion: IC_API_VERSION, kind: 'ImmortalContainer', namespace: 'prod', name: 'web' });
        if (mode === 'Reference') {
          assert.equal(interpreted.object, undefined, 'Reference mode carries no object');
        } else {
          assert.equal(interpreted.object?.metadata.uid, 'uid-web-1');
          assert.equal(interpreted.object?.metadata.resourceVersion, '812');
          assert.deepEqual(interpreted.object?.spec, { image: 'nginx:1.27' });
          assert.equal(interpreted.object?.kind, 'ImmortalContainer');
        }
      }
    });
  }
});

describe('extensions and data', () => {
  test('Reference mode: the extensions win over the data (Triggers filter on them)', () => {
    const event = new CloudEvent<unknown>({
      specversion: '1.0',
      id: 'e1',
      source: SERVER,
      type: 'dev.knative.apiserver.ref.update',
      datacontenttype: 'application/json',
      kind: 'ImmortalContainer',
      apiversion: IC_API_VERSION,
      name: 'from-extension',
      namespace: 'ext-ns',
      data: { kind: 'Pod', apiVersion: 'v1', name: 'from-data', namespace: 'data-ns' },
    });
    assert.deepEqual(change(viaBinary(event)).ref, {
      apiVersion: IC_API_VERSION,
      kind: 'ImmortalContainer',
      namespace: 'ext-ns',
      name: 'from-extension',
    });
  });

  test('Reference mode without extensions falls back to the data (older adapters)', () => {
    const event = new CloudEvent<unknown>({
      specversion: '1.0',
      id: 'e2',
      source: SERVER,
      type: 'dev.knative.apiserver.ref.delete',
      datacontenttype: 'application/json',
      data: { kind: 'Pod', apiVersion: 'v1', name: 'from-data', namespace: 'data-ns' },
    });
    const result = change(viaBinary(event));
    assert.deepEqual(result.ref, { apiVersion: 'v1', kind: 'Pod', namespace: 'data-ns', name: 'from-data' });
    assert.equal(result.action, 'delete');
  });

  test('Resource mode: the object in the data wins over the extensions', () => {
    const event = new CloudEvent<unknown>({
      specversion: '1.0',
      id: 'e3',
      source: SERVER,
      type: 'dev.knative.apiserver.resource.update',
      datacontenttype: 'application/json',
      kind: 'ImmortalContainer',
      apiversion: IC_API_VERSION,
      name: 'from-extension',
      namespace: 'ext-ns',
      data: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'from-data', namespace: 'data-ns', uid: 'p1' } },
    });
    const result = change(viaBinary(event));
    assert.deepEqual(result.ref, { apiVersion: 'v1', kind: 'Pod', namespace: 'data-ns', name: 'from-data' });
    assert.equal(result.object?.metadata.uid, 'p1');
  });

  test('Resource mode: extensions fill in what the object lacks', () => {
    const event = new CloudEvent<unknown>({
      specversion: '1.0',
      id: 'e4',
      source: SERVER,
      type: 'dev.knative.apiserver.resource.add',
      datacontenttype: 'application/json',
      kind: 'ImmortalContainer',
      apiversion: IC_API_VERSION,
      name: 'web',
      namespace: 'prod',
      data: { metadata: { uid: 'u4' } },
    });
    assert.deepEqual(change(viaBinary(event)).ref, {
      apiVersion: IC_API_VERSION,
      kind: 'ImmortalContainer',
      namespace: 'prod',
      name: 'web',
    });
  });

  test('ceOverrides extensions ride along without changing the reference', () => {
    const event = apiServerSourceEvent({
      server: SERVER,
      kind: ImmortalContainerKind,
      object: ic,
      action: 'add',
      mode: 'Reference',
      extensions: { opfnfunction: 'immortal-container' },
    });
    const decoded = decodeCloudEvent(HTTP.binary(event).headers, Buffer.from(HTTP.binary(event).body as string));
    assert.equal(decoded.opfnfunction, 'immortal-container');
    assert.equal(change(interpretEvent(decoded)).ref.name, 'web');
  });
});

describe('cluster-scoped objects', () => {
  const namespace: KubeObject = { metadata: { name: 'team-a', uid: 'ns-uid' } };

  for (const mode of ['Reference', 'Resource'] as const) {
    test(`a Namespace in ${mode} mode has namespace ""`, () => {
      const event = apiServerSourceEvent({ server: SERVER, kind: Namespace, object: namespace, action: 'add', mode });
      assert.equal(event.subject, '/apis/v1/namespaces//namespaces/team-a');
      for (const result of [viaBinary(event), viaStructured(event)]) {
        const interpreted = change(result);
        assert.deepEqual(interpreted.ref, { apiVersion: 'v1', kind: 'Namespace', namespace: '', name: 'team-a' });
        assert.equal(interpreted.object?.metadata.uid, mode === 'Resource' ? 'ns-uid' : undefined);
      }
    });
  }
});

describe('a kind with an irregular plural', () => {
  test('its subject names the resource guessed from its kind, as Knative builds it; the event carries the kind itself', () => {
    const rule = {
      apiVersion: 'flant.com/v1',
      kind: 'CopyratorRule',
      metadata: { name: 'main-rule', namespace: 'default', uid: 'r', resourceVersion: '1' },
    };
    const event = apiServerSourceEvent({ server: SERVER, kind: CopyratorRuleKind, object: rule, action: 'add', mode: 'Resource' });
    assert.equal(CopyratorRuleKind.plural, 'copyrators');
    assert.equal(event.subject, '/apis/flant.com/v1/namespaces/default/copyratorrules/main-rule');
    assert.deepEqual(change(interpretEvent(event)).ref, {
      apiVersion: 'flant.com/v1',
      kind: 'CopyratorRule',
      namespace: 'default',
      name: 'main-rule',
    });
  });
});

describe('PingSource', () => {
  const ping = (data: unknown) =>
    new CloudEvent<unknown>({
      specversion: '1.0',
      id: 'ping-7',
      source: '/apis/v1/namespaces/default/pingsources/resync',
      type: PING_TYPE,
      data,
    });

  test("a ping is a resync, whatever its data but a poll's", () => {
    for (const data of [undefined, { note: 'every 5 minutes' }, 'plain text', { poll: 'true' }, { poll: false }, [POLL_DATA]]) {
      const event = ping(data);
      assert.deepEqual(interpretEvent(event), { type: 'resync', id: 'ping-7' });
      assert.deepEqual(viaBinary(event), { type: 'resync', id: 'ping-7' });
      assert.deepEqual(viaStructured(event), { type: 'resync', id: 'ping-7' });
    }
  });

  test('a ping with the poll data is a poll, in both content modes', () => {
    for (const data of [POLL_DATA, { ...POLL_DATA, note: 'every minute' }]) {
      const event = ping(data);
      assert.deepEqual(interpretEvent(event), { type: 'poll', id: 'ping-7' });
      assert.deepEqual(viaBinary(event), { type: 'poll', id: 'ping-7' });
      assert.deepEqual(viaStructured(event), { type: 'poll', id: 'ping-7' });
    }
  });
});

describe('decoding both content modes', () => {
  const event = apiServerSourceEvent({ server: SERVER, kind: ImmortalContainerKind, object: ic, action: 'update', mode: 'Resource' });

  test('binary mode: ce-* headers, JSON body', () => {
    const message = HTTP.binary(event);
    assert.equal(message.headers['ce-type'], 'dev.knative.apiserver.resource.update');
    const decoded = decodeCloudEvent(message.headers, Buffer.from(message.body as string));
    assert.equal(decoded.id, event.id);
    assert.equal(decoded.source, SERVER);
    assert.equal(decoded.specversion, '1.0');
    assert.equal(decoded.subject, event.subject);
    assert.equal(decoded.kind, 'ImmortalContainer');
    assert.equal((decoded.data as ImmortalContainer).metadata.name, 'web');
  });

  test('binary mode: header names in any case, body as a string', () => {
    const message = HTTP.binary(event);
    const shouted = Object.fromEntries(Object.entries(message.headers).map(([name, value]) => [name.toUpperCase(), value as string]));
    assert.equal(change(interpretEvent(decodeCloudEvent(shouted, message.body as string))).ref.name, 'web');
  });

  test('binary mode: JSON with a charset parameter', () => {
    const message = HTTP.binary(event);
    const headers = { ...(message.headers as Record<string, string>), 'content-type': 'application/json; charset=utf-8' };
    assert.equal(change(interpretEvent(decodeCloudEvent(headers, Buffer.from(message.body as string)))).object?.metadata.uid, 'uid-web-1');
  });

  test('structured mode: application/cloudevents+json', () => {
    const message = HTTP.structured(event);
    assert.match(String(message.headers['content-type']), /^application\/cloudevents\+json/);
    const decoded = decodeCloudEvent(message.headers, Buffer.from(message.body as string));
    assert.equal(decoded.id, event.id);
    assert.equal(decoded.type, 'dev.knative.apiserver.resource.update');
    assert.equal(change(interpretEvent(decoded)).object?.metadata.uid, 'uid-web-1');
  });

  test('structured mode: data as data_base64', () => {
    const body = {
      specversion: '1.0',
      id: 'b64',
      source: SERVER,
      type: 'dev.knative.apiserver.resource.add',
      datacontenttype: 'application/json',
      data_base64: Buffer.from(
        JSON.stringify({
          apiVersion: IC_API_VERSION,
          kind: 'ImmortalContainer',
          metadata: { name: 'web', namespace: 'prod', uid: 'u-b64' },
        }),
      ).toString('base64'),
    };
    const result = change(interpretEvent(decodeCloudEvent({ 'content-type': 'application/cloudevents+json' }, JSON.stringify(body))));
    assert.deepEqual(result.ref, { apiVersion: IC_API_VERSION, kind: 'ImmortalContainer', namespace: 'prod', name: 'web' });
    assert.equal(result.object?.metadata.uid, 'u-b64');
  });

  test('both modes give the same interpretation', () => {
    assert.deepEqual(viaBinary(event), viaStructured(event));
  });
});

describe('bad events', () => {
  const reject = (fn: () => unknown, reason: RegExp) =>
    assert.throws(fn, (error: unknown) => {
      assert.ok(error instanceof BadEventError, `a BadEventError, got ${String(error)}`);
      assert.equal(error.name, 'BadEventError');
      assert.match(error.message, reason);
      return true;
    });

  test('interpretEvent rejects what cannot mean anything', () => {
    const base = { specversion: '1.0', id: 'x', source: SERVER, datacontenttype: 'application/json' };
    reject(
      () => interpretEvent(new CloudEvent<unknown>({ ...base, type: 'dev.knative.apiserver.ref.patch', data: {} })),
      /unknown event type "dev\.knative\.apiserver\.ref\.patch"/,
    );
    reject(() => interpretEvent(new CloudEvent<unknown>({ ...base, type: 'dev.knative.apiserver.ref.add' })), /has no data/);
    reject(
      () => interpretEvent(new CloudEvent<unknown>({ ...base, type: 'dev.knative.apiserver.ref.add', data: 'plain words' })),
      /must be a JSON object, got the string "plain words"/,
    );
    reject(
      () => interpretEvent(new CloudEvent<unknown>({ ...base, type: 'dev.knative.apiserver.ref.add', data: 42 })),
      /must be a JSON object/,
    );
    reject(
      () =>
        interpretEvent(
          new CloudEvent<unknown>({
            ...base,
            type: 'dev.knative.apiserver.resource.add',
            kind: 'Pod',
            apiversion: 'v1',
            name: 'p',
            namespace: 'd',
            data: { kind: 'Pod', apiVersion: 'v1', name: 'p' },
          }),
        ),
      /no metadata/,
    );
  });

  test('decodeCloudEvent rejects what is not one CloudEvent 1.0', () => {
    reject(() => decodeCloudEvent({ 'content-type': 'application/json' }, '{}'), /not a CloudEvent/);
    reject(() => decodeCloudEvent({ 'content-type': 'application/cloudevents-batch+json' }, '[]'), /batched/);
    reject(
      () => decodeCloudEvent({ 'ce-specversion': '0.3', 'ce-id': '1', 'ce-source': 's', 'ce-type': PING_TYPE }, ''),
      /unsupported specversion "0\.3"/,
    );
    reject(
      () =>
        decodeCloudEvent(
          { 'content-type': 'application/cloudevents+json' },
          JSON.stringify({ specversion: '1.0', source: 's', type: PING_TYPE }),
        ),
      /no "id" attribute/,
    );
  });
});

describe('the binary fast path gives what the cloudevents SDK gives', () => {
  // decodeCloudEvent leaves a binary event from a source it has not yet seen validated to the
  // SDK; from then on it decodes that source's events itself. Each case gets a source of its
  // own, is decoded once (the SDK), its source is then vouched for by a valid ping, and it is
  // decoded again (the fast path where it applies): both must give the same event, the same
  // interpretation or the same refusal.
  const kind = ImmortalContainerKind;
  const refData = JSON.stringify(referenceData(kind));
  const valid: { name: string; headers: Record<string, string>; body: string }[] = [
    { name: 'Reference add', headers: binaryHeaders(kind), body: refData },
    ...(['add', 'update', 'delete'] as const).map((action) => {
      const message = HTTP.binary(
        apiServerSourceEvent({
          server: SERVER,
          kind,
          object: ic,
          action,
          mode: 'Resource',
          extensions: { opfnfunction: 'immortal-container' },
        }),
      );
      return {
        name: `Resource ${action} with an extension`,
        headers: message.headers as Record<string, string>,
        body: message.body as string,
      };
    }),
    { name: 'a ping without data', headers: binaryHeaders(kind, { 'ce-type': PING_TYPE, 'content-type': undefined }), body: '' },
    { name: 'a ping with JSON data', headers: binaryHeaders(kind, { 'ce-type': PING_TYPE }), body: '{"hello":"world"}' },
    {
      name: 'a reconcile event with opfnnotbefore',
      headers: binaryHeaders(kind, { 'ce-type': 'dev.opfn.reconcile', 'ce-opfnnotbefore': '2026-01-01T00:00:00Z' }),
      body: JSON.stringify({ keys: [kindKeyString({ kind, namespace: 'default', name: 'web' })] }),
    },
    { name: 'JSON with a charset', headers: binaryHeaders(kind, { 'content-type': 'application/json; charset=utf-8' }), body: refData },
    {
      name: 'JSON with a charset and no space',
      headers: binaryHeaders(kind, { 'content-type': 'application/json;charset=utf-8' }),
      body: refData,
    },
    { name: 'a +json media type', headers: binaryHeaders(kind, { 'content-type': 'application/vnd.example+json' }), body: refData },
    { name: 'JSON sent as text/plain', headers: binaryHeaders(kind, { 'content-type': 'text/plain' }), body: refData },
    { name: 'JSON without a content type', headers: binaryHeaders(kind, { 'content-type': undefined }), body: refData },
    { name: 'a JSON string holding JSON', headers: binaryHeaders(kind), body: JSON.stringify(refData) },
    { name: 'JSON after a space', headers: binaryHeaders(kind, { 'ce-type': PING_TYPE }), body: ` ${refData}` },
    { name: "a bare word as a ping's JSON", headers: binaryHeaders(kind, { 'ce-type': PING_TYPE }), body: 'hello' },
    { name: 'an empty subject and an empty extension', headers: binaryHeaders(kind, { 'ce-subject': '', 'ce-tenant': '' }), body: refData },
    { name: 'a time', headers: binaryHeaders(kind, { 'ce-time': '2026-11-23T10:00:00Z' }), body: refData },
    { name: 'a dataschema', headers: binaryHeaders(kind, { 'ce-dataschema': 'https://example.com/schema' }), body: refData },
    { name: 'ce-datacontenttype', headers: binaryHeaders(kind, { 'ce-datacontenttype': 'text/plain' }), body: refData },
    { name: 'ce-schemaurl', headers: binaryHeaders(kind, { 'ce-schemaurl': 'https://example.com/schema' }), body: refData },
    { name: 'ce-data', headers: binaryHeaders(kind, { 'ce-data': '{"kind":"Other"}' }), body: refData },
  ];
  const malformed = malformedEvents(immortalContainer)
    .filter(
      (c) => c.headers['ce-specversion'] !== undefined && !String(c.headers['content-type'] ?? '').startsWith('application/cloudevents'),
    )
    .map((c) => ({ name: `malformed: ${c.name}`, headers: c.headers as Record<string, string>, body: c.body ?? '' }));
  const outcome = (headers: Record<string, string>, body: string) => {
    try {
      const decoded = decodeCloudEvent(headers, Buffer.from(body));
      // Own attributes only, without the time the SDK rewrites (or makes up).
      const { time, ...attributes } = JSON.parse(JSON.stringify({ ...decoded }));
      let meaning: unknown;
      try {
        meaning = interpretEvent(decoded);
      } catch (error) {
        meaning = `refused: ${(error as Error).message}`;
      }
      return { event: attributes, meaning, fromSdk: decoded instanceof CloudEvent };
    } catch (error) {
      return { refused: (error as Error).message };
    }
  };

  test('the cases cover valid events and every binary-mode case of the malformed corpus', () => {
    assert.ok(malformed.length >= 30, `${malformed.length} malformed binary cases`);
  });

  const fastPathTaken: string[] = [];
  for (const [index, { name, headers, body }] of [...valid, ...malformed].entries()) {
    test(name, () => {
      const source = `https://fast-path.example/${index}`;
      const own = headers['ce-source'] === undefined ? headers : { ...headers, 'ce-source': source };
      const { fromSdk: firstFromSdk, ...first } = outcome(own, body) as Record<string, unknown>;
      assert.notEqual(firstFromSdk, false, 'a source not yet vouched for is decoded by the SDK');
      decodeCloudEvent({ 'ce-specversion': '1.0', 'ce-id': 'vouch', 'ce-source': source, 'ce-type': PING_TYPE }, Buffer.alloc(0));
      const { fromSdk, ...second } = outcome(own, body) as Record<string, unknown>;
      assert.deepEqual(second, first);
      if (fromSdk === false) fastPathTaken.push(name);
    });
  }

  test('the fast path takes every valid case but those it leaves to the SDK, and refuses as the SDK does', () => {
    const leftToSdk = [
      'JSON after a space',
      "a bare word as a ping's JSON",
      'an empty subject and an empty extension',
      'a dataschema',
      'ce-datacontenttype',
      'ce-schemaurl',
      'ce-data',
    ];
    assert.deepEqual(
      fastPathTaken.filter((name) => !name.startsWith('malformed: ')),
      valid.map((c) => c.name).filter((name) => !leftToSdk.includes(name)),
    );
    assert.ok(
      fastPathTaken.length - (valid.length - leftToSdk.length) >= 20,
      `malformed cases decoded by the fast path (refused when interpreted): ${fastPathTaken.length - (valid.length - leftToSdk.length)}`,
    );
  });
});

describe('Resource-mode bodies', () => {
  test('a Resource-mode body whose owners or labels no API server would send is named as such, so the event is malformed (400), not a TypeError', () => {
    const body = (metadata: Record<string, unknown>) => ({ name: 'x', namespace: 'prod', ...metadata });
    const reference = { apiVersion: 'example.com/v1', kind: 'Thing', name: 'a', uid: 'a-uid', controller: true };
    for (const fine of [
      {},
      { ownerReferences: null },
      { ownerReferences: [] },
      { ownerReferences: [reference] },
      { ownerReferences: [{ ...reference, controller: undefined }] },
      { labels: { app: 'a' } },
      { labels: null },
    ]) {
      assert.equal(metadataProblem(body(fine)), undefined, JSON.stringify(fine));
    }
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ ownerReferences: {} }, /^metadata.ownerReferences must be a list, got \{\}$/],
      [{ ownerReferences: 'x' }, /^metadata.ownerReferences must be a list, got "x"$/],
      [{ ownerReferences: [null] }, /^metadata.ownerReferences\[0\] must be an object, got null$/],
      [{ ownerReferences: [reference, []] }, /^metadata.ownerReferences\[1\] must be an object/],
      [{ ownerReferences: [{ ...reference, apiVersion: 5 }] }, /apiVersion must be a string/],
      [{ ownerReferences: [{ ...reference, controller: 'yes' }] }, /controller must be a boolean/],
      [{ labels: 'x' }, /^metadata.labels must be a map of strings/],
      [{ labels: ['a'] }, /^metadata.labels must be a map of strings/],
      [{ labels: { app: 1 } }, /^metadata.labels\["app"\] must be a string$/],
    ];
    for (const [metadata, problem] of cases) assert.match(metadataProblem(body(metadata)) ?? '', problem, JSON.stringify(metadata));
  });
});

describe("names as the API server accepts them for the event's kind", () => {
  test('a system:* ClusterRoleBinding (a path-segment name) is an event, in both modes; the same name on a ConfigMap is refused', () => {
    for (const mode of ['Reference', 'Resource'] as const) {
      const event = apiServerSourceEvent({
        server: SERVER,
        kind: ClusterRoleBinding,
        object: { metadata: { name: 'system:controller:foo', uid: 'u1' } },
        action: 'delete',
        mode,
      });
      assert.equal(change(viaBinary(event)).ref.name, 'system:controller:foo', mode);
    }
    const configMap = apiServerSourceEvent({
      server: SERVER,
      kind: ConfigMap,
      object: { metadata: { name: 'system:foo', namespace: 'prod' } },
      action: 'update',
      mode: 'Reference',
    });
    assert.throws(
      () => viaBinary(configMap),
      (error: Error) => error instanceof BadEventError && /no valid object name/.test(error.message),
    );
  });

  test('still refused for any kind: ., .., a slash, a percent sign, empty, longer than 253 characters', () => {
    for (const name of ['.', '..', 'a/b', '%2e', '', 'x'.repeat(254)]) {
      const event = new CloudEvent({
        type: 'dev.knative.apiserver.ref.delete',
        source: SERVER,
        datacontenttype: 'application/json',
        data: { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', name, namespace: '' },
      });
      assert.throws(() => viaBinary(event), BadEventError, name);
    }
  });
});
