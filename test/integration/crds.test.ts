// The CustomResourceDefinitions in crds/ against a real kube-apiserver (Kubernetes 1.20):
// every CRD installs and becomes Established, every seed example applies unchanged, the
// schemas refuse invalid objects with a message that names the field, and the printer
// columns show what the functions write into status.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { ApiException, KubeConfig, KubernetesObjectApi, loadAllYaml, type KubernetesObject } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { startControlPlane, type ControlPlane } from '../../cluster/control-plane.ts';

const CRD_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'crds');
const EXAMPLES_DIR = join(CRD_DIR, 'examples');
const NAMESPACE = 'default';

/** Every CRD this project ships; the test fails if a file is missing or one appears untested. */
const EXPECTED_CRDS: Record<string, string> = {
  'compositecontroller.yaml': 'compositecontrollers.metacontroller.k8s.io',
  'copyratorrule.yaml': 'copyrators.flant.com',
  'exchangerate.yaml': 'exchangerates.operators.brennerm.github.io',
  'immortalcontainer-metacontroller.yaml': 'immortalcontainers.immortalcontainers.flugel.it',
  'immortalcontainer.yaml': 'immortalcontainers.immortalcontainer.flugel.it',
};

const yamlFiles = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isFile() && /\.ya?ml$/.test(entry.name))
    .map((entry) => entry.name)
    .sort();

/** The documents of a file exactly as written (no client-side model in between). */
const rawDocuments = (file: string): any[] =>
  parseAllDocuments(readFileSync(file, 'utf8'))
    .map((doc) => doc.toJS())
    .filter((doc) => doc !== null && doc !== undefined);

/** The documents of a file as client-node loads them (what `create` is given). */
const clientDocuments = (file: string): KubernetesObject[] =>
  loadAllYaml(readFileSync(file, 'utf8')).filter((doc) => doc !== null && doc !== undefined);

