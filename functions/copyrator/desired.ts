// CopyratorRule's desired state, computed without any API call: which copies should exist, what
// to do about the copies and same-named objects that do exist, and what the status should say.
//
// Upstream rule (Metacontroller, pkg/controller/common/manage_children.go): delete the children
// that exist but are no longer wanted, create or update the wanted ones, keep going past single
// failures. Copies live in other namespaces, where an ownerReference cannot point (the garbage
// collector treats a cross-namespace owner as absent and deletes the dependent), so a copy is
// marked as the rule's by labels (for listing) and annotations (the exact rule and source).
import { createHash } from 'node:crypto';
import {
  type KubeObject,
  type ResourceKind,
  ConfigMap,
  isValidNamespace,
  Secret,
  PART_OF,
  ownerLabelValue,
  controllerOf,
  jsonEqual,
  setCondition,
  type Condition,
  type ConditionInput,
  quote,
} from '../runtime/index.ts';

export const CopyratorRuleKind: ResourceKind = {
  group: 'flant.com',
  version: 'v1',
  kind: 'CopyratorRule',
  plural: 'copyrators',
  namespaced: true,
};

/**
 * Labels every copy carries: which rule made it (its name through ownerLabelValue: a stable hash
 * form when longer than a label value). Listing by label is a pre-selection; the rule annotation
 * decides what is ours.
 */
export const RULE_NAMESPACE_LABEL = 'copyrator.flant.com/rule-namespace';
export const RULE_NAME_LABEL = 'copyrator.flant.com/rule';
/** Annotations every copy carries: the exact rule (`<ns>/<name>`) and source (`<ns>/<name>`). */
export const RULE_ANNOTATION = 'copyrator.flant.com/rule';
export const SOURCE_ANNOTATION = 'copyrator.flant.com/source';
/** Held on each rule until all its copies are gone. */
export const FINALIZER = 'copyrator.flant.com/cleanup';
/** How many conflicts the status lists; `conflictCount` has the total. */
export const MAX_LISTED_CONFLICTS = 20;

export type RuleType = 'configmap' | 'secret';

export interface Conflict {
  namespace: string;
  name: string;
  /** NotManaged, OtherRule: the name is held. Invalid, Forbidden: the API server refused the copy (422, 403). */
  reason: 'NotManaged' | 'OtherRule' | 'Invalid' | 'Forbidden';
  message: string;
}

export interface CopyratorRuleStatus {
  observedGeneration?: number;
  /** Source objects matching the selector. */
  matched?: number;
  /** Copies in place (created, updated or already right). */
  copies?: number;
  conflictCount?: number;
  conflicts?: Conflict[];
  conditions?: Condition[];
  /** The digest (stateDigest) of what the last reconcile found all in place, with nothing to write. */
  inPlace?: string;
}

export interface CopyratorRule extends KubeObject {
  ruleType: RuleType;
  selector: Record<string, string>;
  namespace: string;
  status?: CopyratorRuleStatus;
}

/** A ConfigMap or a Secret: the fields a copy carries over. */
export interface CopyableObject extends KubeObject {
  data?: Record<string, string>;
  binaryData?: Record<string, string>;
  type?: string;
  /** Once true, data, binaryData and immutable itself can no longer change (only a delete and a create can). */
  immutable?: boolean;
}

export const kindOf = (ruleType: RuleType): ResourceKind => (ruleType === 'secret' ? Secret : ConfigMap);

const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const LABEL_NAME = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;

export const ruleRef = (rule: KubeObject): string => `${rule.metadata.namespace}/${rule.metadata.name}`;

/** The label selector listing this rule's copies in every namespace. */
export const copiesSelector = (rule: KubeObject): string =>
  `${RULE_NAMESPACE_LABEL}=${rule.metadata.namespace},${RULE_NAME_LABEL}=${ownerLabelValue(rule.metadata.name!)}`;

