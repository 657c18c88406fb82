// Reliability under faults, end to end through the whole local plane at 1000 objects: a burst of
// ImmortalContainers is created (32 at a time) and, a third of the way in, one fault strikes:
//   - kube-apiserver restarted;
//   - etcd frozen for 5 s (SIGSTOP … SIGCONT);
//   - the source's connections to the API server (its watches) reset;
//   - every function instance killed (SIGKILL) while deliveries are in flight.
// After each, every object converges with exactly one pod and startTimes exactly 1: nothing is
// lost and nothing is counted twice. (While kube-apiserver restarts, a custom resource GET must be
// refused — connection refused, then 503 — never answered 404, so the garbage collector cannot
// take an owner for gone and delete its pod; the restart test checks it.) The function runs as its ServiceAccount with exactly its
// generated RBAC; kube-controller-manager (garbage collector included) runs, as in a cluster.
// Failure messages name the stuck objects and every pod deletion seen in the namespace.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { EventPlane } from '../../eventing/plane.ts';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ImmortalContainerKind, podNameFor, type ImmortalContainer, type PodObject } from '../../functions/immortal-container/desired.ts';
import { CoreEvent, Pod, KubeClient } from '../../functions/runtime/index.ts';
import { startTestCluster, type TestCluster } from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.ts';
import { tempDir } from '../support/temp.ts';

const COUNT = 1000;
/** The fault strikes once this many objects exist. */
const FAULT_AT = 300;
const CONVERGE_TIMEOUT_MS = 300_000;

let cluster: TestCluster;
let kube: KubeClient;
let plane: EventPlane;
let proxy: TcpProxy;
const stateDir = tempDir('opfn-faults-');
/** When each namespace's burst began: convergence is reported from there. */
const burstStarted = new Map<string, number>();

const newIc = (namespace: string, name: string): ImmortalContainer => ({
  apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
  kind: 'ImmortalContainer',
  metadata: { name, namespace },
  spec: { image: 'nginx' },
});

before(async () => {
  cluster = await startTestCluster();
  kube = cluster.kube;
  // The source reaches the API server through a proxy whose connections the watch test cuts.
  proxy = await startTcpProxy(cluster.cp.server);
  const sourceKubeconfig = join(stateDir, 'source.kubeconfig');
  writeFileSync(sourceKubeconfig, readFileSync(cluster.cp.kubeconfigPath, 'utf8').replace(cluster.cp.server, proxy.url));
  plane = new EventPlane({
    functions: [immortalContainer],
    kube: KubeClient.fromFile(sourceKubeconfig),
    kubeconfigPath: await kubeconfigWithDeclaredRbac(cluster.cp, immortalContainer),
    log: pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }),
    stateDir,
    idleTimeoutMs: 10_000,
    resyncIntervalMs: 0,
    // Only crashes: at 1000 objects a fault makes every in-flight reconcile log its (retried) failure.
    env: { LOG_LEVEL: 'fatal' },
    delivery: { retry: 12, backoffPolicy: 'exponential', backoffDelay: 'PT0.2S' },
  });
  await plane.start();
});

after(async () => {
  await plane?.stop();
  await proxy?.close();
  await cluster?.stop();
});

/** Function processes the activator started: children of this process running a function entry. */
function functionPids(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid !== process.pid) continue;
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (cmdline.includes(immortalContainer.name)) pids.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

/** Records every pod deletion in `namespace` (who else but the function deletes a pod here?) until the test ends. */
function recordPodDeletions(t: TestContext, namespace: string): { deleted: string[] } {
  const abort = new AbortController();
  const deleted: string[] = [];
  const watcher = KubeClient.fromFile(cluster.cp.kubeconfigPath);
  void (async () => {
    let resourceVersion: string | undefined;
    while (!abort.signal.aborted) {
      try {
        for await (const event of watcher.watch<PodObject>(Pod, { namespace, resourceVersion, signal: abort.signal })) {
          resourceVersion = event.object.metadata.resourceVersion ?? resourceVersion;
          if (event.type === 'DELETED')
            deleted.push(`${event.object.metadata.name} (uid ${event.object.metadata.uid}, at ${new Date().toISOString()})`);
        }
      } catch {
        await sleep(200); // the API server restarting; resume from the last resourceVersion
      }
    }
  })();
  t.after(() => abort.abort());
  return { deleted };
}

