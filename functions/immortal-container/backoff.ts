// Restarting a pod that keeps failing, the way the kubelet restarts a crashing container
// (CrashLoopBackOff, pkg/kubelet/kuberuntime: initial back-off 10 s, doubled per failure, capped
// at 5 minutes, reset once a container ran for 10 minutes). Without it a pod that fails at once
// is recreated as fast as events flow. The state lives in the ImmortalContainer's status, so it
// survives the function scaling to zero; the wait is a requeue (requeueAfterSeconds).
//
// The kubelet keys its back-off on the container's spec: a changed container starts at once,
// with no failures counted. So does a changed image here (desired.ts podAction): the pod is
// replaced without waiting, and the count of the old image's failures is reset (backoffReset).
// This file knows pods only by uid and times (FinishedRun): desired.ts reads them off the pod.
import { rfc3339 } from '../runtime/index.ts';

export const BACKOFF_INITIAL_SECONDS = 10;
export const BACKOFF_MAX_SECONDS = 300;
/** A pod that ran this long before finishing resets the back-off. */
export const BACKOFF_RESET_SECONDS = 600;

export interface RestartBackoff {
  /** Finished pods in a row that ran less than BACKOFF_RESET_SECONDS. */
  quickFailures: number;
  /** UID of the finished (or, after a reset, replaced) pod this decision is about: deciding twice for one pod changes nothing. */
  failedPod: string;
  /** RFC 3339: the replacement is not created before this. */
  notBefore: string;
}

export const backoffSeconds = (quickFailures: number): number =>
  quickFailures <= 0 ? 0 : Math.min(BACKOFF_INITIAL_SECONDS * 2 ** (quickFailures - 1), BACKOFF_MAX_SECONDS);

/** One run of a pod that has finished: which pod, and when it started (if known) and finished. */
export interface FinishedRun {
  pod: string;
  startedAt?: Date;
  finishedAt: Date;
}

/** The back-off after a finished run, given the previous one; idempotent per pod. */
export function restartBackoff(previous: RestartBackoff | undefined, run: FinishedRun): RestartBackoff {
  if (previous && previous.failedPod === run.pod) return previous;
  const ranLong = run.startedAt !== undefined && run.finishedAt.getTime() - run.startedAt.getTime() >= BACKOFF_RESET_SECONDS * 1000;
  const quickFailures = ranLong ? 0 : (previous?.quickFailures ?? 0) + 1;
  return { quickFailures, failedPod: run.pod, notBefore: rfc3339(run.finishedAt.getTime() + backoffSeconds(quickFailures) * 1000) };
}

/**
 * The back-off once `pod` is replaced by a pod of another image: no failures counted, nothing to
 * wait for (a record like the one a pod that ran long leaves). The old image's failures say
 * nothing about the new image, so its first failure waits BACKOFF_INITIAL_SECONDS.
 */
export const backoffReset = (pod: string, now: Date): RestartBackoff => ({ quickFailures: 0, failedPod: pod, notBefore: rfc3339(now) });

/** Seconds until the back-off allows a new pod (0 = now). */
export const secondsUntil = (backoff: RestartBackoff, now: Date): number =>
  Math.max(0, Math.ceil((Date.parse(backoff.notBefore) - now.getTime()) / 1000));
