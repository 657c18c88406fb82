// The local activator: Knative Serving's scale-from-zero activator and autoscaler for function
// processes on this machine. The implementation is one file per concern (see activator.ts for the map).
export { Activator, type ActivatorOptions } from './activator.ts';
export {
  checkConfiguration,
  DEFAULT_TIMEOUT_SECONDS,
  type FunctionConfiguration,
  type FunctionProcessSpec,
  type FunctionStats,
  type Scaling,
} from './configuration.ts';
export { capacityAtMaxScale, desiredScale, effectiveTarget, type ScaleDecision } from './decider.ts';
export { pick } from './lb-policy.ts';
export { canTransition, type InstanceState } from './instance.ts';
