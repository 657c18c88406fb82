// Readiness reported the way Knative reports it (knative.dev/pkg apis/condition_set.go): a
// `status.conditions` list with a `Ready` condition (True / False / Unknown, a CamelCase reason,
// a message), dependent conditions beside it, `observedGeneration`, and `lastTransitionTime` that
// moves only when a condition's status flips. `kubectl get triggers,apiserversources` prints the
// Ready and Reason columns from it (the CRDs' additionalPrinterColumns).
import { type KubeObject, type ResourceKind, isNotFound, type KubeClient, jsonEqual } from '../../functions/runtime/index.ts';

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}

/** What a controller concluded about one object: its conditions (Ready last) and extra status fields. */
export interface Verdict {
  conditions: Condition[];
  fields?: Record<string, unknown>;
}

export const ready = (reason = 'Ready', message?: string): Condition => ({
  type: 'Ready',
  status: 'True',
  reason,
  ...(message ? { message } : {}),
});
export const notReady = (reason: string, message: string): Condition => ({ type: 'Ready', status: 'False', reason, message });

/** Verdict fields of an object that is not Ready: the address it had is removed (merge patch null). */
export const cleared = (...fields: string[]): Record<string, null> => Object.fromEntries(fields.map((field) => [field, null]));

/** The status to write: the verdict's conditions with transition times kept where the status did not flip. */
export function nextStatus(object: KubeObject, verdict: Verdict, now: string): Record<string, unknown> {
  const previous = (object.status as { conditions?: Condition[] } | undefined)?.conditions ?? [];
  const conditions = verdict.conditions.map((condition) => {
    const before = previous.find((c) => c.type === condition.type);
    return { ...condition, lastTransitionTime: before && before.status === condition.status ? (before.lastTransitionTime ?? now) : now };
  });
  return { ...verdict.fields, observedGeneration: object.metadata.generation, conditions };
}

/**
 * True when writing `status` would change nothing a reader sees (so a status write does not feed
 * itself). A field set to null (removed by the merge patch) equals an absent one. Key order does
 * not count: the API server answers with its own order, and a comparison of serialized text
 * found every status changed, so each write's watch event brought another write, without end.
 */
export function sameStatus(object: KubeObject, status: Record<string, unknown>): boolean {
  const current = (object.status ?? {}) as Record<string, unknown>;
  return Object.keys(status).every((key) => jsonEqual(status[key] ?? null, current[key] ?? null));
}

/** Writes the status subresource unless nothing changed; an object deleted meanwhile is no error. */
export async function writeStatus(kube: KubeClient, kind: ResourceKind, object: KubeObject, verdict: Verdict): Promise<void> {
  const status = nextStatus(object, verdict, new Date().toISOString());
  if (sameStatus(object, status)) return;
  try {
    await kube.mergePatch(kind, { namespace: object.metadata.namespace ?? '', name: object.metadata.name! }, { status }, 'status');
  } catch (error) {
    if (!isNotFound(error)) throw error;
  }
}

/** Where the controllers report readiness: the objects' status in the API server, or a board in memory. */
export interface StatusWriter {
  write(kind: ResourceKind, object: KubeObject, verdict: Verdict): Promise<void>;
}

/** Status written to the objects in the API server (they live there: the local control plane). */
export const apiServerStatus = (kube: KubeClient): StatusWriter => ({
  write: (kind, object, verdict) => writeStatus(kube, kind, object, verdict),
});

/**
 * Status kept in memory, for objects that live only in the plane (run against a configured
 * cluster, whose Knative objects, if any, are not the plane's to write): the last verdict of each
 * object, so the plane can say what is not Ready.
 */
export class StatusBoard implements StatusWriter {
  readonly #verdicts = new Map<string, Verdict>();

  async write(kind: ResourceKind, object: KubeObject, verdict: Verdict): Promise<void> {
    this.#verdicts.set(`${kind.kind} ${object.metadata.namespace ?? ''}/${object.metadata.name}`, verdict);
  }

  /** The Ready condition of `Kind namespace/name`, if reported. */
  ready(key: string): Condition | undefined {
    return this.#verdicts.get(key)?.conditions.find((condition) => condition.type === 'Ready');
  }

  /** Each object that is not Ready, as "Kind namespace/name: Reason: message". */
  problems(): string[] {
    return [...this.#verdicts].flatMap(([key, verdict]) => {
      const ready = verdict.conditions.find((condition) => condition.type === 'Ready');
      return ready?.status === 'True' ? [] : [`${key}: ${ready?.reason ?? 'NoReadyCondition'}: ${ready?.message ?? ''}`];
    });
  }
}
