// `opfn manifests`: the committed deploy/ folder is exactly what the generator writes (one golden
// test per function), and the generated objects say what the declarations say: sources as the
// local plane runs them, least-privilege identities, autoscaling on the revision template, a
// --replace that changes one subscriber and nothing else.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { CloudEventV1 } from 'cloudevents';
import { parseAllDocuments } from 'yaml';
import { loadAllFunctions } from '../../functions/index.ts';
import {
  defineFunction,
  type FunctionDeclaration,
  type PolicyRule,
  Namespace,
  type KubeObject,
  interpretEvent,
  guessedResource,
  installNamespaceFrom,
  sourceKindName,
  sourceResource,
} from '../../functions/runtime/index.ts';
import { manifestFiles, manifestOptions, runManifests } from '../../bin/manifests.ts';
import {
  DEFAULT_OPTIONS,
  functionObjects,
  functionRules,
  generateManifests,
  type ManifestOptions,
  openfaasStack,
  parseLabelSelector,
  renamedKinds,
  renderManifests,
  unwatchedKinds,
  validateManifests,
} from '../../eventing/manifests/index.ts';
import { pollEvent, resyncEvent, sourcesFor } from '../../eventing/plane.ts';
import { matchesTrigger } from '../../eventing/filters.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const DEPLOY = join(ROOT, 'deploy');
const REGENERATE = 'regenerate with: npx opfn manifests --out deploy && npx opfn manifests --target openfaas --out deploy/openfaas';
const functions = await loadAllFunctions();
const byKind = (objects: KubeObject[], kind: string) => objects.filter((object) => object.kind === kind);
const spec = (object: KubeObject) => object.spec as Record<string, any>;

describe("the committed deploy/ folder is the generator's output", () => {
  const rendered = renderManifests(generateManifests(functions, DEFAULT_OPTIONS));
  for (const name of Object.keys(rendered)) {
    test(name, () => {
      const path = join(DEPLOY, name);
      assert.ok(existsSync(path), `deploy/${name} is missing; ${REGENERATE}`);
      assert.equal(readFileSync(path, 'utf8'), rendered[name], `deploy/${name} differs from the generator; ${REGENERATE}`);
    });
  }
  test('openfaas/stack.yml', () => {
    assert.equal(
      readFileSync(join(DEPLOY, 'openfaas', 'stack.yml'), 'utf8'),
      openfaasStack(functions, DEFAULT_OPTIONS),
      `deploy/openfaas/stack.yml differs; ${REGENERATE}`,
    );
  });
  test('every function has its file, and kustomization.yaml lists every file', () => {
    for (const declaration of functions) assert.ok(`${declaration.name}.yaml` in rendered, declaration.name);
    const kustomization = parseAllDocuments(rendered['kustomization.yaml'])[0].toJS() as { resources: string[] };
    assert.deepEqual(
      kustomization.resources.sort(),
      Object.keys(rendered)
        .filter((name) => name !== 'kustomization.yaml')
        .sort(),
    );
  });
});