/**
 * Creates COUNT ImmortalContainers in a new namespace (32 at a time, retrying while the control
 * plane is faulty) and runs `fault` once FAULT_AT exist; resolves when all exist and the fault is over.
 */
async function burstWithFault<T>(namespace: string, fault: () => Promise<T>): Promise<T> {
  assert.equal((await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name: namespace } })).status, 201);
  burstStarted.set(namespace, Date.now());
  let created = 0;
  let faultRun: Promise<T> | undefined;
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < COUNT) {
        const name = `${namespace}-${next++}`;
        for (let attempt = 0; ; attempt++) {
          try {
            await kube.create(ImmortalContainerKind, newIc(namespace, name));
            break;
          } catch (error) {
            if ((error as { reason?: string }).reason === 'AlreadyExists') break;
            if (attempt > 300) throw error;
            await sleep(200);
          }
        }
        if (++created === FAULT_AT) faultRun = fault();
      }
    }),
  );
  return faultRun!;
}

/**
 * Waits until every ImmortalContainer of `namespace` has exactly its one pod and startTimes
 * exactly 1, and the broker has nothing left for it; fails at once when a startTimes above 1
 * appears, and on timeout names the objects that are behind. Reports the time from the burst's
 * first create (docs/benchmarks.md "Faults at 1000 objects").
 */
async function assertConverged(t: TestContext, namespace: string, deletions: { deleted: string[] }): Promise<void> {
  const deadline = Date.now() + CONVERGE_TIMEOUT_MS;
  let report = '';
  for (;;) {
    const ics = (await kube.list<ImmortalContainer>(ImmortalContainerKind, { namespace }).catch(() => undefined))?.items;
    const pods = (await kube.list<PodObject>(Pod, { namespace }).catch(() => undefined))?.items;
    if (ics && pods) {
      const podOf = new Map(pods.map((pod) => [pod.metadata.name, pod]));
      const state = (ic: ImmortalContainer) =>
        `${ic.metadata.name}: pod ${podOf.has(podNameFor(ic)) ? 'yes' : 'no'}, status ${JSON.stringify({ currentPod: ic.status?.currentPod, startTimes: ic.status?.startTimes, countedPods: ic.status?.countedPods })}`;
      const overCounted = ics.filter((ic) => (ic.status?.startTimes ?? 0) > 1);
      assert.equal(
        overCounted.length,
        0,
        `startTimes above 1 (a pod created or counted twice) on ${overCounted.length} objects:\n  ${overCounted.slice(0, 10).map(state).join('\n  ')}\npod deletions seen in ${namespace}: ${deletions.deleted.length}\n  ${deletions.deleted.slice(0, 10).join('\n  ')}`,
      );
      const behind = ics.filter((ic) => {
        const pod = podOf.get(podNameFor(ic));
        return (
          !pod ||
          pod.metadata.ownerReferences?.find((ref) => ref.controller)?.uid !== ic.metadata.uid ||
          ic.status?.startTimes !== 1 ||
          ic.status.currentPod !== podNameFor(ic)
        );
      });
      const stray = pods.filter((pod) => !ics.some((ic) => podNameFor(ic) === pod.metadata.name));
      const stats = plane.broker.stats()[immortalContainer.name];
      if (ics.length === COUNT && pods.length === COUNT && behind.length === 0 && stray.length === 0 && stats.queued + stats.inFlight === 0)
        return t.diagnostic(`converged ${((Date.now() - burstStarted.get(namespace)!) / 1000).toFixed(1)} s after the first create`);
      report =
        `${ics.length}/${COUNT} objects, ${pods.length} pods (${stray.length} without an owner of that name), ${behind.length} behind:\n  ${behind.slice(0, 20).map(state).join('\n  ')}\n` +
        `pod deletions seen: ${deletions.deleted.length} ${deletions.deleted.slice(0, 5).join('; ')}\nsource ${JSON.stringify(plane.source.stats())}\nbroker ${JSON.stringify(stats)}\nfunction processes ${functionPids().join(', ') || 'none'}`;
    }
    if (Date.now() > deadline) assert.fail(`not converged after ${CONVERGE_TIMEOUT_MS / 1000} s: ${report}`);
    await sleep(1000);
  }
}

