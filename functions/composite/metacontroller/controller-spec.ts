// A CompositeController object as the parent controller starts from it: checked once, with the
// facts every sync needs derived from it, and the RBAC a function serving it must hold.
//
// Upstream: metacontroller pkg/controller/composite/controller.go newParentController (no hooks
// → "no hooks defined"; each hook's webhook must resolve; parentResource.labelSelector must
// compile; update strategies are resolved through discovery, makeUpdateStrategyMap in
// rolling_update.go) and Start (resyncPeriodSeconds, never below one second); syncRevisions in
// controller_revision.go fails every sync of a controller without a sync hook. Upstream runs
// with broad rights; the rules below are what its calls need for one controller.
import { type PolicyRule, parseApiVersion, type KubeObject, quote } from '../../runtime/index.ts';
import type { Checked } from './hook-response.ts';
import { webhookTarget } from './hook-client.ts';
import { parentFilter } from './selector.ts';
import { UNSUPPORTED_WEBHOOK_FIELDS, type CompositeController, type ResolvedResource } from './types.ts';

const METHODS = new Set(['OnDelete', 'Recreate', 'InPlace', 'RollingRecreate', 'RollingInPlace']);

/** Everything that would make the controller fail on every parent, found before the first sync. */
export function checkController(object: KubeObject): Checked<CompositeController> {
  const name = object.metadata?.name;
  const spec = (object as { spec?: CompositeController['spec'] }).spec;
  const fail = (reason: string): Checked<CompositeController> => ({
    ok: false,
    reason: `CompositeController ${name ?? '(unnamed)'}: ${reason}`,
  });
  if (!name) return fail('metadata.name is missing');
  if (!spec || typeof spec !== 'object') return fail('spec is missing');
  const parent = spec.parentResource;
  if (!parent || typeof parent.apiVersion !== 'string' || !parent.apiVersion || typeof parent.resource !== 'string' || !parent.resource) {
    return fail('spec.parentResource needs apiVersion and resource');
  }
  if (spec.childResources !== undefined && !Array.isArray(spec.childResources)) return fail('spec.childResources must be a list');
  for (const [index, child] of (spec.childResources ?? []).entries()) {
    if (!child || typeof child.apiVersion !== 'string' || !child.apiVersion || typeof child.resource !== 'string' || !child.resource) {
      return fail(`spec.childResources[${index}] needs apiVersion and resource`);
    }
    const method = child.updateStrategy?.method;
    if (method !== undefined && !METHODS.has(method))
      return fail(`spec.childResources[${index}].updateStrategy.method ${quote(method)} is not one of ${[...METHODS].join(', ')}`);
  }
  const filter = parentFilter(spec);
  if (!filter.ok) return fail(`spec.parentResource.labelSelector: ${filter.reason}`);
  if (!spec.hooks) return fail('no hooks defined');
  if (!spec.hooks.sync) return fail('no sync hook defined');
  for (const hookType of ['sync', 'finalize', 'customize'] as const) {
    const hook = spec.hooks[hookType];
    if (!hook) continue;
    if (hook.version !== undefined && hook.version !== 'v1' && hook.version !== 'v2')
      return fail(`hooks.${hookType}.version must be v1 or v2`);
    // Called without them, a hook would refuse every call or be reached over an unverified connection.
    const credentials = UNSUPPORTED_WEBHOOK_FIELDS.find((field) => (hook.webhook as Record<string, unknown> | undefined)?.[field] != null);
    if (credentials)
      return fail(
        `hooks.${hookType}.webhook.${credentials} is not supported by operator-functions (its hooks are called without TLS settings or credentials)`,
      );
    const target = webhookTarget(hook.webhook);
    if (!target.ok) return fail(`hooks.${hookType}: ${target.failure.reason}`);
  }
  const endpointConfigs = (spec as { endpointConfigs?: unknown }).endpointConfigs;
  if (Array.isArray(endpointConfigs) && endpointConfigs.length > 0)
    return fail('spec.endpointConfigs is not supported by operator-functions (its hooks are called without TLS settings or credentials)');
  return { ok: true, value: object as CompositeController };
}

/** Delay between resyncs of every parent, or undefined for none (at least one second). */
export function resyncPeriodMs(controller: CompositeController): number | undefined {
  const seconds = controller.spec.resyncPeriodSeconds;
  if (seconds === undefined || seconds === null) return undefined;
  return Math.max(1000, seconds * 1000);
}

export interface ResolvedController {
  parent: ResolvedResource;
  children: ResolvedResource[];
  /** Kinds a customize hook may ask for; unknown until it answers, so listed by the operator. */
  related?: ResolvedResource[];
}

/**
 * The rules a function serving this controller needs: the parent read, watched, updated (the
 * finalizer, and the status of a kind without the status subresource; discovery needs no rule)
 * with its status and finalizers subresources (`finalizers` because children carry
 * blockOwnerDeletion, which OwnerReferencesPermissionEnforcement checks), the children fully
 * managed, related kinds read, and Events posted.
 */
export function policyRulesFor(resolved: ResolvedController): PolicyRule[] {
  const group = (resource: ResolvedResource) => parseApiVersion(resource.apiVersion).group;
  const rules: PolicyRule[] = [
    { apiGroups: [group(resolved.parent)], resources: [resolved.parent.resource], verbs: ['get', 'list', 'watch', 'update', 'patch'] },
    {
      apiGroups: [group(resolved.parent)],
      resources: [`${resolved.parent.resource}/status`, `${resolved.parent.resource}/finalizers`],
      verbs: ['get', 'update', 'patch'],
    },
  ];
  for (const child of resolved.children) {
    rules.push({
      apiGroups: [group(child)],
      resources: [child.resource],
      verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'],
    });
  }
  for (const related of resolved.related ?? [])
    rules.push({ apiGroups: [group(related)], resources: [related.resource], verbs: ['get', 'list', 'watch'] });
  rules.push({ apiGroups: [''], resources: ['events'], verbs: ['create', 'patch'] });
  return rules;
}
