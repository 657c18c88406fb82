// The event sources the composite function manages per CompositeController (eventingObjectsFor):
// identities with exactly get/list/watch on the controller's kinds, the ApiServerSources tagged
// for the composite Trigger, ownership by the controller, names valid for any controller name;
// and the pure parts of ensureEventing (deepDerivative, inPlace, repaired) and its configuration.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { deepDerivative, inPlace, repaired } from '../../../functions/composite/ensure-event-sources.ts';
import {
  boundedName,
  CONTROLLER_LABEL,
  eventingObjectsFor,
  eventingOptionsFrom,
  sourceName,
  identityName,
  type EventingOptions,
} from '../../../functions/composite/event-sources.ts';
import {
  ownerLabelValue,
  Pod,
  Secret,
  ConfigMap,
  Namespace,
  type KubeObject,
  type ResourceKind,
  FUNCTION_EXTENSION,
} from '../../../functions/runtime/index.ts';
import { loadAllFunctions } from '../../../functions/index.ts';
import { manifestOptions } from '../../../bin/manifests.ts';
import { generateManifests, validateManifests } from '../../../eventing/manifests/index.ts';

const ImmortalContainer: ResourceKind = {
  group: 'immortalcontainers.flugel.it',
  version: 'v1alpha1',
  kind: 'ImmortalContainer',
  plural: 'immortalcontainers',
  namespaced: true,
};
const ClusterParent: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Tenant', plural: 'tenants', namespaced: false };
const controller: KubeObject = {
  apiVersion: 'metacontroller.k8s.io/v1alpha1',
  kind: 'CompositeController',
  metadata: { name: 'immortalcontainer-controller', uid: 'uid-1' },
};
const cluster: EventingOptions = { namespace: 'operator-functions', brokerName: 'operator-functions', scope: 'cluster' };
const namespaced: EventingOptions = { namespace: 'team-a', brokerName: 'b', scope: 'namespace' };

const byKind = (objects: KubeObject[], kind: string) => objects.filter((object) => object.kind === kind);
const spec = (object: KubeObject) => object.spec as Record<string, any>;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

describe('eventingObjectsFor, cluster scope', () => {
  const objects = eventingObjectsFor(controller, { parent: ImmortalContainer, children: [Pod] }, cluster);

  test('a ServiceAccount, a ClusterRole and its binding, then the two sources, in apply order', () => {
    assert.deepEqual(
      objects.map((object) => `${object.kind} ${object.metadata.namespace ?? ''}/${object.metadata.name}`),
      [
        'ServiceAccount operator-functions/opfn-cc-immortalcontainer-controller',
        'ClusterRole /opfn-cc-immortalcontainer-controller',
        'ClusterRoleBinding /opfn-cc-immortalcontainer-controller',
        'ApiServerSource operator-functions/opfn-cc-immortalcontainer-controller-parents',
        'ApiServerSource operator-functions/opfn-cc-immortalcontainer-controller-children',
      ],
    );
  });

  test('the role allows get, list and watch on exactly the parent and child resources', () => {
    assert.deepEqual(byKind(objects, 'ClusterRole')[0]!.rules, [
      { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: ['immortalcontainers.flugel.it'], resources: ['immortalcontainers'], verbs: ['get', 'list', 'watch'] },
    ]);
    const binding = byKind(objects, 'ClusterRoleBinding')[0]!;
    assert.deepEqual(binding.roleRef, {
      apiGroup: 'rbac.authorization.k8s.io',
      kind: 'ClusterRole',
      name: 'opfn-cc-immortalcontainer-controller',
    });
    assert.deepEqual(binding.subjects, [
      { kind: 'ServiceAccount', name: 'opfn-cc-immortalcontainer-controller', namespace: 'operator-functions' },
    ]);
  });

  test('sources: parents in Resource mode, children in Resource mode, every namespace, tagged for the composite Trigger, sent to the Broker', () => {
    const [parents, children] = byKind(objects, 'ApiServerSource') as [KubeObject, KubeObject];
    assert.equal(parents.apiVersion, 'sources.knative.dev/v1');
    assert.deepEqual(spec(parents), {
      mode: 'Resource',
      resources: [{ apiVersion: 'immortalcontainers.flugel.it/v1alpha1', kind: 'ImmortalContainer' }],
      namespaceSelector: {},
      serviceAccountName: 'opfn-cc-immortalcontainer-controller',
      ceOverrides: { extensions: { [FUNCTION_EXTENSION]: 'composite', opfncontroller: 'immortalcontainer-controller' } },
      sink: { ref: { apiVersion: 'eventing.knative.dev/v1', kind: 'Broker', name: 'operator-functions' } },
    });
    assert.equal(spec(children).mode, 'Resource');
    assert.deepEqual(spec(children).resources, [{ apiVersion: 'v1', kind: 'Pod' }]);
    assert.equal(spec(children).ceOverrides.extensions[FUNCTION_EXTENSION], 'composite');
  });

  test('sound next to the generated install: passes the checks of opfn manifests (sinks, ServiceAccounts, roles, CloudEvent attribute names)', async () => {
    const functions = await loadAllFunctions();
    const install = generateManifests(functions, manifestOptions({ target: 'knative' }, functions)).flatMap((file) => file.objects);
    assert.deepEqual(validateManifests([...install, ...objects]), []);
    const namespacedInstall = generateManifests(functions, manifestOptions({ target: 'knative', namespace: 'team-a' }, functions)).flatMap(
      (file) => file.objects,
    );
    assert.deepEqual(
      validateManifests([
        ...namespacedInstall,
        ...eventingObjectsFor(
          controller,
          { parent: ImmortalContainer, children: [Pod, Secret] },
          { namespace: 'team-a', brokerName: 'operator-functions', scope: 'namespace' },
        ),
      ]),
      [],
    );
  });

  test('every object is controlled by the CompositeController and labelled with its name', () => {
    for (const object of objects) {
      assert.deepEqual(
        object.metadata.ownerReferences,
        [
          {
            apiVersion: 'metacontroller.k8s.io/v1alpha1',
            kind: 'CompositeController',
            name: 'immortalcontainer-controller',
            uid: 'uid-1',
            controller: true,
          },
        ],
        `${object.kind}`,
      );
      assert.equal(object.metadata.labels?.[CONTROLLER_LABEL], 'immortalcontainer-controller');
      assert.equal(object.metadata.labels?.['operator-functions.dev/function'], 'composite');
    }
  });
});

