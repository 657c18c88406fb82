// The CustomResourceDefinitions in crds/ against a real kube-apiserver (the release
// cluster/provision.sh builds, Kubernetes 1.35): every CRD installs and becomes Established,
// every seed example applies unchanged under strict field validation (as `kubectl apply` sends
// it), the schemas refuse invalid objects with a message that names the field, each validation
// rule (x-kubernetes-validations) refuses a bad object with its message and admits the boundary
// case, objects admitted before a rule stay updatable (ratcheting), and the printer columns show
// what the functions write into status.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { ApiException, KubeConfig, KubernetesObjectApi, loadAllYaml, type KubernetesObject } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { startControlPlane, type ControlPlane } from '../../cluster/index.ts';
import { withoutRules } from '../support/crd-rules.ts';

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

/** Plural of each kind served by crds/ (the seeds' CopyratorRule CRD serves `copyrators`). */
const PLURALS: Record<string, string> = {
  ImmortalContainer: 'immortalcontainers',
  CopyratorRule: 'copyrators',
  ExchangeRate: 'exchangerates',
  CompositeController: 'compositecontrollers',
};

/** The collection URL of `object` (in NAMESPACE unless cluster-scoped). */
function collectionOf(object: { apiVersion?: string; kind?: string }): string {
  const plural = PLURALS[object.kind ?? ''];
  assert.ok(plural, `no CRD of crds/ serves kind ${object.kind}`);
  return `/apis/${object.apiVersion}${object.kind === 'CompositeController' ? '' : `/namespaces/${NAMESPACE}`}/${plural}`;
}

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
    assert.ok(
      actual !== null && typeof actual === 'object',
      `${path || '.'}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`,
    );
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
  async function rest(
    method: string,
    path: string,
    options: { body?: unknown; accept?: string; contentType?: string } = {},
  ): Promise<{ status: number; body: any }> {
    const requestOptions: RequestOptions = {
      method,
      headers: { accept: options.accept ?? 'application/json', 'content-type': options.contentType ?? 'application/json' },
    };
    await kc.applyToHTTPSOptions(requestOptions);
    return new Promise((resolve, reject) => {
      const req = httpsRequest(new URL(path, cp.server), requestOptions, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          let body: unknown = text;
          try {
            body = JSON.parse(text);
          } catch {
            /* not JSON */
          }
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
    assert.fail(
      `CRD ${name} not Established (and served) after ${timeoutMs / 1000}s; conditions: ${JSON.stringify(last?.status?.conditions)}`,
    );
  }

  /** POSTs `object` as `kubectl apply` would send it: strict field validation, so an unknown field is an error. */
  const createStrict = (object: object, query = '') =>
    rest('POST', `${collectionOf(object)}?fieldValidation=Strict${query}`, { body: object });

  /**
   * Asserts that an answer is 422 Invalid whose message and causes name `field` with `detail`,
   * and (when given) the cause's `reason` (FieldValueInvalid, FieldValueRequired, ...).
   */
  function assertInvalid(answer: { status: number; body: any }, field: string, detail: RegExp, reason?: string): void {
    const status = answer.body;
    assert.equal(answer.status, 422, `expected 422 Unprocessable Entity (${field}), got ${answer.status}: ${JSON.stringify(status)}`);
    assert.equal(status.reason, 'Invalid', JSON.stringify(status));
    assert.ok(String(status.message).includes(field), `message does not name ${field}: ${status.message}`);
    assert.match(String(status.message), detail);
    const causes: any[] = status.details?.causes ?? [];
    const cause = causes.find((c) => c.field === field && detail.test(c.message));
    assert.ok(cause, `no cause for ${field} matching ${detail}: ${JSON.stringify(causes)}`);
    if (reason) assert.equal(cause.reason, reason, `cause of ${field}: ${JSON.stringify(cause)}`);
  }

  /** Creates `object` (strict, dry run: nothing is stored) and asserts 422 Invalid naming `field` with `detail`. */
  async function assertRefused(object: KubernetesObject, field: string, detail: RegExp, reason?: string): Promise<void> {
    const answer = await createStrict(object, '&dryRun=All');
    assert.notEqual(
      answer.status,
      201,
      `the API server accepted an invalid ${object.kind} (${field} should be refused): ${JSON.stringify(object)}`,
    );
    assertInvalid(answer, field, detail, reason);
  }

  /** Creates `object` (strict, dry run) and asserts the API server admits it. */
  async function assertAdmitted(object: KubernetesObject): Promise<void> {
    const answer = await createStrict(object, '&dryRun=All');
    assert.equal(
      answer.status,
      201,
      `a valid ${object.kind} was refused (${answer.status}): ${answer.body?.message ?? JSON.stringify(answer.body)}\n${JSON.stringify(object)}`,
    );
  }

  before(
    async () => {
      // The first start may provision (or even build) the control-plane binaries.
      cp = await startControlPlane();
      kc = new KubeConfig();
      kc.loadFromFile(cp.kubeconfigPath);
      client = KubernetesObjectApi.makeApiClient(kc);
    },
    { timeout: 20 * 60_000 },
  );

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

  test('the API server is a release that runs the rules (CEL format library: Kubernetes 1.31 or later)', async (t) => {
    const version = await rest('GET', '/version');
    assert.equal(version.status, 200, JSON.stringify(version.body));
    t.diagnostic(`kube-apiserver ${version.body.gitVersion}`);
    const minor = Number.parseInt(String(version.body.minor), 10);
    assert.ok(version.body.major === '1' && minor >= 31, `kube-apiserver ${version.body.gitVersion}: the CRDs' rules need 1.31 or later`);
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
      assert.ok(
        crd.spec.versions.every((v: any) => v.subresources?.status),
        `${name}: status subresource`,
      );
    }
  });

  test('every example in crds/examples/ applies unchanged, under strict field validation', async () => {
    const files = yamlFiles(EXAMPLES_DIR);
    assert.deepEqual(files, ['copyratorrule.yaml', 'exchangerate.yaml', 'immortalcontainer-metacontroller.yaml', 'immortalcontainer.yaml']);
    let count = 0;
    for (const file of files) {
      // The documents exactly as the file holds them, with no client-side model in between; the
      // client's loader must see as many (what `opfn dev` and the walkthrough tests apply).
      const raw = rawDocuments(join(EXAMPLES_DIR, file));
      assert.equal(clientDocuments(join(EXAMPLES_DIR, file)).length, raw.length, file);
      for (const doc of raw) {
        assert.equal(doc.metadata.namespace, undefined, `${file}: examples carry no namespace`);
        // Strict: a field the schema does not know would be an error, not silently pruned.
        const created = await createStrict(doc);
        assert.equal(
          created.status,
          201,
          `${file} (${doc.kind} ${doc.metadata?.name}) was refused (${created.status}): ${created.body?.message ?? JSON.stringify(created.body)}`,
        );
        const namespaced = doc.kind !== 'CompositeController';
        assert.equal(created.body.metadata.namespace, namespaced ? NAMESPACE : undefined, `${file}: ${doc.kind} namespace`);
        // Read back: every field of the example survived (no pruning, no rewriting by the schema).
        const stored = await rest('GET', `${collectionOf(doc)}/${doc.metadata.name}`);
        assert.equal(stored.status, 200, `${file}: ${JSON.stringify(stored.body)}`);
        const { metadata, ...fields } = doc;
        assertContains(stored.body, { ...fields, metadata: { name: metadata.name } }, file);
        count++;
      }
    }
    assert.equal(count, 5, 'four example files holding five objects');
  });

  test('strict field validation is in force: an example with one unknown field is refused', async () => {
    // The control for the test above: with fieldValidation=Strict an unknown field is an error.
    const [example] = rawDocuments(join(EXAMPLES_DIR, 'exchangerate.yaml'));
    const unknown = { ...example, metadata: { name: 'strict-check' }, spec: { ...example.spec, currencyy: 'USD' } };
    const answer = await createStrict(unknown, '&dryRun=All');
    assert.ok(
      answer.status >= 400 && answer.status < 500,
      `an unknown field was accepted (${answer.status}): ${JSON.stringify(answer.body)}`,
    );
    assert.match(String(answer.body.message), /unknown field "spec\.currencyy"/);
  });

  test('ImmortalContainer without spec.image is refused', async () => {
    await assertRefused(
      {
        apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
        kind: 'ImmortalContainer',
        metadata: { name: 'no-image', namespace: NAMESPACE },
        spec: {},
      } as KubernetesObject,
      'spec.image',
      /Required value/,
    );
  });

  test('ImmortalContainer without spec is refused', async () => {
    await assertRefused(
      {
        apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
        kind: 'ImmortalContainer',
        metadata: { name: 'no-spec', namespace: NAMESPACE },
      },
      'spec',
      /Required value/,
    );
  });

  test('ImmortalContainer with an empty image is refused', async () => {
    await assertRefused(
      {
        apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
        kind: 'ImmortalContainer',
        metadata: { name: 'empty-image', namespace: NAMESPACE },
        spec: { image: '' },
      } as KubernetesObject,
      'spec.image',
      /at least 1 chars long/,
    );
  });

  test('ImmortalContainer (Metacontroller variant) with an empty image is refused', async () => {
    await assertRefused(
      {
        apiVersion: 'immortalcontainers.flugel.it/v1alpha1',
        kind: 'ImmortalContainer',
        metadata: { name: 'empty-image', namespace: NAMESPACE },
        spec: { image: '' },
      } as KubernetesObject,
      'spec.image',
      /at least 1 chars long/,
    );
  });

  test('ExchangeRate with currency EUR is refused', async () => {
    await assertRefused(
      {
        apiVersion: 'operators.brennerm.github.io/v1',
        kind: 'ExchangeRate',
        metadata: { name: 'exchange-rate-eur', namespace: NAMESPACE },
        spec: { currency: 'EUR' },
      } as KubernetesObject,
      'spec.currency',
      /Unsupported value: "EUR".*"USD"/,
    );
  });

  test('CopyratorRule with ruleType pod is refused', async () => {
    await assertRefused(
      {
        apiVersion: 'flant.com/v1',
        kind: 'CopyratorRule',
        metadata: { name: 'pod-rule', namespace: NAMESPACE },
        ruleType: 'pod',
        selector: { copyrator: 'true' },
        namespace: 'default',
      } as KubernetesObject,
      'ruleType',
      /Unsupported value: "pod".*"configmap".*"secret"/,
    );
  });

  test('CopyratorRule without a source namespace is refused', async () => {
    await assertRefused(
      {
        apiVersion: 'flant.com/v1',
        kind: 'CopyratorRule',
        metadata: { name: 'no-source', namespace: NAMESPACE },
        ruleType: 'secret',
        selector: {},
      } as KubernetesObject,
      'namespace',
      /Required value/,
    );
  });

  test('CompositeController with an unknown update method is refused', async () => {
    await assertRefused(
      {
        apiVersion: 'metacontroller.k8s.io/v1alpha1',
        kind: 'CompositeController',
        metadata: { name: 'bad-method' },
        spec: {
          parentResource: { apiVersion: 'v1', resource: 'configmaps' },
          childResources: [{ apiVersion: 'v1', resource: 'pods', updateStrategy: { method: 'Sometimes' } }],
        },
      } as KubernetesObject,
      'spec.childResources[0].updateStrategy.method',
      /Unsupported value: "Sometimes"/,
    );
  });

  // ---- validation rules: one refused case per rule (message, field, reason), and the boundary it admits ----

  const immortal = (image: string, group = 'immortalcontainer.flugel.it') =>
    ({
      apiVersion: `${group}/v1alpha1`,
      kind: 'ImmortalContainer',
      metadata: { name: 'rule-check', namespace: NAMESPACE },
      spec: { image },
    }) as KubernetesObject;
  const copyRule = (fields: Record<string, unknown>) =>
    ({
      apiVersion: 'flant.com/v1',
      kind: 'CopyratorRule',
      metadata: { name: 'rule-check', namespace: NAMESPACE },
      ruleType: 'configmap',
      selector: { copyrator: 'true' },
      namespace: 'default',
      ...fields,
    }) as KubernetesObject;
  /** A valid CompositeController with `spec` merged in (an undefined value drops that field). */
  const controller = (spec: Record<string, unknown>) => {
    const merged: Record<string, unknown> = {
      parentResource: { apiVersion: 'v1', resource: 'configmaps' },
      hooks: { sync: { webhook: { url: 'http://hook.example/sync' } } },
      ...spec,
    };
    for (const [key, value] of Object.entries(merged)) if (value === undefined) delete merged[key];
    return {
      apiVersion: 'metacontroller.k8s.io/v1alpha1',
      kind: 'CompositeController',
      metadata: { name: 'rule-check' },
      spec: merged,
    } as KubernetesObject;
  };
  const withParentSelector = (matchExpressions: unknown[]) =>
    controller({ parentResource: { apiVersion: 'v1', resource: 'configmaps', labelSelector: { matchExpressions } } });
  const hooksWith = (hook: string, value: unknown) =>
    controller({ hooks: { sync: { webhook: { url: 'http://hook.example/sync' } }, [hook]: value } });
  // The longest apiVersion: a 253-character DNS subdomain group, '/', a 63-character version.
  const LONGEST_GROUP = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`;

  const RULES: Array<{ rule: string; bad: KubernetesObject; field: string; detail: RegExp; reason?: string; good: KubernetesObject[] }> = [
    {
      rule: 'ImmortalContainer spec.image has no surrounding whitespace',
      bad: immortal('nginx:latest '),
      field: 'spec.image',
      detail: /must not have leading or trailing whitespace/,
      reason: 'FieldValueInvalid',
      good: [immortal('nginx:latest'), immortal('an image')],
    },
    {
      rule: 'ImmortalContainer (Metacontroller variant) spec.image has no surrounding whitespace',
      bad: immortal('\tnginx:latest', 'immortalcontainers.flugel.it'),
      field: 'spec.image',
      detail: /must not have leading or trailing whitespace/,
      reason: 'FieldValueInvalid',
      good: [immortal('an image', 'immortalcontainers.flugel.it')],
    },
    {
      rule: 'CopyratorRule namespace is a namespace name',
      bad: copyRule({ namespace: 'Bad_NS' }),
      field: 'namespace',
      detail:
        /namespace "Bad_NS" is not a valid namespace name \(a DNS-1123 label: lower-case letters, digits and "-", starting and ending with a letter or digit\)/,
      reason: 'FieldValueInvalid',
      good: [copyRule({ namespace: 'n'.repeat(63) }), copyRule({ namespace: '0' })],
    },
    {
      rule: 'CopyratorRule namespace is at most 63 characters',
      bad: copyRule({ namespace: 'n'.repeat(64) }),
      field: 'namespace',
      detail: /Too long: may not be more than 63 bytes/,
      reason: 'FieldValueTooLong',
      good: [copyRule({ namespace: 'n'.repeat(63) })],
    },
    {
      rule: 'CopyratorRule selector label names are label names',
      bad: copyRule({ selector: { ok: 'x', 'bad name': 'x' } }),
      field: 'selector',
      detail:
        /selector label name "bad name" is not a valid label name \(an optional DNS subdomain prefix and "\/", then at most 63 letters, digits, "-", "_" or "\.", starting and ending with a letter or digit\)/,
      reason: 'FieldValueInvalid',
      good: [copyRule({ selector: { [`example.com/${'k'.repeat(63)}`]: 'x', 'A_b.c-9': 'x' } }), copyRule({ selector: {} })],
    },
    {
      rule: 'CopyratorRule selector values are label values',
      bad: copyRule({ selector: { team: 'bad value!' } }),
      field: 'selector[team]',
      detail:
        /selector value "bad value!" is not a valid label value \(at most 63 letters, digits, "-", "_" or "\.", starting and ending with a letter or digit, or empty\)/,
      reason: 'FieldValueInvalid',
      good: [copyRule({ selector: { team: '', tier: 'v'.repeat(63), zone: 'A_b.c-9' } })],
    },
    {
      rule: 'CopyratorRule selector values are at most 63 characters',
      bad: copyRule({ selector: { team: 'v'.repeat(64) } }),
      field: 'selector.team',
      detail: /Too long: may not be more than 63 bytes/,
      reason: 'FieldValueTooLong',
      good: [copyRule({ selector: { team: 'v'.repeat(63) } })],
    },
    {
      rule: "CopyratorRule selector has at most 100 labels (the bound of the rules' cost)",
      bad: copyRule({ selector: Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`l${i}`, 'x'])) }),
      field: 'selector',
      detail: /Too many: 101: must have at most 100 items/,
      reason: 'FieldValueTooMany',
      good: [copyRule({ selector: Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`l${i}`, 'x'])) })],
    },
    {
      rule: 'CompositeController has a sync hook',
      bad: controller({ hooks: { finalize: { webhook: { url: 'http://hook.example/finalize' } } } }),
      field: 'spec.hooks.sync',
      detail: /no sync hook defined/,
      reason: 'FieldValueRequired',
      good: [controller({})],
    },
    {
      rule: 'CompositeController without hooks at all is refused as having no sync hook',
      bad: controller({ hooks: undefined }),
      field: 'spec.hooks.sync',
      detail: /no sync hook defined/,
      reason: 'FieldValueRequired',
      good: [controller({})],
    },
    {
      rule: 'CompositeController parentResource.apiVersion is an apiVersion',
      bad: controller({ parentResource: { apiVersion: 'example.com/v1/extra', resource: 'widgets' } }),
      field: 'spec.parentResource.apiVersion',
      detail: /"example\.com\/v1\/extra" is not an apiVersion \(group\/version, or a version of the core group\)/,
      reason: 'FieldValueInvalid',
      good: [
        controller({ parentResource: { apiVersion: 'example.com/v1alpha1', resource: 'widgets' } }),
        controller({ parentResource: { apiVersion: `${LONGEST_GROUP}/${'v'.repeat(63)}`, resource: 'widgets' } }),
      ],
    },
    {
      rule: 'CompositeController childResources[].apiVersion is an apiVersion',
      bad: controller({
        childResources: [
          { apiVersion: 'v1', resource: 'pods' },
          { apiVersion: 'Apps/v1', resource: 'deployments' },
        ],
      }),
      field: 'spec.childResources[1].apiVersion',
      detail: /"Apps\/v1" is not an apiVersion/,
      reason: 'FieldValueInvalid',
      good: [
        controller({
          childResources: [
            { apiVersion: 'v1', resource: 'pods' },
            { apiVersion: 'apps/v1', resource: 'deployments' },
          ],
        }),
      ],
    },
    {
      rule: "CompositeController has at most 100 childResources (the bound of the apiVersion rule's cost)",
      bad: controller({
        childResources: Array.from({ length: 101 }, (_, i) => ({ apiVersion: `g${i}.example.com/v1`, resource: 'things' })),
      }),
      field: 'spec.childResources',
      detail: /Too many: 101: must have at most 100 items/,
      reason: 'FieldValueTooMany',
      good: [
        controller({ childResources: Array.from({ length: 100 }, (_, i) => ({ apiVersion: `g${i}.example.com/v1`, resource: 'things' })) }),
      ],
    },
    {
      rule: 'CompositeController apiVersion versions are at most 63 letters and digits',
      bad: controller({ parentResource: { apiVersion: `example.com/${'v'.repeat(64)}`, resource: 'widgets' } }),
      field: 'spec.parentResource.apiVersion',
      detail: /is not an apiVersion/,
      reason: 'FieldValueInvalid',
      good: [controller({ parentResource: { apiVersion: `example.com/${'v'.repeat(63)}`, resource: 'widgets' } })],
    },
    {
      rule: "CompositeController labelSelector 'In' and 'NotIn' need values",
      bad: withParentSelector([{ key: 'tier', operator: 'NotIn', values: [] }]),
      field: 'spec.parentResource.labelSelector.matchExpressions[0].values',
      detail: /for 'NotIn' operator, values set can't be empty/,
      reason: 'FieldValueRequired',
      good: [
        withParentSelector([
          { key: 'tier', operator: 'In', values: ['a'] },
          { key: 'zone', operator: 'NotIn', values: [''] },
        ]),
      ],
    },
    {
      rule: "CompositeController labelSelector 'Exists' and 'DoesNotExist' take no values",
      bad: withParentSelector([{ key: 'tier', operator: 'Exists', values: ['a'] }]),
      field: 'spec.parentResource.labelSelector.matchExpressions[0].values',
      detail: /values set must be empty for exists and does not exist/,
      reason: 'FieldValueForbidden',
      good: [
        withParentSelector([
          { key: 'tier', operator: 'Exists', values: [] },
          { key: 'zone', operator: 'DoesNotExist' },
        ]),
      ],
    },
    {
      rule: 'CompositeController labelSelector keys are not empty',
      bad: withParentSelector([{ key: '', operator: 'Exists' }]),
      field: 'spec.parentResource.labelSelector.matchExpressions[0].key',
      detail: /should be at least 1 chars long/,
      reason: 'FieldValueInvalid',
      good: [withParentSelector([{ key: 't', operator: 'Exists' }])],
    },
    // The webhook rules sit in each of the three hooks the function calls; each copy is tested.
    ...['sync', 'finalize', 'customize'].flatMap((hook) => [
      {
        rule: `CompositeController hooks.${hook} has a webhook`,
        bad: hooksWith(hook, { version: 'v2' }),
        field: `spec.hooks.${hook}.webhook`,
        detail: /invalid webhook config: no webhook/,
        reason: 'FieldValueRequired',
        good: [hooksWith(hook, { webhook: { url: 'http://hook.example/x' } })],
      },
      {
        rule: `CompositeController hooks.${hook}.webhook has a url, or a service and a path`,
        bad: hooksWith(hook, { webhook: { url: '', service: { name: 'hook', namespace: 'default' } } }),
        field: `spec.hooks.${hook}.webhook`,
        detail: /invalid webhook config: must specify either a full 'url', or both 'service' and 'path'/,
        reason: 'FieldValueRequired',
        good: [
          hooksWith(hook, { webhook: { service: { name: 'hook', namespace: 'default' }, path: '' } }),
          hooksWith(hook, { webhook: { url: '', service: { name: 'hook', namespace: 'default' }, path: '/x' } }),
        ],
      },
      {
        rule: `CompositeController hooks.${hook}.webhook.service names a service`,
        bad: hooksWith(hook, { webhook: { service: { name: 'hook', namespace: '' }, path: '/x' } }),
        field: `spec.hooks.${hook}.webhook.service`,
        detail: /invalid webhook config: 'service' must specify both 'name' and 'namespace'/,
        reason: 'FieldValueInvalid',
        // A url wins over the service, which is then never used.
        good: [hooksWith(hook, { webhook: { url: 'http://hook.example/x', service: { name: '', namespace: '' } } })],
      },
    ]),
    {
      rule: 'CompositeController preUpdateChild and postUpdateChild hooks are left alone (never called)',
      bad: hooksWith('customize', {}),
      field: 'spec.hooks.customize.webhook',
      detail: /no webhook/,
      reason: 'FieldValueRequired',
      good: [hooksWith('preUpdateChild', {}), hooksWith('postUpdateChild', { webhook: { service: { name: '', namespace: '' } } })],
    },
  ];

  for (const { rule, bad, field, detail, reason, good } of RULES) {
    test(`rule: ${rule}`, async () => {
      await assertRefused(bad, field, detail, reason);
      for (const object of good) await assertAdmitted(object);
    });
  }

  test('objects admitted before the rules stay updatable: what they leave unchanged is ratcheted, what they change is judged', async () => {
    const crds: Array<[string, string]> = [
      ['copyrators.flant.com', 'copyratorrule.yaml'],
      ['compositecontrollers.metacontroller.k8s.io', 'compositecontroller.yaml'],
      ['immortalcontainers.immortalcontainer.flugel.it', 'immortalcontainer.yaml'],
    ];
    const legacyRule = { ...copyRule({ namespace: 'Bad_NS' }), metadata: { name: 'legacy-rule', namespace: NAMESPACE } };
    const legacyController = { ...controller({ hooks: undefined }), metadata: { name: 'legacy-controller' } };
    const legacyImmortal = { ...immortal(' nginx:latest '), metadata: { name: 'legacy-image', namespace: NAMESPACE } };
    const legacy = [legacyRule, legacyController, legacyImmortal];
    /** Puts the CRD's schema from its file, with or without its rules, and waits until the API server judges by it. */
    const schemaFromFile = async (rules: boolean) => {
      for (const [name, file] of crds) {
        const current = (await rest('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`)).body;
        const [written] = rawDocuments(join(CRD_DIR, file));
        const spec = rules ? written.spec : withoutRules(written.spec);
        const put = await rest('PUT', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`, { body: { ...current, spec } });
        assert.equal(put.status, 200, `${name}: ${JSON.stringify(put.body)}`);
      }
      // The handler of a CR picks a changed CRD up asynchronously: probe with dry runs.
      const deadline = Date.now() + 30_000;
      for (const object of legacy) {
        for (;;) {
          const probe = await createStrict({ ...object, metadata: { ...object.metadata, name: 'probe' } }, '&dryRun=All');
          if (probe.status === (rules ? 422 : 201)) break;
          assert.ok(
            Date.now() < deadline,
            `${object.kind}: the API server still answers ${probe.status} ${rules ? 'with' : 'without'} the rules: ${JSON.stringify(probe.body)}`,
          );
          await sleep(100);
        }
      }
    };
    const patch = (object: { apiVersion?: string; kind?: string; metadata: { name: string } }, body: unknown, subresource = '') =>
      rest('PATCH', `${collectionOf(object)}/${object.metadata.name}${subresource}?fieldValidation=Strict`, {
        body,
        contentType: 'application/merge-patch+json',
      });
    try {
      await schemaFromFile(false);
      for (const object of legacy) {
        const created = await createStrict(object);
        assert.equal(created.status, 201, `${object.kind} before the rules: ${JSON.stringify(created.body)}`);
      }
      await schemaFromFile(true);

      // CopyratorRule with an invalid source namespace: other fields change, the namespace is judged once it changes.
      assert.equal((await patch(legacyRule, { metadata: { labels: { touched: 'yes' } } })).status, 200, 'a label on the old rule');
      assert.equal((await patch(legacyRule, { ruleType: 'secret' })).status, 200, 'another field of the old rule');
      assertInvalid(
        await patch(legacyRule, { namespace: 'Still_Bad' }),
        'namespace',
        /namespace "Still_Bad" is not a valid namespace name/,
      );
      assert.equal((await patch(legacyRule, { namespace: 'default' })).status, 200, 'the namespace made valid');

      // CompositeController without hooks (a spec-level rule): metadata changes pass; a spec change must bring the sync hook.
      assert.equal(
        (await patch(legacyController, { metadata: { labels: { touched: 'yes' } } })).status,
        200,
        'a label on the old controller',
      );
      assertInvalid(await patch(legacyController, { spec: { resyncPeriodSeconds: 30 } }), 'spec.hooks.sync', /no sync hook defined/);
      assert.equal(
        (await patch(legacyController, { spec: { hooks: { sync: { webhook: { url: 'http://hook.example/sync' } } } } })).status,
        200,
        'the sync hook added',
      );

      // ImmortalContainer with a padded image: the function can still report on it in status.
      const status = {
        conditions: [
          {
            type: 'Ready',
            status: 'False',
            reason: 'PodInvalid',
            message: 'spec.containers[0].image: must not have leading or trailing whitespace',
            lastTransitionTime: '2024-01-01T00:00:00Z',
          },
        ],
      };
      const reported = await patch(legacyImmortal, { status }, '/status');
      assert.equal(reported.status, 200, `status of the old ImmortalContainer: ${JSON.stringify(reported.body)}`);
      assert.equal(
        (await patch(legacyImmortal, { metadata: { labels: { touched: 'yes' } } })).status,
        200,
        'a label on the old ImmortalContainer',
      );
      assertInvalid(
        await patch(legacyImmortal, { spec: { image: ' nginx:1.27' } }),
        'spec.image',
        /must not have leading or trailing whitespace/,
      );
    } finally {
      await schemaFromFile(true);
      for (const object of legacy) await rest('DELETE', `${collectionOf(object)}/${object.metadata.name}`);
    }
  });

  test('status conditions need a type (the list-map key) and a valid status', async () => {
    const name = 'conditions-check';
    const created: any = await client.create({
      apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
      kind: 'ImmortalContainer',
      metadata: { name, namespace: NAMESPACE },
      spec: { image: 'nginx:latest' },
    } as KubernetesObject);
    const path = `/apis/immortalcontainer.flugel.it/v1alpha1/namespaces/${NAMESPACE}/immortalcontainers/${name}/status`;
    const write = (conditions: unknown[]) => rest('PUT', path, { body: { ...created, status: { conditions } } });

    const untyped = await write([{ status: 'True', reason: 'Running' }]);
    assert.equal(untyped.status, 422, JSON.stringify(untyped.body));
    assert.match(untyped.body.message, /status\.conditions(\[0\])?\.type: Required value/);

    const maybe = await write([{ type: 'Ready', status: 'Maybe' }]);
    assert.equal(maybe.status, 422, JSON.stringify(maybe.body));
    assert.match(maybe.body.message, /status\.conditions(\[0\])?\.status: Unsupported value: "Maybe"/);

    const ok = await write([
      {
        type: 'Ready',
        status: 'True',
        reason: 'PodRunning',
        message: 'pod is running',
        lastTransitionTime: '2024-01-01T00:00:00Z',
        observedGeneration: 1,
      },
    ]);
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.deepEqual(
      ok.body.status.conditions.map((c: any) => [c.type, c.status]),
      [['Ready', 'True']],
    );
  });

  // Kubernetes 1.20 accepts "" in any string field of a CR schema (a condition's message is
  // often empty). Builds of 1.20 with Go >= 1.16 do not: kube-openapi's type validator
  // mistakes every zero value for null (kubernetes/kubernetes#99804, fixed by
  // kubernetes/kube-openapi#230 in 1.21). This test tells such a build apart from the real thing.
  test('an empty string is a valid value of a string field', async () => {
    const name = 'empty-strings';
    const created: any = await client.create({
      apiVersion: 'operators.brennerm.github.io/v1',
      kind: 'ExchangeRate',
      metadata: { name, namespace: NAMESPACE },
      spec: { currency: 'CHF' },
    } as KubernetesObject);
    const path = `/apis/operators.brennerm.github.io/v1/namespaces/${NAMESPACE}/exchangerates/${name}/status`;
    const status = {
      rate: '',
      conditions: [{ type: 'Ready', status: 'False', reason: 'FetchFailed', message: '', lastTransitionTime: '2024-01-01T00:00:00Z' }],
    };
    const written = await rest('PUT', path, { body: { ...created, status } });
    assert.equal(
      written.status,
      200,
      `status with "" strings refused (${written.body.message}); this kube-apiserver has the Go >= 1.16 zero-value bug of ` +
        'kube-openapi (kubernetes/kubernetes#99804): build it with vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go patched as in kubernetes/kube-openapi#230',
    );
    assert.deepEqual(written.body.status, status);
  });

  test('printer columns show spec and what the functions write into status', async () => {
    const cases: Array<{ plural: string; object: any; status: any; columns: string[]; cells: unknown[] }> = [
      {
        plural: 'immortalcontainers',
        object: {
          apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
          kind: 'ImmortalContainer',
          metadata: { name: 'columns' },
          spec: { image: 'busybox:1.36' },
        },
        status: {
          currentPod: 'columns-immortalpod',
          startTimes: 3,
          observedGeneration: 1,
          conditions: [
            { type: 'Ready', status: 'True', reason: 'PodRunning', message: 'pod is running', lastTransitionTime: '2024-01-01T00:00:00Z' },
          ],
        },
        columns: ['Name', 'Image', 'Pod', 'Starts', 'Ready', 'Age'],
        cells: ['columns', 'busybox:1.36', 'columns-immortalpod', 3, 'True'],
      },
      {
        plural: 'copyrators',
        object: {
          apiVersion: 'flant.com/v1',
          kind: 'CopyratorRule',
          metadata: { name: 'columns' },
          ruleType: 'secret',
          selector: { team: 'a' },
          namespace: 'kube-system',
        },
        status: {
          observedGeneration: 1,
          copies: 7,
          conditions: [
            { type: 'Ready', status: 'False', reason: 'SourceMissing', message: 'no source', lastTransitionTime: '2024-01-01T00:00:00Z' },
          ],
        },
        columns: ['Name', 'Type', 'Source', 'Copies', 'Ready', 'Age'],
        cells: ['columns', 'secret', 'kube-system', 7, 'False'],
      },
      {
        plural: 'exchangerates',
        object: {
          apiVersion: 'operators.brennerm.github.io/v1',
          kind: 'ExchangeRate',
          metadata: { name: 'columns' },
          spec: { currency: 'JPY' },
        },
        status: {
          rate: '161.42',
          configMap: 'columns',
          lastUpdated: '2024-01-01T00:00:00Z',
          observedGeneration: 1,
          conditions: [
            {
              type: 'Ready',
              status: 'Unknown',
              reason: 'Fetching',
              message: 'first fetch pending',
              lastTransitionTime: '2024-01-01T00:00:00Z',
            },
          ],
        },
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
      assert.deepEqual(
        table.body.columnDefinitions.map((c: any) => c.name),
        columns,
        plural,
      );
      assert.equal(table.body.rows.length, 1, plural);
      const row: unknown[] = table.body.rows[0].cells;
      assert.deepEqual(row.slice(0, cells.length), cells, plural);
      assert.match(String(row[columns.indexOf('Age')]), /^\d+[smhd]/, `${plural} Age`);
    }
  });
});
