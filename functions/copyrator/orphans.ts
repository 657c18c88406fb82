// The resync's sweep of orphan copies: copies whose rule no longer exists. A replica that read a
// rule just before it was deleted may create a copy after the finalizer listed the copies, skip
// that copy's add event as its own write (runtime skips.ts) and die before its re-read of the
// rule (reconcile.ts); nothing else ever looks at such a copy again: a resync reconciles only the
// rules that exist, and the mappers find only rules that exist.
//
// So every resync (the declaration's `sweep`) lists the copies (by the rule-name label the
// copyrator puts on them), metadata only, a page at a time, per copied kind; the copies whose
// annotation and labels name a rule missing from a metadata-only list of the rules from the
// watch cache are candidates. Each rule they name is then read fresh (from etcd): a rule created
// a moment ago, that the cache does not show yet, keeps its copies; one being deleted is left to
// its finalizer. Only then are the candidates deleted, each with a uid precondition (never an
// object that replaced the one listed). An object without the copyrator's own marks (rule
// annotation, and the rule labels that match it) is never touched.
import {
  type ReconcileContext,
  isValidName,
  isValidNamespace,
  type KubeObject,
  type ObjectKey,
  type KubeClient,
  forEachLimited,
  ownerLabelValue,
} from '../runtime/index.ts';
import { CopyratorRuleKind, kindOf, ruleRef, RULE_ANNOTATION, RULE_NAME_LABEL, RULE_NAMESPACE_LABEL, type RuleType } from './desired.ts';

/** Orphan copies held (and deleted) by one sweep; the rest wait for the next one. */
export const MAX_ORPHANS_PER_SWEEP = 1000;
const CONCURRENCY = 8;

/** The rule a copy's marks name: its annotation, confirmed by its rule labels; else undefined (not a copy of ours). */
function ruleOfCopy(object: KubeObject): ObjectKey | undefined {
  const value = object.metadata.annotations?.[RULE_ANNOTATION];
  if (typeof value !== 'string') return undefined;
  const slash = value.indexOf('/');
  const key = { namespace: value.slice(0, slash), name: value.slice(slash + 1) };
  if (slash <= 0 || !isValidNamespace(key.namespace) || !isValidName(key.name)) return undefined;
  const labels = object.metadata.labels ?? {};
  if (labels[RULE_NAMESPACE_LABEL] !== key.namespace || labels[RULE_NAME_LABEL] !== ownerLabelValue(key.name)) return undefined;
  return key;
}

export interface SweepResult {
  candidates: number;
  deleted: number;
  failed: number;
}

/** Finds and deletes copies whose rule no longer exists; bounded by MAX_ORPHANS_PER_SWEEP and by `outOfTime` (checked between pages). */
export async function sweepOrphanCopies(
  kube: KubeClient,
  ruleTypes: RuleType[],
  log: ReconcileContext['log'],
  outOfTime: () => boolean = () => false,
): Promise<SweepResult> {
  // Metadata of the rules from the watch cache: cheap, and only a first cut (a fresh read decides).
  const known = new Set((await kube.list(CopyratorRuleKind, { cached: true, metadataOnly: true })).items.map(ruleRef));
  const byRule = new Map<string, { key: ObjectKey; copies: { ruleType: RuleType; object: KubeObject }[] }>();
  let held = 0;
  sweep: for (const ruleType of ruleTypes) {
    for await (const page of kube.pages(kindOf(ruleType), { labelSelector: RULE_NAME_LABEL, metadataOnly: true })) {
      for (const object of page.items) {
        const key = ruleOfCopy(object);
        if (!key || object.metadata.deletionTimestamp) continue;
        const ref = `${key.namespace}/${key.name}`;
        if (known.has(ref)) continue;
        let entry = byRule.get(ref);
        if (!entry) byRule.set(ref, (entry = { key, copies: [] }));
        entry.copies.push({ ruleType, object });
        if (++held >= MAX_ORPHANS_PER_SWEEP) break sweep;
      }
      if (outOfTime()) break sweep;
    }
  }
  const result: SweepResult = { candidates: held, deleted: 0, failed: 0 };
  if (held === 0) return result;
  await forEachLimited([...byRule.values()], CONCURRENCY, async ({ key, copies }) => {
    // Fresh (etcd, not the watch cache), and after the copies were listed: a copy is written from
    // a read of its rule, so a rule that made a listed copy and still exists shows here.
    let rule: KubeObject | undefined;
    try {
      rule = await kube.get(CopyratorRuleKind, key);
    } catch (error) {
      result.failed += copies.length;
      log.warn(
        { err: (error as Error).message, rule: `${key.namespace}/${key.name}` },
        'orphan sweep: could not read the rule; its copies wait for the next sweep',
      );
      return;
    }
    if (rule) return;
    await forEachLimited(copies, CONCURRENCY, async ({ ruleType, object }) => {
      try {
        // The uid precondition: only the copy listed, never an object that replaced it.
        if (
          await kube.delete(
            kindOf(ruleType),
            { namespace: object.metadata.namespace!, name: object.metadata.name! },
            { uid: object.metadata.uid },
          )
        )
          result.deleted++;
      } catch (error) {
        result.failed++;
        log.warn(
          { err: (error as Error).message, namespace: object.metadata.namespace, name: object.metadata.name },
          'orphan sweep: could not delete a copy',
        );
      }
    });
  });
  if (result.deleted || result.failed) log.info({ ...result }, 'orphan sweep: removed copies of rules that no longer exist');
  return result;
}