/** Fails with the path of the first difference when `actual` lacks something `expected` has. */
function assertContains(actual: unknown, expected: unknown, path = ''): void {
  if (expected !== null && typeof expected === 'object') {
    assert.ok(actual !== null && typeof actual === 'object', `${path || '.'}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
    if (Array.isArray(expected)) {
      assert.ok(Array.isArray(actual), `${path}: expected an array, got ${JSON.stringify(actual)}`);
      assert.equal(actual.length, expected.length, `${path}: expected ${expected.length} items, got ${JSON.stringify(actual)}`);
    }
    for (const [key, value] of Object.entries(expected)) {
      assertContains((actual as Record<string, unknown>)[key], value, `${path}.${key}`);
    }
    return;
  }
  assert.deepEqual(actual, expected, `${path}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
}

function apiStatusOf(error: ApiException<unknown>): any {
  if (typeof error.body !== 'string') return error.body;
  try {
    return JSON.parse(error.body);
  } catch {
    return { message: error.body };
  }
}

describe('CustomResourceDefinitions on a real kube-apiserver', { timeout: 20 * 60_000 }, () => {
  let cp: ControlPlane;
  let kc: KubeConfig;
  let client: KubernetesObjectApi;

  /** A REST call with the admin kubeconfig, for what KubernetesObjectApi cannot do (Accept, subresources). */
  async function rest(method: string, path: string, options: { body?: unknown; accept?: string } = {}): Promise<{ status: number; body: any }> {
    const requestOptions: RequestOptions = {
      method,
      headers: { accept: options.accept ?? 'application/json', 'content-type': 'application/json' },
    };
    await kc.applyToHTTPSOptions(requestOptions);
    return new Promise((resolve, reject) => {
      const req = httpsRequest(new URL(path, cp.server), requestOptions, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          let body: unknown = text;
          try { body = JSON.parse(text); } catch { /* not JSON */ }
          resolve({ status: res.statusCode ?? 0, body });
        });
      });
      req.on('error', reject);
      if (options.body !== undefined) req.write(JSON.stringify(options.body));
      req.end();
    });
  }

  /** Polls the CRD until Established=True and its group/version serves the plural (discovery). */
  async function waitEstablished(name: string, timeoutMs = 30_000): Promise<any> {
    const deadline = Date.now() + timeoutMs;
    let last: any;
    while (Date.now() < deadline) {
      last = await client.read<any>({ apiVersion: 'apiextensions.k8s.io/v1', kind: 'CustomResourceDefinition', metadata: { name } });
      const established = last.status?.conditions?.find((c: any) => c.type === 'Established');
      if (established?.status === 'True') {
        const version = last.spec.versions.find((v: any) => v.storage).name;
        const discovery = await rest('GET', `/apis/${last.spec.group}/${version}`);
        if (discovery.status === 200 && discovery.body.resources?.some((r: any) => r.name === last.spec.names.plural)) return last;
      }
      await sleep(100);
    }
    assert.fail(`CRD ${name} not Established (and served) after ${timeoutMs / 1000}s; conditions: ${JSON.stringify(last?.status?.conditions)}`);
  }

  /** Creates `object` and asserts 422 Invalid whose message and causes name `field` with `detail`. */
  async function assertRefused(object: KubernetesObject, field: string, detail: RegExp): Promise<void> {
    let error: unknown;
    try {
      await client.create(object);
    } catch (e) {
      error = e;
    }
    assert.ok(error !== undefined, `the API server accepted an invalid ${object.kind} (${field} should be refused): ${JSON.stringify(object)}`);
    assert.ok(error instanceof ApiException, `expected an ApiException, got ${String(error)}`);
    const status = apiStatusOf(error);
    assert.equal(error.code, 422, `expected 422 Unprocessable Entity, got ${error.code}: ${JSON.stringify(status)}`);
    assert.equal(status.reason, 'Invalid', JSON.stringify(status));
    assert.ok(String(status.message).includes(field), `message does not name ${field}: ${status.message}`);
    assert.match(String(status.message), detail);
    const causes: any[] = status.details?.causes ?? [];
    assert.ok(causes.some((c) => c.field === field && detail.test(c.message)), `no cause for ${field} matching ${detail}: ${JSON.stringify(causes)}`);
  }

  before(async () => {
    // The first start may provision (or even build) the control-plane binaries.
    cp = await startControlPlane();
    kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfigPath);
    client = KubernetesObjectApi.makeApiClient(kc);
  }, { timeout: 20 * 60_000 });

  after(async () => {
    await cp?.stop();
  });

  test('crds/ holds exactly the expected CRD files, one CRD each', () => {
    assert.deepEqual(yamlFiles(CRD_DIR), Object.keys(EXPECTED_CRDS).sort());
    for (const [file, name] of Object.entries(EXPECTED_CRDS)) {
      const docs = rawDocuments(join(CRD_DIR, file));
      assert.equal(docs.length, 1, `${file} must hold one document`);
      assert.equal(docs[0].apiVersion, 'apiextensions.k8s.io/v1', file);
      assert.equal(docs[0].kind, 'CustomResourceDefinition', file);
      assert.equal(docs[0].metadata.name, name, file);
    }
  });

  test('every CRD installs, reaches Established=True and is stored as written', async () => {
    for (const file of Object.keys(EXPECTED_CRDS)) {
      const [crd] = clientDocuments(join(CRD_DIR, file));
      try {
        await client.create(crd);
      } catch (error) {
        if (error instanceof ApiException) assert.fail(`${file} was refused (${error.code}): ${apiStatusOf(error).message}`);
        throw error;
      }
    }
    for (const [file, name] of Object.entries(EXPECTED_CRDS)) {
      const established = await waitEstablished(name);
      const names = established.status.conditions.find((c: any) => c.type === 'NamesAccepted');
      assert.equal(names?.status, 'True', `${name}: NamesAccepted ${JSON.stringify(names)}`);
      // Nothing of the file may be lost on the way (client-side model or server-side dropping).
      const stored = await rest('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`);
      assert.equal(stored.status, 200, JSON.stringify(stored.body));
      const [written] = rawDocuments(join(CRD_DIR, file));
      assertContains(stored.body.spec, written.spec, `${file} spec`);
      assertContains(stored.body.metadata.annotations ?? {}, written.metadata.annotations ?? {}, `${file} annotations`);
    }
  });

  test('the CRDs have the names, scopes and short names of the seeds', async () => {
    const expectations: Array<[string, string, string, string[]]> = [
      ['immortalcontainers.immortalcontainer.flugel.it', 'Namespaced', 'ImmortalContainer', ['ic']],
      ['immortalcontainers.immortalcontainers.flugel.it', 'Namespaced', 'ImmortalContainer', []],
      ['copyrators.flant.com', 'Namespaced', 'CopyratorRule', ['copyr']],
      ['exchangerates.operators.brennerm.github.io', 'Namespaced', 'ExchangeRate', ['er']],
      ['compositecontrollers.metacontroller.k8s.io', 'Cluster', 'CompositeController', ['cc', 'cctl']],
    ];
    for (const [name, scope, kind, shortNames] of expectations) {
      const crd = (await rest('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`)).body;
      assert.equal(crd.spec.scope, scope, name);
      assert.equal(crd.status.acceptedNames.kind, kind, name);
      assert.deepEqual(crd.status.acceptedNames.shortNames ?? [], shortNames, name);
      assert.ok(crd.spec.versions.every((v: any) => v.subresources?.status), `${name}: status subresource`);
    }
  });

  test('every example in crds/examples/ applies unchanged', async () => {
    const files = yamlFiles(EXAMPLES_DIR);
    assert.deepEqual(files, ['copyratorrule.yaml', 'exchangerate.yaml', 'immortalcontainer-metacontroller.yaml', 'immortalcontainer.yaml']);
    let count = 0;
    for (const file of files) {
      const raw = rawDocuments(join(EXAMPLES_DIR, file));
      const docs = clientDocuments(join(EXAMPLES_DIR, file));
      assert.equal(docs.length, raw.length, file);
      for (const [i, doc] of docs.entries()) {
        assert.equal(raw[i].metadata.namespace, undefined, `${file}: examples carry no namespace`);
        let created: any;
        try {
          created = await client.create(doc);
        } catch (error) {
          if (error instanceof ApiException) assert.fail(`${file} (${doc.kind} ${doc.metadata?.name}) was refused (${error.code}): ${apiStatusOf(error).message}`);
          throw error;
        }
        const namespaced = doc.kind !== 'CompositeController';
        assert.equal(created.metadata.namespace, namespaced ? NAMESPACE : undefined, `${file}: ${doc.kind} namespace`);
        // Read back raw: every field of the example survived (no pruning by the schema).
        const plural = { ImmortalContainer: 'immortalcontainers', CopyratorRule: 'copyrators', ExchangeRate: 'exchangerates', CompositeController: 'compositecontrollers' }[raw[i].kind as string];
        assert.ok(plural, `${file}: unexpected kind ${raw[i].kind}`);
        const scope = namespaced ? `/namespaces/${NAMESPACE}` : '';
        const stored = await rest('GET', `/apis/${raw[i].apiVersion}${scope}/${plural}/${raw[i].metadata.name}`);
        assert.equal(stored.status, 200, `${file}: ${JSON.stringify(stored.body)}`);
        const { metadata, ...fields } = raw[i];
        assertContains(stored.body, { ...fields, metadata: { name: metadata.name } }, file);
        count++;
      }
    }
    assert.equal(count, 5, 'four example files holding five objects');
  });

  test('ImmortalContainer without spec.image is refused', async () => {
    await assertRefused(
      { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: { name: 'no-image', namespace: NAMESPACE }, spec: {} } as KubernetesObject,
      'spec.image', /Required value/);
  });

  test('ImmortalContainer without spec is refused', async () => {
    await assertRefused(
      { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: { name: 'no-spec', namespace: NAMESPACE } },
      'spec', /Required value/);
  });

  test('ImmortalContainer with an empty image is refused', async () => {
    await assertRefused(
      { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: { name: 'empty-image', namespace: NAMESPACE }, spec: { image: '' } } as KubernetesObject,
      'spec.image', /at least 1 chars long/);
  });

  test('ImmortalContainer (Metacontroller variant) with an empty image is refused', async () => {
    await assertRefused(
      { apiVersion: 'immortalcontainers.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: { name: 'empty-image', namespace: NAMESPACE }, spec: { image: '' } } as KubernetesObject,
      'spec.image', /at least 1 chars long/);
  });

  test('ExchangeRate with currency EUR is refused', async () => {
    await assertRefused(
      { apiVersion: 'operators.brennerm.github.io/v1', kind: 'ExchangeRate', metadata: { name: 'exchange-rate-eur', namespace: NAMESPACE }, spec: { currency: 'EUR' } } as KubernetesObject,
      'spec.currency', /Unsupported value: "EUR".*"USD"/);
  });

  test('CopyratorRule with ruleType pod is refused', async () => {
    await assertRefused(
      { apiVersion: 'flant.com/v1', kind: 'CopyratorRule', metadata: { name: 'pod-rule', namespace: NAMESPACE }, ruleType: 'pod', selector: { copyrator: 'true' }, namespace: 'default' } as KubernetesObject,
      'ruleType', /Unsupported value: "pod".*"configmap".*"secret"/);
  });

  test('CopyratorRule without a source namespace is refused', async () => {
    await assertRefused(
      { apiVersion: 'flant.com/v1', kind: 'CopyratorRule', metadata: { name: 'no-source', namespace: NAMESPACE }, ruleType: 'secret', selector: {} } as KubernetesObject,
      'namespace', /Required value/);
  });

  test('CompositeController with an unknown update method is refused', async () => {
    await assertRefused(
      {
        apiVersion: 'metacontroller.k8s.io/v1alpha1', kind: 'CompositeController', metadata: { name: 'bad-method' },
        spec: { parentResource: { apiVersion: 'v1', resource: 'configmaps' }, childResources: [{ apiVersion: 'v1', resource: 'pods', updateStrategy: { method: 'Sometimes' } }] },
      } as KubernetesObject,
      'spec.childResources.updateStrategy.method', /Unsupported value: "Sometimes"/);
  });

  test('status conditions need a type (the list-map key) and a valid status', async () => {
    const name = 'conditions-check';
    const created: any = await client.create({ apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: { name, namespace: NAMESPACE }, spec: { image: 'nginx:latest' } } as KubernetesObject);
    const path = `/apis/immortalcontainer.flugel.it/v1alpha1/namespaces/${NAMESPACE}/immortalcontainers/${name}/status`;
    const write = (conditions: unknown[]) =>
      rest('PUT', path, { body: { ...created, status: { conditions } } });

    const untyped = await write([{ status: 'True', reason: 'Running' }]);
    assert.equal(untyped.status, 422, JSON.stringify(untyped.body));
    assert.match(untyped.body.message, /status\.conditions(\[0\])?\.type: Required value/);

    const maybe = await write([{ type: 'Ready', status: 'Maybe' }]);
    assert.equal(maybe.status, 422, JSON.stringify(maybe.body));
    assert.match(maybe.body.message, /status\.conditions(\[0\])?\.status: Unsupported value: "Maybe"/);

    const ok = await write([{ type: 'Ready', status: 'True', reason: 'PodRunning', message: 'pod is running', lastTransitionTime: '2024-01-01T00:00:00Z', observedGeneration: 1 }]);
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.deepEqual(ok.body.status.conditions.map((c: any) => [c.type, c.status]), [['Ready', 'True']]);
  });

  // Kubernetes 1.20 accepts "" in any string field of a CR schema (a condition's message is
  // often empty). Builds of 1.20 with Go >= 1.16 do not: kube-openapi's type validator
  // mistakes every zero value for null (kubernetes/kubernetes#99804, fixed by
  // kubernetes/kube-openapi#230 in 1.21). This test tells such a build apart from the real thing.
  test('an empty string is a valid value of a string field', async () => {
    const name = 'empty-strings';
    const created: any = await client.create({ apiVersion: 'operators.brennerm.github.io/v1', kind: 'ExchangeRate', metadata: { name, namespace: NAMESPACE }, spec: { currency: 'CHF' } } as KubernetesObject);
    const path = `/apis/operators.brennerm.github.io/v1/namespaces/${NAMESPACE}/exchangerates/${name}/status`;
    const status = { rate: '', conditions: [{ type: 'Ready', status: 'False', reason: 'FetchFailed', message: '', lastTransitionTime: '2024-01-01T00:00:00Z' }] };
    const written = await rest('PUT', path, { body: { ...created, status } });
    assert.equal(written.status, 200,
      `status with "" strings refused (${written.body.message}); this kube-apiserver has the Go >= 1.16 zero-value bug of ` +
      'kube-openapi (kubernetes/kubernetes#99804): build it with vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go patched as in kubernetes/kube-openapi#230');
    assert.deepEqual(written.body.status, status);
  });

  test('printer columns show spec and what the functions write into status', async () => {
    const cases: Array<{ plural: string; object: any; status: any; columns: string[]; cells: unknown[] }> = [
      {
        plural: 'immortalcontainers',
        object: { apiVersion: 'immortalcontainer.flugel.it/v1alpha1', kind: 'ImmortalContainer', metadata: { name: 'columns' }, spec: { image: 'busybox:1.36' } },
        status: { currentPod: 'columns-immortalpod', startTimes: 3, observedGeneration: 1, conditions: [{ type: 'Ready', status: 'True', reason: 'PodRunning', message: 'pod is running', lastTransitionTime: '2024-01-01T00:00:00Z' }] },
        columns: ['Name', 'Image', 'Pod', 'Starts', 'Ready', 'Age'],
        cells: ['columns', 'busybox:1.36', 'columns-immortalpod', 3, 'True'],
      },
      {
        plural: 'copyrators',
        object: { apiVersion: 'flant.com/v1', kind: 'CopyratorRule', metadata: { name: 'columns' }, ruleType: 'secret', selector: { team: 'a' }, namespace: 'kube-system' },
        status: { observedGeneration: 1, copies: 7, conditions: [{ type: 'Ready', status: 'False', reason: 'SourceMissing', message: 'no source', lastTransitionTime: '2024-01-01T00:00:00Z' }] },
        columns: ['Name', 'Type', 'Source', 'Copies', 'Ready', 'Age'],
        cells: ['columns', 'secret', 'kube-system', 7, 'False'],
      },
      {
        plural: 'exchangerates',
        object: { apiVersion: 'operators.brennerm.github.io/v1', kind: 'ExchangeRate', metadata: { name: 'columns' }, spec: { currency: 'JPY' } },
        status: { rate: '161.42', configMap: 'columns', lastUpdated: '2024-01-01T00:00:00Z', observedGeneration: 1, conditions: [{ type: 'Ready', status: 'Unknown', reason: 'Fetching', message: 'first fetch pending', lastTransitionTime: '2024-01-01T00:00:00Z' }] },
        columns: ['Name', 'Currency', 'Rate', 'Ready', 'Age'],
        cells: ['columns', 'JPY', '161.42', 'Unknown'],
      },
    ];
    for (const { plural, object, status, columns, cells } of cases) {
      const created: any = await client.create({ ...object, metadata: { ...object.metadata, namespace: NAMESPACE } });
      const path = `/apis/${object.apiVersion}/namespaces/${NAMESPACE}/${plural}/${object.metadata.name}`;
      const written = await rest('PUT', `${path}/status`, { body: { ...created, status } });
      assert.equal(written.status, 200, `${plural} status: ${JSON.stringify(written.body)}`);
      assertContains(written.body.status, status, `${plural} status`);
      const table = await rest('GET', path, { accept: 'application/json;as=Table;v=v1;g=meta.k8s.io' });
      assert.equal(table.status, 200, JSON.stringify(table.body));
      assert.equal(table.body.kind, 'Table');
      assert.deepEqual(table.body.columnDefinitions.map((c: any) => c.name), columns, plural);
      assert.equal(table.body.rows.length, 1, plural);
      const row: unknown[] = table.body.rows[0].cells;
      assert.deepEqual(row.slice(0, cells.length), cells, plural);
      assert.match(String(row[columns.indexOf('Age')]), /^\d+[smhd]/, `${plural} Age`);
    }
  });
});
