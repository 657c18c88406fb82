// CloudEvent intake over real HTTP: a FunctionHost on loopback whose Kubernetes API is
// unreachable. Malformed requests must be answered 400 (never retried) with a reason naming
// the problem; well-formed events that need the API must be answered 503 (retried), never 2xx.
import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { CloudEvent, HTTP } from 'cloudevents';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { PING_TYPE } from '../../functions/runtime/events.ts';
import { ConfigMap, Pod } from '../../functions/runtime/kinds.ts';
import { ConnectionReusingKubeConfig, KubeClient, type RequestObserver } from '../../functions/runtime/kube.ts';
import { createMetrics } from '../../functions/runtime/metrics.ts';
import { createFunctionHost, type FunctionHost } from '../../functions/runtime/server.ts';
import { deliver, quietLog } from '../support/cluster.ts';

const UNREACHABLE_API = 'https://127.0.0.1:1';
const MAX_BODY = 3 * 1024 * 1024;

function unreachableKube(observe?: RequestObserver): KubeClient {
  const config = new ConnectionReusingKubeConfig();
  config.loadFromOptions({
    clusters: [{ name: 'nowhere', server: UNREACHABLE_API, skipTLSVerify: true }],
    users: [{ name: 'someone', token: 'not-a-real-token' }],
    contexts: [{ name: 'nowhere', cluster: 'nowhere', user: 'someone' }],
    currentContext: 'nowhere',
  });
  return new KubeClient(config, observe);
}

interface Served {
  host: FunctionHost;
  url: string;
  /** What a process exit does to open connections: cut them, whatever is still unwritten. */
  cutConnections(): void;
  close(): Promise<void>;
}

