// Puts a deployment's generated objects into the LOCAL control plane (`opfn dev` with a control
// plane it started), so the plane runs exactly what `opfn manifests` would install on a cluster
// and `kubectl get/edit/patch` works on them: Knative's own CRDs (crds.ts), then every generated
// object but the functions' CRDs (eventing/crds.ts installed those), created or replaced.
import { type FunctionDeclaration, type KubeObject, isAlreadyExists, type KubeClient } from '../../functions/runtime/index.ts';
import { BROAD, DEFAULT_OPTIONS, generateManifests, validateManifests } from '../manifests/index.ts';
import { installKnativeCrds } from './crds.ts';
import { withResyncInterval } from './ping-sources.ts';
import { resourceKindOf } from './kinds.ts';
import { withConfigFromEnvironment } from './services.ts';

/** Creates each object, or replaces it when it exists (kubectl apply without the merge): the generated objects win. */
export async function applyObjects(kube: KubeClient, objects: KubeObject[]): Promise<void> {
  for (const object of objects) {
    const kind = resourceKindOf(object);
    try {
      await kube.create(kind, object);
    } catch (error) {
      if (!isAlreadyExists(error)) throw new Error(`${object.kind} ${object.metadata.name}: ${(error as Error).message}`);
      const existing = await kube.get(kind, { namespace: object.metadata.namespace ?? '', name: object.metadata.name! });
      await kube.replace(kind, { ...object, metadata: { ...object.metadata, resourceVersion: existing?.metadata.resourceVersion } });
    }
  }
}

/**
 * Installs Knative's CRDs (where missing) and applies the generated objects of `functions` (with
 * `replace` as `opfn manifests --replace`; declared configuration set in `environment` goes into
 * the Services, withConfigFromEnvironment).
 */
export async function applyGeneratedObjects(
  kube: KubeClient,
  functions: FunctionDeclaration[],
  replace: Record<string, string> = {},
  resyncIntervalMs?: number,
  environment: Record<string, string | undefined> = process.env,
): Promise<{ objects: KubeObject[]; crdsInstalled: number }> {
  const crdsInstalled = await installKnativeCrds(kube);
  // The developer's own plane serves any CompositeController applied while it runs: broad, as
  // `opfn manifests --composite-broad` (the function still refuses privileged children).
  const generated = generateManifests(functions, { ...DEFAULT_OPTIONS, replace }, BROAD)
    .flatMap((file) => file.objects)
    .filter((object) => object.kind !== 'CustomResourceDefinition');
  const objects = withConfigFromEnvironment(withResyncInterval(generated, resyncIntervalMs), functions, environment);
  const problems = validateManifests(objects, new Set(Object.values(replace).filter((target) => !target.includes('://'))));
  if (problems.length) throw new Error(`the generated objects are not sound:\n  ${problems.join('\n  ')}`);
  await applyObjects(kube, objects);
  return { objects, crdsInstalled };
}