describe('eventingObjectsFor, variants', () => {
  test('a Secret among the children puts the child source in Reference mode; the parent source stays Resource', () => {
    const objects = eventingObjectsFor(controller, { parent: ImmortalContainer, children: [ConfigMap, Secret] }, cluster);
    const [parents, children] = byKind(objects, 'ApiServerSource') as [KubeObject, KubeObject];
    assert.equal(spec(parents).mode, 'Resource');
    assert.equal(spec(children).mode, 'Reference');
    assert.deepEqual(
      spec(children).resources.map((r: { kind: string }) => r.kind),
      ['ConfigMap', 'Secret'],
    );
    const secretParent = byKind(eventingObjectsFor(controller, { parent: Secret, children: [ConfigMap] }, cluster), 'ApiServerSource') as [
      KubeObject,
      KubeObject,
    ];
    assert.deepEqual(
      secretParent.map((source) => spec(source).mode),
      ['Reference', 'Resource'],
    );
  });

  test('no children: no child source; a child kind listed twice is watched once', () => {
    assert.deepEqual(
      byKind(eventingObjectsFor(controller, { parent: ImmortalContainer, children: [] }, cluster), 'ApiServerSource').map(
        (o) => o.metadata.name,
      ),
      ['opfn-cc-immortalcontainer-controller-parents'],
    );
    const twice = byKind(
      eventingObjectsFor(controller, { parent: ImmortalContainer, children: [Pod, Pod] }, cluster),
      'ApiServerSource',
    )[1]!;
    assert.deepEqual(spec(twice).resources, [{ apiVersion: 'v1', kind: 'Pod' }]);
  });

  test('namespace scope: a Role and RoleBinding in the namespace, sources without namespaceSelector', () => {
    const objects = eventingObjectsFor(controller, { parent: ImmortalContainer, children: [Pod] }, namespaced);
    assert.deepEqual(
      objects.map((object) => object.kind),
      ['ServiceAccount', 'Role', 'RoleBinding', 'ApiServerSource', 'ApiServerSource'],
    );
    assert.ok(objects.every((object) => object.kind === 'ClusterRole' || object.metadata.namespace === 'team-a'));
    for (const source of byKind(objects, 'ApiServerSource')) {
      assert.equal('namespaceSelector' in spec(source), false);
      assert.equal(spec(source).sink.ref.name, 'b');
    }
  });

  test('namespace scope with a cluster-scoped parent: its rule alone goes into a ClusterRole named after the namespace', () => {
    const objects = eventingObjectsFor(controller, { parent: ClusterParent, children: [Pod, Namespace] }, namespaced);
    assert.deepEqual(byKind(objects, 'Role')[0]!.rules, [{ apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] }]);
    const clusterRole = byKind(objects, 'ClusterRole')[0]!;
    assert.equal(clusterRole.metadata.name, 'team-a:opfn-cc-immortalcontainer-controller');
    assert.deepEqual(clusterRole.rules, [
      { apiGroups: [''], resources: ['namespaces'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: ['example.com'], resources: ['tenants'], verbs: ['get', 'list', 'watch'] },
    ]);
    assert.equal(byKind(objects, 'ClusterRoleBinding')[0]!.metadata.name, 'team-a:opfn-cc-immortalcontainer-controller');
  });

  test('a kind whose plural Knative does not guess is named so that it finds it; one no name reaches gets no source (the resync syncs its parents)', () => {
    const Rule: ResourceKind = { group: 'flant.com', version: 'v1', kind: 'CopyratorRule', plural: 'copyrators', namespaced: true };
    const Datum: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Datum', plural: 'data', namespaced: true };
    const objects = eventingObjectsFor(controller, { parent: Rule, children: [Datum, Pod] }, cluster);
    const sources = byKind(objects, 'ApiServerSource');
    assert.deepEqual(
      sources.map((source) => [source.metadata.name!.replace(/^opfn-cc-immortalcontainer-controller-/, ''), spec(source).resources]),
      [
        ['parents', [{ apiVersion: 'flant.com/v1', kind: 'Copyrator' }]],
        ['children', [{ apiVersion: 'v1', kind: 'Pod' }]],
      ],
    );
    const granted = byKind(objects, 'ClusterRole')[0]!.rules as { resources: string[] }[];
    assert.ok(
      granted.some((rule) => rule.resources.includes('copyrators')),
      'the role names the resource the source watches',
    );
  });

  test('a controller without uid cannot own anything: refused, with the reason', () => {
    assert.throws(
      () => eventingObjectsFor({ metadata: { name: 'x' } }, { parent: Pod, children: [] }, cluster),
      /without metadata\.name or metadata\.uid/,
    );
  });
});