/** Why a rule cannot be acted on, or undefined when it is well-formed. */
export function ruleProblem(rule: CopyratorRule, secretsEnabled: boolean): ConditionInput | undefined {
  const invalid = (message: string): ConditionInput => ({ type: 'Ready', status: 'False', reason: 'InvalidRule', message });
  if (rule.ruleType !== 'configmap' && rule.ruleType !== 'secret')
    return invalid(`ruleType must be configmap or secret, not ${quote(rule.ruleType)}`);
  if (!isValidNamespace(rule.namespace)) return invalid(`namespace ${quote(rule.namespace)} is not a valid namespace name`);
  const selector = rule.selector ?? {};
  if (typeof selector !== 'object' || Array.isArray(selector)) return invalid('selector must be a map of label names to values');
  for (const [name, value] of Object.entries(selector)) {
    if (!LABEL_NAME.test(name)) return invalid(`selector label name ${quote(name)} is not a valid label name`);
    if (typeof value !== 'string' || value.length > 63 || !LABEL_VALUE.test(value))
      return invalid(`selector value ${quote(value)} of ${quote(name)} is not a valid label value`);
  }
  if (rule.ruleType === 'secret' && !secretsEnabled) {
    return {
      type: 'Ready',
      status: 'False',
      reason: 'SecretsDisabled',
      message: 'this copyrator was deployed without access to Secrets (COPYRATOR_SECRETS=false)',
    };
  }
  return undefined;
}

/** `a=1,b=2` (validated by ruleProblem first). */
export const selectorString = (selector: Record<string, string>): string =>
  Object.entries(selector ?? {})
    .map(([name, value]) => `${name}=${value}`)
    .join(',');

/** Does an object with these labels match the rule's selector (every label, exact value)? */
export const matchesSelector = (selector: Record<string, string>, labels: Record<string, string> | undefined): boolean =>
  Object.entries(selector ?? {}).every(([name, value]) => labels?.[name] === value);

/** A copy made by some rule (never copied again: otherwise rules would copy each other's copies). */
export const isCopy = (object: KubeObject): boolean => object.metadata.annotations?.[RULE_ANNOTATION] !== undefined;

/**
 * Secret types never copied. A service-account token belongs to its namespace's ServiceAccount:
 * a copy elsewhere would be deleted by the token controller at once and made again, forever. A
 * bootstrap token is a credential to join a node, honoured only in kube-system: copying one there
 * would let whoever may create a Secret and a rule in their own namespace mint it.
 */
const NEVER_COPIED_TYPES = new Set(['kubernetes.io/service-account-token', 'bootstrap.kubernetes.io/token']);

/**
 * Not a copy, not being deleted, not of a type never copied: what a rule's selector may pick. A
 * change of such an object concerns the rules that select it (mapping.ts), whether or not it is a
 * source: one managed by another controller is reported, and loses the copies it had before it
 * got its controller. The reconcile reads it again and decides.
 */
export const isSelectable = (object: CopyableObject): boolean =>
  !isCopy(object) && !object.metadata.deletionTimestamp && !NEVER_COPIED_TYPES.has(object.type ?? '');

/**
 * Is this object one a rule may copy: not a copy itself, not being deleted, not of a type never
 * copied, managed by no controller (controllerOf)?
 *
 * An object with a controller ownerReference is written by another controller (an ExchangeRate's,
 * a composite's, any operator's) on behalf of whoever may create that controller's objects, so it
 * is never a source: a namespace distributes because only those allowed to write ConfigMaps or
 * Secrets there put objects in it, and a controller writing for its users breaks that (a user who
 * may create ExchangeRates in `default`, but no ConfigMap anywhere, would have one named as she
 * chooses, labelled as a rule selects, copied into every namespace). Only `controller: true`
 * counts: any other ownerReference is garbage collection, not authorship.
 */
export const isSource = (object: CopyableObject): boolean => isSelectable(object) && !controllerOf(object);

/** The source objects a rule copies among those listed in its source namespace (isSource). */
export const sourcesOf = (listed: CopyableObject[]): CopyableObject[] => listed.filter(isSource);

