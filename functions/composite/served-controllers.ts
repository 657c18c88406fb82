// The CompositeControllers this function serves, each checked and with its kinds resolved
// through discovery: what routing (which parents an event concerns) and every sync share.
//
// Upstream: metacontroller pkg/controller/composite/controller.go newParentController (the
// controller is checked and its kinds resolved before any parent is synced). Upstream keeps one
// long-running controller per CompositeController; here every reconcile reads them afresh (one
// list of a small cluster-scoped kind), so a changed or deleted controller takes effect at once
// in every instance, and a scaled-to-zero function needs no state to start.
import type { Logger } from 'pino';
import {
  checkController,
  updateStrategies,
  parentFilter,
  type CompositeController,
  type ResolvedResource,
} from './metacontroller/index.ts';
import {
  discoveryFor,
  TerminalError,
  apiVersionOf,
  sameKind,
  type KubeObject,
  type ResourceKind,
  type KubeClient,
} from '../runtime/index.ts';
import { CompositeControllerKind } from './kinds.ts';
import type { ResolvedComposite } from './sync-parent.ts';

/** A checked controller's kinds through discovery; TransientError while one is not served yet, TerminalError for an invalid controller. */
export async function resolveComposite(object: KubeObject, kube: KubeClient): Promise<ResolvedComposite> {
  const checked = checkController(object);
  if (!checked.ok) throw new TerminalError(checked.reason, { reason: 'InvalidController' });
  const controller: CompositeController = checked.value;
  const discovery = discoveryFor(kube);
  const { parentResource, childResources = [] } = controller.spec;
  const parentKind = await discovery.resolve(parentResource.apiVersion, parentResource.resource);
  const childKinds: ResourceKind[] = [];
  for (const rule of childResources) childKinds.push(await discovery.resolve(rule.apiVersion, rule.resource));
  const childRules: ResolvedResource[] = childKinds.map((kind) => ({
    apiVersion: apiVersionOf(kind),
    resource: kind.plural,
    kind: kind.kind,
    namespaced: kind.namespaced,
  }));
  const filter = parentFilter(controller.spec);
  // checkController compiled it already; kept total for the type.
  if (!filter.ok) throw new TerminalError(filter.reason, { reason: 'InvalidController' });
  return {
    controller,
    parentKind,
    childKinds,
    childRules,
    strategies: updateStrategies(
      childRules,
      childResources.map((rule) => rule.updateStrategy?.method),
    ),
    parentFilter: filter.selector,
  };
}

/**
 * How long one read of the controllers serves this process. Every event of a parent or child
 * needs them twice (routing, then the sync): read each time, a burst of parents would list them
 * again for every event. Metacontroller reads them from an informer, which lags too; a
 * controller's own events (and the resync) bypass this and read it afresh (forgetComposites).
 */
const SERVED_FOR_MS = 2000;
const served = new WeakMap<KubeClient, { readAt: number; composites: Promise<ResolvedComposite[]> }>();

/**
 * Every served controller that is not being deleted, read at most SERVED_FOR_MS ago. One that is
 * invalid or whose kinds are not served yet is left out here (its own reconcile reports or
 * retries it), so it never stops the others.
 */
export function servedComposites(kube: KubeClient, log: Logger): Promise<ResolvedComposite[]> {
  const cached = served.get(kube.underlying);
  if (cached && performance.now() - cached.readAt < SERVED_FOR_MS) return cached.composites;
  const composites = readComposites(kube, log);
  served.set(kube.underlying, { readAt: performance.now(), composites });
  // A failed read is not kept: the next caller reads again.
  composites.catch(() => served.delete(kube.underlying));
  return composites;
}

/** Drops what this process remembers of the controllers: one of them changed. */
export const forgetComposites = (kube: KubeClient): void => void served.delete(kube.underlying);

async function readComposites(kube: KubeClient, log: Logger): Promise<ResolvedComposite[]> {
  const resolved: ResolvedComposite[] = [];
  for await (const page of kube.pages(CompositeControllerKind)) {
    for (const object of page.items) {
      if (object.metadata.deletionTimestamp) continue;
      try {
        resolved.push(await resolveComposite(object, kube));
      } catch (error) {
        log.debug({ controller: object.metadata.name, err: (error as Error).message }, 'CompositeController not served now');
      }
    }
  }
  return resolved;
}

/** The controllers whose parents are of this kind (apiVersion + kind, version-agnostic). */
export const withParentKind = (composites: ResolvedComposite[], apiVersion: string, kind: string): ResolvedComposite[] =>
  composites.filter((composite) => sameKind(composite.parentKind, apiVersion, kind));
