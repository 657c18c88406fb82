// `opfn manifests --event-policy`: per function an EventPolicy (eventing.knative.dev/v1alpha1,
// Knative 1.23: knative.dev/eventing pkg/apis/eventing/v1alpha1/eventpolicy_types.go) naming who
// may send to the Broker on its behalf.
//
// What it protects: the Broker's ingress is the one door every event comes through, and without
// authentication anyone who reaches it can post a forged resync ping (a full list and reconcile of
// a kind) or a forged change event. With Knative's `authentication-oidc` feature enabled, the
// ingress verifies each request's OIDC token and accepts it only when an EventPolicy whose `to`
// names the Broker lists the sender (pkg/broker/ingress/ingress_handler.go: VerifyRequest with the
// Broker's status.policies); policies are OR-ed, so each function's own is enough for its senders:
//
//   its ApiServerSources and PingSources   each has its own OIDC identity (status.auth)
//   its Trigger                            a reply re-enters the ingress under the Trigger's identity
//   the composite function only: `system:serviceaccount:<ns>:opfn-cc-*`, the identities of the
//   ApiServerSources it makes per CompositeController at run time (Knative names them
//   `<source>-oidc-sources.knative.dev-apiserversource`, eventing pkg/auth/serviceaccount.go)
//
// What it does not protect: the functions' own Services (Knative Serving verifies no tokens; keep
// them cluster-local, as generated), nor against a sender holding one of those identities (whoever
// may create tokens for ServiceAccounts in the install namespace). Without the feature, Knative's
// webhook refuses every EventPolicy ("oidc-authentication feature not enabled").
import { type FunctionDeclaration, type KubeObject } from '../../functions/runtime/index.ts';
import { EVENTING_API, labels, type ManifestOptions } from './options.ts';

const EVENT_POLICY_API = 'eventing.knative.dev/v1alpha1';
/** What a cluster needs before it takes EventPolicies. */
export const EVENT_POLICY_FEATURE_NOTE =
  'an EventPolicy takes effect, and Knative\'s webhook accepts one, only with the authentication-oidc feature enabled (kubectl -n knative-eventing patch configmap config-features --type merge -p \'{"data":{"authentication-oidc":"enabled"}}\'), which needs the API server\'s ServiceAccount issuer discovery reachable by Knative';

/** The generated objects whose identity may send for the function: its sources and its Trigger. */
const SENDER_KINDS = new Set(['ApiServerSource', 'PingSource', 'Trigger']);

/** The OIDC subjects of the ApiServerSources a function derives at run time (the composite function's, per CompositeController): one glob (`*` only as a suffix). */
const derivedSourcesSubject = (namespace: string, identityPrefix: string): string =>
  `system:serviceaccount:${namespace}:${identityPrefix}*`;

/** The function's EventPolicy, from its generated objects (`objects`: what functionObjects gave). */
export function eventPolicy(declaration: FunctionDeclaration, objects: KubeObject[], options: ManifestOptions): KubeObject {
  const senders = objects.filter((object) => SENDER_KINDS.has(object.kind ?? '') && object.metadata.namespace === options.namespace);
  const from: Record<string, unknown>[] = senders.map((object) => ({
    ref: { apiVersion: object.apiVersion, kind: object.kind, name: object.metadata.name },
  }));
  if (declaration.derivedSources) from.push({ sub: derivedSourcesSubject(options.namespace, declaration.derivedSources.identityPrefix) });
  return {
    apiVersion: EVENT_POLICY_API,
    kind: 'EventPolicy',
    metadata: { name: `${declaration.name}-senders`, namespace: options.namespace, labels: labels('event-policy', declaration) },
    spec: { to: [{ ref: { apiVersion: EVENTING_API, kind: 'Broker', name: options.brokerName } }], from },
  };
}

/** Each function's file with its EventPolicy appended (files named `<function>.yaml`, as generateManifests names them). */
export function withEventPolicies<F extends { name: string; objects: KubeObject[] }>(
  files: F[],
  declarations: FunctionDeclaration[],
  options: ManifestOptions,
): F[] {
  return files.map((file) => {
    const declaration = declarations.find((candidate) => `${candidate.name}.yaml` === file.name);
    return declaration ? { ...file, objects: [...file.objects, eventPolicy(declaration, file.objects, options)] } : file;
  });
}
