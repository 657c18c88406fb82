// CopyratorRule's desired state and event mapping, computed without any API call.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  conflictFor,
  CONTROLLED_REASON,
  controlledNews,
  controlledNote,
  controlledOf,
  controlledWarning,
  copiesSelector,
  copyKey,
  copyUpToDate,
  desiredCopy,
  EXCLUDE_LABEL,
  isManagedBy,
  MAX_LISTED_CONFLICTS,
  missingCopies,
  newConflicts,
  nextStatus,
  planObserved,
  blockTaken,
  RULE_ANNOTATION,
  RULE_NAME_LABEL,
  RULE_NAMESPACE_LABEL,
  ruleProblem,
  selectorString,
  SOURCE_ANNOTATION,
  sourcesOf,
  targetNamespaces,
  updateAction,
  wantedCopies,
  type CopyableObject,
  type CopyratorRule,
} from '../../functions/copyrator/desired.ts';
import { ruleKeyOfCopy } from '../../functions/copyrator/mapping.ts';
import { refusal } from '../../functions/copyrator/reconcile.ts';
import { ApiError, MAX_MESSAGE_CHARS, ownerLabelValue, controllerOf, type KubeObject, PART_OF } from '../../functions/runtime/index.ts';

const rule = (overrides: Partial<CopyratorRule> = {}): CopyratorRule => ({
  apiVersion: 'flant.com/v1',
  kind: 'CopyratorRule',
  metadata: { name: 'main-rule', namespace: 'default', uid: 'rule-uid', generation: 3 },
  ruleType: 'configmap',
  selector: { copyrator: 'true' },
  namespace: 'default',
  ...overrides,
});

const source = (name: string, extra: Partial<CopyableObject> = {}): CopyableObject => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: {
    name,
    namespace: 'default',
    uid: `uid-${name}`,
    resourceVersion: '42',
    creationTimestamp: '2026-01-01T00:00:00Z',
    managedFields: [{ manager: 'kubectl' }],
    ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: 'p', uid: 'u' }],
    labels: { copyrator: 'true', app: 'web' },
    annotations: { note: 'not copied' },
  } as KubeObject['metadata'],
  data: { key: 'value' },
  ...extra,
});

const namespace = (name: string, phase = 'Active', deleting = false): KubeObject => ({
  metadata: { name, ...(deleting ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}) },
  status: { phase },
});

/** The copy as the API server returns it: the desired object plus server fields. */
const stored = (copy: CopyableObject, uid = 'copy-uid'): CopyableObject => ({
  ...structuredClone(copy),
  metadata: { ...structuredClone(copy.metadata), uid, resourceVersion: '7' },
});

/** Every copy the rule wants, as objects (only for a handful here: the function makes them a chunk at a time). */
const desiredCopies = (r: CopyratorRule, sources: CopyableObject[], namespaces: string[]) => [
  ...missingCopies(wantedCopies(r, sources, namespaces), new Set()),
];

