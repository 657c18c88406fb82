// ImmortalContainer's desired state, computed without any API call: which pod should exist,
// what to do about the pod that does exist, and what the status should say.
import {
  sameKind,
  type KubeObject,
  type ObjectKey,
  type ResourceKind,
  boundedMessage,
  controllerReference,
  isControlledBy,
  jsonEqual,
  setCondition,
  type Condition,
  type ConditionInput,
} from '../runtime/index.ts';
import { backoffReset, restartBackoff, secondsUntil, type FinishedRun, type RestartBackoff } from './backoff.ts';

export const ImmortalContainerKind: ResourceKind = {
  group: 'immortalcontainer.flugel.it',
  version: 'v1alpha1',
  kind: 'ImmortalContainer',
  plural: 'immortalcontainers',
  namespaced: true,
};

/** The seed's label: each pod carries `controller=<ImmortalContainer name>`. */
export const OWNER_LABEL = 'controller';
export const CONTAINER_NAME = 'acontainer';
/** The generation of the ImmortalContainer a pod was made for: a replica holding an older read must not replace it. */
export const GENERATION_ANNOTATION = 'immortalcontainer.flugel.it/generation';
/** How many counted pod UIDs the status remembers; only the newest can still be in doubt. */
export const COUNTED_POD_HISTORY = 10;

export interface ImmortalContainerStatus {
  currentPod?: string;
  startTimes?: number;
  /** UIDs of the newest pods already counted in startTimes: makes counting idempotent. */
  countedPods?: string[];
  observedGeneration?: number;
  conditions?: Condition[];
  /** CrashLoopBackOff-like back-off for a pod that keeps finishing (backoff.ts); reset when the image changes. */
  restartBackoff?: RestartBackoff;
}

export interface ImmortalContainer extends KubeObject {
  spec: { image: string };
  status?: ImmortalContainerStatus;
}

export interface PodObject extends KubeObject {
  spec?: { containers?: { name: string; image?: string }[] };
  status?: { phase?: string; startTime?: string; containerStatuses?: { name: string; state?: { terminated?: { finishedAt?: string } } }[] };
}

const POD_SUFFIX = '-immortalpod';
export const podNameFor = (owner: ImmortalContainer): string => `${owner.metadata.name}${POD_SUFFIX}`;

export function desiredPod(owner: ImmortalContainer): PodObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: podNameFor(owner),
      namespace: owner.metadata.namespace,
      labels: { [OWNER_LABEL]: owner.metadata.name! },
      annotations: { [GENERATION_ANNOTATION]: String(owner.metadata.generation ?? 0) },
      ownerReferences: [controllerReference(owner, ImmortalContainerKind)],
    },
    spec: { containers: [{ name: CONTAINER_NAME, image: owner.spec.image }] },
  };
}

export type PodAction =
  | { type: 'keep' }
  | { type: 'create' }
  | { type: 'replace'; reason: 'PodFinished' | 'ImageChanged' | 'OwnerReplaced'; message: string; backoff?: RestartBackoff }
  /** A finished pod whose replacement must wait: reconcile again after `seconds`. */
  | { type: 'backoff'; seconds: number; message: string; backoff: RestartBackoff }
  /** The pod is already going away; its delete event brings the next reconcile. */
  | { type: 'wait'; message: string }
  /** Someone else's pod holds the name: never touch what is not ours. */
  | { type: 'blocked'; message: string };

/**
 * The finished pod's run, for the back-off: when it started, and when its container terminated
 * (else now, the moment it is first seen finished; never later than now).
 */
export function finishedRun(pod: PodObject, now: Date): FinishedRun {
  const terminated = Date.parse(
    pod.status?.containerStatuses?.find((status) => status.name === CONTAINER_NAME)?.state?.terminated?.finishedAt ?? '',
  );
  const started = Date.parse(pod.status?.startTime ?? '');
  return {
    pod: pod.metadata.uid ?? '',
    ...(Number.isNaN(started) ? {} : { startedAt: new Date(started) }),
    finishedAt: new Date(Number.isNaN(terminated) ? now.getTime() : Math.min(terminated, now.getTime())),
  };
}

