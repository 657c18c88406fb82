// The local activator's public API; the implementation lives in activator/ (one file per
// concern, see activator/activator.ts for the map). Other code and the tests import from here.
export { Activator, DEFAULT_TIMEOUT_SECONDS, type ActivatorOptions, type FunctionProcessSpec, type FunctionStats, type Scaling } from './activator/activator.ts';
export { capacityAtMaxScale, desiredScale, effectiveTarget, type ScaleDecision } from './activator/decider.ts';
export { pick } from './activator/lb-policy.ts';
export { canTransition, type InstanceState } from './activator/instance.ts';