describe('a copy', () => {
  test('keeps data, binaryData and labels, marks rule and source, and has no server fields', () => {
    const copy = desiredCopy(rule(), source('settings', { binaryData: { blob: 'AAEC' } }), 'team-a');
    assert.deepEqual(copy, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: {
        name: 'settings',
        namespace: 'team-a',
        labels: { copyrator: 'true', app: 'web', [RULE_NAMESPACE_LABEL]: 'default', [RULE_NAME_LABEL]: 'main-rule' },
        annotations: { [RULE_ANNOTATION]: 'default/main-rule', [SOURCE_ANNOTATION]: 'default/settings' },
      },
      data: { key: 'value' },
      binaryData: { blob: 'AAEC' },
    });
  });

  test('of a Secret keeps its type', () => {
    const secret = { ...source('creds'), kind: 'Secret', type: 'kubernetes.io/dockerconfigjson', data: { '.dockerconfigjson': 'e30=' } };
    const copy = desiredCopy(rule({ ruleType: 'secret' }), secret, 'team-a');
    assert.equal(copy.kind, 'Secret');
    assert.equal(copy.type, 'kubernetes.io/dockerconfigjson');
    assert.deepEqual(copy.data, { '.dockerconfigjson': 'e30=' });
  });

  test('goes to every Active namespace but the source, none being deleted', () => {
    const namespaces = [
      namespace('default'),
      namespace('a'),
      namespace('b', 'Terminating'),
      namespace('c', 'Active', true),
      namespace('d'),
    ];
    assert.deepEqual(targetNamespaces(rule(), namespaces), ['a', 'd']);
    const optedOut = { ...namespace('e'), metadata: { name: 'e', labels: { [EXCLUDE_LABEL]: 'true' } } };
    const install = { ...namespace('f'), metadata: { name: 'f', labels: { ...PART_OF } } };
    const notQuite = { ...namespace('g'), metadata: { name: 'g', labels: { [EXCLUDE_LABEL]: 'yes' } } };
    assert.deepEqual(
      targetNamespaces(rule(), [...namespaces, optedOut, install, notQuite]),
      ['a', 'd', 'g'],
      'opted out, and where operator-functions runs: no copies',
    );
    const copies = desiredCopies(rule(), [source('x'), source('y')], ['a', 'd']);
    assert.deepEqual(
      copies.map((copy) => `${copy.metadata.namespace}/${copy.metadata.name}`),
      ['a/x', 'a/y', 'd/x', 'd/y'],
    );
  });

  test('is never itself a source, nor is an object being deleted, a service-account token or a bootstrap token', () => {
    const copyInSource = stored(desiredCopy(rule({ metadata: { name: 'other', namespace: 'x', uid: 'o' } }), source('z'), 'default'));
    const deleting = source('gone');
    deleting.metadata.deletionTimestamp = '2026-01-01T00:00:00Z';
    const token = { ...source('token'), kind: 'Secret', type: 'kubernetes.io/service-account-token' };
    // A tenant's bootstrap token copied into kube-system would be a working credential to join a node.
    const bootstrap = { ...source('bootstrap-token-abcdef'), kind: 'Secret', type: 'bootstrap.kubernetes.io/token' };
    assert.deepEqual(
      sourcesOf([source('a'), copyInSource, deleting, token, bootstrap]).map((object) => object.metadata.name),
      ['a'],
    );
  });

  test('is never made of an object another controller manages (a controller ownerReference); any other ownerReference does not count', () => {
    const byController = (name: string, kind = 'ExchangeRate') =>
      source(name, {
        metadata: {
          ...source(name).metadata,
          ownerReferences: [
            { apiVersion: 'v1', kind: 'Pod', name: 'p', uid: 'u' },
            { apiVersion: 'operators.brennerm.github.io/v1', kind, name, uid: `owner-${name}`, controller: true, blockOwnerDeletion: true },
          ],
        },
      });
    const notController = source('gc-only', {
      metadata: {
        ...source('gc-only').metadata,
        ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: 'p', uid: 'u', controller: false }],
      },
    });
    const squatted = byController('squatted-name');
    assert.equal(controllerOf(squatted)?.kind, 'ExchangeRate');
    assert.equal(controllerOf(source('plain')), undefined, 'an ownerReference without controller: true is no controller');
    const listed = [source('plain'), notController, squatted, byController('child', 'ImmortalContainer')];
    assert.deepEqual(
      sourcesOf(listed).map((object) => object.metadata.name),
      ['plain', 'gc-only'],
    );
    assert.deepEqual(controlledOf(listed), [
      { namespace: 'default', name: 'squatted-name', controller: 'ExchangeRate/squatted-name' },
      { namespace: 'default', name: 'child', controller: 'ImmortalContainer/child' },
    ]);
    // What is no source for another reason is not reported as controlled.
    const deleting = byController('going');
    deleting.metadata.deletionTimestamp = '2026-01-01T00:00:00Z';
    const token = { ...byController('token'), kind: 'Secret', type: 'kubernetes.io/service-account-token' };
    const copy = stored(desiredCopy(rule({ metadata: { name: 'other', namespace: 'x', uid: 'o' } }), source('z'), 'default'));
    copy.metadata.ownerReferences = [{ apiVersion: 'v1', kind: 'Pod', name: 'p', uid: 'u', controller: true }];
    assert.deepEqual(controlledOf([deleting, token, copy]), []);
    assert.deepEqual(sourcesOf([deleting, token, copy]), []);
  });

  test('of a source that got a controller is deleted; the copy of one that lost it is made', () => {
    const r = rule();
    const owned = source('was-source', {
      metadata: {
        ...source('was-source').metadata,
        ownerReferences: [{ apiVersion: 'v1', kind: 'ExchangeRate', name: 'x', uid: 'x', controller: true }],
      },
    });
    const copy = stored(desiredCopy(r, source('was-source'), 'a'));
    const wanted = wantedCopies(r, sourcesOf([owned]), ['a']);
    assert.deepEqual(
      planObserved(wanted, [copy]).map((action) => action.type),
      ['delete'],
    );
    assert.deepEqual([...missingCopies(wanted, new Set())], []);
    const released = source('was-source');
    assert.deepEqual([...missingCopies(wantedCopies(r, sourcesOf([released]), ['a']), new Set())].map(copyKey), ['a/was-source']);
  });

  test('of a rule with a 253-character name is labelled with a stable hash and named exactly by annotation', () => {
    const long = 'r'.repeat(253);
    const value = ownerLabelValue(long);
    assert.ok(value.length <= 63 && /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/.test(value), value);
    assert.equal(ownerLabelValue(long), value, 'stable');
    assert.notEqual(ownerLabelValue(`${'r'.repeat(252)}s`), value);
    const longRule = rule({ metadata: { name: long, namespace: 'default', uid: 'u' } });
    assert.equal(copiesSelector(longRule), `${RULE_NAMESPACE_LABEL}=default,${RULE_NAME_LABEL}=${value}`);
    assert.equal(desiredCopy(longRule, source('s'), 'a').metadata.annotations?.[RULE_ANNOTATION], `default/${long}`);
  });
});