const imageOf = (pod: PodObject): string | undefined => pod.spec?.containers?.find((container) => container.name === CONTAINER_NAME)?.image;

export function podAction(owner: ImmortalContainer, pod: PodObject | undefined, now: Date = new Date()): PodAction {
  if (!pod) return { type: 'create' };
  const name = pod.metadata.name;
  if (pod.metadata.deletionTimestamp) return { type: 'wait', message: `pod ${name} is terminating` };
  if (!isControlledBy(pod, owner)) {
    // Of this group only: an ImmortalContainer of another (the Metacontroller variant's
    // immortalcontainers.flugel.it) is another controller's, whose pod is not ours to replace.
    const stale = pod.metadata.ownerReferences?.some(
      (reference) =>
        reference.controller &&
        sameKind(ImmortalContainerKind, reference.apiVersion, reference.kind) &&
        reference.name === owner.metadata.name,
    );
    if (stale)
      return { type: 'replace', reason: 'OwnerReplaced', message: `pod ${name} belongs to an earlier ImmortalContainer of the same name` };
    return { type: 'blocked', message: `pod ${name} exists and is not controlled by this ImmortalContainer; delete or rename it` };
  }
  const madeFor = Number(pod.metadata.annotations?.[GENERATION_ANNOTATION] ?? 0);
  // A newer read than ours made this pod: acting on our stale spec would only flap.
  if (madeFor > (owner.metadata.generation ?? 0)) return { type: 'keep' };
  const image = imageOf(pod);
  // The image before the phase: the back-off is, like the kubelet's, that of one container spec.
  // A pod of the old image is replaced at once, finished (even in back-off) or not, and the
  // failures counted for the old image do not carry over to the new one (backoff.ts).
  if (image !== owner.spec.image) {
    const reset = owner.status?.restartBackoff?.quickFailures ? { backoff: backoffReset(pod.metadata.uid ?? '', now) } : {};
    return { type: 'replace', reason: 'ImageChanged', message: `image changed from ${image} to ${owner.spec.image}`, ...reset };
  }
  const phase = pod.status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed') {
    const backoff = restartBackoff(owner.status?.restartBackoff, finishedRun(pod, now));
    const seconds = secondsUntil(backoff, now);
    if (seconds > 0)
      return {
        type: 'backoff',
        seconds,
        backoff,
        message: `back-off restarting pod ${name} (phase ${phase}, ${backoff.quickFailures} quick failures in a row); next start at ${backoff.notBefore}`,
      };
    return { type: 'replace', reason: 'PodFinished', message: `pod ${name} finished (phase ${phase}); starting it again`, backoff };
  }
  return { type: 'keep' };
}

/**
 * The status after this reconcile. startTimes counts pod creations exactly once however many
 * replicas and redeliveries see the same pod: a pod counts when its UID is not yet among
 * `countedPods`, and the status write is conditional on the resourceVersion it was computed from.
 * A creation is counted even if the replica that made it died before writing status.
 */
export function nextStatus(
  current: ImmortalContainer,
  actedOn: ImmortalContainer,
  pod: PodObject | undefined,
  problem?: ConditionInput,
  backoff?: RestartBackoff,
): ImmortalContainerStatus | undefined {
  // Deleted and recreated under the same name since we read it: that object is someone else's reconcile.
  if (current.metadata.uid !== actedOn.metadata.uid) return undefined;
  const status = current.status ?? {};
  const ours = pod && isControlledBy(pod, current) && !pod.metadata.deletionTimestamp ? pod : undefined;
  let { startTimes = 0, countedPods = [] } = status;
  const uid = ours?.metadata.uid;
  if (uid && !countedPods.includes(uid)) {
    startTimes += 1;
    countedPods = [...countedPods, uid].slice(-COUNTED_POD_HISTORY);
  }
  const generation = Math.max(actedOn.metadata.generation ?? 0, status.observedGeneration ?? 0);
  const condition: ConditionInput = problem ?? readyCondition(ours, generation);
  return {
    ...status,
    currentPod: ours?.metadata.name ?? status.currentPod,
    startTimes,
    countedPods,
    observedGeneration: generation,
    conditions: setCondition(status.conditions, { ...condition, observedGeneration: generation }),
    ...(backoff ? { restartBackoff: backoff } : {}),
  };
}

