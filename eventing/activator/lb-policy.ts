// Which instance takes a request: knative/serving pkg/activator/net/lb_policy.go keeps the
// choice a plain function. Here: the least-loaded ready instance with room, ties to the oldest
// (so surplus instances fall idle and scale down when load drops). containerConcurrency > 0 is a
// hard limit per instance (queue-proxy's breaker); with 0 the target is a soft limit, held only
// while more capacity is on its way (an instance takes more than `target` only when no other
// instance is starting).
export interface Candidate {
  state: string;
  inFlight: number;
}

export function pick<T extends Candidate>(instances: readonly T[], containerConcurrency: number, target: number): T | undefined {
  const starting = instances.some((i) => i.state === 'starting');
  let best: T | undefined;
  for (const inst of instances) {
    if (inst.state !== 'ready') continue;
    const room = containerConcurrency > 0 ? inst.inFlight < containerConcurrency : !starting || inst.inFlight < target;
    if (room && (!best || inst.inFlight < best.inFlight)) best = inst;
  }
  return best;
}
