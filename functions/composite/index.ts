// Serves Metacontroller CompositeControllers: one function for every controller. Its keys are
// CompositeControllers (sync every parent) and, through `runtimeKinds`, the parents themselves,
// whose kinds are known only once a controller names them (routing.ts, reconcile.ts,
// sync-parent.ts). The event sources of those kinds are derived per controller
// (event-sources.ts; plane-sources.ts when a local plane runs them), and an install may narrow
// the function's `*` to the controllers it is given (install-rights.ts).
import { defineFunction, INSTALL_CONFIG, INSTALL_DEFAULTS } from '../runtime/index.ts';
import { EVENT_SOURCES_CONFIG } from './event-sources.ts';
import { narrowCompositeRights } from './install-rights.ts';
import { CompositeControllerKind } from './kinds.ts';
import { planeEventSources } from './plane-sources.ts';
import { reconcileComposite } from './reconcile.ts';
import { compositeRuntimeKinds } from './routing.ts';

export default defineFunction({
  name: 'composite',
  description:
    'Serves Metacontroller CompositeControllers: syncs each parent through its sync hook, applies the children and status it answers.',
  reconciles: CompositeControllerKind,
  // Metacontroller's own rights: the parent and child kinds are only known when a
  // CompositeController appears, so the function may manage any kind (as Metacontroller's chart
  // binds a ClusterRole over `*`). Reading discovery documents needs no rule (system:discovery).
  rbac: [{ apiGroups: ['*'], resources: ['*'], verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'] }],
  config: [
    {
      name: 'COMPOSITE_HOOK_URLS',
      description:
        'Hook URL prefixes rewritten before a call, "<prefix>=<replacement>,…" (e.g. a cluster Service name to a loopback port on a local plane); empty on a cluster',
      default: '',
    },
    {
      name: EVENT_SOURCES_CONFIG,
      description:
        '"managed": this function writes the ApiServerSources (and their identities) of each CompositeController, as on Knative; "plane": the local event plane runs them itself (objects held in memory, against a configured cluster)',
      default: 'managed',
    },
    // Where the event sources of each CompositeController go (event-sources.ts); `opfn manifests`
    // sets the install's values.
    {
      name: INSTALL_CONFIG.namespace,
      description: "Namespace of the ApiServerSources and ServiceAccounts made per CompositeController (the install's namespace)",
      default: INSTALL_DEFAULTS.namespace,
    },
    { name: INSTALL_CONFIG.brokerName, description: 'Broker those ApiServerSources send to', default: INSTALL_DEFAULTS.brokerName },
    {
      name: INSTALL_CONFIG.scope,
      description:
        '"cluster" (ClusterRoles, sources watching every namespace) or "namespace" (Roles, sources watching their own namespace)',
      default: INSTALL_DEFAULTS.scope,
    },
  ],
  runtimeKinds: compositeRuntimeKinds,
  derivedSources: planeEventSources,
  narrowRights: narrowCompositeRights,
  reconcile: reconcileComposite,
});

export { CompositeControllerKind } from './kinds.ts';
export { sourceName } from './event-sources.ts';
