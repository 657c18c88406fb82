// KubeClient against a real API server, where the server's own answers make the case: a paged
// list whose continue token etcd compacted meanwhile (410 Expired), a burst of requests all
// refused (401) with the same stale credential, and an RBAC denial while the server says it is
// not ready (as right after it starts, when its authorizer has not caught up).
import assert from 'node:assert/strict';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { KubeConfig } from '@kubernetes/client-node/dist/config.js';
import immortalContainer from '../../functions/immortal-container/index.ts';
import { ApiError, ConfigMap, Namespace, ConnectionReusingKubeConfig, KubeClient, isRbacDenial } from '../../functions/runtime/index.ts';
import { eventually, startTestCluster, type TestCluster } from '../support/cluster.ts';
import { kubeconfigWithDeclaredRbac } from '../support/rbac.ts';
import { tempDir } from '../support/temp.ts';

let cluster: TestCluster;

before(async () => {
  // Since 1.34 the watch cache serves a paged list's later pages from a snapshot of the first
  // page's revision (ListFromCacheSnapshot) for as long as it keeps that snapshot; a page it no
  // longer holds is read from etcd, where the compaction below makes the token expire. Without
  // snapshots every later page is read from etcd, which makes that case here.
  cluster = await startTestCluster({ apiServerFlags: ['--feature-gates=ListFromCacheSnapshot=false'] });
});
after(async () => {
  await cluster?.stop();
});

/** POSTs to etcd's gRPC gateway (etcd 3.4: /v3/...). */
async function etcd(path: string, body: unknown): Promise<any> {
  const response = await fetch(cluster.cp.etcdUrl + path, { method: 'POST', body: JSON.stringify(body) });
  assert.equal(response.status, 200, `etcd ${path}: ${response.status} ${await response.clone().text()}`);
  return response.json();
}

/**
 * Compacts etcd at its current revision, physically, as kube-apiserver does every 5 minutes
 * (--etcd-compaction-interval): every revision before it can no longer be read.
 */
async function compactEtcd(): Promise<void> {
  // A range over key "\0" answers nothing but the header, which carries the current revision.
  const { header } = await etcd('/v3/kv/range', { key: Buffer.from('\0').toString('base64') });
  await etcd('/v3/kv/compaction', { revision: header.revision, physical: true });
}

test('a paged list goes on past a continue token that etcd compacted meanwhile', async () => {
  const namespace = 'paged-compaction';
  await cluster.kube.create(Namespace, { metadata: { name: namespace } });
  const names = ['cm-0', 'cm-1', 'cm-2', 'cm-3', 'cm-4'];
  for (const name of names) await cluster.kube.create(ConfigMap, { metadata: { name, namespace, labels: { paged: 'yes' } } });

  const answers: number[] = [];
  const kube = KubeClient.fromFile(cluster.cp.kubeconfigPath, (_verb, resource, code) => resource === 'configmaps' && answers.push(code));
  const pages = kube.pages(ConfigMap, { namespace, labelSelector: 'paged=yes', limit: 2 });
  const seen: string[] = [];
  const first = await pages.next();
  assert.ok(!first.done && first.value.metadata.continue, 'the first page is followed by a continue token');
  seen.push(...first.value.items.map((item) => item.metadata.name!));
  // The token reads at the first page's revision: a write elsewhere moves etcd past it, so that
  // the compaction below (at the current revision) makes it unreadable, as a slow resync meets
  // kube-apiserver's periodic compaction.
  await cluster.kube.create(ConfigMap, { metadata: { name: 'moves-etcd-on', namespace: 'default' } });
  await compactEtcd();

  for await (const page of pages) seen.push(...page.items.map((item) => item.metadata.name!));
  assert.deepEqual(
    answers,
    [200, 410, 200, 200],
    'the first page, the compacted token refused (410 Gone), then the remainder in two pages',
  );
  // The remainder resumes right after the last name of the page before: nothing is seen twice,
  // and every object that existed throughout is seen (one created or deleted meanwhile could be
  // seen or not, depending on where its name sorts; none is here).
  assert.deepEqual(seen.sort(), names);
});

