// Retry pacing shared by the source's loops and its sink delivery: exponential backoff with
// jitter (client-go's wait.Backoff with Jitter), sleeps and waits that end when the source stops.
import { ApiError } from '../../functions/runtime/index.ts';

export const BACKOFF_INITIAL_MS = 200;
export const BACKOFF_MAX_MS = 30_000;
/** Between half and all of `ms`, so loops that failed together do not retry together. */
export const jitter = (ms: number): number => Math.round(ms * (0.5 + Math.random() * 0.5));

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** `promise`, or a rejection as soon as `signal` aborts (the work itself is abandoned, not cancelled). */
export function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/** One line saying what went wrong. */
export function describe(error: unknown): string {
  let text: string;
  if (error instanceof ApiError) {
    const status = error.code === 0 ? 'unreachable' : String(error.code);
    text = error.reason && error.reason !== status ? `${status} ${error.reason}: ${error.message}` : `${status}: ${error.message}`;
  } else if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    text = typeof code === 'string' ? `${code}: ${error.message}` : error.message;
  } else {
    text = String(error);
  }
  return text.replace(/\s+/g, ' ').trim();
}
