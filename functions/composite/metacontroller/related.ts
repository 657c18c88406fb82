// The customize hook's answer, and the lists it turns into: which related objects a sync hook sees.
//
// Upstream: metacontroller pkg/controller/common/customize/manager.go (determineSelectionType:
// names exclude both selectors, namespace excludes namespaceSelector; GetRelatedObjects: per
// selection type which namespace is listed, with which selector, and the v1-hook rule that a
// namespaced parent only sees related objects of its own namespace; getCustomizeHookResponse
// caches the answer per parent uid and generation) and customize/api/v1/hooks.go
// (CustomizeHookResponse {relatedResources}); decoding as in pkg/hooks/webhook.go.
import { type KubeObject, quote } from '../../runtime/index.ts';
import { strictDuplicate, type Checked } from './hook-response.ts';
import { compileSelector } from './selector.ts';
import type { CustomizeHookResponse, HookVersion, LabelSelector, RelatedResourceRule, ResolvedResource } from './types.ts';

const RULE_FIELDS = new Set(['apiVersion', 'resource', 'labelSelector', 'namespaceSelector', 'namespace', 'names']);
const SELECTOR_FIELDS = new Set(['matchLabels', 'matchExpressions']);

/** Decodes a customize hook's 200 body (strict: unknown fields are errors, at every level of the rules). */
export function parseCustomizeResponse(body: string, options: { version: HookVersion; strict: boolean }): Checked<CustomizeHookResponse> {
  const fail = (reason: string): Checked<CustomizeHookResponse> => ({
    ok: false,
    reason: `can't unmarshal webhookResponse (version: ${options.version}, type: customize): ${reason}`,
  });
  let raw: unknown;
  try {
    raw = JSON.parse(body);
  } catch (error) {
    return fail(`malformed JSON: ${(error as Error).message}`);
  }
  if (raw === null) return { ok: true, value: { relatedResources: [] } };
  if (typeof raw !== 'object' || Array.isArray(raw)) return fail('expected a JSON object');
  const fields = raw as Record<string, unknown>;
  if (options.strict) {
    const unknown = Object.keys(fields).filter((key) => key !== 'relatedResources');
    if (unknown.length > 0) return fail(`strict validation failed: unknown field ${quote(unknown[0])}`);
    const duplicate = strictDuplicate(body);
    if (duplicate) return fail(duplicate);
  }
  const rules = fields.relatedResources ?? [];
  if (!Array.isArray(rules)) return fail('"relatedResources" must be a list');
  for (const [index, rule] of rules.entries()) {
    const where = `relatedResources[${index}]`;
    if (typeof rule !== 'object' || rule === null || Array.isArray(rule)) return fail(`${where} must be an object`);
    const r = rule as Record<string, unknown>;
    if (options.strict) {
      const unknown = Object.keys(r).find((key) => !RULE_FIELDS.has(key));
      if (unknown) return fail(`strict validation failed: unknown field ${quote(`${where}.${unknown}`)}`);
      for (const name of ['labelSelector', 'namespaceSelector']) {
        const selector = r[name];
        if (selector && typeof selector === 'object') {
          const extra = Object.keys(selector).find((key) => !SELECTOR_FIELDS.has(key));
          if (extra) return fail(`strict validation failed: unknown field ${quote(`${where}.${name}.${extra}`)}`);
        }
      }
    }
    if (typeof r.apiVersion !== 'string' || typeof r.resource !== 'string')
      return fail(`${where} needs string "apiVersion" and "resource"`);
    if (r.namespace !== undefined && typeof r.namespace !== 'string') return fail(`${where}.namespace must be a string`);
    if (r.names !== undefined && r.names !== null && (!Array.isArray(r.names) || r.names.some((name) => typeof name !== 'string')))
      return fail(`${where}.names must be a list of strings`);
    for (const name of ['labelSelector', 'namespaceSelector']) {
      const selector = r[name];
      if (selector !== undefined && selector !== null && (typeof selector !== 'object' || Array.isArray(selector)))
        return fail(`${where}.${name} must be an object`);
    }
  }
  return { ok: true, value: { relatedResources: rules as RelatedResourceRule[] } };
}

