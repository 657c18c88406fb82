// CloudEvent intake over real HTTP: a FunctionHost on loopback whose Kubernetes API is
// unreachable. Well-formed events that need the API must be answered 503 (retried), never 2xx;
// bodies and names that could reach a URL are refused; drain. (Malformed requests, 400 with a
// reason: the corpus of test/support/malformed-events.ts, run for every function by
// test/unit/malformed-events.test.ts.)
import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { CloudEvent, HTTP } from 'cloudevents';
import { apiServerSourceEvent } from '../../eventing/apiserver-events.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { PING_TYPE, ConfigMap, Pod, type RequestObserver } from '../../functions/runtime/index.ts';
import { createMetrics, createFunctionHost, type FunctionHost } from '../../functions/runtime/host/index.ts';
import { deliver, quietLog, unreachableKube } from '../support/cluster.ts';
import { metricValue, postRaw } from '../support/http.ts';
import { binaryHeaders as supportHeaders, referenceData } from '../support/malformed-events.ts';

const UNREACHABLE_API = 'https://127.0.0.1:1';
const MAX_BODY = 3 * 1024 * 1024;

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

const IC_API_VERSION = 'immortalcontainer.flugel.it/v1alpha1';
const refData = referenceData(immortalContainer.reconciles);
const binaryHeaders = (overrides: Record<string, string | undefined> = {}) => supportHeaders(immortalContainer.reconciles, overrides);

const ping = () =>
  new CloudEvent({
    specversion: '1.0',
    id: 'ping-1',
    source: '/apis/v1/namespaces/default/pingsources/resync',
    type: PING_TYPE,
    datacontenttype: 'application/json',
    data: {},
  });

