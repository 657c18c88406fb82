// Which refusals of a write a function reports instead of throwing. A thrown error becomes a
// 5xx, and the delivery is retried and then dead-lettered while the status says nothing. That is
// right for a failure that passes (a conflict, an unreachable or overloaded API server), wrong for
// these two, which the same request meets again however often it is sent:
//
// - 422 Invalid: the object itself breaks a rule of the API server; only a change of the object
//   (of the resource it is made from) mends it.
// - 403 Forbidden: RBAC, a ResourceQuota or an admission policy (Pod Security, a webhook) refuses
//   it. A change of the quota or the policy may mend it later, and no event of the reconciled
//   object would say so: callers report it and try again later (FORBIDDEN_RETRY_SECONDS).
import { ApiError, NOT_SERVED } from './kube/errors.ts';
import { boundedMessage } from './bounded-messages.ts';

/** When a write refused by policy (403) is tried again: a quota or policy lifted comes with no event of ours. */
export const FORBIDDEN_RETRY_SECONDS = 60;

export interface RefusedWrite {
  /** 403: may be mended later by a quota or policy change (try again later); else 422, mended only by a change of the object. */
  forbidden: boolean;
  /** The API server's own words (its Status message), bounded for a condition or an Event: it may quote the refused object. */
  message: string;
}

/** The refusal `error` is, when retrying the same write will not change it; undefined for any other error. */
export function refusedWrite(error: unknown): RefusedWrite | undefined {
  if (!(error instanceof ApiError) || (error.code !== 403 && error.code !== 422)) return undefined;
  return { forbidden: error.code === 403, message: boundedMessage(error.status?.message ?? error.message) };
}

/** The request an RBAC refusal names: what a rule must allow for it to pass. */
export interface RefusedRequest {
  verb: string;
  group: string;
  /** With its subresource, as a rule names it: "widgets/status". */
  resource: string;
  /** Undefined at the cluster scope. */
  namespace?: string;
}

/**
 * The request a 403's message names, when RBAC refused it. kube-apiserver words it so
 * (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/errors.go, forbiddenMessage):
 * `User "…" cannot patch resource "widgets/status" in API group "example.com" in the namespace "default"`
 * (or `at the cluster scope`). A 403 from a quota or an admission policy names none: undefined.
 */
export function refusedRequest(error: unknown): RefusedRequest | undefined {
  if (!(error instanceof ApiError) || error.code !== 403) return undefined;
  const text = error.status?.message ?? error.message;
  const match = /cannot (\S+) resource "([^"]+)" in API group "([^"]*)"(?: in the namespace "([^"]*)")?/.exec(text);
  if (!match) return undefined;
  const [, verb, resource, group, namespace] = match;
  return { verb: verb!, group: group!, resource: resource!, ...(namespace ? { namespace } : {}) };
}

/** The reason a reconcile that retrying cannot mend is reported with, on a Warning Event and on Ready=False. */
export type UnmendableReason = 'ReconcileForbidden' | 'ReconcileInvalid' | 'KindNotServed';

/**
 * The reason to report a reconcile's failure with when sending the same event again cannot mend
 * it: 403 (RBAC, a quota, a policy), 422 (the object breaks a rule of the API server), or a kind
 * the API server does not serve. Undefined for any other failure (retried as before).
 */
export function unmendableReason(error: unknown): UnmendableReason | undefined {
  if (!(error instanceof ApiError)) return undefined;
  if (error.code === 403) return 'ReconcileForbidden';
  if (error.code === 422) return 'ReconcileInvalid';
  if (error.reason === NOT_SERVED) return 'KindNotServed';
  return undefined;
}
