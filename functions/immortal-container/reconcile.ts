// ImmortalContainer reconcile: reads the object and its pod, acts on the difference, writes status.
import { type ReconcileContext, type ReconcileResult, Pod, sameKind, type ObjectKey, createIfAbsent, getAnnounced, jsonEqual, updateStatus, type ConditionInput, FORBIDDEN_RETRY_SECONDS, refusedWrite } from '../runtime/index.ts';
import type { RestartBackoff } from './backoff.ts';
import { asCreated, desiredPod, ImmortalContainerKind, nextStatus, podAction, podNameFor, reported, settled, type ImmortalContainer, type PodObject } from './desired.ts';

export async function reconcileImmortalContainer(key: ObjectKey, ctx: ReconcileContext): Promise<ReconcileResult | void> {
  const { kube, log, events, now } = ctx;
  // An event about our pod as it was created (not started, not going): the reconcile that
  // created it writes the status (or fails, and its own event is delivered again), and any
  // change of the ImmortalContainer since comes as its own event. Nothing to do, no request.
  if (ctx.hint?.kind === 'Pod' && asCreated(ctx.hint as PodObject, key)) return;

  // A Resource-mode event of this object announces its version: read at that version from the
  // API server's watch cache when it holds it (reconciler.ts getAnnounced), else from etcd.
  const announced = ctx.hint && sameKind(ImmortalContainerKind, ctx.hint.apiVersion, ctx.hint.kind) ? ctx.hint.metadata.resourceVersion : undefined;
  const owner = await getAnnounced<ImmortalContainer>(kube, ImmortalContainerKind, key, announced);
  // Gone, or going: the garbage collector removes the pod through its ownerReference.
  if (!owner || owner.metadata.deletionTimestamp) return;
  // Read after that read: for a Reference-mode event of this kind the runtime makes the read
  // itself the hint (functions/runtime/host/reference-reads.ts).
  const hint = ctx.hint;

  const podKey = { namespace: key.namespace, name: podNameFor(owner) };
  // An event about our pod carried its body: if that pod needs nothing and the status already
  // says so, this event costs one read. The body is only trusted to do less: anything to do
  // reads the pod afresh below.
  const podHint = hint?.kind === 'Pod' && hint.metadata.name === podKey.name && hint.metadata.namespace === key.namespace ? (hint as PodObject) : undefined;
  if (podHint && podAction(owner, podHint, now()).type === 'keep' && jsonEqual(nextStatus(owner, owner, podHint), owner.status)) return;

  // An event about the ImmortalContainer itself whose fresh read shows its current generation
  // already carried out with a healthy pod tells nothing new about the pod: changes of the pod
  // come as the pod's own events, and the resync (no hint) reads everything. One read.
  if (hint?.kind === ImmortalContainerKind.kind && settled(owner, podKey.name)) return;

  // Create first, read only when it exists: a new object costs no read of a pod that cannot be
  // there yet. A pod the API server refuses for good (runtime/refusals.ts) is reported in the
  // status: invalid (422) as PodInvalid; refused by policy (403: a ResourceQuota, Pod Security
  // admission, RBAC) as FailedCreate, as the ReplicaSet controller reports it, and tried again
  // later: the quota or policy may change, and no change of this object would tell.
  let pod: PodObject | undefined;
  let problem: ConditionInput | undefined;
  let backoff: RestartBackoff | undefined;
  let result: ReconcileResult | undefined;
  const create = async () => {
    try {
      const created = await createIfAbsent(kube, Pod, desiredPod(owner));
      if (created.created) {
        log.info({ pod: podKey.name, image: owner.spec.image }, 'created pod');
        events.normal(owner, ImmortalContainerKind, 'PodCreated', `created pod ${podKey.name} with image ${owner.spec.image}`);
      }
      return created.object;
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

  // A pod event says a pod exists (the status may not say so yet: another instance's write is
  // on its way): read it rather than try a create bound to fail. The hint only picks the order.
  if (!owner.status?.currentPod && !podHint) {
    pod = await create();
  } else {
    // A fresh read: "nothing to do" is a decision no conditional write would check.
    pod = await kube.get<PodObject>(Pod, podKey);
  }
  let action = podAction(owner, pod, now());

  if (action.type === 'backoff') {
    backoff = action.backoff;
    problem = { type: 'Ready', status: 'False', reason: 'BackOff', message: action.message };
    if (owner.status?.restartBackoff?.failedPod !== backoff.failedPod) events.warning(owner, ImmortalContainerKind, 'BackOff', action.message);
    result = { requeueAfterSeconds: action.seconds };
  }

  if (action.type === 'replace') {
    backoff = action.backoff;
    // The uid precondition makes sure we delete the pod we judged, not one another replica
    // created a moment ago.
    await kube.delete(Pod, podKey, { uid: pod!.metadata.uid });
    log.info({ reason: action.reason }, action.message);
    events.normal(owner, ImmortalContainerKind, action.reason, action.message);
    // An unscheduled pod vanishes at once; a running one terminates first and its delete
    // event brings us back.
    pod = await kube.get<PodObject>(Pod, podKey);
    action = pod ? { type: 'wait', message: `pod ${podKey.name} is terminating` } : { type: 'create' };
  }

  if (action.type === 'create' && !problem) {
    pod = await create();
  } else if (action.type === 'blocked') {
    problem = { type: 'Ready', status: 'False', reason: 'PodNameTaken', message: action.message };
    if (!reported(owner, problem.reason, problem.message)) events.warning(owner, ImmortalContainerKind, 'PodNameTaken', action.message);
  }

  await updateStatus<ImmortalContainer>(kube, ImmortalContainerKind, key, (current) => nextStatus(current, owner, pod, problem, backoff), owner);
  return result;
}
