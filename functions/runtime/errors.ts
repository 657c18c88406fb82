// Errors that say what happens next, and the one place where an error becomes an answer
// (controller-runtime's reconcileHandler in pkg/internal/controller/controller.go; kopf's
// TemporaryError(delay) and PermanentError in kopf/_core/actions/execution.py).
//
//   TransientError        try again later: 503, or the failed-key reply of a fan-out
//   TerminalError         retrying cannot help: recorded in a Warning Event, answered 2xx
//   ApiError 403, 422     retrying cannot help: shown on the object (Warning Event, Ready=False)
//   or NotServed of a     and answered 2xx by the host before it asks here (host/unmendable.ts)
//   kind not reconciled
//   ApiError (transient)  unreachable, overloaded, NotServed: 503
//   StatusConflictError   the status kept changing under us: 503
//   InvalidPathSegmentError, BadKeyError  the input can never address an object: 400
//   anything else         a failure of the function's own code: 500 (retried, then dead-lettered)
import { InvalidPathSegmentError } from './kinds.ts';
import { ApiError } from './kube/errors.ts';

export class TransientError extends Error {
  readonly retryAfterSeconds?: number;

  constructor(message: string, options: { retryAfterSeconds?: number; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = 'TransientError';
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

/**
 * The Retry-After (seconds) several failures agree on: the shortest, when every one of them asked
 * for one; else none, so one failure's wait never holds back another the broker would retry sooner.
 */
export function agreedRetryAfter(waits: (number | undefined)[]): number | undefined {
  return waits.length > 0 && waits.every((seconds) => seconds !== undefined) ? Math.min(...(waits as number[])) : undefined;
}

export class TerminalError extends Error {
  /** Kubernetes Event reason (UpperCamelCase), e.g. "InvalidSpec". */
  readonly reason: string;

  constructor(message: string, options: { reason: string; cause?: unknown }) {
    super(message, { cause: options.cause });
    this.name = 'TerminalError';
    this.reason = options.reason;
  }
}

/** Thrown by updateStatus after too many optimistic-concurrency conflicts in a row. */
export class StatusConflictError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StatusConflictError';
  }
}

/** A key that names no object the function could address (e.g. an owner named ".."). */
export class BadKeyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BadKeyError';
  }
}

/** The HTTP status a failure of one reconcile (or of working out the keys) is answered with. */
export function statusForError(error: unknown): 200 | 400 | 500 | 503 {
  if (error instanceof TerminalError) return 200;
  if (error instanceof InvalidPathSegmentError || error instanceof BadKeyError) return 400;
  if (error instanceof TransientError || error instanceof StatusConflictError) return 503;
  if (error instanceof ApiError && error.transient) return 503;
  return 500;
}