test('a burst of requests refused with the same stale credential prepares authentication again once', async () => {
  const dir = tempDir('kube-client-auth-');
  const admin = new KubeConfig();
  admin.loadFromFile(cluster.cp.kubeconfigPath);
  // A credential plugin whose first credential the API server does not accept (as one revoked
  // since it was issued) and which issues a valid one on every later run. Its credential expires at once, so
  // client-node runs it on every preparation of authentication.
  const plugin = join(dir, 'credential.sh');
  writeFileSync(
    plugin,
    `#!/bin/sh
if [ -e "${dir}/issued" ]; then token='${admin.getCurrentUser()!.token}'; else touch "${dir}/issued"; token=revoked; fi
printf '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"1970-01-01T00:00:00Z"}}' "$token"
`,
  );
  chmodSync(plugin, 0o755);
  const config = new ConnectionReusingKubeConfig();
  config.loadFromOptions({
    clusters: [{ name: 'test', server: cluster.cp.server, caFile: join(cluster.cp.dir, 'ca.crt') }],
    users: [{ name: 'rotating', exec: { apiVersion: 'client.authentication.k8s.io/v1beta1', command: plugin } }],
    contexts: [{ name: 'test', cluster: 'test', user: 'rotating' }],
    currentContext: 'test',
  });
  let preparations = 0;
  const apply = config.applySecurityAuthentication.bind(config);
  config.applySecurityAuthentication = async (context) => {
    preparations++;
    return apply(context);
  };

  let refused = 0;
  const client = new KubeClient(config, (_verb, _resource, code) => code === 401 && refused++);
  const namespaces = await Promise.all(Array.from({ length: 20 }, () => client.get(Namespace, { namespace: '', name: 'default' })));
  assert.equal(
    namespaces.filter((namespace) => namespace?.metadata.name === 'default').length,
    20,
    'every request succeeds once authentication is prepared again',
  );
  assert.equal(refused, 20, 'the API server refused each request once, with the revoked credential');
  // The first preparation, then one for the whole burst (before: one per refused request, 21).
  assert.equal(preparations, 2);
});

test('an RBAC denial while the API server says it is not ready is retried as a 503; once it is ready, a denial is final', async () => {
  // ImmortalContainer's identity may not read ConfigMaps.
  const kube = KubeClient.fromFile(await kubeconfigWithDeclaredRbac(cluster.cp, immortalContainer));
  const key = { namespace: 'default', name: 'anything' };
  await assert.rejects(kube.get(ConfigMap, key), (error: unknown) => isRbacDenial(error));
  await sleep(1100); // the client's last readiness answer is no longer used
  // A paused etcd fails /readyz's etcd check, while RBAC still answers from its informers.
  cluster.cp.pauseEtcd();
  try {
    await assert.rejects(kube.get(ConfigMap, key), (error: unknown) => {
      assert.ok(error instanceof ApiError);
      assert.equal(error.code, 503, error.message);
      assert.ok(error.transient);
      assert.match(error.message, /cannot get resource "configmaps".*the API server is not ready/);
      return true;
    });
  } finally {
    cluster.cp.resumeEtcd();
  }
  await eventually(async () => (await cluster.cp.request('GET', '/readyz')).status === 200, 30_000, '/readyz answers 200');
  await sleep(1100);
  await assert.rejects(kube.get(ConfigMap, key), (error: unknown) => isRbacDenial(error));
});

test('where this identity may not read /readyz, an RBAC denial stays a denial, ready or not', async () => {
  const kube = KubeClient.fromFile(await kubeconfigWithDeclaredRbac(cluster.cp, immortalContainer));
  // The default bindings that let every authenticated identity read /readyz.
  const paths = ['system:public-info-viewer', 'system:discovery'].map(
    (name) => `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${name}`,
  );
  const bindings: { metadata: Record<string, unknown> }[] = [];
  for (const path of paths) bindings.push((await cluster.cp.request('GET', path)).body as { metadata: Record<string, unknown> });
  try {
    for (const path of paths) assert.equal((await cluster.cp.request('DELETE', path)).status, 200);
    await eventually(
      async () => (await kube.request<unknown>('GET', '/readyz').catch((error: ApiError) => error.code)) === 403,
      10_000,
      '/readyz denied',
    );
    cluster.cp.pauseEtcd();
    try {
      await assert.rejects(kube.get(ConfigMap, { namespace: 'default', name: 'anything' }), (error: unknown) => isRbacDenial(error));
    } finally {
      cluster.cp.resumeEtcd();
    }
  } finally {
    for (const binding of bindings) {
      const { name, labels, annotations } = binding.metadata;
      await cluster.cp.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
        ...binding,
        metadata: { name, labels, annotations },
      });
    }
  }
});
