// How a function's events reach it, decided from its declaration once: the building blocks of
// its generated ApiServerSources and Trigger (sources.ts, triggers.ts). Nothing else derives
// wiring from a declaration: the local plane runs the generated objects (eventing/knative/).
//
// Sources: its own kind in Resource mode (the runtime can skip a status-only update by its body);
// owned and watched kinds in Resource mode (a delete still names the owner), with their label
// selectors; Secrets always in Reference mode, in a source of their own, because Secret contents
// must never travel through the event plane. Every event is tagged with the function's name
// (ceOverrides), which its Trigger filters on.
import {
  unwantedChanges,
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
  const related = [
    ...declaration.owns.map((owned) => ({ kind: owned.kind, labelSelector: owned.ownerNameLabel })),
    ...declaration.watches.map((watched) => ({ kind: watched.kind, labelSelector: watched.labelSelector })),
  ].filter((resource) => watchableBySource(resource.kind));
  const resources = related.filter((r) => !isSecret(r.kind));
  const secrets = related.filter((r) => isSecret(r.kind));
  if (resources.length) sources.push({ name: `${declaration.name}-related`, mode: 'Resource', resources, extensions });
  if (secrets.length) sources.push({ name: `${declaration.name}-secrets`, mode: 'Reference', resources: secrets, extensions });
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
 * for (`changes`), so the broker leaves those out rather than the function answering them.
 */
export function triggerFor(declaration: FunctionDeclaration): { name: string; filters: SubscriptionsApiFilter[] } {
  const exact = (attribute: string, value: string): SubscriptionsApiFilter => ({ exact: { [attribute]: value } });
  const unwanted = unwantedChanges(declaration).map(({ kind, actions }): SubscriptionsApiFilter => ({
    not: {
      all: [
        exact('apiversion', apiVersionOf(kind)),
        exact('kind', kind.kind),
        { any: actions.flatMap((action) => (['ref', 'resource'] as const).map((mode) => exact('type', apiServerEventType(mode, action)))) },
      ],
    },
  }));
  return { name: declaration.name, filters: [exact(FUNCTION_EXTENSION, declaration.name), ...unwanted] };
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
