// The runtime must reuse connections to the API server: client-node alone opens a new TLS
// connection per request. Counted from the kernel's
// socket table, so nothing about the client is taken on trust.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { ApiServerSource } from '../../eventing/source/index.ts';
import { ConfigMap, KubeClient, type FunctionEvent } from '../../functions/runtime/index.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind } from '../../functions/immortal-container/desired.ts';
import { createFunctionHost } from '../../functions/runtime/host/index.ts';
import { startTestCluster, type TestCluster } from '../support/cluster.ts';

let cluster: TestCluster;
let kube: KubeClient;

before(async () => {
  cluster = await startTestCluster();
  kube = cluster.kube;
});
after(() => cluster?.stop());

/** Sockets of this machine connected to `port` (client side), in any state but LISTEN. */
function clientSocketsTo(port: number): number {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  return ['/proc/net/tcp', '/proc/net/tcp6']
    .flatMap((file) => readFileSync(file, 'utf8').trim().split('\n').slice(1))
    .map((line) => line.trim().split(/\s+/))
    .filter(([, , remote, state]) => remote.endsWith(`:${hexPort}`) && state !== '0A').length;
}

test('1500 API calls, 32 at a time, use a bounded number of connections', async () => {
  const port = Number(new URL(cluster.cp.server).port);
  const before = clientSocketsTo(port);
  const concurrency = 32;
  const calls = 1500;
  let next = 0;
  let peak = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < calls; i = next++) {
        if (i % 3 === 0) await kube.create(ConfigMap, { metadata: { name: `cm-${i}`, namespace: 'default' }, data: { i: String(i) } });
        else await kube.list(ConfigMap, { namespace: 'default', labelSelector: 'none=none' });
        if (i % 50 === 0) peak = Math.max(peak, clientSocketsTo(port));
      }
    }),
  );
  peak = Math.max(peak, clientSocketsTo(port));
  // Sockets in TIME_WAIT count too: a client without reuse leaves one per request behind (>500
  // here). HTTP/1.1 over undici's pool: a connection counts as free again on its 'drain', a tick
  // after the response, so a caller's next request may open a second one; hence 2 per caller.
  assert.ok(
    peak - before <= 2 * concurrency + 4,
    `at most two connections per concurrent caller (+ slack): peak ${peak}, before ${before}`,
  );
});

test("a function host's client opens at most its 32 connections, however many requests are in flight", async () => {
  const port = Number(new URL(cluster.cp.server).port);
  const host = createFunctionHost(immortalContainer, { kubeconfigPath: cluster.cp.kubeconfigPath, log: pino({ level: 'silent' }) });
  const uncapped = KubeClient.fromFile(cluster.cp.kubeconfigPath);
  const peakDuring = async (burst: () => Promise<unknown>) => {
    const before = clientSocketsTo(port);
    let peak = 0;
    const probe = setInterval(() => (peak = Math.max(peak, clientSocketsTo(port))), 5);
    await burst();
    clearInterval(probe);
    return Math.max(peak, clientSocketsTo(port)) - before;
  };
  // 300 events at once, as the broker delivers a burst: each reconcile reads its object (absent).
  const reference = (name: string): FunctionEvent => ({
    type: 'change',
    action: 'add',
    mode: 'ref',
    ref: { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', namespace: 'default', name },
    id: name,
  });
  const capped = await peakDuring(async () => {
    const answers = await Promise.all(Array.from({ length: 300 }, (_, i) => host.handle(reference(`absent-${i}`))));
    assert.deepEqual(new Set(answers.map((answer) => answer.status)), new Set([200]));
  });
  assert.ok(capped <= 32, `the function's client: at most 32 connections, saw ${capped}`);
  // The cap is what bounds it: the same 300 reads through a client without one open far more.
  const free = await peakDuring(() =>
    Promise.all(Array.from({ length: 300 }, (_, i) => uncapped.get(ImmortalContainerKind, { namespace: 'default', name: `absent-${i}` }))),
  );
  assert.ok(free > 40, `an uncapped client opens more under the same burst: ${free}`);
});

// undici offers HTTP/2 by ALPN and kube-apiserver picks it. A source stopped right after its
// list aborts its watch before the response headers; undici's HTTP/2 client leaves the session
// with a socket that throws an uncaught SocketError "other side closed" (client-h2.js
// onHttp2SocketEnd) when the API server restarts, which would crash the plane process. So the
// client speaks HTTP/1.1 to the API server.
test('sources stopped before their watch answered survive a later API server restart', async () => {
  const uncaught: unknown[] = [];
  const record = (err: unknown) => uncaught.push(err);
  process.on('uncaughtException', record);
  try {
    for (let i = 0; i < 5; i++) await kube.create(ConfigMap, { metadata: { name: `restart-${i}`, namespace: 'default' } });
    const clients: KubeClient[] = [];
    for (let round = 0; round < 10; round++) {
      const client = KubeClient.fromFile(cluster.cp.kubeconfigPath);
      clients.push(client);
      const source = new ApiServerSource({
        kube: client,
        log: pino({ level: 'silent' }),
        sink: async () => {},
        resyncIntervalMs: 0,
        listPageSize: 2,
        sources: [{ name: 'stopped-early', mode: 'Reference', resources: [{ kind: ConfigMap }] }],
      });
      await source.start();
      await source.stop(); // the watch request has just been sent: aborted before its headers
    }
    await cluster.cp.restartApiServer();
    await sleep(3000); // the old connections' ends arrive
    assert.deepEqual(uncaught.map(String), [], 'no uncaught exception from the closed connections');
    // And the same clients work against the restarted server.
    for (const client of clients)
      assert.ok((await client.list(ConfigMap, { namespace: 'default', labelSelector: 'none=none' })).items.length === 0);
  } finally {
    process.off('uncaughtException', record);
  }
});
