// The event sources of each CompositeController when a local plane runs them itself (its Knative
// objects held in memory, against a configured cluster). There the plane must not write Knative
// objects into the cluster, so the function runs with COMPOSITE_EVENT_SOURCES=plane and writes
// none; instead the plane watches CompositeControllers and runs exactly the ApiServerSources the
// function would have written (eventingObjectsFor, the same code), so the two modes cannot drift:
// same names, kinds, mode and extensions, delivered by the function's one generated Trigger. Their
// ServiceAccounts and roles are left out: in-memory sources run with the plane's own client, as
// the plane's other in-memory sources do. On Knative, and on the plane's own control plane, the
// function writes these objects and the plane runs what it finds.
//
// Upstream: metacontroller pkg/controller/composite/controller.go (newParentController starts an
// informer per parent and child kind when a CompositeController appears; Stop ends them when it
// goes), pkg/dynamic/discovery (a kind resolved through discovery, refreshed when missing).
import { type DerivedSourcesDeclaration } from '../runtime/index.ts';
import { resolveComposite } from './served-controllers.ts';
import { EVENT_SOURCES_CONFIG, eventingObjectsFor, MANAGED_NAME_PREFIX } from './event-sources.ts';

export const planeEventSources: DerivedSourcesDeclaration = {
  planeConfig: { [EVENT_SOURCES_CONFIG]: 'plane' },
  identityPrefix: MANAGED_NAME_PREFIX,
  // A kind not served yet (a CRD applied after its controller) is a TransientError: the plane
  // retries; an invalid controller is a TerminalError: no sources.
  async sourcesFor(controller, { kube, placement }) {
    const composite = await resolveComposite(controller, kube);
    const objects = eventingObjectsFor(controller, { parent: composite.parentKind, children: composite.childKinds }, placement);
    return objects.filter((object) => object.kind === 'ApiServerSource');
  },
};