/** What a rule's selector picks that another controller manages (controllerOf): never copied, reported. */
export interface ControlledObject {
  namespace: string;
  name: string;
  /** `<kind>/<name>` of its controller. */
  controller: string;
}

export const controlledOf = (listed: CopyableObject[]): ControlledObject[] =>
  listed.flatMap((object) => {
    const controller = isSelectable(object) ? controllerOf(object) : undefined;
    return controller
      ? [{ namespace: object.metadata.namespace!, name: object.metadata.name!, controller: `${controller.kind}/${controller.name}` }]
      : [];
  });

/** The reason of the Warning Event naming selected objects another controller manages. */
export const CONTROLLED_REASON = 'ControlledNotCopied';

/** The part of the Ready message that says how many selected objects are not copied for having a controller. */
export const controlledNote = (count: number): string => `${count} selected objects are managed by another controller and never copied`;

/**
 * Is there news to warn about: selected objects managed by another controller, in a number the
 * Ready condition does not show yet? (Once per number, not on every resync or event.)
 */
export function controlledNews(status: CopyratorRuleStatus | undefined, controlled: ControlledObject[]): boolean {
  if (!controlled.length) return false;
  const shown = status?.conditions?.find((condition) => condition.type === 'Ready')?.message ?? '';
  return !shown.includes(`; ${controlledNote(controlled.length)}`);
}

/**
 * Is there news to warn about: a refusal (sourceRefusal) the Ready condition does not show yet?
 * (Once per refusal, not on every resync or Namespace event, each of which reconciles every rule.)
 */
export function refusalNews(status: CopyratorRuleStatus | undefined, refused: ConditionInput | undefined): refused is ConditionInput {
  const shown = status?.conditions?.find((condition) => condition.type === 'Ready');
  return refused !== undefined && (shown?.reason !== refused.reason || shown.message !== refused.message);
}

/** The Warning naming them (the first three), and why. */
export function controlledWarning(controlled: ControlledObject[]): string {
  const named = controlled
    .slice(0, 3)
    .map((object) => `${object.namespace}/${object.name} (controller ${quote(object.controller)})`)
    .join(', ');
  const more = controlled.length > 3 ? ` and ${controlled.length - 3} more` : '';
  return `not copied: ${named}${more}; an object another controller manages is never a source, as that controller writes it for users who may not write into every namespace`;
}

/**
 * Whom a rule acts for. The function copies with its own cluster-wide rights and a rule does not
 * say who made it, so a rule is trusted only as far as namespace labels say, which only who may
 * update Namespaces (an administrator) can set:
 * - DISTRIBUTE_LABEL=true on a namespace: whoever may write ConfigMaps or Secrets there may have
 *   them written into every namespace, so its objects may be copied out. `default` (where the
 *   seed's sample lives and administrators work) distributes unless labelled false; any other
 *   namespace only when labelled true. Without it a rule could plant a tenant's object under a
 *   name in namespaces the tenant may not write to (and take the name from their owners);
 * - ANY_SOURCE_LABEL=true on a namespace: whoever may create rules there may read the ConfigMaps
 *   and Secrets of every distributing namespace, so its rules may name another source namespace.
 *   Without it a rule copies out of its own namespace only, whose objects its author is trusted
 *   to read (RBAC does not tie that to `create copyrators`: the admission policy checks it, or
 *   an administrator grants rules only to who may read the namespace's ConfigMaps and Secrets).
 * The ValidatingAdmissionPolicy (admission.ts) checks the author's own rights where it is
 * installed; these labels are what holds where it is not, or for rules admitted before it.
 */
export const DISTRIBUTE_LABEL = 'copyrator.flant.com/distribute';
export const ANY_SOURCE_LABEL = 'copyrator.flant.com/any-source';
/** The namespace that distributes unless labelled DISTRIBUTE_LABEL=false. */
const DISTRIBUTING_BY_DEFAULT = 'default';

