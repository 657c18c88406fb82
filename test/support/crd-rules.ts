// Objects a CRD's CEL rules (x-kubernetes-validations) now refuse can still exist: stored before
// the rules were added, or on a cluster whose CRD predates them. Functions keep their run-time
// checks for those; these helpers store such an object on a real API server to test them.
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiError, type KubeClient, collectionPath, type KubeObject, type ResourceKind } from '../../functions/runtime/index.ts';

/** A schema with every x-kubernetes-validations rule removed: the CRD as it was before the rules. */
export function withoutRules(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withoutRules);
  if (schema === null || typeof schema !== 'object') return schema;
  return Object.fromEntries(
    Object.entries(schema)
      .filter(([key]) => key !== 'x-kubernetes-validations')
      .map(([key, value]) => [key, withoutRules(value)]),
  );
}

const crdPath = (name: string) => `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`;

/** One change of a CRD's rules at a time in this process: a second would save the first's rule-less schema as the one to restore. */
let changingRules: Promise<unknown> = Promise.resolve();

/**
 * Creates `object` of `kind` (served by the CRD `crdName`) as the API server admitted it before
 * the CRD had its rules: the rules are taken out, the object created, and the rules put back. The
 * API server picks a changed CRD up asynchronously, so both steps wait until it judges by it.
 */
export function createAdmittedBeforeRules(kube: KubeClient, crdName: string, kind: ResourceKind, object: KubeObject): Promise<void> {
  const created = changingRules.then(() => createWithoutRules(kube, crdName, kind, object));
  changingRules = created.catch(() => {});
  return created;
}

async function createWithoutRules(kube: KubeClient, crdName: string, kind: ResourceKind, object: KubeObject): Promise<void> {
  const path = collectionPath(kind, object.metadata.namespace);
  // Under another name, so that once the object exists the probe is still judged, not a conflict.
  const probe = { ...object, metadata: { ...object.metadata, name: `${object.metadata.name}-probe` } };
  const dryRun = () =>
    kube.request('POST', path, { body: probe, query: { dryRun: 'All' } }).then(
      () => 'admitted',
      (error: unknown) => {
        if (error instanceof ApiError && error.code === 422) return 'refused';
        throw error;
      },
    );
  const judgedAs = async (wanted: 'admitted' | 'refused') => {
    const deadline = Date.now() + 30_000;
    while ((await dryRun()) !== wanted) {
      if (Date.now() > deadline)
        throw new Error(`${kind.kind} ${object.metadata.name}: the API server still does not judge it ${wanted} after 30s`);
      await sleep(100);
    }
  };
  const crd = await kube.request<KubeObject & { spec: unknown }>('GET', crdPath(crdName));
  await kube.request('PUT', crdPath(crdName), { body: { ...crd, spec: withoutRules(crd.spec) } });
  try {
    await judgedAs('admitted');
    await kube.request('POST', path, { body: object });
  } finally {
    const current = await kube.request<KubeObject>('GET', crdPath(crdName));
    await kube.request('PUT', crdPath(crdName), { body: { ...current, spec: crd.spec } });
    await judgedAs('refused');
  }
}
