// A hook's answer, checked before anything is written: decoding, namespace defaults, and the
// invariants between the parent and the children it asks for.
//
// Upstream: metacontroller pkg/hooks/webhook.go (webhookExecutor.Call: sigs.k8s.io/json
// UnmarshalStrict into CompositeHookResponse; unknown fields are an error in strict mode, the
// default for v2 hooks, and ignored in loose mode, the default for v1; an explicit
// responseUnMarshallMode wins), k8s.io/apimachinery unstructured.UnmarshalJSON (each child needs
// a `kind`), pkg/controller/composite/hooks.go (applyNamespaceDefaults: a child without a
// namespace gets the parent's) and composite/controller.go syncParentObject ("Enforce invariants
// between parent selector and child labels": labels must be a string map, generateSelector adds
// `controller-uid` when absent, every child must match the parent's selector).
//
// Stricter than upstream, on purpose (a function only has the RBAC of its declared child rules,
// and names reach URLs): a child whose apiVersion/kind is not one of the controller's child
// rules, or whose name/namespace is not a valid object name, rejects the whole answer.
// Upstream would try the write and fail that one child at the API server. So does a namespaced
// child of a namespaced parent in another namespace: its ownerReference cannot cross namespaces,
// so the garbage collector deletes it (OwnerRefInvalidNamespace) and every sync creates it
// again, while upstream reports success. And so does an answer of more than MAX_CHILDREN
// children: upstream has no bound, a function runs under its Service's memory limit.
import { isValidNamespace, pathSegmentProblem, type KubeObject, quote } from '../../runtime/index.ts';
import { firstDuplicateKey } from './duplicate-keys.ts';
import { describeKey, CONTROLLER_UID_LABEL, type Selector } from './selector.ts';
import { allowedPrivileged, PRIVILEGED_CHILD_REASON, privilegedChildProblem } from './privileged.ts';
import type { CompositeController, CompositeHookResponse, HookVersion, ResolvedResource, Webhook } from './types.ts';

/** `eventReason`: the Warning Event's reason when it is not upstream's SyncError. */
export type Checked<T> = { ok: true; value: T } | { ok: false; reason: string; eventReason?: string };

const RESPONSE_FIELDS = new Set(['status', 'children', 'resyncAfterSeconds', 'finalized']);
/** Children are decoded leniently upstream (unstructured.UnmarshalJSON), even in strict mode. */
const CHILDREN_ONLY: ReadonlySet<string> = new Set(['children']);

/** The strict-mode complaint about a duplicated key, if any (shared with related.ts). */
export function strictDuplicate(body: string, unchecked: ReadonlySet<string> = new Set()): string | undefined {
  try {
    const path = firstDuplicateKey(body, unchecked);
    return path ? `strict validation failed: duplicate field ${quote(path)}` : undefined;
  } catch {
    return 'strict validation failed: JSON nested too deeply';
  }
}

/** v2 hooks default to strict decoding, v1 hooks to loose (responseUnmarshallMode upstream). */
export function isStrict(version: HookVersion, webhook: Webhook | undefined): boolean {
  const mode = webhook?.responseUnMarshallMode;
  return mode ? mode === 'strict' : version === 'v2';
}