const labelOf = (namespace: KubeObject | undefined, label: string): string | undefined => namespace?.metadata.labels?.[label];

export const distributes = (namespace: KubeObject): boolean =>
  labelOf(namespace, DISTRIBUTE_LABEL) === 'true' ||
  (namespace.metadata.name === DISTRIBUTING_BY_DEFAULT && labelOf(namespace, DISTRIBUTE_LABEL) !== 'false');

/**
 * Why the namespace labels do not let this rule copy (Ready=False, and its copies removed), or
 * undefined. Another namespace's existence is told only to a rule allowed to name it.
 */
export function sourceRefusal(rule: CopyratorRule, namespaces: KubeObject[]): ConditionInput | undefined {
  const refused = (reason: string, message: string): ConditionInput => ({ type: 'Ready', status: 'False', reason, message });
  const byName = new Map(namespaces.map((namespace) => [namespace.metadata.name!, namespace]));
  const own = rule.metadata.namespace!;
  if (rule.namespace !== own && labelOf(byName.get(own), ANY_SOURCE_LABEL) !== 'true') {
    return refused(
      'SourceNotOwnNamespace',
      `a rule copies out of its own namespace (${own}), not ${rule.namespace}, unless an administrator labels namespace ${own} ${ANY_SOURCE_LABEL}=true`,
    );
  }
  const source = byName.get(rule.namespace);
  if (!source) return refused('SourceNamespaceNotFound', `source namespace ${rule.namespace} does not exist`);
  if (!distributes(source)) {
    return refused(
      'SourceNotDistributing',
      `namespace ${rule.namespace} does not distribute: its ConfigMaps and Secrets are copied into other namespaces only once an administrator labels it ${DISTRIBUTE_LABEL}=true`,
    );
  }
  return undefined;
}

/** A namespace labelled so receives no copies (and loses those it has): a cluster admin's opt-out, e.g. for kube-system. */
export const EXCLUDE_LABEL = 'copyrator.flant.com/exclude';

/**
 * A namespace copies never go to: opted out, or where operator-functions itself is installed
 * (the generated Namespace carries PART_OF). There a copy could plant what a function reads as
 * its own configuration (e.g. an API key Secret that does not exist yet); labelling a namespace
 * takes rights a rule's author does not have.
 */
const isExcluded = (namespace: KubeObject): boolean => {
  const labels = namespace.metadata.labels ?? {};
  return labels[EXCLUDE_LABEL] === 'true' || Object.entries(PART_OF).every(([name, value]) => labels[name] === value);
};

/** The namespaces copies go to: Active ones other than the source namespace, not excluded. */
export const targetNamespaces = (rule: CopyratorRule, namespaces: KubeObject[]): string[] =>
  namespaces
    .filter(
      (namespace) =>
        (namespace as { status?: { phase?: string } }).status?.phase === 'Active' &&
        !namespace.metadata.deletionTimestamp &&
        !isExcluded(namespace),
    )
    .map((namespace) => namespace.metadata.name!)
    .filter((name) => name !== rule.namespace);

/**
 * One copy of `source` in `namespace`: content and labels of the source, never its server fields.
 * An immutable source makes an immutable copy: a copy mirrors its source, and whoever made the
 * source immutable wants what that gives (no kubelet watch, no accidental edit) for its copies too.
 */
export function desiredCopy(rule: CopyratorRule, source: CopyableObject, namespace: string): CopyableObject {
  const copy: CopyableObject = {
    apiVersion: 'v1',
    kind: kindOf(rule.ruleType).kind,
    metadata: {
      name: source.metadata.name,
      namespace,
      labels: {
        ...source.metadata.labels,
        [RULE_NAMESPACE_LABEL]: rule.metadata.namespace!,
        [RULE_NAME_LABEL]: ownerLabelValue(rule.metadata.name!),
      },
      annotations: { [RULE_ANNOTATION]: ruleRef(rule), [SOURCE_ANNOTATION]: `${source.metadata.namespace}/${source.metadata.name}` },
    },
  };
  if (source.data !== undefined) copy.data = source.data;
  if (source.binaryData !== undefined) copy.binaryData = source.binaryData;
  if (rule.ruleType === 'secret' && source.type !== undefined) copy.type = source.type;
  if (source.immutable) copy.immutable = true;
  return copy;
}

