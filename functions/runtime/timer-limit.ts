// The longest delay a Node timer takes: 2^31 - 1 ms, about 24.8 days. A longer one fires after
// 1 ms instead (with a TimeoutOverflowWarning), so every wait that may come from configuration
// or from an answer (a webhook's timeout, a Retry-After, a requeue, a cron schedule) is capped
// here first; a wait cut short this way re-checks or re-arms where that matters.
export const MAX_TIMER_MS = 2 ** 31 - 1;
