// CopyratorRule reconcile: reads the rule, the namespaces (whose labels say whether the rule may
// copy at all: sourceRefusal), its sources and its copies (a page at a time), carries out
// planObserved and missingCopies, writes status. Clean-up on deletion runs under the rule's
// finalizer.
//
// Secret contents never leave this file in any form but the API writes themselves: logs, Events
// and status name objects, never their data.
import {
  type ReconcileContext,
  type ReconcileResult,
  kindKey,
  Namespace,
  type KubeObject,
  type ObjectKey,
  type ResourceKind,
  ApiError,
  type KubeClient,
  applyChild,
  updateStatus,
  type ConditionInput,
  ownerLabelValue,
  TransientError,
  forEachLimited,
  refusedWrite,
} from '../runtime/index.ts';
import {
  allInPlace,
  blockTaken,
  conflictFor,
  CONTROLLED_REASON,
  controlledNews,
  refusalNews,
  controlledOf,
  controlledWarning,
  copyKey,
  CopyratorRuleKind,
  copiesSelector,
  isManagedBy,
  kindOf,
  missingCopies,
  newConflicts,
  nextStatus,
  planObserved,
  RULE_NAME_LABEL,
  RULE_NAMESPACE_LABEL,
  ruleProblem,
  selectorString,
  sourceRefusal,
  sourcesOf,
  stateDigest,
  targetNamespaces,
  updateAction,
  updatedCopy,
  wantedCopies,
  type Conflict,
  type ControlledObject,
  type CopyableObject,
  type CopyAction,
  type CopyratorRule,
  type CopyTally,
  type RuleType,
} from './desired.ts';

/** Writes in flight at once for one rule: enough to hide API latency, few enough to stay polite. */
const WRITE_CONCURRENCY = 16;

/**
 * How the lists that carry data (sources, and the copies judged against them) are paged. A
 * ConfigMap's or Secret's data may reach 1 MiB (about 1.4 MiB of base64 for a Secret), so a page
 * of client-go's 500 could be a 500 MiB answer. The first page asks for 16 (under about 22 MiB
 * at the largest), each next one for as many as fit 4 MiB at the sizes seen so far (ListOptions
 * pageBytes): small copies still come 500 at a time, large ones a few. These lists are read from
 * etcd, never from the watch cache, which would answer in one page whatever the limit. Lists
 * that need no data ask for metadata only and keep pages of LIST_PAGE_SIZE.
 */
const DATA_PAGES = { limit: 16, pageBytes: 4 * 1024 * 1024 } as const;

type Outcome = 'created' | 'updated' | 'deleted' | 'unchanged' | { conflict: Conflict };

/** Carries out one action; a same-named object that is not our copy is reported, never touched. */
async function apply(
  kube: KubeClient,
  rule: KubeObject,
  ruleType: RuleType,
  action: CopyAction,
  inPlace: (copy: KubeObject) => void,
): Promise<Outcome> {
  const kind = kindOf(ruleType);
  const keyOf = (object: KubeObject): ObjectKey => ({ namespace: object.metadata.namespace!, name: object.metadata.name! });
  switch (action.type) {
    case 'keep':
      inPlace(action.existing);
      return 'unchanged';
    case 'blocked':
      return { conflict: conflictFor(action.existing) };
    case 'delete':
      // The uid precondition: never delete an object that replaced the copy we judged.
      await kube.delete(kind, keyOf(action.existing), { uid: action.existing.metadata.uid });
      return 'deleted';
    case 'update':
      return writeCopy(kube, rule, kind, inPlace, action.desired, action.existing);
    case 'replace':
      // The uid precondition: only the copy we judged. A newer object in its place makes the
      // create below find it and judge it again.
      await kube.delete(kind, keyOf(action.existing), { uid: action.existing.metadata.uid });
      return writeCopy(kube, rule, kind, inPlace, action.desired);
    case 'create':
      return writeCopy(kube, rule, kind, inPlace, action.desired);
  }
}

/**
 * A write of a copy the API server refuses for a reason that retrying the delivery does not
 * change (runtime/refusals.ts): 422 Invalid, 403 Forbidden (a ResourceQuota or an admission
 * policy of the target namespace). Reported as a conflict in status, as a held name is, with the
 * API server's (bounded) words, and the delivery answered 2xx: a 5xx would make every delivery
 * for the rule fail, with a full converge per retry, for one namespace; the resync tries again.
 */
