// Serves Metacontroller CompositeControllers (issue 10): one function for every controller. Its
// keys are CompositeControllers (sync every parent) and, through `runtimeKinds`, the parents
// themselves, whose kinds are known only once a controller names them (routing.ts,
// reconcile.ts, sync-parent.ts).
import { defineFunction } from '../runtime/declaration.ts';
import { CompositeControllerKind } from './kinds.ts';
import { reconcileComposite } from './reconcile.ts';
import { compositeRuntimeKinds } from './routing.ts';

export default defineFunction({
  name: 'composite',
  description: 'Serves Metacontroller CompositeControllers: syncs each parent through its sync hook, applies the children and status it answers.',
  reconciles: CompositeControllerKind,
  // Metacontroller's own rights: the parent and child kinds are only known when a
  // CompositeController appears, so the function may manage any kind (as Metacontroller's chart
  // binds a ClusterRole over `*`). Reading discovery documents needs no rule (system:discovery).
  rbac: [{ apiGroups: ['*'], resources: ['*'], verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'] }],
  config: [
    {
      name: 'COMPOSITE_HOOK_URLS',
      description: 'Hook URL prefixes rewritten before a call, "<prefix>=<replacement>,…" (e.g. a cluster Service name to a loopback port on a local plane); empty on a cluster',
      default: '',
    },
  ],
  runtimeKinds: compositeRuntimeKinds,
  reconcile: reconcileComposite,
});
