// Which CopyratorRules a change of a ConfigMap or Secret concerns (controller-runtime's
// EnqueueRequestsFromMapFunc, pkg/handler/enqueue_mapped.go). ApiServerSource sends only the new
// object, so a mapper cannot rely on a label still being there: a source that lost its selector
// label must still wake its rule. Hence:
//   - an object in a rule's source namespace wakes that rule when the rule selects it (a source,
//     or an object another controller manages: the rule reports it, and removes the copies made
//     before it got its controller), and when the rule has a copy of it (it was a source: it
//     lost its label, or was deleted); the copies come from one list of that name from the watch
//     cache (a copy made a moment ago may be missing there: the resync then removes it). An
//     object no rule selects or copies wakes nothing, however many rules read from its namespace;
//   - a copy (rule annotation) is heard only once its rule labels are gone (index.ts: the copies
//     are not watched); it wakes the rule that made it when it was deleted or differs from what
//     its source makes of it (a hand edit). A copy that is exactly as the rule would write it
//     wakes nothing. The event body may make the function do less, never write; the latest event
//     of an object carries its latest state;
//   - a copy whose rule no longer exists wakes nothing: the resync's sweep removes it (orphans.ts);
//   - a Secret deleted in Reference mode arrives without a body: it wakes the secret rules whose
//     source namespace holds a Secret of that name that they select (it may have been one of
//     their copies);
//   - a deleted object that is not a copy wakes the rules it blocked: those whose status lists it
//     as a conflict, and, when a rule has more conflicts than its status lists, that rule if its
//     source namespace holds an object of that name that it selects. The copy then appears at
//     once, not at the next resync.
//   Those source namespaces are read once each (metadata only), however many rules read from
//   them: one delete anywhere must not cost a read per rule.
// A forged event can only cause reconciles of rules that exist; reconcile re-reads everything:
// whether an object is a source (its labels, its controller) is decided on the object as listed
// from the API server, never as an event shows it.
import {
  type MapperContext,
  type WatchedChange,
  isValidName,
  isValidNamespace,
  type KubeObject,
  type ObjectKey,
  type ResourceKind,
  type KubeClient,
  forEachLimited,
} from '../runtime/index.ts';
import {
  copyUpToDate,
  CopyratorRuleKind,
  desiredCopy,
  isSelectable,
  isSource,
  kindOf,
  matchesSelector,
  ruleRef,
  RULE_ANNOTATION,
  RULE_NAME_LABEL,
  SOURCE_ANNOTATION,
  type CopyableObject,
  type CopyratorRule,
  type RuleType,
} from './desired.ts';

/** The `<namespace>/<name>` an annotation names, when it names a valid key (it reaches a URL). */
function keyIn(value: unknown): ObjectKey | undefined {
  if (typeof value !== 'string') return undefined;
  const slash = value.indexOf('/');
  const key = { namespace: value.slice(0, slash), name: value.slice(slash + 1) };
  return slash > 0 && isValidNamespace(key.namespace) && isValidName(key.name) ? key : undefined;
}

/** The rule a copy's annotation names. */
export const ruleKeyOfCopy = (object: KubeObject | undefined): ObjectKey | undefined =>
  keyIn(object?.metadata.annotations?.[RULE_ANNOTATION]);

const keyOfRule = (rule: KubeObject): ObjectKey => ({ namespace: rule.metadata.namespace!, name: rule.metadata.name! });

/** The source `rule` copies into this copy right now, if any. (One read: the source.) */
async function sourceOf(kube: KubeClient, rule: CopyratorRule, copy: CopyableObject): Promise<CopyableObject | undefined> {
  const sourceKey = keyIn(copy.metadata.annotations?.[SOURCE_ANNOTATION]);
  if (!sourceKey || sourceKey.namespace !== rule.namespace || sourceKey.name !== copy.metadata.name) return undefined;
  const source = await kube.get<CopyableObject>(kindOf(rule.ruleType), sourceKey);
  if (!source || !isSource(source) || !matchesSelector(rule.selector, source.metadata.labels)) return undefined;
  return source;
}

/**
 * Is this change of a copy the echo of its rule's own work? A copy deleted while its rule is
 * being deleted or while it has no source; a copy exactly as the rule would write it.
 */
async function isEcho(kube: KubeClient, rule: CopyratorRule, copy: CopyableObject, deleted: boolean): Promise<boolean> {
  if (rule.metadata.deletionTimestamp) return deleted;
  if (kindOf(rule.ruleType).kind !== (copy.kind ?? kindOf(rule.ruleType).kind)) return false;
  const source = await sourceOf(kube, rule, copy);
  if (deleted) return !source;
  return source !== undefined && copyUpToDate(copy, desiredCopy(rule, source, copy.metadata.namespace!));
}

