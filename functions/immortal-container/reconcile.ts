// ImmortalContainer reconcile: reads the object and its pod, acts on the difference, writes status.
import type { ReconcileContext } from '../runtime/declaration.ts';
import { Pod, type ObjectKey } from '../runtime/kinds.ts';
import { ApiError } from '../runtime/kube.ts';
import { createIfAbsent, updateStatus, type ConditionInput } from '../runtime/reconciler.ts';
import { desiredPod, ImmortalContainerKind, nextStatus, podAction, podNameFor, type ImmortalContainer, type PodObject } from './desired.ts';

export async function reconcileImmortalContainer(key: ObjectKey, { kube, log, events }: ReconcileContext): Promise<void> {
  const owner = await kube.get<ImmortalContainer>(ImmortalContainerKind, key);
  // Gone, or going: the garbage collector removes the pod through its ownerReference.
  if (!owner || owner.metadata.deletionTimestamp) return;

  const podKey = { namespace: key.namespace, name: podNameFor(owner) };
  let pod = await kube.get<PodObject>(Pod, podKey);
  let problem: ConditionInput | undefined;
  let action = podAction(owner, pod);

  if (action.type === 'replace') {
    // The uid precondition makes sure we delete the pod we judged, not one another replica
    // created a moment ago.
    await kube.delete(Pod, podKey, { uid: pod!.metadata.uid });
    log.info({ reason: action.reason }, action.message);
    await events.normal(owner, ImmortalContainerKind, action.reason, action.message);
    // An unscheduled pod vanishes at once; a running one terminates first and its delete
    // event brings us back.
    pod = await kube.get<PodObject>(Pod, podKey);
    action = pod ? { type: 'wait', message: `pod ${podKey.name} is terminating` } : { type: 'create' };
  }

  if (action.type === 'create') {
    try {
      const result = await createIfAbsent(kube, Pod, desiredPod(owner));
      pod = result.object;
      if (result.created) {
        log.info({ pod: podKey.name, image: owner.spec.image }, 'created pod');
        await events.normal(owner, ImmortalContainerKind, 'PodCreated', `created pod ${podKey.name} with image ${owner.spec.image}`);
      }
    } catch (error) {
      // The API server refused the pod as invalid (e.g. a name too long for the label):
      // retrying cannot help, so say so in the status instead.
      if (!(error instanceof ApiError) || error.code !== 422) throw error;
      problem = { type: 'Ready', status: 'False', reason: 'PodInvalid', message: error.status?.message ?? error.message };
      await events.warning(owner, ImmortalContainerKind, 'PodInvalid', problem.message);
    }
  } else if (action.type === 'blocked') {
    problem = { type: 'Ready', status: 'False', reason: 'PodNameTaken', message: action.message };
    await events.warning(owner, ImmortalContainerKind, 'PodNameTaken', action.message);
  }

  await updateStatus<ImmortalContainer>(kube, ImmortalContainerKind, key, (current) => nextStatus(current, owner, pod, problem), owner);
}