async function serve(observe?: RequestObserver): Promise<Served> {
  const metrics = createMetrics(immortalContainer.name);
  const host = createFunctionHost(immortalContainer, { kube: unreachableKube(observe), log: quietLog, metrics });
  const server: Server = host.app.listen(0, '127.0.0.1');
  await new Promise((resolve, reject) => server.once('listening', resolve).once('error', reject));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    host,
    url,
    cutConnections: () => server.closeAllConnections(),
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

// --- the corpus ---------------------------------------------------------------------------

const IC_API_VERSION = 'immortalcontainer.flugel.it/v1alpha1';
const refData = { kind: 'ImmortalContainer', namespace: 'default', name: 'web', apiVersion: IC_API_VERSION };

/** A well-formed binary-mode Reference event for an ImmortalContainer; cases break one thing each. */
const binaryHeaders = (overrides: Record<string, string | undefined> = {}): Record<string, string> => {
  const headers: Record<string, string | undefined> = {
    'content-type': 'application/json',
    'ce-specversion': '1.0',
    'ce-id': 'b1c2d3',
    'ce-source': 'https://10.96.0.1:443',
    'ce-type': 'dev.knative.apiserver.ref.add',
    'ce-subject': `/apis/${IC_API_VERSION}/namespaces/default/immortalcontainers/web`,
    'ce-kind': 'ImmortalContainer',
    'ce-apiversion': IC_API_VERSION,
    'ce-name': 'web',
    'ce-namespace': 'default',
    ...overrides,
  };
  return Object.fromEntries(Object.entries(headers).filter((entry): entry is [string, string] => entry[1] !== undefined));
};

const structuredEvent = (overrides: Record<string, unknown> = {}): Record<string, unknown> => {
  const event: Record<string, unknown> = { specversion: '1.0', id: 's1', source: 'https://10.96.0.1:443', type: PING_TYPE, ...overrides };
  for (const [name, value] of Object.entries(event)) if (value === undefined) delete event[name];
  return event;
};

interface Malformed {
  name: string;
  headers: Record<string, string>;
  body?: string;
  /** What the reason must say: it names the problem, not just "bad request". */
  reason: RegExp;
}

const STRUCTURED = { 'content-type': 'application/cloudevents+json' };

const corpus: Malformed[] = [
  { name: 'missing ce-id', headers: binaryHeaders({ 'ce-id': undefined }), body: JSON.stringify(refData), reason: /\bce-id\b/ },
  { name: 'empty ce-id', headers: binaryHeaders({ 'ce-id': '' }), body: JSON.stringify(refData), reason: /\bce-id\b/ },
  { name: 'missing ce-source', headers: binaryHeaders({ 'ce-source': undefined }), body: JSON.stringify(refData), reason: /\bce-source\b/ },
  { name: 'missing ce-type', headers: binaryHeaders({ 'ce-type': undefined }), body: JSON.stringify(refData), reason: /\bce-type\b/ },
  { name: 'missing ce-specversion', headers: binaryHeaders({ 'ce-specversion': undefined }), body: JSON.stringify(refData), reason: /\bce-specversion\b/ },
  { name: 'specversion 0.3', headers: binaryHeaders({ 'ce-specversion': '0.3' }), body: JSON.stringify(refData), reason: /specversion "0\.3".*only 1\.0/ },
  { name: 'specversion 2.0', headers: binaryHeaders({ 'ce-specversion': '2.0' }), body: JSON.stringify(refData), reason: /specversion "2\.0".*only 1\.0/ },
  { name: 'non-JSON body sent as application/json', headers: binaryHeaders(), body: 'kind=ImmortalContainer&name=web', reason: /not valid JSON/ },
  { name: 'truncated JSON body', headers: binaryHeaders(), body: '{"kind":"ImmortalContainer",', reason: /not valid JSON/ },
  { name: 'empty body for an apiserver event', headers: binaryHeaders(), body: '', reason: /dev\.knative\.apiserver\.ref\.add event has no data/ },
  { name: 'data is a JSON array', headers: binaryHeaders(), body: JSON.stringify([refData]), reason: /data must be a JSON object/ },
  { name: 'data is a JSON string', headers: binaryHeaders(), body: JSON.stringify('web'), reason: /data must be a JSON object/ },
  { name: 'data is JSON null', headers: binaryHeaders(), body: 'null', reason: /data must be a JSON object/ },
  { name: 'reconcile event without keys', headers: binaryHeaders({ 'ce-type': 'dev.opfn.reconcile' }), body: JSON.stringify({}), reason: /dev\.opfn\.reconcile event data must be \{"keys": \[\.\.\.\]\}/ },
  { name: 'reconcile event with an empty key list', headers: binaryHeaders({ 'ce-type': 'dev.opfn.reconcile' }), body: JSON.stringify({ keys: [] }), reason: /at least one key/ },
  { name: 'reconcile event naming a dot-dot object', headers: binaryHeaders({ 'ce-type': 'dev.opfn.reconcile' }), body: JSON.stringify({ keys: ['immortalcontainer.flugel.it/ImmortalContainer:default/..'] }), reason: /invalid object name "\.\."/ },
  { name: 'reconcile event naming a kind the function does not reconcile', headers: binaryHeaders({ 'ce-type': 'dev.opfn.reconcile' }), body: JSON.stringify({ keys: ['Secret:kube-system/x'] }), reason: /"Secret" is not a kind this function reconciles/ },
  { name: 'reconcile event with an invalid opfnnotbefore', headers: binaryHeaders({ 'ce-type': 'dev.opfn.reconcile', 'ce-opfnnotbefore': 'tomorrow' }), body: JSON.stringify({ keys: ['immortalcontainer.flugel.it/ImmortalContainer:default/web'] }), reason: /opfnnotbefore "tomorrow" is not an RFC 3339 time/ },
  { name: 'reconcile event with too many keys', headers: binaryHeaders({ 'ce-type': 'dev.opfn.reconcile' }), body: JSON.stringify({ keys: Array.from({ length: 1001 }, (_, i) => `immortalcontainer.flugel.it/ImmortalContainer:default/k${i}`) }), reason: /carries 1001 keys; at most 1000/ },
  { name: 'structured event sent as text/plain', headers: { 'content-type': 'text/plain' }, body: JSON.stringify(structuredEvent()), reason: /not a CloudEvent.*application\/cloudevents\+json/ },
  { name: 'structured event with an unsupported format', headers: { 'content-type': 'application/cloudevents+xml' }, body: JSON.stringify(structuredEvent()), reason: /content type application\/cloudevents\+xml/ },
  { name: 'structured mode with invalid JSON', headers: STRUCTURED, body: '{"specversion": "1.0", "id": ', reason: /structured CloudEvent is not valid JSON/ },
  { name: 'structured mode with an empty body', headers: STRUCTURED, body: '', reason: /structured CloudEvent is not valid JSON/ },
  { name: 'structured mode with a JSON array', headers: STRUCTURED, body: JSON.stringify([structuredEvent()]), reason: /structured CloudEvent must be a JSON object/ },
  { name: 'structured mode without id', headers: STRUCTURED, body: JSON.stringify(structuredEvent({ id: undefined })), reason: /no "id" attribute/ },
  { name: 'structured mode without source', headers: STRUCTURED, body: JSON.stringify(structuredEvent({ source: undefined })), reason: /no "source" attribute/ },
  { name: 'structured mode without specversion', headers: STRUCTURED, body: JSON.stringify(structuredEvent({ specversion: undefined })), reason: /no "specversion" attribute/ },
  { name: 'batch mode', headers: { 'content-type': 'application/cloudevents-batch+json' }, body: JSON.stringify([structuredEvent()]), reason: /batched CloudEvents are not accepted/ },
  { name: 'unknown event type', headers: binaryHeaders({ 'ce-type': 'com.example.object.changed' }), body: JSON.stringify(refData), reason: /unknown event type "com\.example\.object\.changed"/ },
  { name: 'apiserver event without kind', headers: binaryHeaders({ 'ce-kind': undefined }), body: JSON.stringify({ ...refData, kind: undefined }), reason: /names no apiVersion\/kind/ },
  { name: 'apiserver event without apiversion', headers: binaryHeaders({ 'ce-apiversion': undefined }), body: JSON.stringify({ ...refData, apiVersion: undefined }), reason: /names no apiVersion\/kind/ },
  { name: 'apiserver event without name', headers: binaryHeaders({ 'ce-name': undefined }), body: JSON.stringify({ ...refData, name: undefined }), reason: /no valid object name \(got ""\)/ },
  { name: 'upper-case name', headers: binaryHeaders({ 'ce-name': 'Web' }), body: JSON.stringify(refData), reason: /no valid object name \(got "Web"\)/ },
  { name: 'name longer than 253 characters', headers: binaryHeaders({ 'ce-name': 'a'.repeat(254) }), body: JSON.stringify(refData), reason: /no valid object name \(got "a{254}"\)/ },
  { name: 'name with path traversal', headers: binaryHeaders({ 'ce-name': '../x' }), body: JSON.stringify(refData), reason: /no valid object name \(got "\.\.\/x"\)/ },
  { name: 'name with an empty DNS label', headers: binaryHeaders({ 'ce-name': 'a..b' }), body: JSON.stringify(refData), reason: /no valid object name \(got "a\.\.b"\)/ },
  { name: 'upper-case namespace', headers: binaryHeaders({ 'ce-namespace': 'Default' }), body: JSON.stringify(refData), reason: /invalid namespace "Default"/ },
  { name: 'namespace longer than 63 characters', headers: binaryHeaders({ 'ce-namespace': 'n'.repeat(64) }), body: JSON.stringify(refData), reason: /invalid namespace "n{64}"/ },
  { name: 'namespace with path traversal', headers: binaryHeaders({ 'ce-namespace': '../kube-system' }), body: JSON.stringify(refData), reason: /invalid namespace "\.\.\/kube-system"/ },
  { name: 'namespace with a dot', headers: binaryHeaders({ 'ce-namespace': 'team.a' }), body: JSON.stringify(refData), reason: /invalid namespace "team\.a"/ },
  {
    name: 'Resource-mode data without metadata',
    headers: binaryHeaders({ 'ce-type': 'dev.knative.apiserver.resource.update' }),
    body: JSON.stringify({ apiVersion: IC_API_VERSION, kind: 'ImmortalContainer', spec: { image: 'nginx' } }),
    reason: /resource\.update event data is not a Kubernetes object \(no metadata\)/,
  },
  { name: 'extension name with an underscore', headers: binaryHeaders({ 'ce-my_ext': 'x' }), body: JSON.stringify(refData), reason: /invalid attribute name: "my_ext"/ },
  { name: 'extension name with a dash', headers: binaryHeaders({ 'ce-my-ext': 'x' }), body: JSON.stringify(refData), reason: /invalid attribute name: "my-ext"/ },
  { name: 'structured extension name with upper case', headers: STRUCTURED, body: JSON.stringify(structuredEvent({ Tenant: 'a' })), reason: /invalid attribute name: "Tenant"/ },
  { name: 'empty POST', headers: {}, reason: /not a CloudEvent/ },
];

async function post(url: string, headers: Record<string, string>, body?: string) {
  const response = await fetch(url, { method: 'POST', headers, body });
  const text = await response.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, contentType: response.headers.get('content-type') ?? '', text, json };
}

