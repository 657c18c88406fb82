// The runtime must reuse connections to the API server: client-node 2.0.1 alone opens a new TLS
// connection per request (measured: >500 open sockets for 1500 calls). Counted from the kernel's
// socket table, so nothing about the client is taken on trust.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { ConfigMap } from '../../functions/runtime/kinds.ts';
import type { KubeClient } from '../../functions/runtime/kube.ts';
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
  await Promise.all(Array.from({ length: concurrency }, async () => {
    for (let i = next++; i < calls; i = next++) {
      if (i % 3 === 0) await kube.create(ConfigMap, { metadata: { name: `cm-${i}`, namespace: 'default' }, data: { i: String(i) } });
      else await kube.list(ConfigMap, { namespace: 'default', labelSelector: 'none=none' });
      if (i % 50 === 0) peak = Math.max(peak, clientSocketsTo(port));
    }
  }));
  peak = Math.max(peak, clientSocketsTo(port));
  // Sockets in TIME_WAIT count too: a client without reuse leaves one per request behind.
  assert.ok(peak - before <= concurrency + 4, `at most one connection per concurrent request (+ slack): peak ${peak}, before ${before}`);
});
