// CloudEvents exactly as Knative's ApiServerSource sends them (see DESIGN.md), so functions
// receive the same bytes from the local plane as from Knative.
import { randomUUID } from 'node:crypto';
import { CloudEvent, type CloudEventV1 } from 'cloudevents';
import { apiServerEventType, apiVersionOf, type KubeObject, type ResourceKind, guessedResource } from '../functions/runtime/index.ts';

export type SourceMode = 'Reference' | 'Resource';
export type ChangeAction = 'add' | 'update' | 'delete';

/**
 * ApiServerSource's subject: always under /apis, `namespaces//` for cluster-scoped objects, and
 * the resource guessed from the object's kind (Knative's createSelfLink), which for a kind with an
 * irregular plural is not the one it is served as (a CopyratorRule's subject says `copyratorrules`).
 */
export function subjectOf(kind: ResourceKind, namespace: string, name: string): string {
  return `/apis/${apiVersionOf(kind)}/namespaces/${namespace}/${guessedResource(kind.kind)}/${name}`;
}

export interface ApiServerSourceChange {
  server: string;
  kind: ResourceKind;
  object: KubeObject;
  action: ChangeAction;
  mode: SourceMode;
  /** ceOverrides.extensions of the source (the plane tags each event with its function). */
  extensions?: Record<string, string>;
}

/**
 * The event as plain attributes and data: what the plane's source publishes. Not an SDK
 * CloudEvent, which copies, schema-validates and freezes each one (most of the source's CPU
 * in a burst): the attributes are fixed or were checked with the
 * source's manifest (manifests/validate.ts), and the broker checks every event it is given.
 */
export function apiServerSourceAttributes(change: ApiServerSourceChange): CloudEventV1<unknown> {
  const { kind, object, action, mode } = change;
  const namespace = object.metadata.namespace ?? '';
  const name = object.metadata.name ?? '';
  const apiVersion = apiVersionOf(kind);
  return {
    specversion: '1.0',
    id: randomUUID(),
    time: new Date().toISOString(),
    type: apiServerEventType(mode === 'Reference' ? 'ref' : 'resource', action),
    source: change.server,
    subject: subjectOf(kind, namespace, name),
    datacontenttype: 'application/json',
    kind: kind.kind,
    apiversion: apiVersion,
    name,
    namespace,
    ...change.extensions,
    // Reference: Knative's corev1.ObjectReference, whose empty fields are omitted (a cluster-scoped object has no namespace).
    data:
      mode === 'Reference'
        ? { kind: kind.kind, ...(namespace ? { namespace } : {}), name, apiVersion }
        : { apiVersion, kind: kind.kind, ...object },
  };
}

/** The same event as an SDK CloudEvent (HTTP.binary, `opfn invoke`, tests). */
export function apiServerSourceEvent(change: ApiServerSourceChange): CloudEvent<unknown> {
  return new CloudEvent<unknown>(apiServerSourceAttributes(change), false);
}
