// The cluster's YAML: everything `kubectl apply -k` needs to run the functions on Knative,
// generated from their declarations (generate.ts), checked (validate.ts), and the building
// blocks the local plane runs the same objects from.
export {
  crdsFor,
  functionObjects,
  generateManifests,
  installable,
  kustomization,
  renderManifests,
  toYaml,
  type ManifestFile,
} from './generate.ts';
export { admissionObjects, admissionPolicyName } from './admission-policy.ts';
export { broker, deadLetterSink, namespaceObject } from './broker.ts';
export { BROAD, NARROW_NOTHING_GIVEN, parseObjects, readGivenFile, withInstallRights, type InstallRights } from './install-rights.ts';
export { EVENT_POLICY_FEATURE_NOTE, withEventPolicies } from './event-policy.ts';
export { openfaasStack } from './openfaas.ts';
export { DEAD_LETTER_SERVICE, DEFAULT_OPTIONS, KAFKA_BROKER_CLASS, sourceServiceAccountName, type ManifestOptions } from './options.ts';
export { pingSources } from './ping-source.ts';
export {
  clusterScopedResources,
  functionIdentity,
  functionRules,
  rbacObjects,
  serviceAccountName,
  sourceRules,
  splitByScope,
} from './rbac.ts';
export { AUTOSCALING, knativeService, READINESS_PATH } from './service.ts';
export { formatLabelSelector, parseLabelSelector } from './sources.ts';
export { declaredKindProblems, validateManifests, type KindProblems } from './validate.ts';
export { FUNCTION_EXTENSION, kindsOf, renamedKinds, sourcesFor, unwatchedKinds } from './wiring.ts';