export function refusal(error: unknown, desired: CopyableObject): Conflict | undefined {
  const refused = refusedWrite(error);
  if (!refused) return undefined;
  return {
    namespace: desired.metadata.namespace!,
    name: desired.metadata.name!,
    reason: refused.forbidden ? 'Forbidden' : 'Invalid',
    message: refused.message,
  };
}

/** The copy to PUT over an existing copy of the rule, or undefined when it is up to date (updateAction). */
function mergeCopy(existing: CopyableObject, desired: CopyableObject): CopyableObject | undefined {
  const action = updateAction(desired, existing);
  if (action.type === 'keep') return undefined;
  if (action.type === 'replace')
    throw new ApiError(
      409,
      'Conflict',
      `${desired.metadata.namespace}/${desired.metadata.name} cannot be updated in place (immutable, or another Secret type); will replace on retry`,
    );
  return updatedCopy(desired, existing);
}

/**
 * Creates the copy, or updates `observed` (our copy as listed) to it, and tells `inPlace` the copy
 * as it now is. A name taken by our copy that lost its labels is judged from a read of etcd; by
 * another rule's copy or a foreign object, reported as a conflict.
 */
async function writeCopy(
  kube: KubeClient,
  rule: KubeObject,
  kind: ResourceKind,
  inPlace: (copy: KubeObject) => void,
  desired: CopyableObject,
  observed?: CopyableObject,
): Promise<Outcome> {
  try {
    const applied = await applyChild(kube, kind, desired, {
      observed,
      isManaged: (existing) => isManagedBy(existing, rule),
      merge: mergeCopy,
      firstRead: 'etcd',
    });
    if (applied.result === 'conflict') return { conflict: conflictFor(applied.object!) };
    inPlace(applied.object!);
    // Never superseded: that is only for onRace 'leave'.
    return applied.result as 'created' | 'updated' | 'unchanged';
  } catch (error) {
    const refused = refusal(error, desired);
    if (refused) return { conflict: refused };
    throw error;
  }
}

/**
 * The objects holding the names of copies still to be made that are not this rule's copies: one
 * list per name, across namespaces, from the API server's watch cache, made once per reconcile,
 * of metadata only (all a conflict report needs; the watch cache answers in one page, so with
 * data it would bring every same-named object in the cluster, data and all, in one answer). A
 * rule whose copies collide with objects in many namespaces so costs one read per name on each
 * reconcile, not a failed create and a read per namespace. The cache is as fresh as the events:
 * the ApiServerSource's watch is served from it, so when the delete of a blocking object wakes the
 * rule, the cache already knows it is gone; an object created since meets its 409 on create.
 */
function takenNames(kube: KubeClient, kind: ResourceKind, rule: CopyratorRule): (creates: CopyableObject[]) => Promise<CopyableObject[]> {
  const holdersByName = new Map<string, Promise<CopyableObject[]>>();
  const holdersOf = (name: string) => {
    let holders = holdersByName.get(name);
    if (!holders) {
      holders = kube
        .list(kind, { fieldSelector: `metadata.name=${name}`, cached: true, metadataOnly: true })
        .then(({ items }) => items.filter((object) => !isManagedBy(object, rule)).map(({ metadata }) => ({ metadata })));
      holdersByName.set(name, holders);
    }
    return holders;
  };
  return async (creates) => {
    const names = [...new Set(creates.map((copy) => copy.metadata.name!))];
    const wanted = new Set(creates.map(copyKey));
    const taken: CopyableObject[] = [];
    await forEachLimited(names, WRITE_CONCURRENCY, async (name) => {
      taken.push(...(await holdersOf(name)).filter((object) => wanted.has(copyKey(object))));
    });
    return taken;
  };
}

/** Creates planned and written at once: what a rule with very many missing copies holds in memory. */
const CREATE_CHUNK = 1000;

/** Carries out actions a few at a time and counts their outcomes; one failed write never stops the others. */
class CopyWrites {
  readonly counts: Record<'created' | 'updated' | 'deleted' | 'unchanged', number> = { created: 0, updated: 0, deleted: 0, unchanged: 0 };
  readonly conflicts: Conflict[] = [];
  failed = 0;
  firstError: unknown;
  /** Writes made or tried (every action but keep and blocked). */
  written = 0;
  /** Each object holding the rule's copy labels, as it is after the writes (`<namespace>/<name>@<resourceVersion>`): stateDigest's copies. */
  readonly after: KubeObject[] = [];
  readonly #kube: KubeClient;
  readonly #rule: KubeObject;
  readonly #log: ReconcileContext['log'];