/** Decodes the body of a 200 answer into a response, or says exactly what is wrong with it. */
export function parseHookResponse(
  body: string,
  options: { version: HookVersion; strict: boolean; hookType: string },
): Checked<CompositeHookResponse> {
  const fail = (reason: string): Checked<CompositeHookResponse> => ({
    ok: false,
    reason: `can't unmarshal webhookResponse (version: ${options.version}, type: ${options.hookType}): ${reason}`,
  });
  let raw: unknown;
  try {
    raw = JSON.parse(body);
  } catch (error) {
    return fail(`malformed JSON: ${(error as Error).message}`);
  }
  const response: CompositeHookResponse = { status: null, children: [], resyncAfterSeconds: 0, finalized: false };
  // A JSON null decodes into the zero response upstream: no status, no children.
  if (raw === null) return { ok: true, value: response };
  if (typeof raw !== 'object' || Array.isArray(raw)) return fail(`expected a JSON object, got ${jsonType(raw)}`);
  const fields = raw as Record<string, unknown>;
  if (options.strict) {
    const unknown = Object.keys(fields).filter((key) => !RESPONSE_FIELDS.has(key));
    if (unknown.length > 0)
      return fail(
        `strict validation failed: unknown field${unknown.length > 1 ? 's' : ''} ${unknown
          .slice(0, 10)
          .map((key) => quote(key))
          .join(', ')}${unknown.length > 10 ? ` and ${unknown.length - 10} more` : ''}`,
      );
    const duplicate = strictDuplicate(body, CHILDREN_ONLY);
    if (duplicate) return fail(duplicate);
  }
  const { status, children, resyncAfterSeconds, finalized } = fields;
  if (status !== undefined && status !== null) {
    if (typeof status !== 'object' || Array.isArray(status)) return fail(`"status" must be an object, got ${jsonType(status)}`);
    response.status = status as Record<string, unknown>;
  }
  if (children !== undefined && children !== null) {
    if (!Array.isArray(children)) return fail(`"children" must be a list, got ${jsonType(children)}`);
    for (const [index, child] of children.entries()) {
      if (typeof child !== 'object' || child === null || Array.isArray(child))
        return fail(`children[${index}] must be an object, got ${jsonType(child)}`);
      const object = child as Record<string, unknown>;
      if (typeof object.kind !== 'string' || object.kind === '') return fail(`children[${index}]: Object 'Kind' is missing`);
      if (object.apiVersion !== undefined && typeof object.apiVersion !== 'string')
        return fail(`children[${index}]: "apiVersion" must be a string`);
      if (
        object.metadata !== undefined &&
        (typeof object.metadata !== 'object' || object.metadata === null || Array.isArray(object.metadata))
      ) {
        return fail(`children[${index}]: "metadata" must be an object`);
      }
      if (object.metadata === undefined) object.metadata = {};
    }
    response.children = children as KubeObject[];
  }
  if (resyncAfterSeconds !== undefined && resyncAfterSeconds !== null) {
    if (typeof resyncAfterSeconds !== 'number') return fail(`"resyncAfterSeconds" must be a number, got ${jsonType(resyncAfterSeconds)}`);
    response.resyncAfterSeconds = resyncAfterSeconds;
  }
  if (finalized !== undefined && finalized !== null) {
    if (typeof finalized !== 'boolean') return fail(`"finalized" must be a boolean, got ${jsonType(finalized)}`);
    response.finalized = finalized;
  }
  return { ok: true, value: response };
}

/** applyNamespaceDefaults: children without a namespace get the parent's ("" for a cluster-scoped parent). */
export function withNamespaceDefaults(children: KubeObject[], parent: KubeObject): KubeObject[] {
  return children.map((child) =>
    child.metadata.namespace ? child : { ...child, metadata: { ...child.metadata, namespace: parent.metadata.namespace ?? '' } },
  );
}

/**
 * Children one answer may ask for. A sync holds each child of its parent about three times (as
 * listed, as answered, as desired), and a hook may answer as many as its answer's size allows
 * (hook-client.ts MAX_RESPONSE_BYTES): this many fit the function's heap under the Service's
 * 256 Mi with room to spare (docs/benchmarks.md, bench:composite-children). More is refused
 * before anything is written: a SyncError, retried as any other.
 */
export const MAX_CHILDREN = 50_000;

export interface DesiredChildrenInput {
  parent: KubeObject;
  children: KubeObject[];
  childRules: ResolvedResource[];
  /** childSelector(spec, parent) from selector.ts. */
  selector: Selector;
  generateSelector: boolean;
  /** Whose hook answered: its annotation may allow privileged children (privileged.ts); without it none is allowed. */
  controller?: CompositeController;
}

/**
 * The children to apply, with namespace defaults and the generated `controller-uid` label, or
 * the reason the whole answer is refused (nothing is applied then, as upstream returns before
 * ManageChildren).
 */