for (const declaration of functions) {
  describe(`objects of ${declaration.name}`, () => {
    const objects = functionObjects(declaration, DEFAULT_OPTIONS);

    test('counts and kinds', () => {
      const sources = sourcesFor(declaration).length;
      const counts = Object.fromEntries(
        ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Service', 'Trigger', 'PingSource', 'ApiServerSource'].map((kind) => [
          kind,
          byKind(objects, kind).length,
        ]),
      );
      const pings = unwatchedKinds(declaration).some(({ kind }) => kind === declaration.reconciles) ? 2 : 1;
      assert.deepEqual(counts, {
        ServiceAccount: 1 + sources,
        ClusterRole: 1 + sources,
        ClusterRoleBinding: 1 + sources,
        Service: 1,
        Trigger: 1,
        PingSource: pings,
        ApiServerSource: sources,
      });
      assert.equal(objects.length, 3 * (1 + sources) + 2 + pings + sources);
    });

    test("the ApiServerSources are the plane's sources (names, modes, kinds, selectors, opfnfunction)", () => {
      const generated = byKind(objects, 'ApiServerSource');
      const planned = sourcesFor(declaration);
      assert.deepEqual(
        generated.map((source) => source.metadata.name),
        planned.map((source) => source.name),
      );
      planned.forEach((source, index) => {
        const s = spec(generated[index]);
        assert.equal(s.mode, source.mode);
        // The kind Knative guesses each resource from (the kind itself unless its plural is irregular).
        assert.deepEqual(
          s.resources.map((r: any) => `${r.apiVersion} ${r.kind}`),
          source.resources.map((r) => `${r.kind.group ? `${r.kind.group}/` : ''}${r.kind.version} ${sourceKindName(r.kind)}`),
        );
        source.resources.forEach((r, i) =>
          assert.deepEqual(s.resources[i].selector, r.labelSelector ? parseLabelSelector(r.labelSelector) : undefined),
        );
        // A selection with a source of its own also names that source (opfnsource), which its Trigger filters on.
        assert.equal(s.ceOverrides.extensions.opfnfunction, declaration.name);
        assert.deepEqual(s.ceOverrides.extensions, source.extensions);
        assert.deepEqual(s.sink.ref, { apiVersion: 'eventing.knative.dev/v1', kind: 'Broker', name: DEFAULT_OPTIONS.brokerName });
        // Its own identity, allowed to read exactly what it sends.
        const role = objects.find((o) => o.kind === 'ClusterRole' && o.metadata.name === s.serviceAccountName)!;
        const granted = (role.rules as any[])
          .flatMap((rule) => rule.resources.map((resource: string) => `${rule.apiGroups[0]}/${resource}:${rule.verbs.join(',')}`))
          .sort();
        assert.deepEqual(granted, source.resources.map((r) => `${r.kind.group}/${r.kind.plural}:get,list,watch`).sort());
      });
    });

    test("the function's role is exactly its rules", () => {
      const role = objects.find((o) => o.kind === 'ClusterRole' && o.metadata.name === `opfn-${declaration.name}`)!;
      assert.deepEqual(role.rules, functionRules(declaration));
    });

    test('the Knative Service: image, FUNCTION, autoscaling on the revision template, cluster-local, probes, non-root read-only', () => {
      const service = byKind(objects, 'Service')[0];
      assert.equal(service.metadata.labels?.['networking.knative.dev/visibility'], 'cluster-local');
      assert.equal(service.metadata.annotations, undefined, 'no annotations on the Service itself');
      const template = spec(service).template;
      assert.equal(template.metadata.annotations['autoscaling.knative.dev/min-scale'], String(declaration.scaling.minScale));
      assert.equal(template.metadata.annotations['autoscaling.knative.dev/max-scale'], String(declaration.scaling.maxScale));
      assert.equal(template.spec.containerConcurrency, declaration.scaling.containerConcurrency);
      assert.equal(template.spec.timeoutSeconds, 300);
      assert.equal(template.spec.serviceAccountName, `opfn-${declaration.name}`);
      const [container] = template.spec.containers;
      assert.equal(container.image, DEFAULT_OPTIONS.image);
      assert.deepEqual(
        container.env.find((e: any) => e.name === 'FUNCTION'),
        { name: 'FUNCTION', value: declaration.name },
      );
      assert.equal(container.readinessProbe.httpGet.path, '/health/readiness');
      assert.equal(container.livenessProbe.httpGet.path, '/health/liveness');
      assert.equal(container.readinessProbe.httpGet.port, undefined, 'Knative probes the serving port');
      assert.deepEqual(container.securityContext, {
        runAsNonRoot: true,
        runAsUser: 1000,
        runAsGroup: 1000,
        readOnlyRootFilesystem: true,
        capabilities: { drop: ['ALL'] },
      });
      assert.ok(container.resources.requests.memory && container.resources.limits.memory);
    });

    test('the Trigger and the PingSource', () => {
      const trigger = byKind(objects, 'Trigger')[0];
      // Knative 1.23's filters alone (they win over `filter`, which is therefore not set): the function's tag first.
      assert.equal(spec(trigger).filter, undefined);
      assert.deepEqual(spec(trigger).filters[0], { exact: { opfnfunction: declaration.name } });
      assert.ok(
        spec(trigger)
          .filters.slice(1)
          .every((filter: object) => Object.keys(filter).join() === 'not'),
        'the rest leave out unwanted changes',
      );
      assert.deepEqual(spec(trigger).subscriber, {
        ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: declaration.name },
      });
      // Each attempt ends with the revision's timeout (timeoutSeconds 300); no retryAfterMax unless asked for.
      assert.deepEqual(spec(trigger).delivery, {
        timeout: 'PT300S',
        retry: 10,
        backoffPolicy: 'exponential',
        backoffDelay: 'PT0.2S',
        deadLetterSink: { ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: 'opfn-dead-letters' } },
      });
      const ping = byKind(objects, 'PingSource')[0];
      assert.equal(ping.metadata.name, `${declaration.name}-resync`);
      assert.equal(spec(ping).schedule, declaration.resyncSchedule);
      assert.deepEqual(spec(ping).ceOverrides.extensions, { opfnfunction: declaration.name });
    });
  });
}

