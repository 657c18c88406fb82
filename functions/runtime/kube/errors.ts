// The error model of the Kubernetes client: ApiError with its code and reason, classified once
// (transient or not), and NotServed kept apart from NotFound.
import { boundedMessage } from '../bounded-messages.ts';

/** The Kubernetes Status object an API error carries. */
export interface KubeStatus {
  kind?: 'Status';
  status?: string;
  message?: string;
  reason?: string;
  code?: number;
  details?: { name?: string; kind?: string; causes?: { field?: string; message?: string; reason?: string }[] };
  /** `continue`: where a list whose continue token expired can go on from (see expiredContinuation). */
  metadata?: { continue?: string };
}

export class ApiError extends Error {
  /** HTTP status; 0 when the API server could not be reached. */
  readonly code: number;
  /** Kubernetes reason (NotFound, AlreadyExists, Conflict, Invalid, Forbidden…) or the network error code. */
  readonly reason: string;
  readonly status?: KubeStatus;
  /** How long the API server asked us to wait (its Retry-After on a 429 or 5xx: API Priority and Fairness, a server shutting down). */
  readonly retryAfterSeconds?: number;

  constructor(code: number, reason: string, message: string, status?: KubeStatus, retryAfterSeconds?: number) {
    super(message);
    this.name = 'ApiError';
    this.code = code;
    this.reason = reason;
    this.status = status;
    this.retryAfterSeconds = retryAfterSeconds;
  }

  /** Worth trying again later: the API was unreachable, overloaded, timed out, or did not serve the kind yet. */
  get transient(): boolean {
    return this.code === 0 || this.code === 429 || this.code >= 500 || this.reason === NOT_SERVED;
  }
}

/**
 * The reason of a 404 that is about the resource type, not an object: the API server answers
 * "404 page not found" for a kind it does not serve. It does so for a kind whose CRD is missing,
 * and also for every custom resource for a moment after it starts, before its CRD informer has
 * synced. Reading that as "the object is gone" would drop the event, so it is kept apart from
 * NotFound and retried.
 */
export const NOT_SERVED = 'NotServed';

/**
 * An RBAC denial, in the API server's words (k8s.io/apiserver responsewriters forbiddenMessage:
 * `User "…" cannot <verb> resource "…"`), as opposed to another 403 (an admission policy, a quota).
 */
export const isRbacDenial = (error: unknown): boolean =>
  error instanceof ApiError && error.code === 403 && /\bcannot [a-z]+ resource "/.test(error.status?.message ?? error.message);

/** The object (or the namespace it was addressed in) does not exist. */
export const isNotFound = (error: unknown): boolean => error instanceof ApiError && error.code === 404 && error.reason !== NOT_SERVED;
export const isAlreadyExists = (error: unknown): boolean =>
  error instanceof ApiError && error.code === 409 && error.reason === 'AlreadyExists';
export const isConflict = (error: unknown): boolean => error instanceof ApiError && error.code === 409 && error.reason === 'Conflict';
/**
 * The token to go on with when the API server answers a continued page 410 Expired: etcd has
 * compacted the revision the list is read at (kube-apiserver compacts every 5 minutes), so the
 * pages can no longer be one snapshot. kube-apiserver (1.13+) then puts in the Status a token
 * for the remainder at the latest revision, starting right after the last object returned.
 */
export const expiredContinuation = (error: unknown): string | undefined =>
  (error instanceof ApiError && error.code === 410 && error.status?.metadata?.continue) || undefined;

/** The body as JSON; undefined when it is empty or not JSON. */
export function parseJson(text: string): unknown {
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}

/** The ApiError for a non-2xx answer with body `text`. */
export function errorFromResponse(what: string, code: number, text: string, retryAfter?: string): ApiError {
  const parsed = parseJson(text);
  const status = parsed && typeof parsed === 'object' ? (parsed as KubeStatus) : undefined;
  // An object that does not exist comes back as a Status naming it; anything else is about the path.
  if (code === 404 && !(status?.reason === 'NotFound' && status.details?.name)) {
    return new ApiError(
      404,
      NOT_SERVED,
      `${what}: the API server does not serve this resource (is its CustomResourceDefinition installed and Established, or is the server still starting?)`,
      status,
    );
  }
  // An Invalid answer quotes the refused value whole; the message goes into logs and conditions.
  // Only in whole seconds, as the API server writes it (client-go's checkWait reads it so too).
  const retryAfterSeconds = (code === 429 || code >= 500) && /^\d{1,9}$/.test(retryAfter ?? '') ? Number(retryAfter) : undefined;
  return new ApiError(
    code,
    status?.reason ?? String(code),
    `${what}: ${status?.message === undefined ? text.slice(0, 200) || code : boundedMessage(status.message)}`,
    status,
    retryAfterSeconds,
  );
}
