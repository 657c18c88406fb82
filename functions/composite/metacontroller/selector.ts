// Which selector ties a parent to its children.
//
// Upstream: metacontroller pkg/controller/composite/
// controller.go: makeSelector (generateSelector → `controller-uid=<parent uid>`, the parent's
// own `.spec.selector` otherwise, and an empty one is an error, never "select everything"),
// doNotMatchLabels (parentResource.labelSelector; absent = every parent).
import { compileSelector, SELECTS_EVERYTHING, type KubeObject, type SelectorResult } from '../../runtime/index.ts';

// The core matches children with the runtime's label selectors.
export { compileSelector, type Selector, type SelectorResult } from '../../runtime/index.ts';
import type { CompositeControllerSpec, LabelSelector } from './types.ts';

export const CONTROLLER_UID_LABEL = 'controller-uid';

/**
 * Does this parent fall under the controller? parentResource.labelSelector absent = yes
 * (backward compatibility upstream); a selector that does not compile is the controller's error.
 */
export function parentFilter(spec: CompositeControllerSpec): SelectorResult {
  const selector = spec.parentResource.labelSelector;
  return selector ? compileSelector(selector) : { ok: true, selector: SELECTS_EVERYTHING };
}

/**
 * The selector a parent's children must match (makeSelector): `controller-uid=<uid>` with
 * generateSelector, else the parent's `.spec.selector`, which must not be empty.
 */
export function childSelector(spec: CompositeControllerSpec, parent: KubeObject): SelectorResult {
  if (spec.generateSelector === true) {
    return compileSelector({ matchLabels: { [CONTROLLER_UID_LABEL]: parent.metadata.uid ?? '' } });
  }
  const raw = (parent.spec as { selector?: unknown } | undefined)?.selector;
  if (raw !== undefined && raw !== null && (typeof raw !== 'object' || Array.isArray(raw))) {
    return { ok: false, reason: `can't get label selector from ${parent.kind} ${describeKey(parent)}` };
  }
  const selector = (raw ?? {}) as LabelSelector;
  if (Object.keys(selector.matchLabels ?? {}).length === 0 && (selector.matchExpressions ?? []).length === 0) {
    return { ok: false, reason: '.spec.selector must have either matchLabels, matchExpressions, or both' };
  }
  return compileSelector(selector);
}

export const describeKey = (object: KubeObject): string =>
  object.metadata.namespace ? `${object.metadata.namespace}/${object.metadata.name}` : `${object.metadata.name}`;
