// ImmortalContainer reconcile: reads the object and its pod, acts on the difference, writes status.
import {
  type ReconcileContext,
  type ReconcileResult,
  Pod,
  type ObjectKey,
  applyChild,
  keepExisting,
  getNoOlderThan,
  isControlledBy,
  updateStatus,
  type ConditionInput,
  FORBIDDEN_RETRY_SECONDS,
  refusedWrite,
} from '../runtime/index.ts';
import type { RestartBackoff } from './backoff.ts';
import {
  desiredPod,
  ImmortalContainerKind,
  nextStatus,
  nothingToDo,
  podAction,
  podInEvent,
  podNameFor,
  reported,
  type ImmortalContainer,
  type PodObject,
} from './desired.ts';

export async function reconcileImmortalContainer(key: ObjectKey, ctx: ReconcileContext): Promise<ReconcileResult | void> {
  const { kube, log, events, now } = ctx;
  if (nothingToDo(key, ctx.eventObject)) return;
  // At the version the event announced, if it did (from the watch cache when it holds it).
  const owner = await getNoOlderThan<ImmortalContainer>(kube, ImmortalContainerKind, key, ctx.eventObject);
  // Gone, or going: the garbage collector removes the pod through its ownerReference.
  if (!owner || owner.metadata.deletionTimestamp) return;
  // ctx.eventObject again: for a Reference-mode event the runtime makes the read above its event object.
  if (nothingToDo(key, ctx.eventObject, owner, now())) return;

  const podKey = { namespace: key.namespace, name: podNameFor(owner) };
  let problem: ConditionInput | undefined;
  let backoff: RestartBackoff | undefined;
  let result: ReconcileResult | undefined;
  // A pod the API server refuses for good (runtime/refusals.ts) is reported in the status:
  // invalid (422) as PodInvalid; refused by policy (403: a ResourceQuota, Pod Security admission,
  // RBAC) as FailedCreate, as the ReplicaSet controller reports it, and tried again later: the
  // quota or policy may change, and no change of this object would tell.
  const create = async (): Promise<PodObject | undefined> => {
    try {
      // A pod is never updated: podAction judges one that exists.
      const applied = await applyChild<PodObject>(kube, Pod, desiredPod(owner), {
        isManaged: (pod) => isControlledBy(pod, owner),
        merge: keepExisting,
      });
      if (applied.result === 'created') {
        log.info({ pod: podKey.name, image: owner.spec.image }, 'created pod');
        events.normal(owner, ImmortalContainerKind, 'PodCreated', `created pod ${podKey.name} with image ${owner.spec.image}`);
      }
      return applied.object;
    } catch (error) {
      const refused = refusedWrite(error);
      if (!refused) throw error;
      const reason = refused.forbidden ? 'FailedCreate' : 'PodInvalid';
      problem = { type: 'Ready', status: 'False', reason, message: refused.message };
      if (!reported(owner, reason, refused.message)) events.warning(owner, ImmortalContainerKind, reason, refused.message);
      if (refused.forbidden) result = { requeueAfterSeconds: FORBIDDEN_RETRY_SECONDS };
      return undefined;
    }
  };

  // No pod known (the status names none, and the event is not about one): create first, as a new
  // object's pod cannot be there yet. Else read it afresh: "nothing to do" is a decision no
  // conditional write would check.
  let pod = !owner.status?.currentPod && !podInEvent(owner, ctx.eventObject) ? await create() : await kube.get<PodObject>(Pod, podKey);
  let action = podAction(owner, pod, now());

  if (action.type === 'backoff') {
    backoff = action.backoff;
    problem = { type: 'Ready', status: 'False', reason: 'BackOff', message: action.message };
    if (owner.status?.restartBackoff?.failedPod !== backoff.failedPod)
      events.warning(owner, ImmortalContainerKind, 'BackOff', action.message);
    result = { requeueAfterSeconds: action.seconds };
  }

  if (action.type === 'replace') {
    backoff = action.backoff;
    // The uid precondition: delete the pod we judged, not one another replica created since.
    await kube.delete(Pod, podKey, { uid: pod!.metadata.uid });
    log.info({ reason: action.reason }, action.message);
    events.normal(owner, ImmortalContainerKind, action.reason, action.message);
    // An unscheduled pod vanishes at once; a running one terminates first, and its delete event
    // brings us back.
    pod = await kube.get<PodObject>(Pod, podKey);
    action = pod ? { type: 'wait', message: `pod ${podKey.name} is terminating` } : { type: 'create' };
  }

  if (action.type === 'create' && !problem) {
    pod = await create();
  } else if (action.type === 'blocked') {
    problem = { type: 'Ready', status: 'False', reason: 'PodNameTaken', message: action.message };
    if (!reported(owner, problem.reason, problem.message)) events.warning(owner, ImmortalContainerKind, 'PodNameTaken', action.message);
  }

  await updateStatus<ImmortalContainer>(
    kube,
    ImmortalContainerKind,
    key,
    (current) => nextStatus(current, owner, pod, problem, backoff),
    owner,
  );
  return result;
}
