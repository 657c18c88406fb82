// ImmortalContainer: keep one pod `<name>-immortalpod` running forever (seed: flugel-it/k8s-operators).
import { defineFunction, Pod } from '../runtime/index.ts';
import { ImmortalContainerKind, OWNER_LABEL } from './desired.ts';
import { reconcileImmortalContainer } from './reconcile.ts';

export default defineFunction({
  name: 'immortal-container',
  description: 'Keeps one pod per ImmortalContainer running: recreates it when deleted or finished, replaces it when the image changes.',
  reconciles: ImmortalContainerKind,
  // Only this function adds its pods, and the reconcile that added one writes the status: the
  // adds are never news (a third of the plane's deliveries). Updates (a pod finished or
  // failed) and deletes are.
  owns: [{ kind: Pod, ownerNameLabel: OWNER_LABEL, changes: ['update', 'delete'] }],
  // What reconcile itself does; reading ImmortalContainers and pods, Events, and update on
  // immortalcontainers/finalizers (the pods' blockOwnerDeletion) follow from the declaration
  // (functions/runtime/rbac.ts).
  rbac: [
    { apiGroups: ['immortalcontainer.flugel.it'], resources: ['immortalcontainers/status'], verbs: ['update'] },
    { apiGroups: [''], resources: ['pods'], verbs: ['create', 'delete'] },
  ],
  // Acts on spec.image and status only: an update that leaves the generation observed is the
  // status's own change (ours or another instance's) and needs no reconcile.
  readsMetadata: false,
  // Reads each object at its event's version: from a watch while a burst lasts.
  watchDuringBursts: true,
  reconcile: reconcileImmortalContainer,
});
