// The Knative objects the local plane runs (Brokers, Services, Triggers, PingSources,
// ApiServerSources), from the API server or from memory: their kinds, their CRDs, the controllers
// that turn each into what runs (controllers.ts), and putting the generated objects into a local
// control plane (local-install.ts).
export { hasLabels, namespacesFrom } from './api-server-sources.ts';
export { derivedSourcesFor, FunctionDerivedSources, inMemoryConfig } from './derived-sources.ts';
export { KnativeControllers } from './controllers.ts';
export {
  installKnativeCrds,
  knativeCrdDir,
  knativeCrds,
  PLANE_CRD_NAMES,
  PROVISION_KNATIVE_SCRIPT,
  provisionKnativeCrds,
  STAND_IN_LABEL,
  standInCrds,
} from './crds.ts';
export { ApiServerSource, Broker, EventPolicy, KnativeService, PingSource, resourceKindOf, Trigger } from './kinds.ts';
export { applyGeneratedObjects, applyObjects } from './local-install.ts';
export { pingEvent, withResyncInterval } from './ping-sources.ts';
export { configurationFromService, functionOf, LOCAL_IMAGE, withConfigFromEnvironment } from './services.ts';
export { ready, StatusBoard, writeStatus } from './status.ts';