describe('planObserved and missingCopies', () => {
  const r = rule();
  const named = (action: { type: string; desired?: KubeObject; existing?: KubeObject }) =>
    `${action.type} ${(action.desired ?? action.existing)!.metadata.name}`;
  test('the copies in place: keeps the right, updates the changed, deletes the unwanted; the missing are created', () => {
    const wanted = wantedCopies(r, [source('keep'), source('change'), source('new')], ['a']);
    const [keep, change] = [...missingCopies(wanted, new Set())];
    const changedByHand = stored(change!);
    changedByHand.data = { key: 'edited by hand' };
    const orphan = stored(desiredCopy(r, source('gone'), 'a'));
    const elsewhere = stored(desiredCopy(r, source('keep'), 'no-longer-a-target'));
    const observed = [stored(keep!), changedByHand, orphan, elsewhere];
    assert.deepEqual(planObserved(wanted, observed).map(named), ['keep keep', 'update change', 'delete gone', 'delete keep']);
    assert.deepEqual([...missingCopies(wanted, new Set(observed.map(copyKey)))].map(copyKey), ['a/new']);
  });

  test('missing copies come namespace by namespace, one at a time (never all at once)', () => {
    const wanted = wantedCopies(r, [source('x'), source('y')], ['a', 'd']);
    const missing = missingCopies(wanted, new Set(['a/y']));
    assert.equal(copyKey(missing.next().value as KubeObject), 'a/x');
    assert.deepEqual([...missing].map(copyKey), ['d/x', 'd/y']);
  });

  test('a name another object holds is blocked without a write; one being deleted is tried', () => {
    const [free, held, dying] = desiredCopies(r, [source('free'), source('held'), source('dying')], ['a']);
    const foreign = { ...stored(held!), metadata: { ...stored(held!).metadata, annotations: {} } };
    const leaving = {
      ...stored(dying!),
      metadata: { ...stored(dying!).metadata, annotations: {}, deletionTimestamp: '2026-01-01T00:00:00Z' },
    };
    const plan = blockTaken(
      [free!, held!, dying!].map((desired) => ({ type: 'create', desired })),
      [foreign, leaving],
    );
    assert.deepEqual(
      plan.map((action) => action.type),
      ['create', 'blocked', 'create'],
    );
    assert.equal(plan[1]!.type === 'blocked' && plan[1]!.existing, foreign);
  });

  test('a copy being deleted is left to go, not updated (the reconcile counts it missing, so its successor is created)', () => {
    const wanted = wantedCopies(r, [source('x')], ['a']);
    const [copy] = [...missingCopies(wanted, new Set())];
    const dying = stored(copy!);
    dying.metadata.deletionTimestamp = '2026-01-01T00:00:00Z';
    assert.deepEqual(planObserved(wanted, [dying]), []);
  });

  test('ignores server fields when comparing; a label added by hand is an edit', () => {
    const [wanted] = desiredCopies(r, [source('x')], ['a']);
    assert.ok(copyUpToDate(stored(wanted), wanted));
    const relabelled = stored(wanted);
    relabelled.metadata.labels = { ...relabelled.metadata.labels, extra: 'hand' };
    assert.equal(copyUpToDate(relabelled, wanted), false);
  });

  test('a Secret whose type changed is replaced (type is immutable), an Opaque default is no change', () => {
    const secretRule = rule({ ruleType: 'secret' });
    const wanted = desiredCopy(secretRule, { ...source('s'), kind: 'Secret', type: 'kubernetes.io/tls' }, 'a');
    assert.equal(updateAction(wanted, { ...stored(wanted), type: 'Opaque' }).type, 'replace');
    const untyped = desiredCopy(secretRule, { ...source('t'), kind: 'Secret' }, 'a');
    assert.equal(updateAction(untyped, { ...stored(untyped), type: 'Opaque' }).type, 'keep');
  });

  test('an immutable copy that differs in data or immutability is replaced; in labels only, updated', () => {
    const [wanted] = desiredCopies(r, [source('x')], ['a']);
    const frozen = { ...stored(wanted), immutable: true };
    assert.equal(updateAction(wanted, frozen).type, 'replace', 'made immutable by hand: restored as the source is, mutable');
    const newWanted = { ...wanted, data: { key: 'rotated' } };
    assert.equal(updateAction({ ...newWanted, immutable: true }, frozen).type, 'replace', 'the source changed');
    const relabelled = { ...frozen, metadata: { ...frozen.metadata, labels: { ...frozen.metadata.labels, extra: 'hand' } } };
    assert.equal(updateAction({ ...wanted, immutable: true }, relabelled).type, 'update', 'metadata stays changeable');
    assert.equal(updateAction(newWanted, stored(wanted)).type, 'update', 'a mutable copy is updated in place');
    const secretRule = rule({ ruleType: 'secret' });
    const secret = desiredCopy(secretRule, { ...source('s'), kind: 'Secret', data: { k: 'bmV3' } }, 'a');
    assert.equal(
      updateAction(secret, { ...stored(secret), data: { k: 'b2xk' }, immutable: true }).type,
      'replace',
      'a rotated Secret reaches an immutable copy',
    );
  });

  test('an immutable source makes an immutable copy; a mutable one a mutable copy', () => {
    assert.equal(desiredCopy(r, source('x', { immutable: true }), 'a').immutable, true);
    assert.equal('immutable' in desiredCopy(r, source('x', { immutable: false }), 'a'), false);
    const [wanted] = desiredCopies(r, [source('x', { immutable: true })], ['a']);
    assert.equal(
      updateAction(wanted, stored(desiredCopy(r, source('x'), 'a'))).type,
      'update',
      'a mutable copy can be made immutable in place',
    );
  });
});