  constructor(kube: KubeClient, rule: KubeObject, log: ReconcileContext['log']) {
    this.#kube = kube;
    this.#rule = rule;
    this.#log = log;
  }

  apply(ruleType: RuleType, actions: CopyAction[]): Promise<void> {
    return forEachLimited(actions, WRITE_CONCURRENCY, async (action) => {
      if (action.type !== 'keep' && action.type !== 'blocked') this.written++;
      try {
        const outcome = await apply(this.#kube, this.#rule, ruleType, action, ({ metadata }) =>
          this.after.push({ metadata: { namespace: metadata.namespace, name: metadata.name, resourceVersion: metadata.resourceVersion } }),
        );
        if (typeof outcome === 'string') this.counts[outcome]++;
        else this.conflicts.push(outcome.conflict);
      } catch (error) {
        // Keep going: one failed write must not block the others (manage_children.go does the same).
        this.failed++;
        this.firstError ??= error;
        const target = 'desired' in action ? action.desired : action.existing;
        this.#log.warn(
          { err: (error as Error).message, action: action.type, namespace: target.metadata.namespace, name: target.metadata.name },
          'copy write failed',
        );
      }
    });
  }
}

/** Deletes of those of `objects` that are the rule's copies (found by label, confirmed by annotation). */
const deletesOf = (objects: CopyableObject[], rule: KubeObject): CopyAction[] =>
  objects.filter((object) => isManagedBy(object, rule)).map((existing) => ({ type: 'delete', existing }));

/** `size` items at a time. */
function* chunks<T>(items: Iterable<T>, size: number): Generator<T[]> {
  let chunk: T[] = [];
  for (const item of items) {
    chunk.push(item);
    if (chunk.length === size) {
      yield chunk;
      chunk = [];
    }
  }
  if (chunk.length > 0) yield chunk;
}

/**
 * What a rule's copies are judged from, as the API server's watch cache shows it, as metadata:
 * the namespaces (whose labels decide whether the rule may copy at all and where to), its sources
 * and its copies, each one list from memory, whatever the size of the cluster, and their digest
 * (stateDigest). Metadata only, so each answer (one page: the watch cache ignores `limit`) is
 * small: no data of any ConfigMap or Secret.
 */
interface Placement {
  namespaces: KubeObject[];
  refused: ConditionInput | undefined;
  targets: string[];
}
interface Observed extends Placement {
  /** Whether the watch cache shows any copy of the rule: none, and the copies need no list from etcd. */
  hasCopies: boolean;
  /** Whether copies of the kinds the rule does not copy (its former ruleType) may exist. */
  formerCopies: boolean;
  digest?: string;
}

/** The rules of one event that list their copies each on their own, before the others share one list of every copy. */
const OWN_COPY_LISTS = 8;

interface SharedCopies {
  observed: number;
  all?: Promise<Map<string, KubeObject[]>>;
}

/**
 * The rule's copies as metadata, from the watch cache. A label-selected list there still looks at
 * every object of the kind in the cluster (in memory): one per rule is fine for an event that
 * concerns a few rules, not for a resync or a namespace's fan-out of thousands. So once an event
 * has observed OWN_COPY_LISTS rules, the others share one list of every copy of every rule (its
 * answer grows with the copies, not with the cluster), read once per event and kept as names and
 * resourceVersions only. It is as stale as the event is long: a digest read from it that matches
 * names a state that was in place; one that does not costs a reconcile from etcd.
 */
