// Every object `opfn manifests` generates, checked by a real kube-apiserver against the real
// Knative 1.0.0 CRDs (server-side dry run, `?dryRun=All`: admission and schema validation run,
// nothing is stored), in the default layout and in the --namespace / --replace / Kafka variants.
// The CRD schemas are partial, so the answer is also compared with what was sent: a field the
// schema does not know is pruned silently, and the test lists every pruned field.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { startControlPlane, type ControlPlane } from '../../cluster/control-plane.ts';
import { applyCrds } from '../../eventing/crds.ts';
import { knativeCrdCandidates, knativeCrdDir, knativeCrds } from '../../eventing/knative/crds.ts';
import { resourceKindOf } from '../../eventing/knative/kinds.ts';
import { manifestOptions } from '../../eventing/manifests/cli.ts';
import { generateManifests } from '../../eventing/manifests/index.ts';
import { validateManifests } from '../../eventing/manifests/validate.ts';
import { eventingObjectsFor, type EventingOptions } from '../../functions/composite-controller/eventing.ts';
import { loadAllFunctions } from '../../functions/index.ts';
import { collectionPath, Pod, Secret, type KubeObject, type ResourceKind } from '../../functions/runtime/kinds.ts';
import { KubeClient } from '../../functions/runtime/kube.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const crdDir = knativeCrdDir();
const skip = crdDir ? false : `no Knative CRDs found (looked in ${knativeCrdCandidates().join(', ')}); set KNATIVE_CRDS_DIR to a folder with Knative 1.0.0's CRD files`;
if (skip) console.log(`# SKIPPED: ${skip}`);

let cp: ControlPlane;
let kube: KubeClient;
const functions = await loadAllFunctions();

before(async () => {
  if (skip) return;
  cp = await startControlPlane({ controllerManager: false });
  kube = KubeClient.fromFile(cp.kubeconfigPath);
  await applyCrds(kube, knativeCrds(crdDir!));
});
after(async () => cp?.stop());

/** Paths of every field in `sent` that `got` lacks (what structural pruning removed). */
function pruned(sent: unknown, got: unknown, path = ''): string[] {
  if (sent === null || typeof sent !== 'object') return [];
  if (got === null || typeof got !== 'object') return [path];
  return Object.entries(sent as Record<string, unknown>).flatMap(([key, value]) => {
    const here = Array.isArray(sent) ? `${path}[${key}]` : `${path}.${key}`;
    return key in (got as object) ? pruned(value, (got as Record<string, unknown>)[key], here) : [here];
  });
}

async function dryRun(object: KubeObject): Promise<{ status: number; message?: string; pruned: string[] }> {
  const kind = resourceKindOf(object);
  const path = `${collectionPath(kind, object.metadata.namespace)}?dryRun=All`;
  const answer = await cp.request('POST', path, object);
  return { status: answer.status, message: answer.body?.message, pruned: answer.status === 201 ? pruned(object, answer.body) : [] };
}

/** Dry-runs every object (creating the namespace for real first: a dry run cannot create into a namespace that does not exist). */
async function dryRunAll(objects: KubeObject[]): Promise<{ object: KubeObject; status: number; message?: string; pruned: string[] }[]> {
  const results = [];
  // Namespace objects first, dry-run while the namespace does not exist yet.
  for (const object of objects.filter((o) => o.kind === 'Namespace')) results.push({ object, ...(await dryRun(object)) });
  for (const namespace of new Set(objects.map((object) => object.metadata.namespace).filter(Boolean))) {
    const created = await cp.request('POST', '/api/v1/namespaces', { metadata: { name: namespace } });
    assert.ok(created.status === 201 || created.status === 409, JSON.stringify(created.body));
  }
  for (const object of objects.filter((o) => o.kind !== 'Namespace')) results.push({ object, ...(await dryRun(object)) });
  console.log(results.map(({ object, status, message, pruned }) => `#   ${status} ${object.kind} ${object.metadata.namespace ? `${object.metadata.namespace}/` : ''}${object.metadata.name}${message ? `: ${message}` : ''}${pruned.length ? `  (pruned by the schema: ${pruned.join(', ')})` : ''}`).join('\n'));
  return results;
}

/** Fields Knative 1.0.0's schemas do not have and prune; honoured by later Knative releases. */
const KNOWN_PRUNED: Record<string, string[]> = {
  // knative/eventing#6665 added namespaceSelector after 1.0; 1.0's adapter watches its own namespace.
  ApiServerSource: ['.spec.namespaceSelector'],
  // The Subscriptions API `filters` (beta and on by default since Eventing 1.12) leave out the
  // changes a function does not ask for; on 1.0 the Trigger's `filter` still routes only the
  // function's own events, and the runtime answers the left-out ones without a reconcile.
  Trigger: ['.spec.filters'],
};

