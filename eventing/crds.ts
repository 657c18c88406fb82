// Installs the project's CustomResourceDefinitions (crds/*.yaml) and waits until the API server
// serves them, so the functions and their sources can start right after.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { type KubeObject, type ResourceKind, isAlreadyExists, type KubeClient } from '../functions/runtime/index.ts';

export const CRD_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', 'crds');

export const CustomResourceDefinition: ResourceKind = {
  group: 'apiextensions.k8s.io',
  version: 'v1',
  kind: 'CustomResourceDefinition',
  plural: 'customresourcedefinitions',
  namespaced: false,
};

/** Every object in a YAML file (documents separated by `---`). */
export function readManifestFile(path: string): KubeObject[] {
  return parseAllDocuments(readFileSync(path, 'utf8'))
    .map((document) => document.toJS() as KubeObject)
    .filter((object) => object && object.kind);
}

/** Every object of every YAML file in `dir` (not recursive: crds/examples holds samples). */
export function readManifests(dir: string): KubeObject[] {
  return readdirSync(dir)
    .filter((file) => /\.ya?ml$/.test(file))
    .sort()
    .flatMap((file) => readManifestFile(join(dir, file)));
}

/** Creates or updates each CRD, then waits for every one to be Established. */
export async function applyCrds(kube: KubeClient, crds: KubeObject[] = readManifests(CRD_DIR), timeoutMs = 30_000): Promise<void> {
  for (const crd of crds) {
    try {
      await kube.create(CustomResourceDefinition, crd);
    } catch (error) {
      if (!isAlreadyExists(error)) throw error;
      const existing = await kube.get(CustomResourceDefinition, { namespace: '', name: crd.metadata.name! });
      await kube.replace(CustomResourceDefinition, {
        ...crd,
        metadata: { ...crd.metadata, resourceVersion: existing?.metadata.resourceVersion },
      });
    }
  }
  const deadline = Date.now() + timeoutMs;
  for (const crd of crds) {
    for (;;) {
      const current = await kube.get<KubeObject & { status?: { conditions?: { type: string; status: string }[] } }>(
        CustomResourceDefinition,
        { namespace: '', name: crd.metadata.name! },
      );
      if (current?.status?.conditions?.some((condition) => condition.type === 'Established' && condition.status === 'True')) break;
      if (Date.now() > deadline) throw new Error(`CRD ${crd.metadata.name} not Established after ${timeoutMs / 1000}s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}
