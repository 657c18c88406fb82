// Every registered function (functions/index.ts) runs the malformed-event corpus
// (test/support/malformed-events.ts) over real HTTP, with an API server and a rate provider that
// count what reaches them: each request is refused with 400 and a one-line JSON reason naming the
// problem, before any API or provider request, and the function keeps serving afterwards (ready,
// and a valid ping is taken: 503 only because the API is unreachable).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { CloudEvent } from 'cloudevents';
import { functionNames, loadAllFunctions } from '../../functions/index.ts';
import { resolveConfig, type FunctionDeclaration, PING_TYPE } from '../../functions/runtime/index.ts';
import { createMetrics, createFunctionHost } from '../../functions/runtime/host/index.ts';
import { deliver, quietLog, unreachableKube } from '../support/cluster.ts';
import { metricValue, postRaw } from '../support/http.ts';
import { malformedEvents } from '../support/malformed-events.ts';

const functions = await loadAllFunctions();

/** An HTTP server counting every request: stands in for the exchange-rate provider (and anything else a function might call). */
async function countingServer(): Promise<{ url: string; requests: string[]; close(): Promise<void> }> {
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    res.writeHead(503).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

async function serve(declaration: FunctionDeclaration, providerUrl: string, apiRequests: string[]) {
  const kube = unreachableKube((verb, resource) => apiRequests.push(`${verb} ${resource}`));
  const host = createFunctionHost(declaration, {
    kube,
    log: quietLog,
    metrics: createMetrics(declaration.name),
    config: resolveConfig(declaration.name, declaration.config, { EXCHANGE_RATE_PROVIDER_URL: providerUrl }),
  });
  const server = host.app.listen(0, '127.0.0.1');
  await new Promise((resolve, reject) => server.once('listening', resolve).once('error', reject));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

test('the corpus runs against every registered function', () => {
  assert.deepEqual(
    functions.map((fn) => fn.name),
    functionNames,
  );
  assert.ok(functionNames.length >= 3, functionNames.join(', '));
});

for (const declaration of functions) {
  describe(`malformed events to ${declaration.name}`, () => {
    const corpus = malformedEvents(declaration);
    const apiRequests: string[] = [];
    let provider: Awaited<ReturnType<typeof countingServer>>;
    let fn: Awaited<ReturnType<typeof serve>>;
    before(async () => {
      provider = await countingServer();
      fn = await serve(declaration, provider.url, apiRequests);
    });
    after(async () => {
      await fn?.close();
      await provider?.close();
    });

    test('the corpus is big enough and every case is distinct', () => {
      assert.ok(corpus.length >= 40, `corpus has ${corpus.length} cases`);
      assert.equal(new Set(corpus.map((c) => c.name)).size, corpus.length);
    });

    for (const malformed of corpus) {
      test(`400 for ${malformed.name}, no API request`, async () => {
        const answer = await postRaw(`${fn.url}/`, malformed.headers, malformed.body);
        assert.equal(answer.status, 400, `${malformed.name}: ${answer.text}`);
        assert.match(answer.contentType, /^application\/json/);
        assert.equal(typeof answer.json?.error, 'string', `a JSON {error} reason: ${answer.text}`);
        assert.match(String(answer.json?.error), malformed.reason);
        assert.doesNotMatch(String(answer.json?.error), /\n/, 'the reason is one line');
        // Whatever the request carried: the reason goes into logs and dead letters.
        assert.ok(String(answer.json?.error).length <= 400, `the reason stays short: ${String(answer.json?.error).length} characters`);
        assert.deepEqual(apiRequests, [], 'no Kubernetes API request');
        assert.deepEqual(provider.requests, [], 'no outbound request');
      });
    }

    test('after the corpus it is still ready, counts every request as rejected, and takes a valid event', async () => {
      const readiness = await fetch(`${fn.url}/health/readiness`);
      assert.equal(readiness.status, 200);
      assert.deepEqual(await readiness.json(), { status: 'ready' });
      assert.equal((await fetch(`${fn.url}/health/liveness`)).status, 200);
      assert.equal(await metricValue(fn.url, 'opfn_cloudevents_total', { function: declaration.name, outcome: 'rejected' }), corpus.length);
      const ping = new CloudEvent({
        id: 'ping-1',
        source: `/apis/v1/namespaces/default/pingsources/${declaration.name}-resync`,
        type: PING_TYPE,
        datacontenttype: 'application/json',
        data: {},
      });
      const answer = await deliver(`${fn.url}/`, ping);
      assert.equal(answer.status, 503, JSON.stringify(answer.body));
      assert.match(answer.body.error, /Kubernetes API https:\/\/127\.0\.0\.1:1 unreachable/);
      assert.ok(apiRequests.length > 0, 'the valid event did reach for the API');
    });
  });
}
