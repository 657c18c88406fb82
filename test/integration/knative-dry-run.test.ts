// Every object `opfn manifests` generates, checked by a real kube-apiserver against the real
// Knative CRDs of the release the manifests target (1.23, provisioned from its Go modules by
// cluster/provision-knative.sh): a server-side dry run with strict field validation
// (`?dryRun=All&fieldValidation=Strict`: admission and schema validation run, an unknown field
// where the schema is closed is an error, nothing is stored), in the default layout and in the
// --namespace / --replace / Kafka / --retry-after-max variants. Knative's schemas leave parts
// open (a Trigger's spec, delivery), where even strict validation keeps an unknown field, so every
// object is also walked against its schema (schema-fields.ts) and the answer compared with what
// was sent (nothing may be pruned).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { startControlPlane, type ControlPlane } from '../../cluster/index.ts';
import { applyCrds } from '../../eventing/crds.ts';
import { knativeCrds, provisionKnativeCrds, resourceKindOf } from '../../eventing/knative/index.ts';
import { manifestOptions } from '../../bin/manifests.ts';
import { generateManifests, validateManifests, withEventPolicies } from '../../eventing/manifests/index.ts';
import { undeclaredFields } from '../../eventing/manifests/schema-fields.ts';
import { eventingObjectsFor, type EventingOptions } from '../../functions/composite/event-sources.ts';
import { loadAllFunctions } from '../../functions/index.ts';
import { collectionPath, Pod, Secret, type KubeObject, type ResourceKind, KubeClient } from '../../functions/runtime/index.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

let cp: ControlPlane;
let kube: KubeClient;
let crds: KubeObject[];
const functions = await loadAllFunctions();