test(`kube-apiserver restarted during a burst of ${COUNT}: every object has one pod and startTimes exactly 1`, async (t) => {
  const deletions = recordPodDeletions(t, 'restart');
  const restartsBefore = plane.source.stats().watchRestarts + plane.source.stats().relists;
  // What a custom resource GET answers while the API server restarts (the garbage collector's
  // view of an owner): a 404 here would make the collector delete a child whose owner exists.
  // kube-apiserver 1.20 did, at about 1 start in 15 under load (a race in its CRD handler,
  // kubernetes/kubernetes#104342); later releases answer 503 until their paths are installed.
  const answers = new Set<string>();
  await burstWithFault('restart', async () => {
    let restarted = false;
    const restarting = cluster.cp.restartApiServer().then(() => (restarted = true));
    while (!restarted) {
      answers.add(
        await cluster.cp.request('GET', '/apis/immortalcontainer.flugel.it/v1alpha1/namespaces/restart/immortalcontainers/restart-0').then(
          (answer) => String(answer.status),
          (error: Error) => String((error.cause as { code?: string } | undefined)?.code ?? error.message),
        ),
      );
      await sleep(5);
    }
    await restarting;
  });
  assert.ok(!answers.has('404'), `an existing custom resource was answered 404 during the restart: ${[...answers].join(', ')}`);
  await assertConverged(t, 'restart', deletions);
  // While it starts, kube-apiserver denies what RBAC allows for a moment: a restart, not a missing right.
  const forbidden = (await kube.list(CoreEvent, { namespace: 'restart', fieldSelector: 'reason=ReconcileForbidden' })).items;
  assert.deepEqual(
    forbidden.map((event) => event.metadata.name),
    [],
    'no object was reported forbidden',
  );
  const stats = plane.source.stats();
  assert.ok(stats.watchRestarts + stats.relists > restartsBefore, `the source noticed its broken watches: ${JSON.stringify(stats)}`);
  assert.deepEqual(deletions.deleted, [], 'no pod was deleted (by the garbage collector or anyone)');
});

test(`etcd frozen for 5 s during a burst of ${COUNT}: every object has one pod and startTimes exactly 1`, async (t) => {
  const deletions = recordPodDeletions(t, 'etcd-pause');
  await burstWithFault('etcd-pause', async () => {
    cluster.cp.pauseEtcd();
    await sleep(5000);
    cluster.cp.resumeEtcd();
  });
  await assertConverged(t, 'etcd-pause', deletions);
  assert.deepEqual(deletions.deleted, [], 'no pod was deleted');
});

test(`the source's watch connections reset during a burst of ${COUNT}: every object has one pod and startTimes exactly 1`, async (t) => {
  const deletions = recordPodDeletions(t, 'watch-drop');
  const restartsBefore = plane.source.stats().watchRestarts + plane.source.stats().relists;
  const dropped = await burstWithFault('watch-drop', async () => proxy.dropAll());
  // undici speaks HTTP/2 to the API server when offered: every watch may share one connection.
  assert.ok(dropped >= 1, `the source's connections were reset: ${dropped}`);
  await assertConverged(t, 'watch-drop', deletions);
  const stats = plane.source.stats();
  assert.ok(stats.watchRestarts + stats.relists > restartsBefore, `the source re-established its watches: ${JSON.stringify(stats)}`);
  assert.deepEqual(deletions.deleted, [], 'no pod was deleted');
});

test(`every function instance killed (SIGKILL) during a burst of ${COUNT}: every object has one pod and startTimes exactly 1`, async (t) => {
  const deletions = recordPodDeletions(t, 'kill');
  const retriedBefore = plane.broker.stats()[immortalContainer.name].retried;
  const killed = await burstWithFault('kill', async () => {
    // Kill while deliveries are open, checked and killed in one synchronous step.
    for (let tries = 0; tries < 600; tries++) {
      const pids = functionPids();
      if (pids.length > 0 && plane.broker.stats()[immortalContainer.name].inFlight >= 3) {
        for (const pid of pids) process.kill(pid, 'SIGKILL');
        return pids;
      }
      await sleep(50);
    }
    return [];
  });
  assert.ok(killed.length > 0, 'a function instance was running with deliveries in flight, and was killed');
  await assertConverged(t, 'kill', deletions);
  assert.ok(
    functionPids().every((pid) => !killed.includes(pid)),
    'the killed instances are gone; new ones did the rest',
  );
  assert.ok(plane.broker.stats()[immortalContainer.name].retried > retriedBefore, 'the deliveries the kill cut off were retried');
  assert.deepEqual(deletions.deleted, [], 'no pod was deleted');
});