describe('options', () => {
  const all = (options: ManifestOptions) => generateManifests(functions, options).flatMap((file) => file.objects);
  const [first] = functions;

  test('the generated set passes the checks the CRD schemas cannot make', () => {
    assert.deepEqual(validateManifests(all(DEFAULT_OPTIONS)), []);
  });

  test('--retry-after-max sets delivery.retryAfterMax on the Broker and every Trigger (and says what Knative needs for it); unset, none has it; a malformed one is refused', () => {
    const deliveries = (list: KubeObject[]) => list.filter((o) => o.kind === 'Broker' || o.kind === 'Trigger').map((o) => spec(o).delivery);
    assert.ok(deliveries(all(DEFAULT_OPTIONS)).every((delivery) => !('retryAfterMax' in delivery)));
    const options = manifestOptions({ target: 'knative', retryAfterMax: 'PT5M' }, functions);
    const withMax = deliveries(all(options));
    assert.ok(withMax.length > 1 && withMax.every((delivery) => delivery.retryAfterMax === 'PT5M' && delivery.timeout === 'PT300S'));
    assert.deepEqual(validateManifests(all(options)), []);
    const lines: string[] = [];
    runManifests({ target: 'knative', retryAfterMax: 'PT5M' }, functions, (text) => lines.push(text));
    assert.match(lines.join(''), /# note: Knative accepts delivery\.retryAfterMax only with its delivery-retryafter feature enabled/);
    assert.throws(
      () => manifestOptions({ target: 'knative', retryAfterMax: '5m' }, functions),
      /--retry-after-max: invalid ISO-8601 duration "5m"/,
    );
  });

  test("--replace f=<URL> and f=<Service> change that Trigger's subscriber and nothing else", () => {
    const before = all(DEFAULT_OPTIONS);
    for (const [target, subscriber] of [
      ['http://other.example:8080/x', { uri: 'http://other.example:8080/x' }],
      ['my-impl', { ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: 'my-impl' } }],
    ] as const) {
      const options = manifestOptions({ target: 'knative', replace: [`${first.name}=${target}`] }, functions);
      const after = all(options);
      assert.equal(after.length, before.length);
      const changed = after.map((object, i) => [object, before[i]] as const).filter(([a, b]) => JSON.stringify(a) !== JSON.stringify(b));
      assert.equal(changed.length, 1);
      const [[trigger, original]] = changed;
      assert.equal(trigger.kind, 'Trigger');
      assert.deepEqual(spec(trigger).subscriber, subscriber);
      assert.deepEqual({ ...spec(trigger), subscriber: undefined }, { ...spec(original), subscriber: undefined });
      // A Service named by --replace is not generated, yet is a valid target.
      assert.deepEqual(validateManifests(after, new Set(['my-impl'])), []);
    }
  });

  test('--replace with an unknown function or a bad target fails with the reason', () => {
    assert.throws(() => manifestOptions({ target: 'knative', replace: ['nope=x'] }, functions), /no function "nope"/);
    assert.throws(
      () => manifestOptions({ target: 'knative', replace: [`${first.name}=Not A Name`] }, functions),
      /URL .* or a Knative Service name/,
    );
  });

  test('--namespace: Roles in that namespace, no Namespace object, sources watch only it; cluster-scoped rules stay in a ClusterRole', () => {
    const watcher: FunctionDeclaration = defineFunction({
      name: 'ns-watcher',
      description: 'test',
      reconciles: first.reconciles,
      watches: [{ kind: Namespace, keysFor: async () => [] }],
      rbac: [{ apiGroups: [''], resources: ['configmaps', 'namespaces'], verbs: ['get', 'list'] }],
      reconcile: async () => {},
    });
    const options = manifestOptions({ target: 'knative', namespace: 'team-a' }, [watcher]);
    const files = generateManifests([watcher], options);
    assert.ok(!files.some((file) => file.name === 'namespace.yaml'));
    const objects = files.flatMap((file) => file.objects);
    assert.deepEqual(validateManifests(objects), []);
    const role = objects.find((o) => o.kind === 'Role' && o.metadata.name === 'opfn-ns-watcher')!;
    assert.equal(role.metadata.namespace, 'team-a');
    // Everything but the cluster-scoped namespaces rule (the implied rules included).
    assert.deepEqual(
      role.rules,
      functionRules(watcher).filter((rule) => !rule.resources.includes('namespaces')),
    );
    assert.ok((role.rules as PolicyRule[]).some((rule) => rule.resources.includes('configmaps')));
    // Named after the namespace: another namespaced install of the same function keeps its own.
    const clusterRole = objects.find((o) => o.kind === 'ClusterRole' && o.metadata.name === 'team-a:opfn-ns-watcher')!;
    assert.deepEqual(clusterRole.rules, [{ apiGroups: [''], resources: ['namespaces'], verbs: ['get', 'list'] }]);
    for (const source of byKind(objects, 'ApiServerSource')) assert.equal(spec(source).namespaceSelector, undefined);
    for (const object of objects)
      if (!['ClusterRole', 'ClusterRoleBinding', 'CustomResourceDefinition'].includes(object.kind!))
        assert.equal(object.metadata.namespace, 'team-a', `${object.kind} ${object.metadata.name}`);
  });

  test("--namespace: every Service tells its function the install's scope; a function whose work crosses namespaces is left out with a note", () => {
    const lines: string[] = [];
    runManifests({ target: 'knative', namespace: 'team-a' }, functions, (text) => lines.push(text));
    const objects = lines.flatMap((text) => parseAllDocuments(text).map((d) => d.toJS() as KubeObject)).filter(Boolean);
    const services = byKind(objects, 'Service').filter((s) => s.metadata.name !== 'opfn-dead-letters');
    assert.deepEqual(
      services.map((s) => s.metadata.name).sort(),
      functions
        .filter((f) => !f.crossesNamespaces)
        .map((f) => f.name)
        .sort(),
    );
    assert.ok(
      functions.some((f) => f.name === 'copyrator' && f.crossesNamespaces),
      'the copyrator says it crosses namespaces',
    );
    assert.match(lines.join(''), /# note: copyrator is left out: it copies from a source namespace into every namespace/);
    for (const service of services) {
      const env = Object.fromEntries(
        (spec(service).template.spec.containers[0].env as Array<{ name: string; value?: string }>).map((e) => [e.name, e.value]),
      );
      assert.equal(installNamespaceFrom(env), 'team-a', service.metadata.name);
    }
    const clusterWide = generateManifests(functions)
      .flatMap((file) => file.objects)
      .filter((o) => o.kind === 'Service' && o.metadata.name !== 'opfn-dead-letters');
    for (const service of clusterWide) {
      const env = Object.fromEntries(
        (spec(service).template.spec.containers[0].env as Array<{ name: string; value?: string }>).map((e) => [e.name, e.value]),
      );
      assert.equal(installNamespaceFrom(env), undefined, `${service.metadata.name} in a cluster-wide install`);
    }
    assert.throws(() => installNamespaceFrom({ OPFN_SCOPE: 'namespace' }), /OPFN_NAMESPACE is not set/);
    assert.throws(() => installNamespaceFrom({ OPFN_SCOPE: 'galaxy' }), /neither "cluster" nor "namespace"/);
  });

  test("--broker-class Kafka names the class and the Kafka broker's config", () => {
    const files = manifestFiles({ target: 'knative', brokerClass: 'Kafka' }, functions);
    const broker = parseAllDocuments(files['broker.yaml'])
      .map((d) => d.toJS())
      .find((o) => o.kind === 'Broker');
    assert.equal(broker.metadata.annotations['eventing.knative.dev/broker.class'], 'Kafka');
    assert.deepEqual(broker.spec.config, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      name: 'kafka-broker-config',
      namespace: 'knative-eventing',
    });
  });
});