const variants: [string, Parameters<typeof manifestOptions>[0]][] = [
  ['default (cluster scope, namespace operator-functions)', { target: 'knative' }],
  ['--namespace team-a --broker-class Kafka', { target: 'knative', namespace: 'team-a', brokerClass: 'Kafka' }],
  ['--replace (a URL)', { target: 'knative', namespace: 'swap-a', replace: [`${functions[0].name}=http://my-impl.example.svc.cluster.local/`] }],
];

describe('server-side dry run against the Knative 1.0.0 CRDs', { skip }, () => {
  for (const [what, command] of variants) {
    test(what, async () => {
      const options = manifestOptions(command, functions);
      const objects = generateManifests(functions, options).flatMap((file) => file.objects);
      assert.deepEqual(validateManifests(objects), [], 'the checks the schemas cannot make');
      const results = await dryRunAll(objects);
      const refused = results.filter((result) => result.status !== 201);
      assert.deepEqual(refused.map((r) => `${r.object.kind} ${r.object.metadata.name}: ${r.status} ${r.message}`), [], 'every object is accepted');
      const unexpected = results.flatMap((r) => r.pruned.filter((field) => !(KNOWN_PRUNED[r.object.kind!] ?? []).includes(field)).map((field) => `${r.object.kind} ${r.object.metadata.name} ${field}`));
      assert.deepEqual(unexpected, [], 'no field is silently dropped by the schemas');
      const kinds = [...new Set(results.map((r) => r.object.kind))].sort();
      for (const kind of ['ApiServerSource', 'Broker', 'PingSource', 'Service', 'ServiceAccount', 'Trigger']) assert.ok(kinds.includes(kind), `${kind} among ${kinds}`);
    });
  }

  // The objects the composite function makes at run time per CompositeController (eventing.ts).
  for (const [what, options] of [
    ['composite event sources, cluster scope', { namespace: 'cc-cluster', brokerName: 'operator-functions', scope: 'cluster' }],
    ['composite event sources, namespace scope, a cluster-scoped parent and a Secret child', { namespace: 'cc-ns', brokerName: 'b', scope: 'namespace' }],
  ] as [string, EventingOptions][]) {
    test(what, async () => {
      const controller = { metadata: { name: 'a.very-long.compositecontroller.name'.repeat(5), uid: '1b7c2a3e-0000-4000-8000-000000000001' } };
      const parent: ResourceKind = options.scope === 'cluster' ? { group: 'immortalcontainers.flugel.it', version: 'v1alpha1', kind: 'ImmortalContainer', plural: 'immortalcontainers', namespaced: true } : { group: '', version: 'v1', kind: 'Namespace', plural: 'namespaces', namespaced: false };
      const children: ResourceKind[] = options.scope === 'cluster' ? [Pod] : [Pod, Secret];
      const objects = eventingObjectsFor(controller, { parent, children }, options);
      const results = await dryRunAll(objects);
      assert.deepEqual(results.filter((result) => result.status !== 201).map((r) => `${r.object.kind} ${r.object.metadata.name}: ${r.status} ${r.message}`), [], 'every object is accepted');
      const unexpected = results.flatMap((r) => r.pruned.filter((field) => !(KNOWN_PRUNED[r.object.kind!] ?? []).includes(field)).map((field) => `${r.object.kind} ${r.object.metadata.name} ${field}`));
      assert.deepEqual(unexpected, [], 'no field is silently dropped by the schemas');
      assert.deepEqual(results.map((r) => r.object.kind), options.scope === 'cluster'
        ? ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'ApiServerSource', 'ApiServerSource']
        : ['ServiceAccount', 'Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding', 'ApiServerSource', 'ApiServerSource']);
    });
  }

  test('the dry run is a real check: a wrongly typed field is refused with its name', async () => {
    const [service] = generateManifests(functions).flatMap((file) => file.objects).filter((o) => o.kind === 'Service' && o.metadata.name === functions[0].name);
    const broken = structuredClone(service);
    (broken.spec as any).template.spec.containerConcurrency = 'unlimited';
    const answer = await dryRun(broken);
    assert.equal(answer.status, 422);
    assert.match(answer.message ?? '', /containerConcurrency/);
  });
});

test('kubectl kustomize deploy/ yields the generated objects', { skip: spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).status === 0 ? false : 'kubectl is not installed' }, () => {
  const built = spawnSync('kubectl', ['kustomize', join(ROOT, 'deploy')], { encoding: 'utf8' });
  assert.equal(built.status, 0, built.stderr);
  const objects = parseAllDocuments(built.stdout).map((d) => d.toJS() as KubeObject);
  const id = (o: KubeObject) => `${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`;
  assert.deepEqual(objects.map(id).sort(), generateManifests(functions).flatMap((file) => file.objects).map(id).sort());
});