export function desiredChildren(input: DesiredChildrenInput): Checked<KubeObject[]> {
  if (input.children.length > MAX_CHILDREN)
    return {
      ok: false,
      reason: `the hook answered ${input.children.length} children, more than the ${MAX_CHILDREN} one parent may have here (the function's memory is bounded)`,
    };
  const uid = input.parent.metadata.uid ?? '';
  const allowed = input.controller ? allowedPrivileged(input.controller) : new Set<string>();
  const result: KubeObject[] = [];
  for (const child of withNamespaceDefaults(input.children, input.parent)) {
    const what = `${child.kind} ${describeKey(child)}`;
    const rule = input.childRules.find((candidate) => candidate.apiVersion === child.apiVersion && candidate.kind === child.kind);
    if (!rule) {
      const declared = input.childRules.map((candidate) => `${candidate.kind} ${candidate.apiVersion}`).join(', ') || 'none';
      return {
        ok: false,
        reason: `desired child ${what} (apiVersion ${quote(child.apiVersion ?? '')}) is not one of the controller's childResources (${declared})`,
      };
    }
    const nameProblem = objectNameProblem(child.metadata.name);
    if (nameProblem) return { ok: false, reason: `desired child ${what}: metadata.name ${nameProblem}` };
    const namespace = child.metadata.namespace ?? '';
    if (typeof namespace !== 'string') return { ok: false, reason: `desired child ${what}: metadata.namespace must be a string` };
    if (rule.namespaced && namespace === '')
      return { ok: false, reason: `desired child ${what}: a namespaced ${rule.kind} needs a namespace (the parent is cluster-scoped)` };
    if (!rule.namespaced && namespace !== '')
      return { ok: false, reason: `desired child ${what}: ${rule.kind} is cluster-scoped and cannot have a namespace` };
    if (namespace && !isValidNamespace(namespace))
      return { ok: false, reason: `desired child ${what}: metadata.namespace is not a valid namespace name` };
    const parentNamespace = input.parent.metadata.namespace ?? '';
    if (rule.namespaced && parentNamespace && namespace !== parentNamespace) {
      return {
        ok: false,
        reason: `desired child ${what}: a child of a namespaced parent must be in the parent's namespace "${parentNamespace}" (an ownerReference cannot cross namespaces; the garbage collector would delete it)`,
      };
    }
    const privileged = privilegedChildProblem(child, rule, parentNamespace, allowed, input.controller?.metadata.name ?? '');
    if (privileged) return { ok: false, reason: `desired child ${what}: ${privileged}`, eventReason: PRIVILEGED_CHILD_REASON };
    const labels = child.metadata.labels;
    if (
      labels !== undefined &&
      labels !== null &&
      (typeof labels !== 'object' || Array.isArray(labels) || Object.values(labels).some((value) => typeof value !== 'string'))
    ) {
      return { ok: false, reason: `invalid labels on desired child ${what}: labels must be a map of strings` };
    }
    let desired = child;
    if (input.generateSelector && !Object.hasOwn(labels ?? {}, CONTROLLER_UID_LABEL)) {
      desired = { ...child, metadata: { ...child.metadata, labels: { ...(labels ?? {}), [CONTROLLER_UID_LABEL]: uid } } };
    }
    if (!input.selector.matches(desired.metadata.labels ?? {})) {
      return { ok: false, reason: `labels on desired child ${what} don't match parent selector` };
    }
    result.push(desired);
  }
  return { ok: true, value: result };
}

/**
 * What the API server says about any object name (path.IsValidPathSegmentName, applied to every
 * kind before the kind's own rules), or undefined when acceptable: names reach URLs, and `new URL`
 * collapses `.` and `..`. The kind's own rules (DNS subdomain for most) are the server's to apply.
 */
export function objectNameProblem(name: unknown): string | undefined {
  if (typeof name !== 'string' || name === '') return 'is required (generateName is not supported: children are matched by name)';
  return pathSegmentProblem(name);
}

const jsonType = (value: unknown): string => (value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value);
