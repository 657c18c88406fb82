// Which CopyratorRules a change of a ConfigMap or Secret concerns (controller-runtime's
// EnqueueRequestsFromMapFunc, pkg/handler/enqueue_mapped.go). ApiServerSource sends only the new
// object, so a mapper cannot rely on a label still being there: a source that lost its selector
// label must still wake its rule. Hence:
//   - a copy (rule annotation) wakes the rule that made it (its deletion or a hand edit);
//   - any object in a rule's source namespace wakes that rule (added, changed, unlabelled, deleted);
//   - a Secret deleted in Reference mode arrives without a body: it wakes the secret rules whose
//     source namespace holds a Secret of that name (it may have been one of their copies).
// A forged event can only cause reconciles of rules that exist; reconcile re-reads everything.
import type { MapperContext, WatchedChange } from '../runtime/declaration.ts';
import { isValidName, isValidNamespace, type KubeObject, type ObjectKey } from '../runtime/kinds.ts';
import { CopyratorRuleKind, kindOf, RULE_ANNOTATION, type CopyratorRule, type RuleType } from './desired.ts';

/** The rule a copy's annotation names, when it names one validly (it reaches a URL). */
export function ruleKeyOfCopy(object: KubeObject | undefined): ObjectKey | undefined {
  const value = object?.metadata.annotations?.[RULE_ANNOTATION];
  if (typeof value !== 'string') return undefined;
  const slash = value.indexOf('/');
  const key = { namespace: value.slice(0, slash), name: value.slice(slash + 1) };
  return slash > 0 && isValidNamespace(key.namespace) && isValidName(key.name) ? key : undefined;
}

const keyOfRule = (rule: KubeObject): ObjectKey => ({ namespace: rule.metadata.namespace!, name: rule.metadata.name! });

export function rulesForChange(ruleType: RuleType) {
  const kind = kindOf(ruleType);
  return async (change: WatchedChange, { kube }: MapperContext): Promise<ObjectKey[]> => {
    // Reference mode (Secrets) carries no body: read the object unless the event says it is gone.
    const object = change.object ?? (change.deleted ? undefined : await kube.get(kind, change.key));
    const keys: ObjectKey[] = [];
    const owner = ruleKeyOfCopy(object);
    if (owner) keys.push(owner);
    const rules = (await kube.list<CopyratorRule>(CopyratorRuleKind)).items.filter((rule) => rule.ruleType === ruleType);
    for (const rule of rules) {
      if (rule.namespace === change.key.namespace) keys.push(keyOfRule(rule));
    }
    if (!change.object && change.deleted) {
      for (const rule of rules) {
        if (rule.namespace === change.key.namespace || !isValidNamespace(rule.namespace)) continue;
        if (await kube.get(kind, { namespace: rule.namespace, name: change.key.name })) keys.push(keyOfRule(rule));
      }
    }
    return keys;
  };
}
