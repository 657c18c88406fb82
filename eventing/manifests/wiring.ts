// How a function's events reach it, decided from its declaration once: the building blocks of
// its generated ApiServerSources and Trigger (sources.ts, triggers.ts). Nothing else derives
// wiring from a declaration: the local plane runs the generated objects (eventing/knative/).
//
// Sources: its own kind in Resource mode (the runtime can skip a status-only update by its body);
// owned and watched kinds in Resource mode (a delete still names the owner), with their label
// selectors; Secrets always in Reference mode, in a source of their own, because Secret contents
// must never travel through the event plane. A selection that asks for fewer changes than another
// of its kind (ownSourceSelections) has a source of its own, tagged with its name, so that its
// Trigger filter can leave out what that selection does not ask for. Every event is tagged with
// the function's name (ceOverrides), which its Trigger filters on.
import {
  unwantedChanges,
  CHANGE_ACTIONS,
  type ChangeAction,
  type FunctionDeclaration,
  apiServerEventType,
  FUNCTION_EXTENSION,
  apiVersionOf,
  type ResourceKind,
  guessedResource,
  sourceKindName,
  watchableBySource,
} from '../../functions/runtime/index.ts';
import type { SubscriptionsApiFilter } from '../filters.ts';
import type { SourceSpec } from '../source/index.ts';

/** CloudEvent extension naming the function a source serves (ApiServerSource ceOverrides). */
export { FUNCTION_EXTENSION };

/** CloudEvent extension naming the source of a selection that has one of its own (ownSourceSelections). */
export const SOURCE_EXTENSION = 'opfnsource';

/** A watched or owned selection: a kind, the objects of it the watch takes, the changes asked for. */
interface Selection {
  kind: ResourceKind;
  labelSelector?: string;
  changes?: readonly ChangeAction[];
}

const selectionsOf = (declaration: FunctionDeclaration): Selection[] =>
  [
    ...declaration.owns.map((owned) => ({ kind: owned.kind, labelSelector: owned.ownerNameLabel, changes: owned.changes })),
    ...declaration.watches.map((watched) => ({ kind: watched.kind, labelSelector: watched.labelSelector, changes: watched.changes })),
  ].filter((selection) => watchableBySource(selection.kind));

/**
 * The selections with a source of their own, each with that source's name: those that ask for
 * fewer changes than another selection of the same kind (e.g. the deletes of the function's own
 * copies beside every change of the other objects of their kind). ApiServerSource sends every
 * change of what it selects; the Trigger can leave some out only by an attribute, and the kind is
 * shared, so such a source tags its events (SOURCE_EXTENSION) and the Trigger filters on the tag.
 */
function ownSourceSelections(declaration: FunctionDeclaration, selections: Selection[]): Map<Selection, string> {
  const asked = (selection: Selection) => selection.changes ?? CHANGE_ACTIONS;
  const own = new Map<Selection, string>();
  const names = new Set<string>();
  for (const selection of selections) {
    const others = selections.filter((other) => other !== selection && sameKindAs(other.kind, selection.kind));
    if (!others.some((other) => asked(other).some((action) => !asked(selection).includes(action)))) continue;
    const base = `${declaration.name}-${selection.kind.plural}-${asked(selection).join('-')}`;
    let name = base;
    for (let i = 2; names.has(name); i++) name = `${base}-${i}`;
    names.add(name);
    own.set(selection, name);
  }
  return own;
}

const sameKindAs = (a: ResourceKind, b: ResourceKind): boolean => a.group === b.group && a.kind === b.kind;

/**
 * The ApiServerSources of one function. A kind no ApiServerSource can watch (watchableBySource)
 * is left out (unwatchedKinds): the reconciled kind's changes reach the function through its poll
 * (ping-source.ts), an owned or watched kind's through its resync.
 */
