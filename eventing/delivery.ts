// Delivery semantics of the local broker, kept identical to Knative Eventing's channel-based
// broker (kncloudevents dispatcher + go-retryablehttp) so that a Trigger's `delivery` behaves the
// same locally and on a cluster:
//
// - `retry` counts retries after the first attempt (attempts = retry + 1).
// - Backoff before retry n (n = 1, 2, …) uses attemptNum = n - 1, as go-retryablehttp numbers it:
//   exponential = backoffDelay * 2^(n-1)  → d, 2d, 4d, …
//   linear      = backoffDelay * (n-1)    → 0, d, 2d, …   (yes: Knative's first linear retry is immediate)
//   Both `backoffPolicy` and `backoffDelay` must be set for any wait at all (Knative ignores one
//   without the other and retries immediately).
// - Retried: network errors/timeouts, 5xx, 404, 408, 409, 429. Not retried: other 4xx, 3xx.
// - `timeout` bounds each attempt (http.Client.Timeout per request in kncloudevents'
//   DoWithRetries): an attempt past it fails like a network error and is retried.
// - A 429 or 503 with a Retry-After header (seconds or an HTTP date) waits at least that long
//   before the next retry, at most `retryAfterMax`, as kncloudevents' generateBackoffFn does.
//   Knative 1.23 has this behind its alpha delivery-retryafter feature, whose reading is:
//   retryAfterMax set > 0, respected up to it; PT0S, ignored; unset, ignored. The local broker
//   reads it the same way, so a Trigger honours Retry-After locally exactly when it would on a
//   cluster (where the feature must also be enabled for the field to be accepted at all).
// - Dead-lettered events carry knativeerrordest (the URL that failed), knativeerrorcode (its
//   HTTP status) and knativeerrordata (the response body, standard base64, cut to 1024 chars).
import { resolve as resolvePath } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CloudEventV1 } from 'cloudevents';
import { retryAfterMs } from '../functions/runtime/index.ts';

export interface DeliverySpec {
  /** Retries after the first attempt. */
  retry?: number;
  backoffPolicy?: 'linear' | 'exponential';
  /** ISO-8601 duration, e.g. PT0.2S. */
  backoffDelay?: string;
  /** ISO-8601 duration, per attempt. */
  timeout?: string;
  /** ISO-8601 duration: the longest a Retry-After of a 429/503 is honoured; PT0S or unset = not at all. */
  retryAfterMax?: string;
  /** How events are sent: "binary" (what the local broker always does) or "json" (structured; not implemented locally). */
  format?: 'binary' | 'json';
  /** http(s) URL, or a file path / file:// URL to append JSON lines to. */
  deadLetterSink?: string;
}

/** Knative's broker default (config-br-defaults): retry 10, exponential, PT0.2S. */
export const KNATIVE_DEFAULT_DELIVERY: Readonly<DeliverySpec> = Object.freeze({
  retry: 10,
  backoffPolicy: 'exponential',
  backoffDelay: 'PT0.2S',
});

export const KNATIVE_ERROR_DEST = 'knativeerrordest';
export const KNATIVE_ERROR_CODE = 'knativeerrorcode';
export const KNATIVE_ERROR_DATA = 'knativeerrordata';
/** pkg/kncloudevents/attributes/knative_error.go: KnativeErrorDataExtensionMaxLength. */
export const KNATIVE_ERROR_DATA_MAX_LENGTH = 1024;

export type DeadLetterTarget = { kind: 'http'; url: string } | { kind: 'file'; path: string };

/** A DeliverySpec with its durations parsed; what the dispatcher actually uses. */
export interface ResolvedDelivery {
  retry: number;
  backoffPolicy?: 'linear' | 'exponential';
  backoffDelayMs?: number;
  /** 0 = no per-attempt timeout. */
  timeoutMs: number;
  /** The longest a Retry-After is honoured; 0 or undefined = not at all. */
  retryAfterMaxMs?: number;
  deadLetter: DeadLetterTarget;
}

const NUMBER = String.raw`(\d+(?:[.,]\d+)?)`;
const ISO_DURATION = new RegExp(
  `^P(?:${NUMBER}Y)?(?:${NUMBER}M)?(?:${NUMBER}W)?(?:${NUMBER}D)?` + `(?:T(?:${NUMBER}H)?(?:${NUMBER}M)?(?:${NUMBER}S)?)?$`,
);
const MS_PER_SECOND = 1000;
const MS_PER_DAY = 24 * 3600 * MS_PER_SECOND;
// Same estimates as the period library Knative uses (years of 365.2425 days, months a 12th of that).
const MS_PER_YEAR = 365.2425 * MS_PER_DAY;
const MS_PER_MONTH = MS_PER_YEAR / 12;
const UNIT_MS = [MS_PER_YEAR, MS_PER_MONTH, 7 * MS_PER_DAY, MS_PER_DAY, 3600 * MS_PER_SECOND, 60 * MS_PER_SECOND, MS_PER_SECOND];

