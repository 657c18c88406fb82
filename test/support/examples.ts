// The seeds' sample objects from crds/examples/, applied unchanged by the walkthrough tests, and
// the kinds the CompositeController tests and benchmark share.
import { join } from 'node:path';
import { CRD_DIR, readManifests } from '../../eventing/crds.ts';
import type { ImmortalContainer } from '../../functions/immortal-container/desired.ts';
import type { KubeObject, ResourceKind } from '../../functions/runtime/index.ts';

/** The Metacontroller variant of ImmortalContainer (group immortalcontainers.flugel.it): the seed CompositeController's parents. */
export const MetaImmortalContainer: ResourceKind = {
  group: 'immortalcontainers.flugel.it',
  version: 'v1alpha1',
  kind: 'ImmortalContainer',
  plural: 'immortalcontainers',
  namespaced: true,
};

/** The hook URL the seed's CompositeController manifest names (a Service inside a cluster), mapped to loopback with COMPOSITE_HOOK_URLS. */
export const SEED_HOOK_URL = 'http://immortalcontainer-controller.metacontroller/';

/** The seed's Metacontroller CompositeController, or its ImmortalContainer, from crds/examples/immortalcontainer-metacontroller.yaml. */
export function metacontrollerExample(kind: 'CompositeController' | 'ImmortalContainer'): KubeObject {
  const example = readManifests(join(CRD_DIR, 'examples')).find(
    (object) => object.kind === kind && (kind === 'CompositeController' || object.apiVersion === 'immortalcontainers.flugel.it/v1alpha1'),
  );
  if (!example) throw new Error(`crds/examples/ has no Metacontroller ${kind}`);
  return example;
}

/** A CRD serving `kind` (any fields, a status subresource): a kind a test applies while the function or plane runs. */
export function crdFor(kind: ResourceKind): KubeObject {
  const singular = kind.kind.toLowerCase();
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${kind.plural}.${kind.group}` },
    spec: {
      group: kind.group,
      scope: kind.namespaced ? 'Namespaced' : 'Cluster',
      names: { kind: kind.kind, listKind: `${kind.kind}List`, plural: kind.plural, singular },
      versions: [
        {
          name: kind.version,
          served: true,
          storage: true,
          subresources: { status: {} },
          schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
        },
      ],
    },
  };
}

export function exampleImmortalContainer(): ImmortalContainer {
  const example = readManifests(join(CRD_DIR, 'examples')).find(
    (object) => object.kind === 'ImmortalContainer' && object.apiVersion === 'immortalcontainer.flugel.it/v1alpha1',
  );
  if (!example) throw new Error('crds/examples/ has no immortalcontainer.flugel.it ImmortalContainer');
  return example as ImmortalContainer;
}