async function copiesOf({ kube, readOnce }: ReconcileContext, rule: CopyratorRule, kind: ResourceKind): Promise<KubeObject[]> {
  const shared = await readOnce(`copyrator-copies-${kind.kind}`, async (): Promise<SharedCopies> => ({ observed: 0 }));
  if (++shared.observed <= OWN_COPY_LISTS)
    return (await kube.list(kind, { labelSelector: copiesSelector(rule), cached: true, metadataOnly: true })).items;
  shared.all ??= kube.list(kind, { labelSelector: RULE_NAME_LABEL, cached: true, metadataOnly: true }).then(({ items }) => {
    const byRule = new Map<string, KubeObject[]>();
    for (const { metadata } of items) {
      const labels = metadata.labels ?? {};
      const ruleLabels = `${labels[RULE_NAMESPACE_LABEL]}/${labels[RULE_NAME_LABEL]}`;
      const { namespace, name, resourceVersion, deletionTimestamp } = metadata;
      const copies = byRule.get(ruleLabels) ?? byRule.set(ruleLabels, []).get(ruleLabels)!;
      copies.push({ metadata: { namespace, name, resourceVersion, ...(deletionTimestamp ? { deletionTimestamp } : {}) } });
    }
    return byRule;
  });
  return (await shared.all).get(`${rule.metadata.namespace}/${ownerLabelValue(rule.metadata.name!)}`) ?? [];
}

/** Whether the rule may copy at all, and where to (the namespaces' labels decide). */
async function placement({ kube, readOnce }: ReconcileContext, rule: CopyratorRule): Promise<Placement> {
  // Every rule of a resync or of a new namespace's fan-out lists the same namespaces: once.
  const namespaces = (await readOnce('namespaces', () => kube.list(Namespace))).items;
  const refused = sourceRefusal(rule, namespaces);
  return { namespaces, refused, targets: refused ? [] : targetNamespaces(rule, namespaces) };
}

/**
 * A rule the runtime has just given its finalizer (ctx.finalizerAdded): as the API server showed
 * it, it had none, so this function has made no copy of it yet, and nothing is listed to find
 * one (each such list looks at every object of the kind in the cluster). A copy that exists all
 * the same (the finalizer removed by hand, another replica's run at the same moment, an orphan of
 * an earlier rule of that name) is still judged where it is wanted, by its create's 409
 * (writeCopy); where it is not, the digest this run writes leaves it out, so the next resync finds
 * the rule unsettled and converges it from etcd.
 */
const unseenCopies = async (ctx: ReconcileContext, rule: CopyratorRule): Promise<Observed> => ({
  ...(await placement(ctx, rule)),
  hasCopies: false,
  formerCopies: false,
});

async function observe(ctx: ReconcileContext, rule: CopyratorRule): Promise<Observed> {
  const { kube } = ctx;
  const kind = kindOf(rule.ruleType);
  const { namespaces, refused, targets } = await placement(ctx, rule);
  const [sources, copies] = await Promise.all([
    refused
      ? { items: [] }
      : kube.list(kind, {
          namespace: rule.namespace,
          labelSelector: selectorString(rule.selector) || undefined,
          cached: true,
          metadataOnly: true,
        }),
    copiesOf(ctx, rule, kind),
  ]);
  return {
    namespaces,
    refused,
    targets,
    hasCopies: copies.length > 0,
    formerCopies: true,
    digest: stateDigest(rule, refused, targets, sources.items, copies),
  };
}

/**
 * Brings the rule's copies to the desired set; returns what is in place. Throws only on reads.
 * Memory stays bounded whatever the number of copies: they are read a page at a time and each
 * page judged and written before the next, the missing ones made a chunk at a time; what is kept
 * throughout is the sources and the names of the copies in place. Time too: once the delivery's
 * deadline has passed and this run has written something (so that every run gets further), it
 * stops before the next page or chunk and reports the tally unfinished.
 */
