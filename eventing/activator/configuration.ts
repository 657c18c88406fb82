// What a Knative Service's revision says about running one function, and its checks: the
// autoscaling annotations (knative/serving pkg/apis/autoscaling: min-scale, max-scale, target),
// `containerConcurrency` and `timeoutSeconds` (default revision-timeout-seconds, 300), as the
// local activator takes them at start and through `configure()` (a Service edited live).
import type { Scaling } from '../../functions/runtime/declaration.ts';

export type { Scaling };

export interface FunctionProcessSpec {
  name: string;
  command: string;
  args: string[];
  /** Merged over process.env (undefined: unset); the activator sets PORT and HOST=127.0.0.1 (and K_SERVICE unless given) per instance. */
  env?: Record<string, string | undefined>;
  scaling: Scaling;
  /** Knative Serving's per-request timeout (revision timeoutSeconds); default 300 (revision-timeout-seconds). */
  timeoutSeconds?: number;
}

/** Knative Serving's revision-timeout-seconds default. */
export const DEFAULT_TIMEOUT_SECONDS = 300;

/** What a Knative Service's revision says about running a function: scaling and request timeout. */
export interface FunctionConfiguration {
  scaling: Scaling;
  timeoutSeconds?: number;
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

/** Throws unless `scaling` and `timeoutSeconds` are usable; returns the timeout (default applied). */
export function checkScaling(name: string, s: Scaling, timeoutSeconds = DEFAULT_TIMEOUT_SECONDS): number {
  for (const k of ['minScale', 'maxScale', 'target', 'containerConcurrency'] as const) {
    if (!Number.isInteger(s[k]) || s[k] < 0) throw new Error(`function "${name}": scaling.${k} must be a non-negative integer, got ${String(s[k])}`);
  }
  if (s.maxScale > 0 && s.maxScale < s.minScale) throw new Error(`function "${name}": scaling.maxScale (${s.maxScale}) is below minScale (${s.minScale})`);
  if (!(timeoutSeconds >= 0)) throw new Error(`function "${name}": timeoutSeconds must be >= 0, got ${String(timeoutSeconds)}`);
  return timeoutSeconds;
}

/** Only the four scaling fields (a configuration may come with more keys). */
export function scalingOf(s: Scaling): Scaling {
  return { minScale: s.minScale, maxScale: s.maxScale, target: s.target, containerConcurrency: s.containerConcurrency };
}