describe('validateManifests finds what a dry run would let through', () => {
  const objects = () => structuredClone(generateManifests(functions, DEFAULT_OPTIONS).flatMap((file) => file.objects));
  const find = (list: KubeObject[], kind: string) => list.find((o) => o.kind === kind && o.metadata.name === functions[0].name)!;
  const cases: [string, (list: KubeObject[]) => void, RegExp][] = [
    [
      'autoscaling annotations on the Service',
      (list) => {
        find(list, 'Service').metadata.annotations = { 'autoscaling.knative.dev/min-scale': '0' };
      },
      /belong on spec\.template\.metadata\.annotations/,
    ],
    [
      'a filter attribute that is no CloudEvent attribute name',
      (list) => {
        spec(find(list, 'Trigger')).filters[0] = { exact: { 'opfn-function': 'x' } };
      },
      /not a CloudEvent attribute name/,
    ],
    [
      'a filter attribute longer than 20 characters',
      (list) => {
        spec(find(list, 'Trigger')).filters.push({ not: { any: [{ prefix: { abcdefghijklmnopqrstu: 'x' } }] } });
      },
      /filter attribute "abcdefghijklmnopqrstu" is not a CloudEvent attribute name/,
    ],
    [
      'filters with two dialects in one expression',
      (list) => {
        spec(find(list, 'Trigger')).filters[0] = { exact: { type: 'a' }, prefix: { type: 'b' } };
      },
      /multiple dialects found/,
    ],
    [
      'a CESQL filter (the local plane does not evaluate it)',
      (list) => {
        spec(find(list, 'Trigger')).filters[0] = { cesql: "type = 'a'" };
      },
      /CESQL filters are not supported by the local broker/,
    ],
    [
      'both filter and filters (filters wins: filter would be dead text)',
      (list) => {
        spec(find(list, 'Trigger')).filter = { attributes: { type: 'a' } };
      },
      /sets both filter and filters; Knative applies only filters/,
    ],
    [
      'a zero delivery timeout (Knative refuses it)',
      (list) => {
        spec(find(list, 'Trigger')).delivery.timeout = 'PT0S';
      },
      /delivery\.timeout must be above zero/,
    ],
    [
      "a delivery timeout shorter than the function's delivery budget",
      (list) => {
        spec(find(list, 'Trigger')).delivery.timeout = 'PT10S';
      },
      /delivery\.timeout \(10 s\) is shorter than its function's delivery budget \(OPFN_DELIVERY_BUDGET_SECONDS 30 s\)/,
    ],
    [
      'a malformed retryAfterMax on the Broker',
      (list) => {
        spec(list.find((o) => o.kind === 'Broker')!).delivery.retryAfterMax = '5m';
      },
      /Broker .*delivery\.retryAfterMax: invalid ISO-8601 duration/,
    ],
    [
      'a subscriber Service that is not generated',
      (list) => {
        spec(find(list, 'Trigger')).subscriber.ref.name = 'elsewhere';
      },
      /subscriber Service .*elsewhere is not generated/,
    ],
    [
      'a relative subscriber uri',
      (list) => {
        spec(find(list, 'Trigger')).subscriber = { uri: '/x' };
      },
      /not an absolute URL/,
    ],
    [
      'a ServiceAccount that is not generated',
      (list) => {
        spec(find(list, 'Service')).template.spec.serviceAccountName = 'ghost';
      },
      /ServiceAccount .*ghost is not generated/,
    ],
    [
      'a source without its own ServiceAccount',
      (list) => {
        delete spec(list.find((o) => o.kind === 'ApiServerSource')!).serviceAccountName;
      },
      /no serviceAccountName/,
    ],
    [
      'a source sink that is not the Broker',
      (list) => {
        spec(list.find((o) => o.kind === 'ApiServerSource')!).sink = { uri: 'http://x/' };
      },
      /sink uri/,
    ],
    [
      'a Service name too long for its revision',
      (list) => {
        find(list, 'Service').metadata.name = 'x'.repeat(60);
      },
      /revision name/,
    ],
    [
      'a timeoutSeconds lowered below the delivery budget',
      (list) => {
        spec(find(list, 'Service')).template.spec.timeoutSeconds = 25;
      },
      /OPFN_DELIVERY_BUDGET_SECONDS 30 leaves no time before timeoutSeconds 25/,
    ],
  ];
  for (const [what, mutate, expected] of cases) {
    test(what, () => {
      const list = objects();
      mutate(list);
      const problems = validateManifests(list);
      assert.ok(
        problems.some((problem) => expected.test(problem)),
        problems.join('\n'),
      );
    });
  }
});

