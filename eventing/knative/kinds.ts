// The kinds `opfn manifests` generates, addressable without discovery (as functions/runtime/
// kinds.ts does for the functions' own kinds): the Knative kinds the local plane watches and the
// tests dry-run, and the built-in kinds of a deployment's identities.
import { Namespace, type KubeObject, type ResourceKind } from '../../functions/runtime/index.ts';

const kind = (group: string, version: string, name: string, plural: string, namespaced = true): ResourceKind => ({
  group,
  version,
  kind: name,
  plural,
  namespaced,
});

export const KnativeService = kind('serving.knative.dev', 'v1', 'Service', 'services');
export const Trigger = kind('eventing.knative.dev', 'v1', 'Trigger', 'triggers');
export const Broker = kind('eventing.knative.dev', 'v1', 'Broker', 'brokers');
export const PingSource = kind('sources.knative.dev', 'v1', 'PingSource', 'pingsources');
export const ApiServerSource = kind('sources.knative.dev', 'v1', 'ApiServerSource', 'apiserversources');
export const EventPolicy = kind('eventing.knative.dev', 'v1alpha1', 'EventPolicy', 'eventpolicies');

const BUILT_IN: ResourceKind[] = [
  Namespace,
  kind('', 'v1', 'ServiceAccount', 'serviceaccounts'),
  kind('rbac.authorization.k8s.io', 'v1', 'ClusterRole', 'clusterroles', false),
  kind('rbac.authorization.k8s.io', 'v1', 'ClusterRoleBinding', 'clusterrolebindings', false),
  kind('rbac.authorization.k8s.io', 'v1', 'Role', 'roles'),
  kind('rbac.authorization.k8s.io', 'v1', 'RoleBinding', 'rolebindings'),
  kind('apiextensions.k8s.io', 'v1', 'CustomResourceDefinition', 'customresourcedefinitions', false),
  kind('admissionregistration.k8s.io', 'v1', 'ValidatingAdmissionPolicy', 'validatingadmissionpolicies', false),
  kind('admissionregistration.k8s.io', 'v1', 'ValidatingAdmissionPolicyBinding', 'validatingadmissionpolicybindings', false),
];

const ALL = [...BUILT_IN, KnativeService, Trigger, Broker, PingSource, ApiServerSource, EventPolicy];

/** The ResourceKind of a generated object (by apiVersion and kind). */
export function resourceKindOf(object: KubeObject): ResourceKind {
  const found = ALL.find((k) => (k.group ? `${k.group}/${k.version}` : k.version) === object.apiVersion && k.kind === object.kind);
  if (!found) throw new Error(`${object.apiVersion} ${object.kind} is not a kind opfn manifests generates`);
  return found;
}