async function metricValue(url: string, name: string, labels: Record<string, string>): Promise<number | undefined> {
  const text = await (await fetch(`${url}/metrics`)).text();
  for (const line of text.split('\n')) {
    const match = /^(\w+)\{([^}]*)\} (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const present = Object.fromEntries([...match[2].matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([key, value]) => present[key] === value)) return Number(match[3]);
  }
  return undefined;
}

const ping = () => new CloudEvent({ specversion: '1.0', id: 'ping-1', source: '/apis/v1/namespaces/default/pingsources/resync', type: PING_TYPE, datacontenttype: 'application/json', data: {} });

describe('intake of malformed requests', () => {
  let fn: Served;
  before(async () => {
    fn = await serve();
  });
  after(() => fn?.close());

  test('the corpus is big enough and every case is distinct', () => {
    assert.ok(corpus.length >= 24, `corpus has ${corpus.length} cases`);
    assert.equal(new Set(corpus.map((c) => c.name)).size, corpus.length);
  });

  for (const malformed of corpus) {
    test(`400 for ${malformed.name}`, async () => {
      const answer = await post(`${fn.url}/`, malformed.headers, malformed.body);
      assert.equal(answer.status, 400, `${malformed.name}: ${answer.text}`);
      assert.match(answer.contentType, /^application\/json/);
      assert.equal(typeof answer.json?.error, 'string', `a JSON {error} reason: ${answer.text}`);
      assert.match(answer.json.error, malformed.reason);
      assert.doesNotMatch(answer.json.error, /\n/, 'the reason is one line');
    });
  }

  test('after the corpus the host is still ready', async () => {
    const response = await fetch(`${fn.url}/health/readiness`);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { status: 'ready' });
    assert.equal((await fetch(`${fn.url}/health/liveness`)).status, 200);
  });

  test('a valid ping gets 503 with a reason while the API is unreachable (the broker retries)', async () => {
    const answer = await deliver(`${fn.url}/`, ping());
    assert.equal(answer.status, 503, JSON.stringify(answer.body));
    assert.match(answer.body.error, /Kubernetes API https:\/\/127\.0\.0\.1:1 unreachable/);
  });

  test('/metrics counts every corpus request as rejected, and the ping as retry', async () => {
    assert.equal(await metricValue(fn.url, 'opfn_cloudevents_total', { function: 'immortal-container', outcome: 'rejected' }), corpus.length);
    assert.equal(await metricValue(fn.url, 'opfn_cloudevents_total', { function: 'immortal-container', outcome: 'retry' }), 1);
    assert.equal(await metricValue(fn.url, 'opfn_cloudevents_total', { function: 'immortal-container', outcome: 'done' }), undefined);
  });

  test('an event for a kind the function does not handle is 200 and ignored, without an API call', async () => {
    const configMap = { metadata: { name: 'settings', namespace: 'default', uid: 'u-cm' }, data: { a: '1' } };
    for (const mode of ['Reference', 'Resource'] as const) {
      const answer = await deliver(`${fn.url}/`, apiServerSourceEvent({ server: UNREACHABLE_API, kind: ConfigMap, object: configMap, action: 'update', mode }));
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      assert.match(answer.body.ignored, /^ConfigMap default\/settings concerns no ImmortalContainer$/);
    }
    assert.equal(await metricValue(fn.url, 'opfn_cloudevents_total', { function: 'immortal-container', outcome: 'ignored' }), 2);
    assert.equal(await metricValue(fn.url, 'opfn_kube_api_requests_total', { function: 'immortal-container' }), undefined, 'no API request for an ignored kind');
  });
});