export function sourcesFor(declaration: FunctionDeclaration): SourceSpec[] {
  const extensions = { [FUNCTION_EXTENSION]: declaration.name };
  const primary = declaration.reconciles;
  const sources: SourceSpec[] = watchableBySource(primary)
    ? [
        {
          name: `${declaration.name}-objects`,
          mode: isSecret(primary) ? 'Reference' : 'Resource',
          resources: [{ kind: primary }],
          extensions,
        },
      ]
    : [];
  const selections = selectionsOf(declaration);
  const own = ownSourceSelections(declaration, selections);
  const resource = ({ kind, labelSelector }: Selection) => ({ kind, ...(labelSelector !== undefined ? { labelSelector } : {}) });
  const related = selections.filter((selection) => !own.has(selection));
  const resources = related.filter((r) => !isSecret(r.kind)).map(resource);
  const secrets = related.filter((r) => isSecret(r.kind)).map(resource);
  if (resources.length) sources.push({ name: `${declaration.name}-related`, mode: 'Resource', resources, extensions });
  if (secrets.length) sources.push({ name: `${declaration.name}-secrets`, mode: 'Reference', resources: secrets, extensions });
  for (const [selection, name] of own)
    sources.push({
      name,
      mode: isSecret(selection.kind) ? 'Reference' : 'Resource',
      resources: [resource(selection)],
      extensions: { ...extensions, [SOURCE_EXTENSION]: name },
    });
  return sources;
}

/** Secrets are never watched in Resource mode: their data must not reach events, logs or dead letters. */
export function isSecret(kind: ResourceKind): boolean {
  return kind.group === '' && kind.kind === 'Secret';
}

/**
 * Name and filters of the Trigger routing a function's events (its sources' and its resync pings)
 * to it, in Knative's `filters` (the Subscriptions API dialects, GA and always on in Eventing
 * 1.23; `filters` wins over `filter`, so the older `filter` is not set beside them): the
 * function's own tag (exact), then one `not` per kind whose changes the declaration does not ask
 * for (`changes`), and one per source of its own (ownSourceSelections) for the changes its
 * selection does not ask for, so the broker leaves those out rather than the function answering them.
 */
export function triggerFor(declaration: FunctionDeclaration): { name: string; filters: SubscriptionsApiFilter[] } {
  const exact = (attribute: string, value: string): SubscriptionsApiFilter => ({ exact: { [attribute]: value } });
  const ofTypes = (actions: readonly ChangeAction[]): SubscriptionsApiFilter => ({
    any: actions.flatMap((action) => (['ref', 'resource'] as const).map((mode) => exact('type', apiServerEventType(mode, action)))),
  });
  const unwanted = unwantedChanges(declaration).map(({ kind, actions }): SubscriptionsApiFilter => ({
    not: { all: [exact('apiversion', apiVersionOf(kind)), exact('kind', kind.kind), ofTypes(actions)] },
  }));
  const unwantedOfSources = [...ownSourceSelections(declaration, selectionsOf(declaration))].map(
    ([selection, name]): SubscriptionsApiFilter => ({
      not: { all: [exact(SOURCE_EXTENSION, name), ofTypes(CHANGE_ACTIONS.filter((action) => !selection.changes!.includes(action)))] },
    }),
  );
  return { name: declaration.name, filters: [exact(FUNCTION_EXTENSION, declaration.name), ...unwanted, ...unwantedOfSources] };
}

const declaredKinds = (declaration: FunctionDeclaration): ResourceKind[] => [
  declaration.reconciles,
  ...declaration.owns.map((owned) => owned.kind),
  ...declaration.watches.map((watched) => watched.kind),
];

/** The function's kinds that no ApiServerSource can watch, each with the resource Knative would look for. */
export function unwatchedKinds(declaration: FunctionDeclaration): { kind: ResourceKind; guessed: string }[] {
  return declaredKinds(declaration)
    .filter((kind) => !watchableBySource(kind))
    .map((kind) => ({ kind, guessed: guessedResource(kind.kind) }));
}

/** The function's kinds its ApiServerSources name by another kind name, so that Knative finds their resource (sourceKindName). */
export function renamedKinds(declaration: FunctionDeclaration): { kind: ResourceKind; named: string }[] {
  return declaredKinds(declaration).flatMap((kind) => {
    const named = sourceKindName(kind);
    return named !== undefined && named !== kind.kind ? [{ kind, named }] : [];
  });
}

/** Every kind a function's sources send (its own, owned and watched kinds). */
export function kindsOf(declaration: FunctionDeclaration): ResourceKind[] {
  return sourcesFor(declaration).flatMap((source) => source.resources.map((resource) => resource.kind));
}