describe('ownership', () => {
  test('a copy is managed by exactly the rule its annotation names', () => {
    const copy = stored(desiredCopy(rule(), source('x'), 'a'));
    assert.ok(isManagedBy(copy, rule()));
    assert.equal(isManagedBy(copy, rule({ metadata: { name: 'main-rule', namespace: 'other', uid: 'u' } })), false);
    assert.equal(conflictFor(copy).reason, 'OtherRule');
    assert.equal(conflictFor({ metadata: { name: 'x', namespace: 'a' } }).reason, 'NotManaged');
  });

  test('the mapper takes the rule from a copy only when the annotation names a valid key', () => {
    const annotated = (value: string): KubeObject => ({
      metadata: { name: 'x', namespace: 'a', annotations: { [RULE_ANNOTATION]: value } },
    });
    assert.deepEqual(ruleKeyOfCopy(annotated('default/main-rule')), { namespace: 'default', name: 'main-rule' });
    for (const bad of ['default/..', '../x', 'noslash', '/x', 'default/', 'UPPER/x', `${'n'.repeat(64)}/x`, 'a/b/c']) {
      assert.equal(ruleKeyOfCopy(annotated(bad)), undefined, bad);
    }
    assert.equal(ruleKeyOfCopy({ metadata: { name: 'x' } }), undefined);
  });
});