test('label selectors as list/watch take them become LabelSelector objects', () => {
  assert.deepEqual(parseLabelSelector('controller'), { matchExpressions: [{ key: 'controller', operator: 'Exists' }] });
  assert.deepEqual(parseLabelSelector('a=b, c!=d,!e'), {
    matchLabels: { a: 'b' },
    matchExpressions: [
      { key: 'c', operator: 'NotIn', values: ['d'] },
      { key: 'e', operator: 'DoesNotExist' },
    ],
  });
  assert.deepEqual(parseLabelSelector('tier in (web, api),x notin (y)'), {
    matchExpressions: [
      { key: 'tier', operator: 'In', values: ['web', 'api'] },
      { key: 'x', operator: 'NotIn', values: ['y'] },
    ],
  });
  assert.throws(() => parseLabelSelector('a=b=c'), /cannot read/);
});

describe('the opfn manifests command', () => {
  const opfn = (...args: string[]) =>
    spawnSync(process.execPath, [join(ROOT, 'bin', 'opfn.ts'), 'manifests', ...args], { encoding: 'utf8', cwd: ROOT });

  test('without --out: one YAML stream of every object, ready for kubectl apply -f -', () => {
    const run = opfn();
    assert.equal(run.status, 0, run.stderr);
    const objects = parseAllDocuments(run.stdout).map((d) => d.toJS() as KubeObject);
    assert.deepEqual(
      objects,
      generateManifests(functions, DEFAULT_OPTIONS).flatMap((file) => file.objects),
    );
  });

  test('a bad option: exit 1 and one line saying what is wrong', () => {
    for (const [args, reason] of [
      [['--replace', 'nope=x'], /no function "nope"/],
      [['--target', 'helm'], /--target must be knative or openfaas/],
      [['--namespace', 'Bad_NS'], /not a namespace name/],
    ] as const) {
      const run = opfn(...args);
      assert.equal(run.status, 1);
      assert.equal(run.stdout, '');
      assert.equal(run.stderr.trim().split('\n').length, 1, run.stderr);
      assert.match(run.stderr, reason);
    }
  });
});