// The malformed-event corpus runs against every function in test/unit/malformed-events.test.ts.
describe('intake of events the function cannot finish, or need not', () => {
  let fn: Served;
  before(async () => {
    fn = await serve();
  });
  after(() => fn?.close());

  test('a valid ping gets 503 with a reason while the API is unreachable (the broker retries)', async () => {
    const answer = await deliver(`${fn.url}/`, ping());
    assert.equal(answer.status, 503, JSON.stringify(answer.body));
    assert.match(answer.body.error, /Kubernetes API https:\/\/127\.0\.0\.1:1 unreachable/);
  });

  test('/metrics counts the ping as retry', async () => {
    assert.equal(await metricValue(fn.url, 'opfn_cloudevents_total', { function: 'immortal-container', outcome: 'retry' }), 1);
    assert.equal(await metricValue(fn.url, 'opfn_cloudevents_total', { function: 'immortal-container', outcome: 'done' }), undefined);
  });

  test('an event for a kind the function does not handle is 200 and ignored, without an API call', async () => {
    const configMap = { metadata: { name: 'settings', namespace: 'default', uid: 'u-cm' }, data: { a: '1' } };
    for (const mode of ['Reference', 'Resource'] as const) {
      const answer = await deliver(
        `${fn.url}/`,
        apiServerSourceEvent({ server: UNREACHABLE_API, kind: ConfigMap, object: configMap, action: 'update', mode }),
      );
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      assert.match(answer.body.ignored, /^ConfigMap default\/settings concerns no ImmortalContainer$/);
    }
    assert.equal(await metricValue(fn.url, 'opfn_cloudevents_total', { function: 'immortal-container', outcome: 'ignored' }), 2);
    assert.equal(
      await metricValue(fn.url, 'opfn_kube_api_requests_total', { function: 'immortal-container' }),
      undefined,
      'no API request for an ignored kind',
    );
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
    const answer = await postRaw(`${fn.url}/`, binaryHeaders(), JSON.stringify({ ...refData, padding: 'x'.repeat(MAX_BODY + 1) }));
    assert.equal(answer.status, 413, answer.text);
    assert.match(String(answer.json?.error), new RegExp(`larger than ${MAX_BODY} bytes`));
  });

  test('a 20 MB POST gets 413 too: the body is drained, the connection is not reset', async () => {
    const answer = await postRaw(`${fn.url}/`, binaryHeaders(), 'x'.repeat(20 * 1024 * 1024));
    assert.equal(answer.status, 413, answer.text);
  });

  test('a Resource-mode event for a 1.5 MiB object is taken (answered 503 only because the API is unreachable)', async () => {
    const big = {
      apiVersion: IC_API_VERSION,
      kind: 'ImmortalContainer',
      metadata: { name: 'web', namespace: 'default', annotations: { big: 'é'.repeat(750 * 1024) } },
      spec: { image: 'nginx' },
    };
    const answer = await postRaw(`${fn.url}/`, binaryHeaders({ 'ce-type': 'dev.knative.apiserver.resource.add' }), JSON.stringify(big));
    assert.equal(answer.status, 503, answer.text);
  });

  for (const owner of ['..', '.', '']) {
    test(`a Resource-mode pod event whose controller owner is named "${owner}" is 400, with no API request`, async () => {
      const before = requests;
      const pod = {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: 'x-immortalpod',
          namespace: 'default',
          uid: 'p',
          ownerReferences: [{ apiVersion: IC_API_VERSION, kind: 'ImmortalContainer', name: owner, uid: 'o', controller: true }],
        },
      };
      const answer = await deliver(
        `${fn.url}/`,
        apiServerSourceEvent({ server: UNREACHABLE_API, kind: Pod, object: pod, action: 'update', mode: 'Resource' }),
      );
      assert.equal(answer.status, 400, JSON.stringify(answer.body));
      assert.match(answer.body.error, /controller ownerReference has an invalid object name/);
      assert.equal(requests, before, 'no API request');
    });
  }

  test('an owner-name label that is not a name is dropped with a warning (200, ignored), with no API request', async () => {
    const before = requests;
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'x-immortalpod', namespace: 'default', uid: 'p', labels: { controller: '..' } },
    };
    const answer = await deliver(
      `${fn.url}/`,
      apiServerSourceEvent({ server: UNREACHABLE_API, kind: Pod, object: pod, action: 'delete', mode: 'Resource' }),
    );
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.match(answer.body.ignored, /concerns no ImmortalContainer/);
    assert.equal(requests, before, 'no API request');
  });

  test('a reconcile event before its due time is answered 200 and dropped, with no API request', async () => {
    const before = requests;
    const due = new Date(Date.now() + 60_000).toISOString();
    const answer = await postRaw(
      `${fn.url}/`,
      binaryHeaders({ 'ce-type': 'dev.opfn.reconcile', 'ce-opfnnotbefore': due }),
      JSON.stringify({ keys: ['immortalcontainer.flugel.it/ImmortalContainer:default/web'] }),
    );
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.text, '');
    assert.equal(requests, before);
  });

  test("a reconcile event due within the delivery's budget is waited for, then reconciled (503 here: the API is unreachable), never early", async () => {
    const sent = Date.now();
    const due = new Date(sent + 400);
    const answer = await postRaw(
      `${fn.url}/`,
      binaryHeaders({ 'ce-type': 'dev.opfn.reconcile', 'ce-opfnnotbefore': due.toISOString() }),
      JSON.stringify({ keys: ['immortalcontainer.flugel.it/ImmortalContainer:default/web'] }),
    );
    assert.equal(answer.status, 503, answer.text);
    assert.equal(answer.json?.failed, 1, 'reconciled once due');
    assert.ok(Date.now() >= due.getTime(), 'answered no earlier than the key was due');
  });

  test('a due reconcile event reconciles its keys (503 here: the API is unreachable)', async () => {
    const answer = await postRaw(
      `${fn.url}/`,
      binaryHeaders({ 'ce-type': 'dev.opfn.reconcile', 'ce-opfnnotbefore': new Date(Date.now() - 1000).toISOString() }),
      JSON.stringify({ keys: ['immortalcontainer.flugel.it/ImmortalContainer:default/web'] }),
    );
    assert.equal(answer.status, 503, answer.text);
    assert.equal(answer.json?.failed, 1);
  });
});

describe('a failure of the host itself', () => {
  test('is 500 (retried) with its own message, not blamed on the request body', async () => {
    const fn = await serve();
    try {
      // Stands in for a bug between the reconcile and the answer (one was a requeue time too far for a Date).
      fn.host.receive = async () => {
        throw new RangeError('Invalid time value');
      };
      const answer = await postRaw(`${fn.url}/`, binaryHeaders(), JSON.stringify(refData));
      assert.equal(answer.status, 500, answer.text);
      assert.equal(answer.json?.error, 'internal error: Invalid time value');
    } finally {
      await fn.close();
    }
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
      const answer = await postRaw(`${fn.url}/`, structured.headers as Record<string, string>, structured.body as string);
      assert.equal(answer.status, 503);
      assert.match(String(answer.json?.error), /shutting down/);
    } finally {
      await fn.close();
    }
  });
});
