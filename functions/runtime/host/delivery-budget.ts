// How long one delivery keeps starting work (keys of a fan-out, parents of a sweep) after it
// arrived; what is not started by then goes back in its reply (answers.ts) and is done in the
// reply's own delivery. The answer must reach the broker before the request times out (Knative
// Serving's timeoutSeconds): past it the activator answers 504 while the work goes on, and each
// of the broker's retries does the whole fan-out again.
//
// A function cannot see its revision's timeoutSeconds (Knative gives the user container PORT and
// K_SERVICE, not the revision spec), so the Service tells it: the generated Service sets
// OPFN_DELIVERY_BUDGET_SECONDS from its timeoutSeconds, the local activator does the same from
// the Service it runs, and `opfn manifests` refuses a Service whose budget would not leave room.

export const DELIVERY_BUDGET_ENV = 'OPFN_DELIVERY_BUDGET_SECONDS';

/**
 * The budget when the Service allows 60 s or more (Knative's default is 300 s) or sets no
 * timeout: a fan-out that fits in 30 s costs nothing, and the keys already started keep the
 * rest of the request's time to finish (a hook's call, a CopyratorRule's writes).
 */
export const DEFAULT_DELIVERY_BUDGET_SECONDS = 30;

/** The budget for a request timeout of `timeoutSeconds` (0: none): half of it, at most the default. */
export function deliveryBudgetFor(timeoutSeconds: number): number {
  return timeoutSeconds > 0 ? Math.min(DEFAULT_DELIVERY_BUDGET_SECONDS, timeoutSeconds / 2) : DEFAULT_DELIVERY_BUDGET_SECONDS;
}

/** Why `seconds` cannot be the budget under a request timeout of `timeoutSeconds` (0: none), or undefined. */
export function deliveryBudgetProblem(seconds: number, timeoutSeconds: number): string | undefined {
  if (!Number.isFinite(seconds) || seconds < 0) return `${DELIVERY_BUDGET_ENV} must be a number of seconds ≥ 0, got ${String(seconds)}`;
  if (timeoutSeconds > 0 && seconds >= timeoutSeconds) {
    return `${DELIVERY_BUDGET_ENV} ${seconds} leaves no time before timeoutSeconds ${timeoutSeconds}: answers would come after the request timed out (keep it at about half, e.g. ${deliveryBudgetFor(timeoutSeconds)})`;
  }
  return undefined;
}

/** The budget the environment sets, in seconds, or undefined when it sets none; throws on one that is not a number ≥ 0. */
export function deliveryBudgetFromEnvironment(env: Record<string, string | undefined> = process.env): number | undefined {
  const text = env[DELIVERY_BUDGET_ENV];
  if (text === undefined || text.trim() === '') return undefined;
  const seconds = Number(text);
  // Without a timeout, the only problem a budget can have is not being a number of seconds.
  if (deliveryBudgetProblem(seconds, 0)) throw new Error(`${DELIVERY_BUDGET_ENV} "${text}" is not a number of seconds ≥ 0`);
  return seconds;
}
