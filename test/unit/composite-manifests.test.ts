// `opfn manifests --composite <file>`: the CompositeControllers known at install time replace the
// composite function's `*` with exactly what they need (policyRulesFor per controller, the event
// sources' objects by name, the runtime's rules); bad input is refused with the reason.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { manifestFiles, manifestOptions, runManifests } from '../../bin/manifests.ts';
import { CRD_DIR, readManifests } from '../../eventing/crds.ts';
import { parseObjects } from '../../eventing/manifests/index.ts';
import { compositeControllersIn, compositeRules, EVENTING_ROLE } from '../../functions/composite/install-rights.ts';
import { loadAllFunctions } from '../../functions/index.ts';
import type { KubeObject } from '../../functions/runtime/index.ts';

const SEED = new URL('../../crds/examples/immortalcontainer-metacontroller.yaml', import.meta.url).pathname;
const seedText = readFileSync(SEED, 'utf8');
const functions = await loadAllFunctions();
/** The CompositeControllers of a YAML text, as `opfn manifests --composite` reads a file. */
const readCompositeControllers = (text: string, source: string, crds: KubeObject[] = readManifests(CRD_DIR)) =>
  compositeControllersIn(parseObjects(text, source), source, crds);
const objectsOf = (text: string) =>
  parseAllDocuments(text)
    .map((document) => document.toJS() as KubeObject)
    .filter(Boolean);

const cc = (name: string, extra: string) => `apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata:
  name: ${name}
${extra}spec:
  parentResource: { apiVersion: example.com/v1, resource: widgets }
  childResources: [{ apiVersion: apps/v1, resource: deployments }]
  hooks: { sync: { webhook: { url: http://hook/sync } } }
`;

describe('reading the CompositeControllers of a file', () => {
  test('the seed manifest: one controller, other kinds ignored, kinds resolved through crds/', () => {
    const [controller, ...rest] = readCompositeControllers(seedText, 'seed');
    assert.equal(rest.length, 0);
    assert.deepEqual(controller, {
      name: 'immortalcontainer-controller',
      parent: {
        apiVersion: 'immortalcontainers.flugel.it/v1alpha1',
        resource: 'immortalcontainers',
        kind: 'ImmortalContainer',
        namespaced: true,
      },
      children: [{ apiVersion: 'v1', resource: 'pods', kind: '', namespaced: true }],
      related: [],
    });
  });

  test('several documents, a CRD in the file gives a kind its scope, related kinds from the annotation', () => {
    const crd =
      'apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: { name: widgets.example.com }\nspec: { group: example.com, scope: Cluster, names: { plural: widgets, kind: Widget } }\n';
    const text = [
      cc('a', ''),
      'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: x }\n',
      crd,
      cc('b', '  annotations:\n    operator-functions.dev/related-resources: "v1/configmaps, apps/v1/replicasets"\n'),
    ].join('---\n');
    const [a, b] = readCompositeControllers(text, 'file', []);
    assert.equal(a!.parent.namespaced, false);
    assert.equal(a!.parent.kind, 'Widget');
    assert.deepEqual(
      b!.related.map((r) => `${r.apiVersion} ${r.resource}`),
      ['v1 configmaps', 'apps/v1 replicasets'],
    );
  });

  test('refused with the reason: no controller, an invalid one, the same one twice, a bad annotation, not YAML', () => {
    assert.throws(
      () => readCompositeControllers('apiVersion: v1\nkind: ConfigMap\nmetadata: { name: x }\n', 'f.yaml'),
      /f\.yaml: no CompositeController/,
    );
    assert.throws(
      () => readCompositeControllers(cc('x', '').replace(/  hooks:.*\n/, ''), 'f.yaml'),
      /f\.yaml: CompositeController x: no hooks defined/,
    );
    assert.throws(
      () => readCompositeControllers([cc('x', ''), cc('x', '')].join('---\n'), 'f.yaml'),
      /CompositeController x is there twice/,
    );
    assert.throws(
      () => readCompositeControllers(cc('x', '  annotations: { operator-functions.dev/related-resources: configmaps }\n'), 'f.yaml'),
      /entry "configmaps" is not <apiVersion>\/<resource>/,
    );
    assert.throws(() => readCompositeControllers('a: [', 'f.yaml'), /f\.yaml: not YAML/);
  });
});

describe('where the function puts the event sources', () => {
  const envOf = (files: Record<string, string>) => {
    const service = objectsOf(files['composite.yaml']!).find((object) => object.kind === 'Service')!;
    const env = (service.spec as any).template.spec.containers[0].env as { name: string; value?: string }[];
    return Object.fromEntries(env.filter((entry) => entry.name.startsWith('OPFN_')).map((entry) => [entry.name, entry.value]));
  };

  test("the generated Service carries the install's namespace, Broker and scope", () => {
    assert.deepEqual(envOf(manifestFiles({ target: 'knative' }, functions)), {
      OPFN_DELIVERY_BUDGET_SECONDS: '30',
      OPFN_NAMESPACE: 'operator-functions',
      OPFN_BROKER: 'operator-functions',
      OPFN_SCOPE: 'cluster',
    });
    assert.deepEqual(envOf(manifestFiles({ target: 'knative', namespace: 'team-a' }, functions)), {
      OPFN_DELIVERY_BUDGET_SECONDS: '30',
      OPFN_NAMESPACE: 'team-a',
      OPFN_BROKER: 'operator-functions',
      OPFN_SCOPE: 'namespace',
    });
  });
});