test('declared configuration reaches the Service: defaults as values, secrets through secretKeyRef, none in the manifest', () => {
  const configured = defineFunction({
    name: 'configured',
    description: 'test',
    reconciles: functions[0].reconciles,
    rbac: [],
    config: [
      { name: 'PROVIDER_URL', description: 'x', default: 'https://example.com' },
      { name: 'API_KEY', description: 'x', default: '', secret: true },
      { name: 'TOKEN', description: 'x', secret: true },
    ],
    reconcile: async () => {},
  });
  const service = functionObjects(configured, DEFAULT_OPTIONS).find((o) => o.kind === 'Service')!;
  assert.deepEqual(spec(service).template.spec.containers[0].env, [
    { name: 'FUNCTION', value: 'configured' },
    { name: 'OPFN_DELIVERY_BUDGET_SECONDS', value: '30' },
    { name: 'PROVIDER_URL', value: 'https://example.com' },
    { name: 'API_KEY', valueFrom: { secretKeyRef: { name: 'opfn-configured-config', key: 'API_KEY', optional: true } } },
    { name: 'TOKEN', valueFrom: { secretKeyRef: { name: 'opfn-configured-config', key: 'TOKEN', optional: false } } },
  ]);
  const required = defineFunction({
    name: 'needs-value',
    description: 'test',
    reconciles: functions[0].reconciles,
    rbac: [],
    config: [{ name: 'REQUIRED', description: 'x' }],
    reconcile: async () => {},
  });
  assert.throws(() => functionObjects(required, DEFAULT_OPTIONS), /config REQUIRED has no default/);
});