describe('names for any controller name', () => {
  const long = `${'a'.repeat(120)}.example.${'b'.repeat(120)}`;

  test('short names stay readable; dotted or long ones are cut and hashed into valid, distinct names', () => {
    assert.equal(sourceName('web', 'parents'), 'opfn-cc-web-parents');
    assert.equal(identityName('web.example.com'), 'opfn-cc-web.example.com');
    const dotted = sourceName('web.example.com', 'children');
    assert.match(dotted, /^opfn-cc-web-example-com-[0-9a-f]{10}-children$/);
    assert.notEqual(sourceName('web.example.com', 'children'), sourceName('web-example.com', 'children'));
    for (const name of [long, `${long}x`, 'x'.repeat(253), 'a.b', `${'c'.repeat(50)}.${'d'.repeat(50)}`]) {
      for (const role of ['parents', 'children'] as const) assert.match(sourceName(name, role), DNS_LABEL, `${role} of ${name}`);
      assert.ok(DNS_SUBDOMAIN.test(identityName(name)) && identityName(name).length <= 253 - 64, identityName(name));
    }
    assert.notEqual(sourceName(long, 'parents'), sourceName(`${long}x`, 'parents'));
    assert.notEqual(identityName('x'.repeat(253)), identityName(`${'x'.repeat(252)}y`));
    assert.equal(boundedName('p-', 'abcdefghij', '-s', 20, true), 'p-abcdefghij-s');
    assert.match(boundedName('p-', 'abcdefghijklmnop', '-s', 18, true), /^p-abc-[0-9a-f]{10}-s$/);
  });

  test('a long controller name: every object valid, the label in its hash form', () => {
    const objects = eventingObjectsFor({ metadata: { name: long, uid: 'u' } }, { parent: Pod, children: [ConfigMap] }, namespaced);
    for (const object of objects) {
      assert.equal(object.metadata.labels?.[CONTROLLER_LABEL], ownerLabelValue(long));
      assert.ok((object.metadata.labels?.[CONTROLLER_LABEL] ?? '').length <= 63);
      if (object.kind === 'ApiServerSource') assert.match(object.metadata.name!, DNS_LABEL);
      else assert.ok(object.metadata.name!.replace(/^team-a:/, '').match(DNS_SUBDOMAIN), object.metadata.name);
    }
  });
});

