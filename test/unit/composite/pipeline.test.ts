// The pure modules composed the way the shell will compose them (briefs/composite-next.md, "One
// sync of one parent key"), run against an in-memory stand-in for the API server. This checks
// that the pieces fit together. The real control plane is the next session's integration test.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { planClaim } from '../../../functions/composite/claim.ts';
import { buildHookRequest } from '../../../functions/composite/hook-request.ts';
import { sync } from '../../../functions/composite/immortal-container-hook.ts';
import { updateStrategies, type ChildOperation } from '../../../functions/composite/manage-children.ts';
import { childSelector } from '../../../functions/composite/selector.ts';
import { planSync } from '../../../functions/composite/sync-plan.ts';
import type { ChildUpdateMethod, CompositeController, CompositeHookResponse, ResolvedResource } from '../../../functions/composite/types.ts';
import type { KubeObject } from '../../../functions/runtime/kinds.ts';

const pods: ResolvedResource = { apiVersion: 'v1', resource: 'pods', kind: 'Pod', namespaced: true };
const PARENT_API_VERSION = 'immortalcontainers.flugel.it/v1alpha1';

const controllerWith = (method: ChildUpdateMethod): CompositeController => ({
  apiVersion: 'metacontroller.k8s.io/v1alpha1',
  kind: 'CompositeController',
  metadata: { name: 'immortalcontainer-controller' },
  spec: {
    parentResource: { apiVersion: PARENT_API_VERSION, resource: 'immortalcontainers' },
    childResources: [{ apiVersion: 'v1', resource: 'pods', updateStrategy: { method } }],
    generateSelector: true,
    hooks: { sync: { webhook: { url: 'http://immortalcontainer-controller.metacontroller/sync' } } },
  },
});

/** Just enough of an API server: uids, resourceVersions, a defaulted field, status kept apart. */
class Pods {
  readonly objects = new Map<string, KubeObject>();
  #next = 1;
  log: string[] = [];

  list(): KubeObject[] {
    return [...this.objects.values()].map((object) => structuredClone(object));
  }

  put(object: KubeObject): void {
    this.objects.set(object.metadata.name!, object);
  }