before(async () => {
  const dir = await provisionKnativeCrds();
  crds = knativeCrds(dir);
  console.log(`# Knative CRDs: ${dir}`);
  cp = await startControlPlane({ controllerManager: false });
  kube = KubeClient.fromFile(cp.kubeconfigPath);
  await applyCrds(kube, crds);
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

type Result = { object: KubeObject; status: number; message?: string; pruned: string[]; undeclared: string[] };

async function dryRun(object: KubeObject): Promise<Omit<Result, 'object'>> {
  const kind = resourceKindOf(object);
  const path = `${collectionPath(kind, object.metadata.namespace)}?dryRun=All&fieldValidation=Strict`;
  const answer = await cp.request('POST', path, object);
  const undeclared = kind.group.endsWith('knative.dev') ? undeclaredFields(object, crds) : [];
  return {
    status: answer.status,
    message: answer.body?.message,
    pruned: answer.status === 201 ? pruned(object, answer.body) : [],
    undeclared,
  };
}

/** Dry-runs every object (creating the namespace for real first: a dry run cannot create into a namespace that does not exist). */
async function dryRunAll(objects: KubeObject[]): Promise<Result[]> {
  const results = [];
  // Namespace objects first, dry-run while the namespace does not exist yet.
  for (const object of objects.filter((o) => o.kind === 'Namespace')) results.push({ object, ...(await dryRun(object)) });
  for (const namespace of new Set(objects.map((object) => object.metadata.namespace).filter(Boolean))) {
    const created = await cp.request('POST', '/api/v1/namespaces', { metadata: { name: namespace } });
    assert.ok(created.status === 201 || created.status === 409, JSON.stringify(created.body));
  }
  for (const object of objects.filter((o) => o.kind !== 'Namespace')) results.push({ object, ...(await dryRun(object)) });
  console.log(
    results
      .map(
        ({ object, status, message, pruned, undeclared }) =>
          `#   ${status} ${object.kind} ${object.metadata.namespace ? `${object.metadata.namespace}/` : ''}${object.metadata.name}${message ? `: ${message}` : ''}${pruned.length ? `  (pruned by the schema: ${pruned.join(', ')})` : ''}${undeclared.length ? `  (not in the schema: ${undeclared.join(', ')})` : ''}`,
      )
      .join('\n'),
  );
  return results;
}

/** What is wrong with the results: refused objects, pruned fields, fields the schema does not name. */
function faults(results: Result[]): { refused: string[]; pruned: string[]; undeclared: string[] } {
  const name = (r: Result) => `${r.object.kind} ${r.object.metadata.name}`;
  return {
    refused: results.filter((r) => r.status !== 201).map((r) => `${name(r)}: ${r.status} ${r.message}`),
    pruned: results.flatMap((r) => r.pruned.map((field) => `${name(r)} ${field}`)),
    undeclared: results.flatMap((r) => r.undeclared.map((field) => `${name(r)} ${field}`)),
  };
}

const variants: [string, Parameters<typeof manifestOptions>[0]][] = [
  ['default (cluster scope, namespace operator-functions)', { target: 'knative' }],
  ['--namespace team-a --broker-class Kafka', { target: 'knative', namespace: 'team-a', brokerClass: 'Kafka' }],
  [
    '--replace (a URL)',
    { target: 'knative', namespace: 'swap-a', replace: [`${functions[0].name}=http://my-impl.example.svc.cluster.local/`] },
  ],
  ['--retry-after-max PT5M', { target: 'knative', namespace: 'retry-a', retryAfterMax: 'PT5M' }],
];

describe("server-side dry run, strict field validation, against Knative 1.23's CRDs", () => {
  for (const [what, command] of variants) {
    test(what, async () => {
      const options = manifestOptions(command, functions);
      const objects = generateManifests(functions, options).flatMap((file) => file.objects);
      assert.deepEqual(validateManifests(objects), [], 'the checks the schemas cannot make');
      const results = await dryRunAll(objects);
      assert.deepEqual(
        faults(results),
        { refused: [], pruned: [], undeclared: [] },
        'every object is accepted whole, and names only fields Knative declares',
      );
      const kinds = [...new Set(results.map((r) => r.object.kind))].sort();
      for (const kind of ['ApiServerSource', 'Broker', 'PingSource', 'Service', 'ServiceAccount', 'Trigger'])
        assert.ok(kinds.includes(kind), `${kind} among ${kinds}`);
      // The Knative features the generator relies on reached the server as sent (none pruned, asserted above).
      const triggers = results
        .filter((r) => r.object.kind === 'Trigger')
        .map((r) => r.object.spec as { filters?: unknown[]; filter?: unknown; delivery: { timeout?: string; retryAfterMax?: string } });
      assert.ok(
        triggers.length > 0 &&
          triggers.every((spec) => spec.filters?.length && spec.filter === undefined && spec.delivery.timeout === 'PT300S'),
        'Triggers use filters and a per-attempt timeout',
      );
      assert.ok(
        triggers.every((spec) => spec.delivery.retryAfterMax === command.retryAfterMax),
        'retryAfterMax only when asked for',
      );
      const sources = results
        .filter((r) => r.object.kind === 'ApiServerSource')
        .map((r) => (r.object.spec as { namespaceSelector?: unknown }).namespaceSelector);
      assert.ok(
        sources.every((selector) => (options.scope === 'cluster' ? JSON.stringify(selector) === '{}' : selector === undefined)),
        'namespaceSelector {} in cluster scope, none in a namespace',
      );
    });
  }

  test('--event-policy: per function an EventPolicy to the Broker from its sources and Trigger', async () => {
    const options = manifestOptions({ target: 'knative', namespace: 'policy-a' }, functions);
    const objects = withEventPolicies(generateManifests(functions, options), functions, options).flatMap((file) => file.objects);
    const results = await dryRunAll(objects);
    assert.deepEqual(
      faults(results),
      { refused: [], pruned: [], undeclared: [] },
      'every object is accepted whole, and names only fields Knative declares',
    );
    const policies = results.filter((r) => r.object.kind === 'EventPolicy').map((r) => r.object);
    assert.deepEqual(
      policies.map((policy) => policy.metadata.name).sort(),
      functions
        .filter((f) => !f.crossesNamespaces)
        .map((f) => `${f.name}-senders`)
        .sort(),
    );
    for (const policy of policies) {
      const from = (policy.spec as { from: { ref?: { kind: string; name: string } }[] }).from;
      const senders = objects.filter(
        (o) =>
          ['ApiServerSource', 'PingSource', 'Trigger'].includes(o.kind!) &&
          o.metadata.labels?.['operator-functions.dev/function'] === policy.metadata.labels?.['operator-functions.dev/function'],
      );
      assert.deepEqual(
        from
          .filter((entry) => entry.ref)
          .map((entry) => `${entry.ref!.kind}/${entry.ref!.name}`)
          .sort(),
        senders.map((o) => `${o.kind}/${o.metadata.name}`).sort(),
        policy.metadata.name,
      );
    }
  });

  // The objects the composite function makes at run time per CompositeController (functions/composite/event-sources.ts).
  for (const [what, options] of [
    ['composite event sources, cluster scope', { namespace: 'cc-cluster', brokerName: 'operator-functions', scope: 'cluster' }],
    [
      'composite event sources, namespace scope, a cluster-scoped parent and a Secret child',
      { namespace: 'cc-ns', brokerName: 'b', scope: 'namespace' },
    ],
  ] as [string, EventingOptions][]) {
    test(what, async () => {
      const controller = {
        metadata: { name: 'a.very-long.compositecontroller.name'.repeat(5), uid: '1b7c2a3e-0000-4000-8000-000000000001' },
      };
      const parent: ResourceKind =
        options.scope === 'cluster'
          ? {
              group: 'immortalcontainers.flugel.it',
              version: 'v1alpha1',
              kind: 'ImmortalContainer',
              plural: 'immortalcontainers',
              namespaced: true,
            }
          : { group: '', version: 'v1', kind: 'Namespace', plural: 'namespaces', namespaced: false };
      const children: ResourceKind[] = options.scope === 'cluster' ? [Pod] : [Pod, Secret];
      const objects = eventingObjectsFor(controller, { parent, children }, options);
      const results = await dryRunAll(objects);
      assert.deepEqual(
        faults(results),
        { refused: [], pruned: [], undeclared: [] },
        'every object is accepted whole, and names only fields Knative declares',
      );
      assert.deepEqual(
        results.map((r) => r.object.kind),
        options.scope === 'cluster'
          ? ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'ApiServerSource', 'ApiServerSource']
          : ['ServiceAccount', 'Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding', 'ApiServerSource', 'ApiServerSource'],
      );
    });
  }

  const generated = (kind: string) =>
    structuredClone(
      generateManifests(functions)
        .flatMap((file) => file.objects)
        .find((o) => o.kind === kind && o.metadata.name?.startsWith(functions[0].name))!,
    );

  test('the dry run is a real check: a wrongly typed field is refused with its name', async () => {
    const broken = generated('Service');
    (broken.spec as any).template.spec.containerConcurrency = 'unlimited';
    const answer = await dryRun(broken);
    assert.equal(answer.status, 422);
    assert.match(answer.message ?? '', /containerConcurrency/);
  });

  test('strict field validation refuses a misspelled field where the schema is closed', async () => {
    const broken = generated('Service');
    (broken.spec as any).template.spec.containerConcurency = 0;
    const answer = await dryRun(broken);
    // A strict decoding error is a 400 (BadRequest), not a 422 like a schema violation.
    assert.equal(answer.status, 400, JSON.stringify(answer));
    assert.match(answer.message ?? '', /strict decoding error: unknown field "spec.template.spec.containerConcurency"/);
    assert.deepEqual(answer.undeclared, ['.spec.template.spec.containerConcurency'], 'the schema walk names it too');
  });

  test('where the schema is open the API server keeps a misspelled field, and the schema walk names it', async () => {
    const broken = generated('Trigger');
    (broken.spec as any).delivery.retryAfterMaxx = 'PT1M';
    (broken.spec as any).filterz = [{ exact: { type: 'x' } }];
    const answer = await dryRun(broken);
    assert.equal(answer.status, 201, 'accepted: spec and delivery preserve unknown fields');
    assert.deepEqual(answer.pruned, [], 'and kept');
    assert.deepEqual(answer.undeclared.sort(), ['.spec.delivery.retryAfterMaxx', '.spec.filterz']);
  });
});

test(
  'kubectl kustomize deploy/ yields the generated objects',
  { skip: spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).status === 0 ? false : 'kubectl is not installed' },
  () => {
    const built = spawnSync('kubectl', ['kustomize', join(ROOT, 'deploy')], { encoding: 'utf8' });
    assert.equal(built.status, 0, built.stderr);
    const objects = parseAllDocuments(built.stdout).map((d) => d.toJS() as KubeObject);
    const id = (o: KubeObject) => `${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`;
    assert.deepEqual(
      objects.map(id).sort(),
      generateManifests(functions)
        .flatMap((file) => file.objects)
        .map(id)
        .sort(),
    );
  },
);