/** Those of `rules` (which read from the object's namespace) that hold a copy of the object. */
async function rulesWithCopiesOf(kube: KubeClient, kind: ResourceKind, source: ObjectKey, rules: CopyratorRule[]): Promise<ObjectKey[]> {
  // Metadata only: the watch cache answers in one page, and this list holds every copy of the name.
  const copies = await kube.list(kind, {
    fieldSelector: `metadata.name=${source.name}`,
    labelSelector: RULE_NAME_LABEL,
    cached: true,
    metadataOnly: true,
  });
  const copied = new Set(
    copies.items
      .filter((copy) => copy.metadata.annotations?.[SOURCE_ANNOTATION] === `${source.namespace}/${source.name}`)
      .map((copy) => copy.metadata.annotations?.[RULE_ANNOTATION]),
  );
  return rules.filter((rule) => copied.has(ruleRef(rule))).map(keyOfRule);
}

/** Reads in flight at once when a mapper looks into many source namespaces. */
const READ_CONCURRENCY = 16;

/**
 * Which of `rules` select a source named `name` in their own source namespace (isSource: an
 * object they would copy): each distinct
 * namespace read once, as metadata (labels decide; a Secret's data stays where it is), by a
 * list of that one name, which the API server answers from a single key as a GET would.
 */
async function rulesSelectingSourceNamed(
  kube: KubeClient,
  kind: ResourceKind,
  name: string,
  rules: CopyratorRule[],
): Promise<CopyratorRule[]> {
  const namespaces = [...new Set(rules.map((rule) => rule.namespace))];
  const found = new Map<string, CopyableObject | undefined>();
  await forEachLimited(namespaces, READ_CONCURRENCY, async (namespace) => {
    found.set(namespace, (await kube.list(kind, { namespace, fieldSelector: `metadata.name=${name}`, metadataOnly: true })).items[0]);
  });
  return rules.filter((rule) => {
    const source = found.get(rule.namespace);
    return source !== undefined && isSource(source) && matchesSelector(rule.selector, source.metadata.labels);
  });
}

export function rulesForChange(ruleType: RuleType) {
  const kind = kindOf(ruleType);
  return async (change: WatchedChange, { kube }: MapperContext): Promise<ObjectKey[]> => {
    // Reference mode (Secrets) carries no body: read the object unless the event says it is gone.
    const object = (change.object ?? (change.deleted ? undefined : await kube.get(kind, change.key))) as CopyableObject | undefined;
    // From the watch cache: every ConfigMap and Secret event in the cluster reads this list.
    const allRules = (await kube.list<CopyratorRule>(CopyratorRuleKind, { cached: true })).items;
    const rules = allRules.filter((rule) => rule.ruleType === ruleType);
    const readers = rules.filter((rule) => rule.namespace === change.key.namespace);
    const selectable = object !== undefined && isSelectable(object);
    const selecting: CopyratorRule[] = [];
    const others: CopyratorRule[] = [];
    for (const rule of readers) (selectable && matchesSelector(rule.selector, object!.metadata.labels) ? selecting : others).push(rule);
    const keys = [...selecting.map(keyOfRule), ...(others.length ? await rulesWithCopiesOf(kube, kind, change.key, others) : [])];

    // The sources select no copies: one arrives here once its rule labels were removed by hand,
    // and its rule restores it. A copy whose rule is gone is the resync's (orphans.ts).
    const ownerKey = ruleKeyOfCopy(object);
    const owner = ownerKey && allRules.find((rule) => ruleRef(rule) === `${ownerKey.namespace}/${ownerKey.name}`);
    if (owner && !(await isEcho(kube, owner, { ...object!, kind: kind.kind }, change.deleted))) keys.push(keyOfRule(owner));
    if (change.deleted && !ownerKey) {
      // Rules that copy from elsewhere into this namespace.
      const copyingHere = rules.filter((rule) => rule.namespace !== change.key.namespace && isValidNamespace(rule.namespace));
      let unsure: CopyratorRule[] = [];
      if (!change.object) {
        // No body (Reference mode): it may have been any such rule's copy or blocked any of them.
        unsure = copyingHere;
      } else if (object) {
        // Not a copy: it may have blocked a copy. Sure for a rule whose status lists it; maybe
        // for one with more conflicts than its status lists.
        for (const rule of copyingHere) {
          const { conflicts = [], conflictCount = 0 } = rule.status ?? {};
          if (conflicts.some((conflict) => conflict.namespace === change.key.namespace && conflict.name === change.key.name))
            keys.push(keyOfRule(rule));
          else if (conflictCount > conflicts.length) unsure.push(rule);
        }
      }
      if (unsure.length) keys.push(...(await rulesSelectingSourceNamed(kube, kind, change.key.name, unsure)).map(keyOfRule));
    }
    return keys;
  };
}
