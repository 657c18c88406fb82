// Metacontroller's CompositeController (crds/compositecontroller.yaml): cluster-scoped.
import type { ResourceKind } from '../runtime/index.ts';

export const CompositeControllerKind: ResourceKind = {
  group: 'metacontroller.k8s.io',
  version: 'v1alpha1',
  kind: 'CompositeController',
  plural: 'compositecontrollers',
  namespaced: false,
};