/** One list the shell makes for a related rule. */
export interface RelatedQuery {
  rule: ResolvedResource;
  /** undefined = all namespaces (or a cluster-scoped kind). */
  namespace?: string;
  /** labelSelector query parameter; "" = everything. */
  labelSelector: string;
  /** List Namespaces with this selector first, then list in each of them. */
  namespaceSelector?: string;
  /** Keep only objects with these names (empty = all). */
  names: string[];
}

export interface RelatedContext {
  version: HookVersion;
  parent: KubeObject;
  parentNamespaced: boolean;
}

/** determineSelectionType + GetRelatedObjects, minus the lists: one query per rule, or why not. */
export function relatedQueries(
  rules: RelatedResourceRule[],
  resolved: ResolvedResource[],
  context: RelatedContext,
): Checked<RelatedQuery[]> {
  const queries: RelatedQuery[] = [];
  const parentNamespace = context.parent.metadata.namespace ?? '';
  for (const [index, rule] of rules.entries()) {
    const resource = resolved[index];
    if (!resource) return { ok: false, reason: `can't find related resource ${quote(rule.resource)} in ${rule.apiVersion}` };
    const hasLabelSelector = rule.labelSelector !== undefined && rule.labelSelector !== null;
    const hasNamespaceSelector = rule.namespaceSelector !== undefined && rule.namespaceSelector !== null;
    const namespace = rule.namespace ?? '';
    const names = rule.names ?? [];
    // Only a v1 hook of a namespaced parent is confined to the parent's namespace.
    const confined = context.version === 'v1' && context.parentNamespaced && resource.namespaced;
    if (names.length > 0 && (hasLabelSelector || hasNamespaceSelector))
      return {
        ok: false,
        reason: `related rule cannot have both names and labelSelector/namespaceSelector specified (${rule.apiVersion} ${rule.resource})`,
      };
    if (namespace && hasNamespaceSelector)
      return {
        ok: false,
        reason: `related rule cannot have both namespace and namespaceSelector specified (${rule.apiVersion} ${rule.resource})`,
      };
    const labelSelector = selectorQuery(rule.labelSelector);
    if (!labelSelector.ok) return labelSelector;
    const inNamespace = resource.namespaced && namespace ? namespace : undefined;
    if (hasNamespaceSelector) {
      if (confined) return { ok: false, reason: 'namespaceSelector is not supported for namespaced parent in v1 hook version' };
      if (!resource.namespaced) return { ok: false, reason: 'namespaceSelector is only supported for namespaced related resources' };
      const namespaceSelector = selectorQuery(rule.namespaceSelector);
      if (!namespaceSelector.ok) return namespaceSelector;
      queries.push({ rule: resource, labelSelector: labelSelector.value, namespaceSelector: namespaceSelector.value, names: [] });
    } else if (namespace || names.length > 0) {
      // By namespace and labels, or by namespace and/or names (names never come with a selector).
      if (confined && namespace && namespace !== parentNamespace)
        return {
          ok: false,
          reason: `requested related object namespace ${namespace} differs from parent object namespace ${parentNamespace}`,
        };
      queries.push({ rule: resource, namespace: inNamespace, labelSelector: labelSelector.value, names });
    } else {
      queries.push({ rule: resource, namespace: confined ? parentNamespace : undefined, labelSelector: labelSelector.value, names: [] });
    }
  }
  return { ok: true, value: queries };
}

/** The related objects of one query from what the shell listed (names filter). */
export const selectRelated = (query: RelatedQuery, listed: KubeObject[]): KubeObject[] =>
  query.names.length === 0 ? listed : listed.filter((object) => query.names.includes(object.metadata.name ?? ''));

function selectorQuery(selector: LabelSelector | null | undefined): Checked<string> {
  if (!selector) return { ok: true, value: '' };
  const compiled = compileSelector(selector);
  return compiled.ok
    ? { ok: true, value: compiled.selector.toQuery() }
    : { ok: false, reason: `invalid label selector: ${compiled.reason}` };
}