describe('the narrow rules', () => {
  const controllers = readCompositeControllers(seedText, 'seed');

  test("cluster scope: the function holds the parent, its status and finalizers, the children, Events, and the event sources' cluster objects by name", () => {
    const { functionRules, namespaceRules } = compositeRules(controllers, manifestOptions({ target: 'knative' }, functions));
    const lines = (rules: typeof functionRules) =>
      rules.map(
        (rule) =>
          `${rule.apiGroups[0] || 'core'}/${rule.resources[0]} ${rule.verbs.join(',')}${rule.resourceNames ? ` [${rule.resourceNames.join(',')}]` : ''}`,
      );
    assert.deepEqual(lines(functionRules), [
      'core/events create,patch',
      'core/pods get,list,watch,create,update,patch,delete',
      'immortalcontainers.flugel.it/immortalcontainers get,list,watch,update,patch',
      'immortalcontainers.flugel.it/immortalcontainers/finalizers get,update,patch',
      'immortalcontainers.flugel.it/immortalcontainers/status get,update,patch',
      'rbac.authorization.k8s.io/clusterrolebindings create',
      'rbac.authorization.k8s.io/clusterrolebindings get,update,delete [opfn-cc-immortalcontainer-controller]',
      'rbac.authorization.k8s.io/clusterroles create',
      'rbac.authorization.k8s.io/clusterroles get,update,delete [opfn-cc-immortalcontainer-controller]',
    ]);
    assert.deepEqual(lines(namespaceRules), [
      'core/serviceaccounts create',
      'core/serviceaccounts get,update,delete [opfn-cc-immortalcontainer-controller]',
      'sources.knative.dev/apiserversources create',
      'sources.knative.dev/apiserversources get,update,delete [opfn-cc-immortalcontainer-controller-children,opfn-cc-immortalcontainer-controller-parents]',
    ]);
  });

  test("namespace scope: everything in the function's own rules (its Role), no ClusterRole rights for namespaced kinds", () => {
    const { functionRules, namespaceRules } = compositeRules(
      controllers,
      manifestOptions({ target: 'knative', namespace: 'team-a' }, functions),
    );
    assert.deepEqual(namespaceRules, []);
    assert.ok(
      functionRules.some((rule) => rule.resources[0] === 'roles' && rule.resourceNames?.includes('opfn-cc-immortalcontainer-controller')),
    );
    assert.ok(!functionRules.some((rule) => rule.resources[0]!.startsWith('clusterrole')));
  });

  test("opfn manifests --composite: no `*` left, the install namespace's Role bound to the function, other functions unchanged", () => {
    const broad = manifestFiles({ target: 'knative', compositeBroad: true }, functions);
    const narrow = manifestFiles({ target: 'knative', composite: SEED }, functions);
    for (const name of Object.keys(broad).filter((file) => file !== 'composite.yaml')) assert.equal(narrow[name], broad[name], name);
    const objects = objectsOf(narrow['composite.yaml']!);
    const clusterRole = objects.find((object) => object.kind === 'ClusterRole' && object.metadata.name === 'opfn-composite')!;
    assert.ok(
      !(clusterRole.rules as { apiGroups: string[]; resources: string[] }[]).some(
        (rule) => rule.apiGroups.includes('*') || rule.resources.includes('*'),
      ),
    );
    assert.ok(
      (
        objectsOf(broad['composite.yaml']!).find((object) => object.kind === 'ClusterRole' && object.metadata.name === 'opfn-composite')!
          .rules as { resources: string[] }[]
      ).some((rule) => rule.resources.includes('*')),
      '--composite-broad is broad',
    );
    const binding = objects.find((object) => object.kind === 'RoleBinding' && object.metadata.name === EVENTING_ROLE)!;
    assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: 'opfn-composite', namespace: 'operator-functions' }]);
    assert.ok(objects.some((object) => object.kind === 'Role' && object.metadata.name === EVENTING_ROLE));
  });

  test("by default (no file, no --composite-broad) the composite function holds only its runtime's rights, and `opfn manifests` says so", () => {
    const files = manifestFiles({ target: 'knative' }, functions);
    const clusterRole = objectsOf(files['composite.yaml']!).find(
      (object) => object.kind === 'ClusterRole' && object.metadata.name === 'opfn-composite',
    )!;
    assert.deepEqual(clusterRole.rules, [
      { apiGroups: [''], resources: ['events'], verbs: ['create', 'patch'] },
      { apiGroups: ['metacontroller.k8s.io'], resources: ['compositecontrollers'], verbs: ['get', 'list'] },
    ]);
    assert.ok(!objectsOf(files['composite.yaml']!).some((object) => object.kind === 'Role'), 'no controller, no event-source Role');
    const broad = manifestFiles({ target: 'knative', compositeBroad: true }, functions);
    for (const name of Object.keys(files).filter((file) => file !== 'composite.yaml')) assert.equal(files[name], broad[name], name);
    const notes: string[] = [];
    runManifests({ target: 'knative' }, functions, (text) => void notes.push(text));
    assert.ok(
      notes.some((text) =>
        text.startsWith('# note: composite: no --composite file, so the composite function may serve no CompositeController'),
      ),
      notes.join(''),
    );
    notes.length = 0;
    runManifests({ target: 'knative', compositeBroad: true }, functions, (text) => void notes.push(text));
    assert.ok(!notes.some((text) => text.includes('--composite file')));
    assert.throws(
      () => manifestFiles({ target: 'knative', composite: SEED, compositeBroad: true }, functions),
      /--composite and --composite-broad exclude each other/,
    );
  });

  test('--composite is refused for OpenFaaS and for a file that cannot be read, with one line', () => {
    assert.throws(() => manifestFiles({ target: 'openfaas', composite: SEED }, functions), /--composite applies to --target knative/);
    assert.throws(
      () => manifestFiles({ target: 'knative', composite: '/nonexistent.yaml' }, functions),
      /--composite \/nonexistent\.yaml: cannot read it \(ENOENT\)/,
    );
  });
});