export const copyKey = (object: KubeObject): string => `${object.metadata.namespace}/${object.metadata.name}`;

/** The parts of a copy the rule decides; anything else (server fields) is ignored when comparing. */
const content = (object: CopyableObject) => ({
  labels: object.metadata.labels ?? {},
  annotations: object.metadata.annotations ?? {},
  data: object.data ?? {},
  binaryData: object.binaryData ?? {},
  type: object.type,
  immutable: object.immutable ?? false,
});

/** True when `existing` already is what `desired` describes. Secrets' type defaults to Opaque. */
export function copyUpToDate(existing: CopyableObject, desired: CopyableObject): boolean {
  const a = content(existing);
  const b = content(desired);
  if (desired.kind === 'Secret') {
    a.type ??= 'Opaque';
    b.type ??= 'Opaque';
  }
  return jsonEqual(a, b);
}

/** Is this object a copy made by this very rule? */
export const isManagedBy = (object: KubeObject, rule: KubeObject): boolean =>
  object.metadata.annotations?.[RULE_ANNOTATION] === ruleRef(rule);

export type CopyAction =
  | { type: 'create'; desired: CopyableObject }
  | { type: 'update'; desired: CopyableObject; existing: CopyableObject }
  /** What the API server refuses to change in place (frozenFieldsDiffer): delete, then create. */
  | { type: 'replace'; desired: CopyableObject; existing: CopyableObject }
  | { type: 'delete'; existing: CopyableObject }
  | { type: 'keep'; existing: CopyableObject }
  /** The name is held by an object that is not this rule's copy: reported, never written. */
  | { type: 'blocked'; existing: CopyableObject };

/**
 * The copies a rule wants, as what they are made of (each source in each target namespace)
 * rather than as objects: a rule copying 1000 sources into 100 namespaces wants 100 000 copies,
 * more than a function's memory holds, so they are made one page or chunk at a time.
 */
export interface WantedCopies {
  rule: CopyratorRule;
  /** By name: the copy wanted in a target namespace carries its source's name. */
  sources: Map<string, CopyableObject>;
  namespaces: string[];
  targets: Set<string>;
}

export function wantedCopies(rule: CopyratorRule, sources: CopyableObject[], namespaces: string[]): WantedCopies {
  return { rule, sources: new Map(sources.map((source) => [source.metadata.name!, source])), namespaces, targets: new Set(namespaces) };
}

/**
 * What to do with the rule's copies found by its label (a page of them, already narrowed to this
 * rule by isManagedBy): keep, update or replace each copy still wanted, delete the others. A copy
 * being deleted is left alone: it is not counted present, so missingCopies makes its successor.
 */
export function planObserved(wanted: WantedCopies, observed: CopyableObject[]): CopyAction[] {
  return observed.flatMap((object): CopyAction[] => {
    if (object.metadata.deletionTimestamp) return [];
    const source = wanted.targets.has(object.metadata.namespace!) ? wanted.sources.get(object.metadata.name!) : undefined;
    return [
      source ? updateAction(desiredCopy(wanted.rule, source, object.metadata.namespace!), object) : { type: 'delete', existing: object },
    ];
  });
}

/** The wanted copies that `present` (namespace/name of the rule's copies in place) lacks, namespace by namespace. */
export function* missingCopies(wanted: WantedCopies, present: ReadonlySet<string>): Generator<CopyableObject> {
  for (const namespace of wanted.namespaces) {
    for (const [name, source] of wanted.sources)
      if (!present.has(`${namespace}/${name}`)) yield desiredCopy(wanted.rule, source, namespace);
  }
}