  carryOut(operation: ChildOperation): void {
    this.log.push(`${operation.action}${'observed' in operation ? ` ${operation.observed.metadata.name}` : ''}`);
    switch (operation.action) {
      case 'create': {
        const spec = operation.object.spec as { containers: Record<string, unknown>[] };
        this.put({
          ...structuredClone(operation.object),
          metadata: { ...structuredClone(operation.object.metadata), uid: `pod-uid-${this.#next++}`, resourceVersion: String(this.#next) },
          spec: { ...spec, containers: spec.containers.map((container) => ({ ...container, imagePullPolicy: 'Always' })) },
          status: { phase: 'Pending' },
        });
        return;
      }
      case 'update': {
        const current = this.objects.get(operation.object.metadata.name!)!;
        assert.equal(operation.object.metadata.resourceVersion, current.metadata.resourceVersion, 'updates carry the observed resourceVersion');
        this.put({ ...structuredClone(operation.object), metadata: { ...operation.object.metadata, resourceVersion: String(this.#next++) }, status: current.status });
        return;
      }
      case 'delete':
      case 'recreate':
        this.objects.delete(operation.observed.metadata.name!);
        return;
      case 'unchanged':
        return;
      case 'error':
        throw new Error(operation.reason);
    }
  }
}

interface World {
  controller: CompositeController;
  parent: KubeObject & { status?: Record<string, unknown> };
  pods: Pods;
}

/** One sync of the parent, as the shell will run it (minus finalizer, customize and HTTP). */
function syncOnce(world: World, hook: (request: ReturnType<typeof buildHookRequest>) => Pick<CompositeHookResponse, 'status' | 'children'> = sync): void {
  const { controller, parent } = world;
  const selector = childSelector(controller.spec, parent);
  assert.ok(selector.ok);
  const claim = planClaim({ parent, parentApiVersion: PARENT_API_VERSION, parentKind: 'ImmortalContainer', parentNamespaced: true, selector: selector.selector, candidates: world.pods.list() });
  for (const action of [...claim.release, ...claim.adopt]) {
    world.pods.log.push(`${action.action} ${action.child.metadata.name}`);
    world.pods.put({ ...action.child, metadata: { ...action.child.metadata, ownerReferences: action.ownerReferences } });
  }
  const observed = [...claim.claimed, ...claim.adopt.map((action) => world.pods.objects.get(action.child.metadata.name!)!)];
  const request = buildHookRequest({ controller, parent, version: 'v1', childRules: [pods], children: observed, finalizing: false });
  const answer = hook(JSON.parse(JSON.stringify(request)));
  const plan = planSync({
    controller,
    parent,
    parentApiVersion: PARENT_API_VERSION,
    parentKind: 'ImmortalContainer',
    childRules: [pods],
    strategies: updateStrategies([pods], controller.spec.childResources!.map((rule) => rule.updateStrategy?.method)),
    selector: selector.selector,
    observed,
    response: { status: answer.status ?? null, children: answer.children ?? [], resyncAfterSeconds: 0, finalized: false },
  });
  assert.ok(plan.outcome.ok, plan.outcome.ok ? '' : plan.outcome.reason);
  for (const operation of plan.outcome.value.children) world.pods.carryOut(operation);
  if (plan.outcome.value.status.changed) world.parent = { ...parent, status: plan.outcome.value.status.status };
}

const world = (method: ChildUpdateMethod = 'Recreate', image = 'nginx:1'): World => ({
  controller: controllerWith(method),
  parent: { apiVersion: PARENT_API_VERSION, kind: 'ImmortalContainer', metadata: { name: 'web', namespace: 'prod', uid: 'ic-uid', generation: 1 }, spec: { image } },
  pods: new Pods(),
});
const thePod = (w: World) => w.pods.objects.get('web-immortalpod')!;
const imageOf = (pod: KubeObject) => (pod.spec as { containers: { image: string }[] }).containers[0]!.image;

describe('CompositeController pipeline (pure modules, in-memory API server)', () => {
  test('first sync creates the pod with controller-uid, ownerReference and last-applied; it then stays put', () => {
    const w = world();
    syncOnce(w);
    const pod = thePod(w);
    assert.equal(pod.metadata.labels!['controller-uid'], 'ic-uid');
    assert.deepEqual(pod.metadata.ownerReferences, [{ apiVersion: PARENT_API_VERSION, kind: 'ImmortalContainer', name: 'web', uid: 'ic-uid', controller: true, blockOwnerDeletion: true }]);
    assert.ok(pod.metadata.annotations!['metacontroller.k8s.io/last-applied-configuration']);
    assert.deepEqual(w.parent.status, { currentPod: '', observedGeneration: 1 });
    syncOnce(w);
    syncOnce(w);
    assert.deepEqual(w.pods.log, ['create', 'unchanged web-immortalpod', 'unchanged web-immortalpod']);
    assert.deepEqual(w.parent.status, { currentPod: 'web-immortalpod', observedGeneration: 1 });
  });

  test('a pod that exited 0 is deleted, then recreated with a new uid', () => {
    const w = world();
    syncOnce(w);
    const firstUid = thePod(w).metadata.uid;
    (thePod(w) as { status?: unknown }).status = { phase: 'Succeeded' };
    syncOnce(w);
    assert.equal(w.pods.objects.size, 0);
    syncOnce(w);
    assert.notEqual(thePod(w).metadata.uid, firstUid);
    assert.deepEqual(w.pods.log, ['create', 'delete web-immortalpod', 'create']);
  });

  test("the seed's hook (finished pods kept as desired) never replaces a Succeeded pod", () => {
    const seedHook = (request: ReturnType<typeof buildHookRequest>) => {
      const response = sync({ parent: request.parent, children: {} });
      return { status: { currentPod: Object.keys(request.children['Pod.v1'] ?? {})[0] ?? '' }, children: response.children };
    };
    const w = world();
    syncOnce(w, seedHook);
    (thePod(w) as { status?: unknown }).status = { phase: 'Succeeded' };
    for (let i = 0; i < 3; i++) syncOnce(w, seedHook);
    assert.equal((thePod(w) as { status?: { phase?: string } }).status?.phase, 'Succeeded');
    assert.deepEqual(w.pods.log, ['create', 'unchanged web-immortalpod', 'unchanged web-immortalpod', 'unchanged web-immortalpod']);
  });

  test('Recreate: a spec change recreates; a field added by someone else does not', () => {
    const w = world('Recreate');
    syncOnce(w);
    thePod(w).metadata.labels = { ...thePod(w).metadata.labels, 'added-by': 'someone' };
    thePod(w).metadata.annotations = { ...thePod(w).metadata.annotations, note: 'hi' };
    syncOnce(w);
    assert.deepEqual(w.pods.log, ['create', 'unchanged web-immortalpod']);
    w.parent = { ...w.parent, spec: { image: 'nginx:2' } };
    syncOnce(w);
    syncOnce(w);
    assert.equal(imageOf(thePod(w)), 'nginx:2');
    assert.deepEqual(w.pods.log, ['create', 'unchanged web-immortalpod', 'recreate web-immortalpod', 'create']);
  });

  test('InPlace: a spec change updates in place and the field added by someone else survives', () => {
    const w = world('InPlace');
    syncOnce(w);
    thePod(w).metadata.labels = { ...thePod(w).metadata.labels, 'added-by': 'someone' };
    w.parent = { ...w.parent, spec: { image: 'nginx:2' } };
    syncOnce(w);
    const pod = thePod(w);
    assert.equal(imageOf(pod), 'nginx:2');
    assert.equal(pod.metadata.labels!['added-by'], 'someone');
    assert.equal((pod.spec as { containers: Record<string, unknown>[] }).containers[0]!.imagePullPolicy, 'Always');
    assert.deepEqual(w.pods.log, ['create', 'update web-immortalpod']);
  });

  test('OnDelete: never updates until the child is deleted, then creates it from the new spec', () => {
    const w = world('OnDelete');
    syncOnce(w);
    w.parent = { ...w.parent, spec: { image: 'nginx:2' } };
    syncOnce(w);
    syncOnce(w);
    assert.equal(imageOf(thePod(w)), 'nginx:1');
    w.pods.objects.clear();
    syncOnce(w);
    assert.equal(imageOf(thePod(w)), 'nginx:2');
  });

  test('a matching orphan is adopted instead of replaced; a child that stops matching is released and replaced', () => {
    const w = world('InPlace');
    w.pods.put({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'web-immortalpod', namespace: 'prod', uid: 'orphan-uid', labels: { 'controller-uid': 'ic-uid' } }, spec: { restartPolicy: 'OnFailure', containers: [{ name: 'acontainer', image: 'nginx:1' }] } });
    syncOnce(w);
    assert.equal(thePod(w).metadata.uid, 'orphan-uid');
    assert.equal(thePod(w).metadata.ownerReferences![0]!.uid, 'ic-uid');
    // Someone relabels the pod: it is released (no longer ours), and ours is created again
    // (here under the same name, which the real API server would refuse as AlreadyExists).
    thePod(w).metadata.labels = { 'controller-uid': 'someone-else' };
    syncOnce(w);
    assert.deepEqual(w.pods.log.slice(0, 3), ['adopt web-immortalpod', 'update web-immortalpod', 'release web-immortalpod']);
  });
});
