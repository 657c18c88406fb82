// What a function's own integration test needs, from one import (the tests `opfn new` writes use
// it): a real control plane, the function served as its own ServiceAccount with exactly the RBAC
// its declaration generates, CRDs from files, and events as an ApiServerSource sends them.
export { deliver, eventually, serveFunction, startTestCluster, type RunningFunction, type TestCluster } from './cluster.ts';
export { kubeconfigWithDeclaredRbac } from './rbac.ts';
export { applyCrds, readManifestFile } from '../../eventing/crds.ts';
export { apiServerSourceEvent, type ChangeAction, type SourceMode } from '../../eventing/apiserver-events.ts';