function readyCondition(pod: PodObject | undefined, generation: number): ConditionInput {
  if (!pod)
    return {
      type: 'Ready',
      status: 'False',
      reason: 'PodMissing',
      message: 'the pod is being (re)created',
      observedGeneration: generation,
    };
  if (pod.status?.phase === 'Running')
    return {
      type: 'Ready',
      status: 'True',
      reason: 'PodRunning',
      message: `pod ${pod.metadata.name} is running`,
      observedGeneration: generation,
    };
  return {
    type: 'Ready',
    status: 'False',
    reason: 'PodPending',
    message: `pod ${pod.metadata.name} is ${pod.status?.phase ?? 'Pending'}`,
    observedGeneration: generation,
  };
}

/** The Ready condition's current reason and message: a problem already reported is not reported again. */
export const reported = (owner: ImmortalContainer, reason: string, message: string) =>
  owner.status?.conditions?.some(
    (condition) => condition.type === 'Ready' && condition.reason === reason && condition.message === boundedMessage(message),
  ) ?? false;

/** A pod of the ImmortalContainer `key` names, as created: Pending (or no phase yet), not being deleted. */
export const asCreated = (pod: PodObject, key: ObjectKey): boolean =>
  pod.metadata.name === `${key.name}${POD_SUFFIX}` &&
  pod.metadata.namespace === key.namespace &&
  !pod.metadata.deletionTimestamp &&
  (pod.status?.phase ?? 'Pending') === 'Pending' &&
  (pod.metadata.ownerReferences?.some(
    (owner) => owner.controller && owner.kind === ImmortalContainerKind.kind && owner.name === key.name,
  ) ??
    false);

/** The status says the current generation was carried out and its pod was healthy then. */
export const statusShowsHealthyPod = (owner: ImmortalContainer, podName: string): boolean => {
  const ready = owner.status?.conditions?.find((condition) => condition.type === 'Ready');
  return (
    owner.status?.observedGeneration === owner.metadata.generation &&
    owner.status?.currentPod === podName &&
    (ready?.reason === 'PodRunning' || ready?.reason === 'PodPending')
  );
};

/** The owner's pod, when the event (ReconcileContext.eventObject) is about it. */
export const podInEvent = (owner: ImmortalContainer, eventObject: KubeObject | undefined): PodObject | undefined =>
  eventObject?.kind === 'Pod' &&
  eventObject.metadata.name === podNameFor(owner) &&
  eventObject.metadata.namespace === owner.metadata.namespace
    ? (eventObject as PodObject)
    : undefined;

/**
 * Whether the event behind this reconcile already shows there is nothing to do, from what it
 * carried (`eventObject`: the event's body, or the runtime's own first read of the ImmortalContainer:
 * ReconcileContext.eventObject) and, once read, the ImmortalContainer. Asked before that read, when only
 * our pod as created can be told (the reconcile that created it writes the status), and again
 * after. The event object only ever spares work: whatever is done is decided from fresh reads.
 */
export function nothingToDo(
  key: ObjectKey,
  eventObject: KubeObject | undefined,
  owner?: ImmortalContainer,
  now: Date = new Date(),
): boolean {
  if (!eventObject) return false;
  if (eventObject.kind === 'Pod' && asCreated(eventObject as PodObject, key)) return true;
  if (!owner) return false;
  // Our pod, needing nothing, and the status already saying so.
  const pod = podInEvent(owner, eventObject);
  if (pod) return podAction(owner, pod, now).type === 'keep' && jsonEqual(nextStatus(owner, owner, pod), owner.status);
  // The ImmortalContainer itself, read afresh, its generation carried out with a healthy pod:
  // changes of the pod come as the pod's own events, and the resync (no event object) reads everything.
  return eventObject.kind === ImmortalContainerKind.kind && statusShowsHealthyPod(owner, podNameFor(owner));
}