describe('ensureEventing decisions', () => {
  const [account, role, binding, source] = eventingObjectsFor(
    controller,
    { parent: ImmortalContainer, children: [Pod] },
    cluster,
  ) as KubeObject[] as [KubeObject, KubeObject, KubeObject, KubeObject];
  const stored = (object: KubeObject, extra: Record<string, unknown> = {}): KubeObject => ({
    ...structuredClone(object),
    ...extra,
    metadata: {
      ...structuredClone(object.metadata),
      uid: 'obj',
      resourceVersion: '7',
      labels: { ...object.metadata.labels, 'someone/else': 'x' },
    },
  });

  test('deepDerivative: fields we never set are ignored; what we set must be there; {} matches absent', () => {
    assert.ok(deepDerivative({ a: 1, b: { c: [1, 2] } }, { a: 1, b: { c: [1, 2], d: 3 }, e: 4 }));
    assert.ok(!deepDerivative({ a: 1 }, { a: 2 }));
    assert.ok(!deepDerivative({ b: { c: [1, 2] } }, { b: { c: [1] } }));
    assert.ok(!deepDerivative({ a: 1 }, undefined));
    assert.ok(deepDerivative({ namespaceSelector: {} }, {}));
    assert.ok(!deepDerivative({ namespaceSelector: {} }, { namespaceSelector: { matchLabels: { a: 'b' } } }));
  });

  test("in place: as stored by the API server (defaults and others' labels added)", () => {
    assert.ok(inPlace(account, { ...stored(account), secrets: [{ name: 'token' }] }));
    assert.ok(inPlace(role, stored(role)));
    assert.ok(
      inPlace(
        binding,
        stored(binding, {
          subjects: [
            { kind: 'ServiceAccount', apiGroup: '', name: 'opfn-cc-immortalcontainer-controller', namespace: 'operator-functions' },
          ],
        }),
      ),
    );
    assert.ok(inPlace(source, stored(source, { status: { sinkUri: 'http://broker' } })));
  });

  test('drift: a narrowed rule, a changed spec, a lost label, another controller', () => {
    assert.ok(!inPlace(role, stored(role, { rules: [] })));
    assert.ok(!inPlace(source, stored(source, { spec: { ...spec(source), mode: 'Reference' } })));
    const unlabelled = stored(account);
    delete unlabelled.metadata.labels![CONTROLLER_LABEL];
    assert.ok(!inPlace(account, unlabelled));
    const taken = stored(account);
    taken.metadata.ownerReferences = [{ apiVersion: 'v1', kind: 'X', name: 'x', uid: 'other', controller: true }];
    assert.ok(!inPlace(account, taken));
  });

  test('repaired: ours restored, everything else of the stored object kept', () => {
    const drifted = stored(source, { spec: { ...spec(source), mode: 'Reference', extra: 1 }, status: { s: 1 } });
    drifted.metadata.ownerReferences = [
      { apiVersion: 'v1', kind: 'X', name: 'x', uid: 'other', controller: true },
      { apiVersion: 'v1', kind: 'Y', name: 'y', uid: 'friend' },
    ];
    const fixed = repaired(source, drifted);
    assert.deepEqual(fixed.spec, source.spec);
    assert.deepEqual(fixed.status, { s: 1 });
    assert.equal(fixed.metadata.resourceVersion, '7');
    assert.equal(fixed.metadata.labels?.['someone/else'], 'x');
    assert.deepEqual(
      fixed.metadata.ownerReferences?.map((reference) => reference.uid),
      ['uid-1', 'friend'],
    );
    assert.ok(inPlace(source, fixed));
  });
});

describe('configuration', () => {
  test('namespace, Broker and scope from the install parameters; bad values named', () => {
    assert.deepEqual(eventingOptionsFrom({ OPFN_NAMESPACE: 'ns', OPFN_BROKER: 'b', OPFN_SCOPE: 'namespace' }), {
      namespace: 'ns',
      brokerName: 'b',
      scope: 'namespace',
    });
    assert.match(
      String(eventingOptionsFrom({ OPFN_NAMESPACE: 'Bad_NS', OPFN_BROKER: 'b', OPFN_SCOPE: 'cluster' })),
      /OPFN_NAMESPACE "Bad_NS" is not a namespace name/,
    );
    assert.match(String(eventingOptionsFrom({ OPFN_NAMESPACE: 'ns', OPFN_BROKER: 'b', OPFN_SCOPE: 'world' })), /OPFN_SCOPE "world"/);
  });
});

describe('kinds an ApiServerSource cannot watch', () => {
  test("a parent whose plural is not Knative's guess gets no source (it would never become Ready); its watchable children keep theirs", () => {
    const Person: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Person', plural: 'people', namespaced: true };
    const objects = eventingObjectsFor(controller, { parent: Person, children: [Pod] }, cluster);
    const sources = byKind(objects, 'ApiServerSource');
    assert.deepEqual(
      sources.map((source) => source.metadata.name),
      ['opfn-cc-immortalcontainer-controller-children'],
    );
    assert.deepEqual(spec(sources[0]!).resources, [{ apiVersion: 'v1', kind: 'Pod' }]);
  });
});