async function converge(
  { kube, now, deadline }: ReconcileContext,
  rule: CopyratorRule,
  ruleTypes: RuleType[],
  log: ReconcileContext['log'],
  { refused, targets, hasCopies, formerCopies }: Observed,
): Promise<CopyTally & { counts: Record<string, number>; firstError?: unknown; controlled: ControlledObject[]; digest?: string }> {
  const kind = kindOf(rule.ruleType);
  // Copies of the kind the rule no longer copies (its ruleType changed) are removed as well; from
  // the watch cache, as there are almost never any, and as metadata: deleting needs no data.
  const formerTypes = formerCopies ? ruleTypes.filter((ruleType) => ruleType !== rule.ruleType) : [];
  const [listed, ...former] = await Promise.all([
    refused
      ? { items: [] }
      : kube.list<CopyableObject>(kind, {
          namespace: rule.namespace,
          labelSelector: selectorString(rule.selector) || undefined,
          ...DATA_PAGES,
        }),
    ...formerTypes.map((ruleType) =>
      kube.list(kindOf(ruleType), { labelSelector: copiesSelector(rule), cached: true, metadataOnly: true }),
    ),
  ]);
  // Decided on the objects as listed from the API server: one another controller manages is no
  // source (controllerOf), so its copies, if any, are deleted below as a non-matching source's.
  const sources = sourcesOf(listed.items);
  const controlled = controlledOf(listed.items);
  // A refused rule wants no copy: those it has (made before an administrator removed a label, or
  // before the function refused such rules) are removed.
  const wanted = wantedCopies(rule, sources, targets);
  const writes = new CopyWrites(kube, rule, log);
  const outOfTime = () => writes.written > 0 && now().getTime() >= deadline;
  const tally = (unfinished: boolean) => {
    const { counts, conflicts, failed, firstError } = writes;
    return {
      matched: sources.length,
      copies: counts.created + counts.updated + counts.unchanged,
      conflicts,
      failed,
      counts,
      firstError,
      controlled,
      ...(unfinished ? { unfinished } : {}),
      ...(refused ? { refused } : {}),
    };
  };
  const present = new Set<string>();
  // A label-selected list from etcd reads every object of the kind in the cluster: only when the
  // watch cache shows copies. One it does not show yet (made a moment ago by another replica)
  // meets its 409 on create, and the create then judges it from a read of etcd (writeCopy).
  const copyPages = hasCopies ? kube.pages<CopyableObject>(kind, { labelSelector: copiesSelector(rule), ...DATA_PAGES }) : [];
  for await (const page of copyPages) {
    if (outOfTime()) return tally(true);
    const ours = page.items.filter((object) => isManagedBy(object, rule));
    for (const object of ours) if (!object.metadata.deletionTimestamp) present.add(copyKey(object));
    // What this run leaves as it is: others' objects with the rule's labels, and copies being deleted.
    for (const object of page.items)
      if (!ours.includes(object) || object.metadata.deletionTimestamp) writes.after.push({ metadata: object.metadata });
    await writes.apply(rule.ruleType, planObserved(wanted, ours));
  }
  const taken = takenNames(kube, kind, rule);
  for (const creates of chunks(missingCopies(wanted, present), CREATE_CHUNK)) {
    if (outOfTime()) return tally(true);
    await writes.apply(
      rule.ruleType,
      blockTaken(
        creates.map((desired): CopyAction => ({ type: 'create', desired })),
        await taken(creates),
      ),
    );
  }
  for (const [index, { items }] of former.entries()) await writes.apply(formerTypes[index]!, deletesOf(items, rule));
  // The state this run leaves, as observe would see it once the watch cache has its writes.
  return { ...tally(false), digest: stateDigest(rule, refused, targets, listed.items, writes.after) };
}