describe('changes a declaration leaves out (`changes`)', () => {
  const Widget = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };
  const ConfigMapKind = { group: '', version: 'v1', kind: 'ConfigMap', plural: 'configmaps', namespaced: true };
  const PodKind = { group: '', version: 'v1', kind: 'Pod', plural: 'pods', namespaced: true };
  const declare = (extra: object) =>
    defineFunction({ name: 'w', description: '', reconciles: Widget, rbac: [], reconcile: async () => {}, ...extra });
  const event = (type: string, kind: string, apiversion: string, fn = 'w') => ({
    specversion: '1.0',
    id: '1',
    source: 's',
    type,
    kind,
    apiversion,
    opfnfunction: fn,
  });
  const delivered = (declaration: FunctionDeclaration, e: ReturnType<typeof event>) => {
    const trigger = byKind(functionObjects(declaration, DEFAULT_OPTIONS), 'Trigger')[0];
    const { filter, filters } = spec(trigger);
    return matchesTrigger({ name: 't', subscriber: 'http://x', filter, filters }, e as never);
  };

  test('the Trigger leaves out exactly those changes, in both source modes, and only for that kind', () => {
    const declaration = declare({
      owns: [{ kind: PodKind, changes: ['update', 'delete'] }],
      watches: [{ kind: ConfigMapKind, keysFor: async () => [] }],
    });
    for (const mode of ['ref', 'resource']) {
      assert.equal(delivered(declaration, event(`dev.knative.apiserver.${mode}.add`, 'Pod', 'v1')), false, `a Pod's ${mode}.add`);
      for (const action of ['update', 'delete'])
        assert.equal(
          delivered(declaration, event(`dev.knative.apiserver.${mode}.${action}`, 'Pod', 'v1')),
          true,
          `a Pod's ${mode}.${action}`,
        );
      assert.equal(delivered(declaration, event(`dev.knative.apiserver.${mode}.add`, 'ConfigMap', 'v1')), true, "another kind's add");
      assert.equal(
        delivered(declaration, event(`dev.knative.apiserver.${mode}.add`, 'Widget', 'example.com/v1')),
        true,
        "the reconciled kind's add",
      );
      assert.equal(
        delivered(declaration, event(`dev.knative.apiserver.${mode}.add`, 'Pod', 'example.com/v1')),
        true,
        'a Pod of another group',
      );
    }
    assert.equal(delivered(declaration, event('dev.knative.sources.ping', '', '')), true, 'the resync');
    assert.equal(
      delivered(declaration, event('dev.knative.apiserver.resource.update', 'Pod', 'v1', 'other')),
      false,
      "another function's event",
    );
  });

  test("a kind declared twice hears what either entry asks for; without changes the Trigger has the function's tag alone", () => {
    const twice = declare({
      owns: [{ kind: PodKind, changes: ['delete'] }],
      watches: [{ kind: PodKind, changes: ['update'], keysFor: async () => [] }],
    });
    assert.equal(delivered(twice, event('dev.knative.apiserver.resource.add', 'Pod', 'v1')), false);
    assert.equal(delivered(twice, event('dev.knative.apiserver.resource.update', 'Pod', 'v1')), true);
    assert.equal(delivered(twice, event('dev.knative.apiserver.resource.delete', 'Pod', 'v1')), true);
    const plain = spec(byKind(functionObjects(declare({ owns: [{ kind: PodKind }] }), DEFAULT_OPTIONS), 'Trigger')[0]);
    assert.deepEqual(plain.filters, [{ exact: { opfnfunction: 'w' } }]);
    assert.equal(plain.filter, undefined);
  });

  test('a declaration naming no change, an unknown one, or one twice is refused', () => {
    for (const changes of [[], ['create'], ['add', 'add']]) {
      assert.throws(
        () => declare({ owns: [{ kind: PodKind, changes }] }),
        /changes of Pod must name some of add, update, delete, each once/,
      );
    }
  });
});