/** Parses an ISO-8601 duration (PT0.2S, PT1M30S, P1D, P1W, …) to milliseconds. */
export function parseIsoDuration(text: string): number {
  if (typeof text !== 'string') {
    throw new Error(`invalid ISO-8601 duration ${describe(text)}: expected a string such as "PT0.2S", "PT30S" or "P1D"`);
  }
  const trimmed = text.trim().toUpperCase();
  const match = ISO_DURATION.exec(trimmed);
  const hasComponent = match !== null && match.slice(1).some((part) => part !== undefined);
  if (!match || !hasComponent || trimmed.endsWith('T')) {
    throw new Error(`invalid ISO-8601 duration ${JSON.stringify(text)}: expected a form such as "PT0.2S", "PT30S", "PT1M" or "P1D"`);
  }
  let ms = 0;
  match.slice(1).forEach((part, i) => {
    if (part !== undefined) ms += Number(part.replace(',', '.')) * (UNIT_MS[i] ?? 0);
  });
  if (!Number.isFinite(ms)) throw new Error(`invalid ISO-8601 duration ${JSON.stringify(text)}: value too large`);
  return ms;
}

/** Wait before retry number `retryNumber` (1 = first retry), Knative formula (Dispatcher.sleep keeps it within a timer's range). */
export function backoffDelayMs(delivery: Pick<ResolvedDelivery, 'backoffPolicy' | 'backoffDelayMs'>, retryNumber: number): number {
  const delay = delivery.backoffDelayMs;
  if (delivery.backoffPolicy === undefined || delay === undefined || retryNumber < 1) return 0;
  const attemptNum = retryNumber - 1;
  return delivery.backoffPolicy === 'exponential' ? delay * 2 ** attemptNum : delay * attemptNum;
}

/**
 * The wait a 429 or 503 asked for with its Retry-After header (delta-seconds or an HTTP date, as
 * kncloudevents' parseRetryAfterDuration reads it), at most `maxMs`; 0 for other statuses, a
 * missing or unreadable header, or `maxMs` 0 or unset (retryAfterMax not given).
 */
export function retryAfterDelayMs(status: number, retryAfter: string | undefined, maxMs: number | undefined, now = Date.now()): number {
  if ((status !== 429 && status !== 503) || !maxMs) return 0;
  const wait = retryAfterMs(retryAfter, now);
  return wait !== undefined && wait > 0 ? Math.min(wait, maxMs) : 0;
}

/** kncloudevents.SelectiveRetry: 5xx, 404, 408, 409, 429 are retried; everything else is not. */
export function isRetryableStatus(status: number): boolean {
  return status >= 500 || status === 404 || status === 408 || status === 409 || status === 429;
}

/** Response body as knativeerrordata: standard base64, truncated to 1024 characters. */
export function encodeErrorData(body: Uint8Array | string | undefined): string {
  if (body === undefined) return '';
  const encoded = Buffer.from(body).toString('base64');
  return encoded.length > KNATIVE_ERROR_DATA_MAX_LENGTH ? encoded.slice(0, KNATIVE_ERROR_DATA_MAX_LENGTH) : encoded;
}

export interface DeliveryFailure {
  /** The URL whose delivery failed (the subscriber). */
  destination: string;
  /** Last HTTP status; absent for network errors, timeouts and refusals before any answer. */
  status?: number;
  /** Last response body, or a description of the dispatch error when there was no answer. */
  body?: Uint8Array | string;
  /** One line for the log. */
  reason: string;
}

/** The original event plus Knative's error extensions. */
export function withErrorExtensions(event: CloudEventV1<unknown>, failure: DeliveryFailure): CloudEventV1<unknown> {
  const out: CloudEventV1<unknown> = { ...event, [KNATIVE_ERROR_DEST]: failure.destination };
  if (failure.status !== undefined) out[KNATIVE_ERROR_CODE] = failure.status;
  else delete out[KNATIVE_ERROR_CODE];
  out[KNATIVE_ERROR_DATA] = encodeErrorData(failure.body);
  return out;
}

