// The scaling decision, pure: knative/serving pkg/autoscaler/scaling/autoscaler.go (Scale →
// ScaleResult) reduced to what a local plane needs. want = ceil(concurrency / target), where
// concurrency counts in-flight plus buffered requests and target is min(target,
// containerConcurrency) when both are set (pkg/reconciler/autoscaling/resources/target.go),
// clamped to [minScale, maxScale] (maxScale 0 = unbounded, as in Knative).
import type { Scaling } from '../../functions/runtime/index.ts';

/** Knative's container-concurrency-target-default. */
export const DEFAULT_TARGET = 100;

/** Knative's effective concurrency target: the annotation, never above containerConcurrency. */
export function effectiveTarget(s: Scaling): number {
  let total = s.target > 0 ? s.target : s.containerConcurrency > 0 ? s.containerConcurrency : DEFAULT_TARGET;
  if (s.containerConcurrency > 0) total = Math.min(total, s.containerConcurrency);
  return Math.max(1, total);
}

/**
 * How many requests the function can take at once at full scale: containerConcurrency (or the
 * target when there is no hard limit) × maxScale; undefined when maxScale is unbounded. The
 * broker bounds a trigger's deliveries with it, so a burst can scale the function out.
 */
export function capacityAtMaxScale(s: Scaling): number | undefined {
  if (s.maxScale <= 0) return undefined;
  const perInstance = s.containerConcurrency > 0 ? s.containerConcurrency : effectiveTarget(s);
  return perInstance * s.maxScale;
}

export interface ScaleDecision {
  want: number;
  reason: string;
}

/**
 * The instances wanted for `demand` concurrent requests with `live` instances running or starting.
 * `hostLimit` caps them whatever max-scale says: the local plane is a one-node cluster, where
 * instances beyond the spare cores only compete for them (as Knative's pods stay Pending when no
 * node has room).
 */
export function desiredScale(demand: number, scaling: Scaling, live: number, hostLimit = Number.POSITIVE_INFINITY): ScaleDecision {
  const target = effectiveTarget(scaling);
  let want = Math.max(scaling.minScale, Math.ceil(demand / target));
  if (scaling.maxScale > 0) want = Math.min(want, scaling.maxScale);
  want = Math.min(want, Math.max(1, hostLimit));
  const reason =
    live === 0 && demand > 0
      ? 'cold start'
      : demand > target * live
        ? `concurrency ${demand} > target ${target} x ${live}`
        : `min-scale ${scaling.minScale}`;
  return { want, reason };
}