describe('bodies and names that reach a URL', () => {
  let fn: Served;
  let requests = 0;
  before(async () => {
    fn = await serve(() => requests++);
  });
  after(() => fn?.close());

  test('a body larger than the limit is 413 with a reason, not 400 and not a reset', async () => {
    const answer = await post(`${fn.url}/`, binaryHeaders(), JSON.stringify({ ...refData, padding: 'x'.repeat(MAX_BODY + 1) }));
    assert.equal(answer.status, 413, answer.text);
    assert.match(answer.json.error, new RegExp(`larger than ${MAX_BODY} bytes`));
  });

  test('a 20 MB POST gets 413 too: the body is drained, the connection is not reset', async () => {
    const answer = await post(`${fn.url}/`, binaryHeaders(), 'x'.repeat(20 * 1024 * 1024));
    assert.equal(answer.status, 413, answer.text);
  });

  test('a Resource-mode event for a 1.5 MiB object is taken (answered 503 only because the API is unreachable)', async () => {
    const big = { apiVersion: IC_API_VERSION, kind: 'ImmortalContainer', metadata: { name: 'web', namespace: 'default', annotations: { big: 'é'.repeat(750 * 1024) } }, spec: { image: 'nginx' } };
    const answer = await post(`${fn.url}/`, binaryHeaders({ 'ce-type': 'dev.knative.apiserver.resource.add' }), JSON.stringify(big));
    assert.equal(answer.status, 503, answer.text);
  });

  for (const owner of ['..', '.', '']) {
    test(`a Resource-mode pod event whose controller owner is named "${owner}" is 400, with no API request`, async () => {
      const before = requests;
      const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'x-immortalpod', namespace: 'default', uid: 'p', ownerReferences: [{ apiVersion: IC_API_VERSION, kind: 'ImmortalContainer', name: owner, uid: 'o', controller: true }] } };
      const answer = await deliver(`${fn.url}/`, apiServerSourceEvent({ server: UNREACHABLE_API, kind: Pod, object: pod, action: 'update', mode: 'Resource' }));
      assert.equal(answer.status, 400, JSON.stringify(answer.body));
      assert.match(answer.body.error, /controller ownerReference has an invalid object name/);
      assert.equal(requests, before, 'no API request');
    });
  }

  test('an owner-name label that is not a name is dropped with a warning (200, ignored), with no API request', async () => {
    const before = requests;
    const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'x-immortalpod', namespace: 'default', uid: 'p', labels: { controller: '..' } } };
    const answer = await deliver(`${fn.url}/`, apiServerSourceEvent({ server: UNREACHABLE_API, kind: Pod, object: pod, action: 'delete', mode: 'Resource' }));
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.match(answer.body.ignored, /concerns no ImmortalContainer/);
    assert.equal(requests, before, 'no API request');
  });

  test('a reconcile event before its due time is answered 200 and dropped, with no API request', async () => {
    const before = requests;
    const due = new Date(Date.now() + 60_000).toISOString();
    const answer = await post(`${fn.url}/`, binaryHeaders({ 'ce-type': 'dev.opfn.reconcile', 'ce-opfnnotbefore': due }), JSON.stringify({ keys: ['immortalcontainer.flugel.it/ImmortalContainer:default/web'] }));
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.text, '');
    assert.equal(requests, before);
  });

  test('a due reconcile event reconciles its keys (503 here: the API is unreachable)', async () => {
    const answer = await post(`${fn.url}/`, binaryHeaders({ 'ce-type': 'dev.opfn.reconcile', 'ce-opfnnotbefore': new Date(Date.now() - 1000).toISOString() }), JSON.stringify({ keys: ['immortalcontainer.flugel.it/ImmortalContainer:default/web'] }));
    assert.equal(answer.status, 503, answer.text);
    assert.equal(answer.json.failed, 1);
  });
});