describe('rule validation', () => {
  test('a well-formed rule has no problem; its selector becomes a label selector', () => {
    assert.equal(ruleProblem(rule(), true), undefined);
    assert.equal(selectorString({ copyrator: 'true', 'app.kubernetes.io/name': 'web' }), 'copyrator=true,app.kubernetes.io/name=web');
  });

  test('selectors that would change the meaning of a label selector are refused', () => {
    for (const selector of [{ 'a,b': 'c' }, { a: 'x,y' }, { a: 'x=y' }, { '': 'x' }, { a: 'v'.repeat(64) }, { 'a!': 'b' }] as Record<
      string,
      string
    >[]) {
      assert.equal(ruleProblem(rule({ selector }), true)?.reason, 'InvalidRule', JSON.stringify(selector));
    }
    assert.equal(ruleProblem(rule({ namespace: 'Bad_NS' }), true)?.reason, 'InvalidRule');
  });

  test('a secret rule is refused when the function runs without Secrets', () => {
    assert.equal(ruleProblem(rule({ ruleType: 'secret' }), false)?.reason, 'SecretsDisabled');
    assert.equal(ruleProblem(rule({ ruleType: 'secret' }), true), undefined);
  });
});

describe('status', () => {
  test('counts, a bounded sorted conflict list, observedGeneration and Ready', () => {
    const conflicts = Array.from({ length: 25 }, (_, i) => ({
      namespace: `ns-${String(i).padStart(2, '0')}`,
      name: 'x',
      reason: 'NotManaged' as const,
      message: 'm',
    })).reverse();
    const status = nextStatus(rule(), rule(), { matched: 2, copies: 10, conflicts, failed: 0 })!;
    assert.equal(status.matched, 2);
    assert.equal(status.copies, 10);
    assert.equal(status.conflictCount, 25);
    assert.equal(status.conflicts!.length, MAX_LISTED_CONFLICTS);
    assert.equal(status.conflicts![0].namespace, 'ns-00');
    assert.equal(status.observedGeneration, 3);
    const ready = status.conditions!.find((condition) => condition.type === 'Ready')!;
    assert.deepEqual([ready.status, ready.reason], ['False', 'CopyConflicts']);
  });

  test('a conflict is reported as new once; with a full list, an unchanged total is nothing new', () => {
    const conflict = (i: number) => ({
      namespace: `ns-${String(i).padStart(2, '0')}`,
      name: 'x',
      reason: 'NotManaged' as const,
      message: 'm',
    });
    assert.deepEqual(newConflicts(undefined, [conflict(1)]), [conflict(1)]);
    assert.deepEqual(newConflicts({ conflicts: [conflict(1)], conflictCount: 1 }, [conflict(1), conflict(2)]), [conflict(2)]);
    const many = Array.from({ length: 30 }, (_, i) => conflict(i));
    const status = nextStatus(rule(), rule(), { matched: 1, copies: 0, conflicts: many, failed: 0 })!;
    assert.deepEqual(newConflicts(status, many), []);
    assert.equal(newConflicts(status, [...many, conflict(40)]).length > 0, true, 'a new total is news');
  });

  test('Ready=True when every copy is in place; nothing is written for an object replaced meanwhile', () => {
    const status = nextStatus(rule(), rule(), { matched: 1, copies: 3, conflicts: [], failed: 0 })!;
    const ready = status.conditions!.find((condition) => condition.type === 'Ready')!;
    assert.deepEqual([ready.status, ready.reason], ['True', 'CopiesInPlace']);
    assert.equal(
      nextStatus(rule({ metadata: { name: 'main-rule', namespace: 'default', uid: 'new-uid' } }), rule(), {
        matched: 0,
        copies: 0,
        conflicts: [],
        failed: 0,
      }),
      undefined,
    );
  });
});

