// Reconciles that fail for a reason sending the same event again cannot mend (refusals.ts
// unmendableReason: 403, 422, a kind not served) are shown on the reconciled object, where
// `kubectl describe` finds them, instead of being answered 5xx, retried and dead-lettered while the
// object says nothing (controller-runtime's TerminalError, recorded rather than requeued):
//
//   a Warning Event on the object     reason ReconcileForbidden, ReconcileInvalid or KindNotServed
//   Ready=False with that reason       best effort, through the status subresource when the kind
//                                      has one: when the refused write was the status itself, the
//                                      condition is refused too and the Event is what shows
//   the answer                         2xx naming the reason (answers.ts); a 403 or a kind not
//                                      served comes back after a while (a Role bound or a CRD
//                                      applied brings no event of the object), a 422 with the
//                                      object's next change or the resync
//   the log                            for an RBAC refusal, the rule the declaration lacks
//
// A later reconcile of the key that succeeds takes the condition away again, if it is still the
// one reported here (this process remembers which keys it marked; a function that sets its own
// Ready replaces it anyway). Functions that report a refusal in their own status (refusedWrite)
// keep doing so: they do not throw it. No right is added: Events are the runtime's own (rbac.ts),
// the condition is written with the function's status rule.
import type { Logger } from 'pino';
import type { FunctionDeclaration, PolicyRule } from '../declaration.ts';
import { discoveryFor } from '../discovery.ts';
import { kindKeyString, type KindKey, type KubeObject } from '../kinds.ts';
import { ApiError, NOT_SERVED } from '../kube/errors.ts';
import type { KubeClient } from '../kube/client.ts';
import { setRecent } from '../lru-map.ts';
import { rulesFor } from '../rbac.ts';
import { setCondition, updateStatus, type Condition } from '../reconciler.ts';
import type { EventSink } from '../recorder.ts';
import { FORBIDDEN_RETRY_SECONDS, refusedRequest, unmendableReason, type RefusedRequest, type UnmendableReason } from '../refusals.ts';

/** When a reconcile that met a kind not served is tried again: a CRD applied brings no event of the reconciled object. */
export const NOT_SERVED_RETRY_SECONDS = 15;
/** Keys whose Ready=False this process remembers setting. */
const MARKED_KEYS = 4096;

/** What the host answers for a key whose reconcile was refused for good. */
export interface Unmended {
  reason: UnmendableReason;
  message: string;
  /** When to try again (undefined: at the object's next change or the resync). */
  retryAfterSeconds?: number;
}

type WithConditions = KubeObject & { status?: { conditions?: Condition[] } & Record<string, unknown> };

/** Does any of `rules` allow `request` (verbs, groups and resources, `*` included; resourceNames ignored: the message does not name the object)? */
export function allows(rules: PolicyRule[], request: RefusedRequest): boolean {
  const has = (list: string[], value: string) => list.includes('*') || list.includes(value);
  return rules.some((rule) => has(rule.verbs, request.verb) && has(rule.apiGroups, request.group) && has(rule.resources, request.resource));
}

/** What to say about an RBAC refusal: the rule the declaration lacks, or that it has it and the identity does not. */
export function missingRuleMessage(declaration: FunctionDeclaration, request: RefusedRequest): string {
  const where = `${request.verb} on ${request.group || 'the core group'} ${request.resource}`;
  if (allows(rulesFor(declaration), request))
    return `the declaration of ${declaration.name} allows ${where}, but the identity it runs as may not: are its generated Role and binding applied?`;
  return `declaration of ${declaration.name} has no rule for ${where}; add { apiGroups: ['${request.group}'], resources: ['${request.resource}'], verbs: ['${request.verb}'] }`;
}

export class UnmendableReconciles {
  readonly #declaration: FunctionDeclaration;
  readonly #kube: KubeClient;
  readonly #events: EventSink;
  /** Key → the reason of the Ready=False this process set on it. */
  readonly #marked = new Map<string, UnmendableReason>();

  constructor(declaration: FunctionDeclaration, kube: KubeClient, events: EventSink) {
    this.#declaration = declaration;
    this.#kube = kube;
    this.#events = events;
  }

  /**
   * Reports `error` on the object `key` names when retrying cannot mend it, and says how to
   * answer; undefined when the failure is one to retry. A kind not served that is the reconciled
   * kind itself stays a retried failure: the API server serves no custom resource for a moment
   * after it starts, and there is no object to report on.
   */
  async report(key: KindKey, error: unknown, log: Logger): Promise<Unmended | undefined> {
    const reason = unmendableReason(error);
    if (!reason) return undefined;
    let object: WithConditions | undefined;
    let read = true;
    try {
      object = await this.#kube.get<WithConditions>(key.kind, key);
    } catch (readError) {
      if (reason === 'KindNotServed' || (readError instanceof ApiError && readError.reason === NOT_SERVED)) return undefined;
      read = false;
    }
    const request = refusedRequest(error);
    const rule = request && missingRuleMessage(this.#declaration, request);
    const apiMessage = (error as Error).message;
    const message = rule ? `${rule} (${apiMessage})` : apiMessage;
    log.warn(
      { reason, err: apiMessage, ...(rule ? { rule } : {}) },
      rule ?? `reconcile refused (${reason}); shown on the object, not retried as a failure`,
    );
    const retryAfterSeconds =
      reason === 'ReconcileForbidden' ? FORBIDDEN_RETRY_SECONDS : reason === 'KindNotServed' ? NOT_SERVED_RETRY_SECONDS : undefined;
    const unmended = { reason, message, retryAfterSeconds };
    // Gone meanwhile: nothing to show it on.
    if (read && !object) return unmended;
    this.#events.record(
      object ?? { metadata: { name: key.name, namespace: key.namespace || undefined } },
      key.kind,
      'Warning',
      reason,
      message,
      log,
    );
    if (object) await this.#setNotReady(key, object, reason, message, log);
    return unmended;
  }

  /** After a reconcile of `key` succeeded: takes away the Ready=False this process set, if it is still there. */
  async succeeded(key: KindKey, log: Logger): Promise<void> {
    const id = kindKeyString(key);
    const reason = this.#marked.get(id);
    if (!reason) return;
    this.#marked.delete(id);
    try {
      await updateStatus<WithConditions>(this.#kube, key.kind, key, (current) => {
        const conditions = current.status?.conditions ?? [];
        const ready = conditions.find((condition) => condition.type === 'Ready');
        if (ready?.status !== 'False' || ready.reason !== reason) return undefined;
        return { ...current.status, conditions: conditions.filter((condition) => condition !== ready) };
      });
    } catch (error) {
      log.debug({ err: (error as Error).message }, `could not take away Ready=False (${reason})`);
    }
  }

  async #setNotReady(key: KindKey, object: WithConditions, reason: UnmendableReason, message: string, log: Logger): Promise<void> {
    try {
      if (!(await discoveryFor(this.#kube).hasStatusSubresource(key.kind))) return;
      await updateStatus<WithConditions>(
        this.#kube,
        key.kind,
        key,
        (current) => ({
          ...current.status,
          conditions: setCondition(current.status?.conditions, {
            type: 'Ready',
            status: 'False',
            reason,
            message,
            ...(current.metadata.generation !== undefined ? { observedGeneration: current.metadata.generation } : {}),
          }),
        }),
        object,
      );
      setRecent(this.#marked, kindKeyString(key), reason, MARKED_KEYS);
    } catch (error) {
      log.warn(
        { err: (error as Error).message },
        `could not set Ready=False (${reason}) on the object; its Warning Event shows the reason`,
      );
    }
  }
}