/**
 * The plan with each create whose name `taken` shows held (objects that are not this rule's copies,
 * from a possibly stale read) blocked, without a write. A name held by an object being deleted is
 * still tried, and a create still finds out (409) what the read did not show yet.
 */
export function blockTaken(actions: CopyAction[], taken: CopyableObject[]): CopyAction[] {
  const holders = new Map(taken.filter((object) => !object.metadata.deletionTimestamp).map((object) => [copyKey(object), object]));
  return actions.map((action) => {
    const holder = action.type === 'create' ? holders.get(copyKey(action.desired)) : undefined;
    return holder ? { type: 'blocked', existing: holder } : action;
  });
}

/**
 * Does `desired` differ from `existing` in a field the API server will not change in place (422
 * "field is immutable")? A Secret's type, always; data, binaryData and immutable itself once the
 * existing object is immutable (set by the source, or by hand on the copy). Labels and
 * annotations stay changeable either way.
 */
export function frozenFieldsDiffer(existing: CopyableObject, desired: CopyableObject): boolean {
  if (desired.kind === 'Secret' && (existing.type ?? 'Opaque') !== (desired.type ?? 'Opaque')) return true;
  if (!existing.immutable) return false;
  const frozen = (object: CopyableObject) => ({
    data: object.data ?? {},
    binaryData: object.binaryData ?? {},
    immutable: object.immutable ?? false,
  });
  return !jsonEqual(frozen(existing), frozen(desired));
}

/** For a same-named object that exists: keep it, update it, or replace it when it cannot be updated. */
export function updateAction(desired: CopyableObject, existing: CopyableObject): CopyAction {
  if (copyUpToDate(existing, desired)) return { type: 'keep', existing };
  if (frozenFieldsDiffer(existing, desired)) return { type: 'replace', desired, existing };
  return { type: 'update', desired, existing };
}

/** The object to PUT for an update: the desired copy at the existing resourceVersion. */
export const updatedCopy = (desired: CopyableObject, existing: CopyableObject): CopyableObject => ({
  ...desired,
  metadata: { ...desired.metadata, resourceVersion: existing.metadata.resourceVersion },
});

/** A same-named object that is not this rule's copy: whose it is, in words. */
export function conflictFor(existing: KubeObject): Conflict {
  const other = existing.metadata.annotations?.[RULE_ANNOTATION];
  const where = `${existing.metadata.namespace}/${existing.metadata.name}`;
  return other
    ? {
        namespace: existing.metadata.namespace!,
        name: existing.metadata.name!,
        reason: 'OtherRule',
        message: `${where} is the copy of rule ${other}, which made it first`,
      }
    : {
        namespace: existing.metadata.namespace!,
        name: existing.metadata.name!,
        reason: 'NotManaged',
        message: `${where} exists and is not a copy; it is left alone`,
      };
}

export interface CopyTally {
  matched: number;
  copies: number;
  conflicts: Conflict[];
  /** Writes that failed for another reason (retried by the next delivery). */
  failed: number;
  /** The delivery's deadline came first: the copies not judged yet follow in the rule's next delivery. */
  unfinished?: boolean;
  /** Selected objects another controller manages: not copied, not counted in `matched`. */
  controlled?: ControlledObject[];
  /** Why the namespace labels do not let the rule copy (sourceRefusal): its Ready condition. */
  refused?: ConditionInput;
}

/**
 * Conflicts not reported before (worth a Warning Event): those missing from the listed ones,
 * unless the total is unchanged and the list is full (the rest cannot be told apart then).
 */
export function newConflicts(status: CopyratorRuleStatus | undefined, conflicts: Conflict[]): Conflict[] {
  const listed = status?.conflicts ?? [];
  const known = new Set(listed.map((conflict) => `${conflict.namespace}/${conflict.name}`));
  const fresh = conflicts.filter((conflict) => !known.has(`${conflict.namespace}/${conflict.name}`));
  const listFull = listed.length >= MAX_LISTED_CONFLICTS;
  return listFull && status?.conflictCount === conflicts.length && fresh.length <= conflicts.length - listed.length ? [] : fresh;
}