describe('selected objects another controller manages', () => {
  const controlled = (count: number) =>
    Array.from({ length: count }, (_, i) => ({ namespace: 'default', name: `rate-${i}`, controller: `ExchangeRate/rate-${i}` }));

  test('are not matched; Ready keeps its reason and says how many, only when there are some', () => {
    const status = nextStatus(rule(), rule(), { matched: 1, copies: 3, conflicts: [], failed: 0, controlled: controlled(2) })!;
    const ready = status.conditions!.find((condition) => condition.type === 'Ready')!;
    assert.equal(status.matched, 1);
    assert.deepEqual(
      [ready.status, ready.reason, ready.message],
      ['True', 'CopiesInPlace', `3 copies of 1 matching objects in place; ${controlledNote(2)}`],
    );
    assert.equal(controlledNote(2), '2 selected objects are managed by another controller and never copied');
    const none = nextStatus(rule(), rule(), { matched: 1, copies: 3, conflicts: [], failed: 0, controlled: [] })!;
    assert.equal(none.conditions!.find((condition) => condition.type === 'Ready')!.message, '3 copies of 1 matching objects in place');
    const conflicting = nextStatus(rule(), rule(), {
      matched: 1,
      copies: 2,
      conflicts: [{ namespace: 'a', name: 'x', reason: 'NotManaged', message: 'm' }],
      failed: 0,
      controlled: controlled(1),
    })!;
    const held = conflicting.conditions!.find((condition) => condition.type === 'Ready')!;
    assert.equal(held.reason, 'CopyConflicts');
    assert.ok(held.message.endsWith(`; ${controlledNote(1)}`), held.message);
  });

  test('are warned about once per number: news while the Ready condition does not show that number', () => {
    assert.equal(controlledNews(undefined, []), false);
    assert.equal(controlledNews(undefined, controlled(1)), true);
    const shown = nextStatus(rule(), rule(), { matched: 0, copies: 0, conflicts: [], failed: 0, controlled: controlled(1) })!;
    assert.equal(controlledNews(shown, controlled(1)), false, 'the same number again: shown already');
    assert.equal(controlledNews(shown, controlled(11)), true, '11 is not 1');
    assert.equal(controlledNews(shown, []), false, 'none left: nothing to warn about');
    const eleven = nextStatus(rule(), rule(), { matched: 0, copies: 0, conflicts: [], failed: 0, controlled: controlled(11) })!;
    assert.equal(controlledNews(eleven, controlled(1)), true, '1 is not 11');
  });

  test('the Warning names the first three with their controllers, and why', () => {
    assert.equal(CONTROLLED_REASON, 'ControlledNotCopied');
    assert.equal(
      controlledWarning(controlled(1)),
      'not copied: default/rate-0 (controller "ExchangeRate/rate-0"); an object another controller manages is never a source, as that controller writes it for users who may not write into every namespace',
    );
    const many = controlledWarning(controlled(5));
    assert.match(
      many,
      /^not copied: default\/rate-0 \(controller "ExchangeRate\/rate-0"\), default\/rate-1 .*, default\/rate-2 \(controller "ExchangeRate\/rate-2"\) and 2 more; /,
    );
    assert.doesNotMatch(many, /rate-3/);
    // A controller's kind and name are whatever the object's writer put there: quoted and bounded.
    const long = controlledWarning([{ namespace: 'default', name: 'x', controller: `K/${'n'.repeat(500)}` }]);
    assert.ok(long.length < 300 && long.includes('(502 characters)'), long);
    const escape = controlledWarning([{ namespace: 'default', name: 'x', controller: 'K/x\u001b[2J' }]);
    assert.ok(!escape.includes('\u001b') && escape.includes('K/x\\u001b[2J'), escape);
  });
});

describe('a copy the API server refuses', () => {
  const desired: CopyableObject = { metadata: { namespace: 'team-q', name: 'shared' } };

  test('422 and 403 are conflicts (Invalid, Forbidden) with a bounded message; other errors are not', () => {
    const hostile = `configmaps "shared" is forbidden: ${'x'.repeat(5000)}\u001b[2J`;
    const forbidden = refusal(
      new ApiError(403, 'Forbidden', 'POST /api/v1/namespaces/team-q/configmaps: cut', { message: hostile }),
      desired,
    )!;
    assert.deepEqual([forbidden.namespace, forbidden.name, forbidden.reason], ['team-q', 'shared', 'Forbidden']);
    assert.ok(forbidden.message.length <= MAX_MESSAGE_CHARS && !forbidden.message.includes('\u001b'), forbidden.message.slice(-60));
    assert.equal(refusal(new ApiError(422, 'Invalid', 'POST: invalid', { message: hostile }), desired)?.reason, 'Invalid');
    for (const code of [409, 404, 500, 0]) assert.equal(refusal(new ApiError(code, 'Other', 'm'), desired), undefined, String(code));
    assert.equal(refusal(new Error('not from the API'), desired), undefined);
  });
});
