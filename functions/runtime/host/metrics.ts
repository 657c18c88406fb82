// Prometheus metrics served on /metrics, named like Knative Functions' and controller-runtime's.
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface FunctionMetrics {
  registry: Registry;
  reconciles: Counter<'result'>;
  reconcileSeconds: Histogram<'result'>;
  apiRequests: Counter<'verb' | 'resource' | 'code'>;
  apiRequestSeconds: Histogram<'verb'>;
  burstWatchReads: Counter<'resource' | 'answered_by'>;
  events: Counter<'outcome'>;
}

export function createMetrics(functionName: string): FunctionMetrics {
  const registry = new Registry();
  registry.setDefaultLabels({ function: functionName });
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    reconciles: new Counter({
      name: 'opfn_reconcile_total',
      help: 'Reconciles by result (success, requeue, error, terminal, refused: 403, 422 or a kind not served, shown on the object).',
      labelNames: ['result'],
      registers: [registry],
    }),
    reconcileSeconds: new Histogram({
      name: 'opfn_reconcile_duration_seconds',
      help: 'Time per reconcile of one key.',
      labelNames: ['result'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    }),
    apiRequests: new Counter({
      name: 'opfn_kube_api_requests_total',
      help: 'Kubernetes API requests by verb, resource and HTTP code (0 = unreachable).',
      labelNames: ['verb', 'resource', 'code'],
      registers: [registry],
    }),
    apiRequestSeconds: new Histogram({
      name: 'opfn_kube_api_request_duration_seconds',
      help: 'Kubernetes API request latency.',
      labelNames: ['verb'],
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5],
      registers: [registry],
    }),
    burstWatchReads: new Counter({
      name: 'opfn_burst_watch_reads_total',
      help: "Reads at an event's version while a burst watch of their kind was open, by who answered: the watch, or the API server.",
      labelNames: ['resource', 'answered_by'],
      registers: [registry],
    }),
    events: new Counter({
      name: 'opfn_cloudevents_total',
      help: 'CloudEvents received by outcome (done, ignored, rejected, retry).',
      labelNames: ['outcome'],
      registers: [registry],
    }),
  };
}