/**
 * A digest of everything a rule's copies are judged from, as metadata: the rule (uid, generation),
 * whether and why it is refused, its target namespaces, its sources and its copies, each at its
 * resourceVersion. Any change of any of them (a source edited, a copy edited or deleted by hand, a
 * namespace added) changes it; resourceVersions are never reused, so a digest once seen in place
 * means that very state, never a later one.
 */
export function stateDigest(
  rule: CopyratorRule,
  refused: ConditionInput | undefined,
  targets: string[],
  sources: KubeObject[],
  copies: KubeObject[],
): string {
  const versions = (objects: KubeObject[]) =>
    objects
      .map(({ metadata }) => `${metadata.namespace}/${metadata.name}@${metadata.resourceVersion}${metadata.deletionTimestamp ? '-' : ''}`)
      .sort();
  const state = [
    rule.metadata.uid,
    rule.metadata.generation,
    refused?.reason,
    refused?.message,
    [...targets].sort(),
    versions(sources),
    versions(copies),
  ];
  return createHash('sha256').update(JSON.stringify(state)).digest('hex');
}

/** A tally that leaves every copy in place: none failed, conflicting or left for later. */
export const allInPlace = (tally: CopyTally): boolean => !tally.conflicts.length && !tally.failed && !tally.unfinished;

export function nextStatus(
  current: CopyratorRule,
  actedOn: CopyratorRule,
  tally: CopyTally | undefined,
  problem?: ConditionInput,
  inPlace?: string,
): CopyratorRuleStatus | undefined {
  // Deleted and recreated under the same name since we read it: that object is someone else's reconcile.
  if (current.metadata.uid !== actedOn.metadata.uid) return undefined;
  const status = current.status ?? {};
  const generation = actedOn.metadata.generation ?? 0;
  const conflicts = [...(tally?.conflicts ?? [])].sort((a, b) => copyKey({ metadata: a }).localeCompare(copyKey({ metadata: b })));
  const condition = problem ?? tally?.refused ?? readyCondition(tally!);
  const { inPlace: _formerDigest, ...kept } = status;
  return {
    ...kept,
    ...(inPlace ? { inPlace } : {}),
    observedGeneration: generation,
    matched: tally?.matched ?? 0,
    copies: tally?.copies ?? 0,
    conflictCount: conflicts.length,
    conflicts: conflicts.slice(0, MAX_LISTED_CONFLICTS),
    conditions: setCondition(status.conditions, { ...condition, observedGeneration: generation }),
  };
}

function readyCondition(tally: CopyTally): ConditionInput {
  const condition = readyByCopies(tally);
  const controlled = tally.controlled?.length ?? 0;
  return controlled ? { ...condition, message: `${condition.message}; ${controlledNote(controlled)}` } : condition;
}

function readyByCopies(tally: CopyTally): ConditionInput {
  if (tally.conflicts.length) {
    return {
      type: 'Ready',
      status: 'False',
      reason: 'CopyConflicts',
      message: `${tally.copies} copies in place; ${tally.conflicts.length} not made: names held by objects this rule does not manage, or copies the API server refused (see status.conflicts)`,
    };
  }
  if (tally.failed)
    return {
      type: 'Ready',
      status: 'False',
      reason: 'CopiesFailing',
      message: `${tally.copies} copies in place; ${tally.failed} writes failed and are being retried`,
    };
  if (tally.unfinished)
    return {
      type: 'Ready',
      status: 'False',
      reason: 'CopiesPending',
      message: `${tally.copies} copies of ${tally.matched} matching objects in place so far; the others follow`,
    };
  return {
    type: 'Ready',
    status: 'True',
    reason: 'CopiesInPlace',
    message: `${tally.copies} copies of ${tally.matched} matching objects in place`,
  };
}
