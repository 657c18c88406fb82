// The host's face: the process every function runs in. The entry program (functions/main.ts),
// the local plane (eventing/), the bundles (build/build.ts) and tests import it; functions never do.
export { serve, KEEP_ALIVE_TIMEOUT_MS, LISTENING_MESSAGE } from './serve.ts';
export { createFunctionHost, FunctionHost } from './function-host.ts';
export { DEFAULT_MAX_EVENT_BYTES, type FunctionHostOptions } from './host-options.ts';
export { OUTCOME_HEADER } from './http-app.ts';
export { MAX_REQUEUE_SECONDS, requeueTime } from './reconcile-loop.ts';
export { answerFor, failedResult, LISTED_ERROR_CHARS } from './answers.ts';
export type { FailedResult, KeyResult, Outcome } from './answers.ts';
export { reconcileReply, type ReplyEvent, type ReplyKey } from './reply.ts';
export {
  DEFAULT_DELIVERY_BUDGET_SECONDS,
  DELIVERY_BUDGET_ENV,
  deliveryBudgetFor,
  deliveryBudgetFromEnvironment,
  deliveryBudgetProblem,
} from './delivery-budget.ts';
export { createLogger, logFormat, prettyLine, type LogFormat } from './log.ts';
export { createMetrics, type FunctionMetrics } from './metrics.ts';
export { FINALIZE_AGAIN_SECONDS, reconcileWithFinalizer } from './finalizing.ts';
export { keysForEvent, uniqueKeys } from './routing.ts';
export { eventObjectFromFirstRead, ReferenceEvents } from './reference-reads.ts';
export { isUnchangedSinceReconcile, metadataFingerprint, SeenObjects, skipReason } from './skips.ts';
export { KeyedWorkQueue } from './workqueue.ts';
export { FanOutGate, type SharedRun } from './fan-out-gate.ts';