describe('drain', () => {
  test('waits until the in-flight answer is written; meanwhile readiness is 503 and new events get 503', async () => {
    let apiCalled!: () => void;
    const firstApiCall = new Promise<void>((resolve) => (apiCalled = resolve));
    const fn = await serve(() => apiCalled());
    try {
      const inFlight = deliver(`${fn.url}/`, ping());
      await firstApiCall; // the ping is being handled: its list fails and is retried for >= 350 ms
      let drained = false;
      // serve() exits the process as soon as drain() resolves: cut every connection at that
      // moment, so an answer not yet written never reaches the sender.
      const draining = fn.host.drain().then(() => {
        drained = true;
        fn.cutConnections();
      });
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(drained, false, 'drain does not resolve while an event is in flight');

      const readiness = await fetch(`${fn.url}/health/readiness`);
      assert.equal(readiness.status, 503);
      assert.deepEqual(await readiness.json(), { status: 'draining' });
      const refused = await deliver(`${fn.url}/`, ping());
      assert.equal(refused.status, 503);
      assert.match(refused.body.error, /shutting down; deliver again/);

      const answer = await inFlight; // rejects ("fetch failed") if the answer was cut off
      await draining;
      assert.equal(drained, true);
      assert.equal(answer.status, 503, 'the in-flight event still gets its real answer');
      assert.match(answer.body.error, /Kubernetes API https:\/\/127\.0\.0\.1:1 unreachable/);
    } finally {
      await fn.close();
    }
  });

  test('resolves at once when nothing is in flight', async () => {
    const fn = await serve();
    try {
      await fn.host.drain();
      assert.equal((await fetch(`${fn.url}/health/readiness`)).status, 503);
      const structured = HTTP.structured(ping());
      const answer = await post(`${fn.url}/`, structured.headers as Record<string, string>, structured.body as string);
      assert.equal(answer.status, 503);
      assert.match(answer.json.error, /shutting down/);
    } finally {
      await fn.close();
    }
  });
});