describe("kinds whose plural Knative's ApiServerSource does not guess", () => {
  test('the resource is guessed from the kind as apimachinery guesses it', () => {
    const cases: [string, string][] = [
      ['Pod', 'pods'],
      ['Ingress', 'ingresses'],
      ['NetworkPolicy', 'networkpolicies'],
      ['Endpoints', 'endpoints'],
      ['ImmortalContainer', 'immortalcontainers'],
      ['CopyratorRule', 'copyratorrules'],
      ['Person', 'persons'],
    ];
    for (const [kind, resource] of cases) assert.equal(guessedResource(kind), resource, kind);
  });

  test('a kind whose plural the guess misses is named by a kind its plural is guessed from; one no kind name reaches has none', () => {
    const kind = (name: string, plural: string) => ({ group: 'example.com', version: 'v1', kind: name, plural, namespaced: true });
    const cases: [string, string, string | undefined][] = [
      ['Pod', 'pods', 'Pod'],
      ['CopyratorRule', 'copyrators', 'Copyrator'],
      ['Policy', 'policies', 'Policy'],
      ['Shelf', 'shelves', 'Shelve'],
      ['Datum', 'data', undefined],
    ];
    for (const [name, plural, named] of cases) {
      assert.equal(sourceKindName(kind(name, plural)), named, `${name} ${plural}`);
      if (named) assert.equal(guessedResource(named), plural, 'Knative finds the resource from the name');
    }
    assert.throws(
      () => sourceResource(kind('Datum', 'data')),
      /no ApiServerSource can watch Datum: no kind name guesses its resource "data"/,
    );
  });

  test('every seed kind is watched; CopyratorRule (plural copyrators) by its own source, which names it Copyrator, with no poll', async () => {
    const all = await loadAllFunctions();
    assert.deepEqual(
      all.flatMap((declaration) => unwatchedKinds(declaration)),
      [],
    );
    assert.deepEqual(
      all.flatMap((declaration) => renamedKinds(declaration).map(({ kind, named }) => `${declaration.name}: ${kind.kind} as ${named}`)),
      ['copyrator: CopyratorRule as Copyrator'],
    );
    const copyrator = all.find((declaration) => declaration.name === 'copyrator')!;
    const objects = functionObjects(copyrator, DEFAULT_OPTIONS);
    const own = byKind(objects, 'ApiServerSource').find((source) => source.metadata.name === 'copyrator-objects')!;
    assert.deepEqual([spec(own).mode, spec(own).resources], ['Resource', [{ apiVersion: 'flant.com/v1', kind: 'Copyrator' }]]);
    for (const declaration of all)
      assert.deepEqual(
        byKind(functionObjects(declaration, DEFAULT_OPTIONS), 'PingSource').map((ping) => ping.metadata.name),
        [`${declaration.name}-resync`],
      );
    assert.throws(() => pollEvent(copyrator), /copyrator has no poll: its kind CopyratorRule is watched by its ApiServerSource/);
    const written: string[] = [];
    runManifests({ target: 'knative' }, [copyrator], (text) => written.push(text));
    assert.match(
      written.join(''),
      /^# note: copyrator: its ApiServerSource names CopyratorRule as kind Copyrator: Knative looks for the resource it guesses from the kind \("copyratorrules"\), and the CRD serves "copyrators"; the events carry kind CopyratorRule$/m,
    );
  });

  test('a kind no ApiServerSource can watch (plural data) gets no source but a poll PingSource every minute beside its resync', () => {
    const Datum = { group: 'example.com', version: 'v1', kind: 'Datum', plural: 'data', namespaced: true };
    const declaration = defineFunction({ name: 'datums', description: 'test', reconciles: Datum, rbac: [], reconcile: async () => {} });
    assert.deepEqual(
      unwatchedKinds(declaration).map(({ kind, guessed }) => `${kind.kind} ${kind.plural} (guess ${guessed})`),
      ['Datum data (guess datums)'],
    );
    assert.deepEqual(sourcesFor(declaration), []);
    const pings = byKind(functionObjects(declaration, DEFAULT_OPTIONS), 'PingSource').map((ping) => [
      ping.metadata.name,
      spec(ping).schedule,
      spec(ping).data,
      spec(ping).ceOverrides,
    ]);
    assert.deepEqual(pings, [
      ['datums-resync', '*/5 * * * *', '{}', { extensions: { opfnfunction: 'datums' } }],
      ['datums-poll', '* * * * *', '{"poll":true}', { extensions: { opfnfunction: 'datums' } }],
    ]);
    // What the plane sends for each is what the function reads as a poll and a resync.
    assert.equal(interpretEvent(pollEvent(declaration) as CloudEventV1<unknown>).type, 'poll');
    assert.equal(interpretEvent(resyncEvent(declaration) as CloudEventV1<unknown>).type, 'resync');
    const written: string[] = [];
    runManifests({ target: 'knative' }, [declaration], (text) => written.push(text));
    assert.match(
      written.join(''),
      /^# note: datums: Knative's ApiServerSource cannot watch Datum \(it looks for the resource "datums", and no kind name makes it look for "data"\); its changes reach datums through its poll PingSource \(every minute\)$/m,
    );
  });
});
