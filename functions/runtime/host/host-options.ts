// What a function host is built from, and the defaults of what may be left out.
import { setTimeout as delay } from 'node:timers/promises';
import type { Logger } from 'pino';
import { resolveConfig } from '../config.ts';
import type { FunctionDeclaration } from '../declaration.ts';
import { httpClient, type HttpClient } from '../http.ts';
import { installNamespaceFrom } from '../knative-objects.ts';
import type { KubeClient } from '../kube/client.ts';
import { DEFAULT_DELIVERY_BUDGET_SECONDS } from './delivery-budget.ts';
import type { FunctionMetrics } from './metrics.ts';

export interface FunctionHostOptions {
  declaration: FunctionDeclaration;
  kube: KubeClient;
  log: Logger;
  metrics: FunctionMetrics;
  /** Larger requests are refused with 413; a Resource-mode event for the largest object the API server stores (about 1.5 MiB) fits. */
  maxBodyBytes?: number;
  /** Keys reconciled at once during a fan-out (resync, mapper, reply). */
  fanOutConcurrency?: number;
  /** The least time between the end of one resync (or poll) and the start of the next: FanOutGate; default FAN_OUT_SPACING_MS. */
  fanOutSpacingMs?: number;
  /** How long a delivery starts work (delivery-budget.ts); default DEFAULT_DELIVERY_BUDGET_SECONDS. */
  deliveryBudgetMs?: number;
  /** The declared config; resolved from the environment when omitted. */
  config?: Readonly<Record<string, string>>;
  /**
   * The namespace an install limited to one runs in (from the environment when omitted:
   * installNamespaceFrom); undefined for a cluster-wide install. The function's Role grants only
   * there, so its resync, polls and mappers list namespaced kinds there, and an event or key
   * about another namespace is ignored (only a forged one can name it).
   */
  installNamespace?: string;
  http?: HttpClient;
  now?: () => Date;
  /** Waits for a key named ahead of its due time (tests move a clock instead). */
  sleep?: (ms: number) => Promise<void>;
}

/** The options with every default filled in. */
export type HostSettings = Required<Omit<FunctionHostOptions, 'config' | 'installNamespace'>> & {
  config: Readonly<Record<string, string>>;
  installNamespace: string | undefined;
};

/** Objects up to the API server's limit (about 1.5 MiB) in a Resource-mode event, with room for JSON escaping. */
export const DEFAULT_MAX_EVENT_BYTES = 3 * 1024 * 1024;
/**
 * The least time between two resyncs (or polls) of a function, end to start (FanOutGate), when
 * the last run was shorter: far below any resync schedule (minutes), and a burst of pings arriving
 * within it shares one run.
 */
const FAN_OUT_SPACING_MS = 1000;

export function hostSettings(options: FunctionHostOptions): HostSettings {
  const { declaration } = options;
  return {
    maxBodyBytes: DEFAULT_MAX_EVENT_BYTES,
    fanOutConcurrency: 8,
    fanOutSpacingMs: FAN_OUT_SPACING_MS,
    deliveryBudgetMs: DEFAULT_DELIVERY_BUDGET_SECONDS * 1000,
    http: httpClient(),
    now: () => new Date(),
    sleep: (ms: number) => delay(ms),
    ...options,
    config: options.config ?? resolveConfig(declaration.name, declaration.config),
    installNamespace: 'installNamespace' in options ? options.installNamespace : installNamespaceFrom(process.env),
  };
}
