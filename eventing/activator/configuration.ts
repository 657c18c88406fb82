// What a Knative Service's revision says about running one function, and its checks: the
// autoscaling annotations (knative/serving pkg/apis/autoscaling: min-scale, max-scale, target),
// `containerConcurrency`, `timeoutSeconds` (default revision-timeout-seconds, 300) and the
// function's delivery budget (its container's OPFN_DELIVERY_BUDGET_SECONDS), as the local
// activator takes them at start and through `configure()` (a Service edited live).
import type { Scaling } from '../../functions/runtime/index.ts';
import { deliveryBudgetFor, deliveryBudgetProblem } from '../../functions/runtime/host/index.ts';

export type { Scaling };

/** Knative Serving's revision-timeout-seconds default. */
export const DEFAULT_TIMEOUT_SECONDS = 300;

/** What a Knative Service's revision says about running a function: scaling, request timeout and delivery budget. */
export interface FunctionConfiguration {
  scaling: Scaling;
  /** Knative Serving's per-request timeout (revision timeoutSeconds); default 300 (revision-timeout-seconds). */
  timeoutSeconds?: number;
  /** How long a delivery starts work, given to each instance as OPFN_DELIVERY_BUDGET_SECONDS; default half the timeout, at most 30 s (delivery-budget.ts). */
  deliveryBudgetSeconds?: number;
  /**
   * The revision's container environment (name → value). Instances started from now on get it
   * under the process's own `env`; a change rolls the instances (roll()), as a new revision does.
   * Undefined: the one in force stays.
   */
  containerEnv?: Record<string, string>;
}

export interface FunctionProcessSpec extends FunctionConfiguration {
  name: string;
  command: string;
  args: string[];
  /**
   * Merged over process.env and the container environment (undefined: unset), so the plane's own
   * settings (KUBECONFIG, log format) win over a Service's; the activator sets PORT and
   * HOST=127.0.0.1 (and K_SERVICE unless given) per instance.
   */
  env?: Record<string, string | undefined>;
}

export interface FunctionStats {
  /** Instances running or starting now. */
  instances: number;
  /** Most instances live at once since the activator started. */
  peakInstances: number;
  /** Instances started since the activator started. */
  started: number;
  /** Requests proxied through the activator. */
  proxied: number;
  /** Requests sent by the broker straight to an instance (warm path). */
  direct: number;
}

/** Scaling, timeout and delivery budget with their defaults applied (checkConfiguration). */
export type CheckedConfiguration = Required<Omit<FunctionConfiguration, 'containerEnv'>>;

/**
 * Throws unless the configuration is usable; returns its scaling, timeout and budget with the
 * defaults applied (only the scaling fields of `scaling`).
 */
export function checkConfiguration(name: string, configuration: FunctionConfiguration): CheckedConfiguration {
  const { scaling: s, timeoutSeconds = DEFAULT_TIMEOUT_SECONDS } = configuration;
  for (const k of ['minScale', 'maxScale', 'target', 'containerConcurrency'] as const) {
    if (!Number.isInteger(s[k]) || s[k] < 0)
      throw new Error(`function "${name}": scaling.${k} must be a non-negative integer, got ${String(s[k])}`);
  }
  if (s.maxScale > 0 && s.maxScale < s.minScale)
    throw new Error(`function "${name}": scaling.maxScale (${s.maxScale}) is below minScale (${s.minScale})`);
  if (!(timeoutSeconds >= 0)) throw new Error(`function "${name}": timeoutSeconds must be >= 0, got ${String(timeoutSeconds)}`);
  const deliveryBudgetSeconds = configuration.deliveryBudgetSeconds ?? deliveryBudgetFor(timeoutSeconds);
  const budgetProblem = deliveryBudgetProblem(deliveryBudgetSeconds, timeoutSeconds);
  if (budgetProblem) throw new Error(`function "${name}": ${budgetProblem}`);
  return { scaling: scalingOf(s), timeoutSeconds, deliveryBudgetSeconds };
}

/** Only the four scaling fields (a configuration may come with more keys). */
export function scalingOf(s: Scaling): Scaling {
  return { minScale: s.minScale, maxScale: s.maxScale, target: s.target, containerConcurrency: s.containerConcurrency };
}