export function parseDeadLetterSink(sink: string, where: string): DeadLetterTarget {
  if (typeof sink !== 'string' || sink.trim() === '') {
    throw new Error(`${where}.deadLetterSink must be a non-empty http(s) URL, file:// URL or file path`);
  }
  const text = sink.trim();
  if (/^https?:\/\//i.test(text)) {
    try {
      return { kind: 'http', url: new URL(text).toString() };
    } catch {
      throw new Error(`${where}.deadLetterSink ${JSON.stringify(sink)} is not a valid URL`);
    }
  }
  if (/^file:/i.test(text)) {
    try {
      return { kind: 'file', path: fileURLToPath(text) };
    } catch {
      throw new Error(`${where}.deadLetterSink ${JSON.stringify(sink)} is not a valid file:// URL`);
    }
  }
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(text)) {
    throw new Error(`${where}.deadLetterSink ${JSON.stringify(sink)}: only http://, https://, file:// or a plain path are supported`);
  }
  return { kind: 'file', path: resolvePath(text) };
}

/** Validates a DeliverySpec and parses its durations; throws one clear Error naming the field. */
export function parseDeliverySpec(
  spec: DeliverySpec,
  where: string,
): Omit<ResolvedDelivery, 'deadLetter'> & { deadLetter?: DeadLetterTarget; warnings: string[] } {
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) {
    throw new Error(`${where} must be an object with retry, backoffPolicy, backoffDelay, timeout, retryAfterMax, deadLetterSink`);
  }
  const warnings: string[] = [];
  const known = new Set(['retry', 'backoffPolicy', 'backoffDelay', 'timeout', 'retryAfterMax', 'format', 'deadLetterSink']);
  for (const key of Object.keys(spec)) {
    if (!known.has(key)) throw new Error(`${where}.${key} is not a delivery field (known: ${[...known].join(', ')})`);
  }
  // The local dispatcher sends in binary mode only (as Knative does when format is unset).
  if (spec.format !== undefined && spec.format !== 'binary') {
    throw new Error(
      `${where}.format ${describe(spec.format)}: the local broker sends events in binary mode only ("binary", or leave format unset)`,
    );
  }
  let retry = 0;
  if (spec.retry !== undefined) {
    if (!Number.isInteger(spec.retry) || spec.retry < 0) {
      throw new Error(`${where}.retry must be an integer >= 0, got ${describe(spec.retry)}`);
    }
    retry = spec.retry;
  }
  if (spec.backoffPolicy !== undefined && spec.backoffPolicy !== 'linear' && spec.backoffPolicy !== 'exponential') {
    throw new Error(`${where}.backoffPolicy must be "linear" or "exponential", got ${describe(spec.backoffPolicy)}`);
  }
  /** A duration field in milliseconds (undefined when unset); a malformed one throws naming the field. */
  const duration = (field: 'backoffDelay' | 'timeout' | 'retryAfterMax'): number | undefined => {
    const value = spec[field];
    if (value === undefined) return undefined;
    try {
      return parseIsoDuration(value);
    } catch (err) {
      throw new Error(`${where}.${field}: ${(err as Error).message}`);
    }
  };
  const backoffDelayMs = duration('backoffDelay');
  const timeoutMs = duration('timeout') ?? 0;
  // Knative's webhook refuses a zero timeout (it would mean "none" here, silently).
  if (spec.timeout !== undefined && timeoutMs <= 0) throw new Error(`${where}.timeout must be above zero, got ${describe(spec.timeout)}`);
  const retryAfterMaxMs = duration('retryAfterMax');
  if (retry > 0 && (spec.backoffPolicy === undefined) !== (spec.backoffDelay === undefined)) {
    warnings.push(
      `${where} sets only one of backoffPolicy/backoffDelay; Knative then retries without waiting, and so does the local broker`,
    );
  }
  const deadLetter = spec.deadLetterSink === undefined ? undefined : parseDeadLetterSink(spec.deadLetterSink, where);
  const resolved: Omit<ResolvedDelivery, 'deadLetter'> & { deadLetter?: DeadLetterTarget; warnings: string[] } = {
    retry,
    timeoutMs,
    warnings,
  };
  if (spec.backoffPolicy !== undefined) resolved.backoffPolicy = spec.backoffPolicy;
  if (backoffDelayMs !== undefined) resolved.backoffDelayMs = backoffDelayMs;
  if (retryAfterMaxMs !== undefined) resolved.retryAfterMaxMs = retryAfterMaxMs;
  if (deadLetter !== undefined) resolved.deadLetter = deadLetter;
  return resolved;
}

function describe(value: unknown): string {
  if (value === undefined) return 'undefined';
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