export function reconcileCopyratorRule(ruleTypes: RuleType[]) {
  const secretsEnabled = ruleTypes.includes('secret');
  return async (key: ObjectKey, ctx: ReconcileContext): Promise<ReconcileResult | void> => {
    const { kube, log, events } = ctx;
    // The runtime read the rule to drive its finalizer (ctx.current): not read twice.
    const rule = (ctx.current as CopyratorRule | undefined) ?? (await kube.get<CopyratorRule>(CopyratorRuleKind, key));
    // Going: the runtime runs finalizeCopies instead. Gone: its finalizer removed the copies, but
    // a replica that read the rule just before may have written one after; remove such orphans.
    const removeOrphans = async () => {
      if (!(await finalizeCopies({ metadata: { namespace: key.namespace, name: key.name } }, ruleTypes, kube, log)))
        throw new TransientError(`some copies of the deleted rule ${key.namespace}/${key.name} could not be removed yet`);
    };
    if (!rule) return removeOrphans();
    if (rule.metadata.deletionTimestamp) return;

    const problem: ConditionInput | undefined = ruleProblem(rule, secretsEnabled);
    if (problem) {
      await events.warning(rule, CopyratorRuleKind, problem.reason, problem.message);
      await updateStatus<CopyratorRule>(kube, CopyratorRuleKind, key, (current) => nextStatus(current, rule, undefined, problem), rule);
      return;
    }

    const observed = ctx.finalizerAdded ? await unseenCopies(ctx, rule) : await observe(ctx, rule);
    // Nothing it is judged from has changed since a reconcile found all its copies in place (a
    // resync of a settled rule): nothing to read from etcd, nothing to write.
    if (observed.digest && rule.status?.observedGeneration === rule.metadata.generation && rule.status?.inPlace === observed.digest) return;
    const tally = await converge(ctx, rule, ruleTypes, log, observed);
    // Copies created while another replica ran the rule's finalizer (it listed the copies before
    // these creates, then let the rule go) would be orphans nothing looks at again: no resync
    // reaches a rule that is gone, and their add events come back to this replica, which skips
    // them as its own writes (runtime skips.ts) before any mapper runs. So a run that created
    // copies reads the rule again (from etcd): the finalizer lists after the deletion mark and this
    // read follows the creates, so a create the finalizer missed is always followed by a read that
    // sees the mark. One read per run that created something; mapping every echo of our own writes
    // instead would cost a LIST of the rules per copy written.
    if (tally.counts.created && isDeleted(rule, await kube.get<CopyratorRule>(CopyratorRuleKind, key))) {
      log.info({ created: tally.counts.created }, 'rule deleted while its copies were written: removing them');
      return removeOrphans();
    }
    const { created, updated, deleted } = tally.counts;
    if (created || updated || deleted) {
      const message = `copies: ${created} created, ${updated} updated, ${deleted} deleted; ${tally.copies} in place`;
      log.info({ created, updated, deleted, copies: tally.copies, matched: tally.matched }, 'copies converged');
      await events.normal(rule, CopyratorRuleKind, 'CopiesChanged', message);
    }
    const fresh = newConflicts(rule.status, tally.conflicts);
    if (fresh.length)
      await events.warning(
        rule,
        CopyratorRuleKind,
        'CopyConflict',
        fresh
          .slice(0, 3)
          .map((conflict) => conflict.message)
          .join('; ') + (fresh.length > 3 ? `; and ${fresh.length - 3} more` : ''),
      );
    if (refusalNews(rule.status, tally.refused)) await events.warning(rule, CopyratorRuleKind, tally.refused.reason, tally.refused.message);
    if (controlledNews(rule.status, tally.controlled))
      await events.warning(rule, CopyratorRuleKind, CONTROLLED_REASON, controlledWarning(tally.controlled));
    // The digest only when every copy is in place: the state this run leaves, its writes included.
    const inPlace = allInPlace(tally) ? tally.digest : undefined;
    await updateStatus<CopyratorRule>(
      kube,
      CopyratorRuleKind,
      key,
      (current) => nextStatus(current, rule, tally, undefined, inPlace),
      rule,
    );
    // Written status first, so it shows progress; the failed writes are retried with the event.
    if (tally.firstError) throw tally.firstError;
    // The rest in the rule's next delivery, at once (ReconcileResult.deferredKeys).
    if (tally.unfinished) return { deferredKeys: [kindKey(CopyratorRuleKind, key)] };
  };
}

/** Is the rule `actedOn` gone or being deleted, as `current` (a fresh read) shows? Another rule of its name is not it. */
const isDeleted = (actedOn: KubeObject, current: KubeObject | undefined): boolean =>
  !current || (current.metadata.uid === actedOn.metadata.uid && current.metadata.deletionTimestamp !== undefined);

/**
 * Removes every copy of a rule being deleted (found by label, confirmed by annotation). True when
 * none is left, so the runtime may remove the finalizer; a conflict on delete means try again.
 */
export async function finalizeCopies(
  rule: KubeObject,
  ruleTypes: RuleType[],
  kube: KubeClient,
  log: ReconcileContext['log'],
): Promise<boolean> {
  const writes = new CopyWrites(kube, rule, log);
  // Every kind the function copies: the rule's ruleType may have changed since the copies were
  // made. A page at a time: a rule may have a hundred thousand; of metadata, all a delete needs.
  for (const ruleType of ruleTypes) {
    for await (const page of kube.pages(kindOf(ruleType), { labelSelector: copiesSelector(rule), metadataOnly: true }))
      await writes.apply(ruleType, deletesOf(page.items, rule));
  }
  if (writes.written) log.info({ deleted: writes.counts.deleted, failed: writes.failed }, 'rule deleted: removed its copies');
  return writes.failed === 0;
}
