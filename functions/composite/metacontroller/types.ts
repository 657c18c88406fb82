// Metacontroller's CompositeController API and its hook messages, as plain data.
//
// Upstream: metacontroller/metacontroller pkg/apis/metacontroller/v1alpha1/types.go
// (CompositeControllerSpec, Hook, Webhook, ServiceReference, RelatedResourceRule),
// pkg/controller/composite/api/v1/hooks.go (CompositeHookRequest, CompositeHookResponse) and
// pkg/controller/common/api/api.go (GroupVersionKind.MarshalText: the `<Kind>.<version>` /
// `<Kind>.<group>/<version>` keys of `children` and `related`).
import { parseApiVersion, type KubeObject, type LabelSelector } from '../../runtime/index.ts';

export type { LabelSelector, LabelSelectorRequirement } from '../../runtime/index.ts';

export interface ResourceRule {
  /** group/version, or just the version for the core group ("v1"). */
  apiVersion: string;
  /** Plural resource name, e.g. "pods". */
  resource: string;
}

export interface ParentResourceRule extends ResourceRule {
  revisionHistory?: { fieldPaths?: string[] };
  /** Parents that do not match are left alone (unless they still carry our finalizer). */
  labelSelector?: LabelSelector;
  ignoreStatusChanges?: boolean;
}

/** Upstream ChildUpdateMethod; the empty/absent method means OnDelete. */
export type ChildUpdateMethod = 'OnDelete' | 'Recreate' | 'InPlace' | 'RollingRecreate' | 'RollingInPlace';

export interface ChildResourceRule extends ResourceRule {
  updateStrategy?: { method?: ChildUpdateMethod; statusChecks?: unknown };
}

export interface ServiceReference {
  name: string;
  namespace: string;
  port?: number;
  /** The URL scheme: http (default) or https. */
  protocol?: string;
}

export interface Webhook {
  /** Full URL; overrides `service` and `path`. */
  url?: string;
  /** Go duration ("10s", "1m30s"); default 10 s. */
  timeout?: string;
  path?: string;
  service?: ServiceReference;
  /** Upstream's JSON name, with its capital M. */
  responseUnMarshallMode?: 'loose' | 'strict';
  etag?: unknown;
}

/** Upstream's TLS and credential settings of a hook (webhook fields, or `endpointConfigs` by host); none is supported here. */
export const UNSUPPORTED_WEBHOOK_FIELDS = ['caBundle', 'clientTLS', 'authorization', 'basicAuth'] as const;

export type HookVersion = 'v1' | 'v2';

export interface Hook {
  version?: HookVersion;
  webhook?: Webhook;
}

export interface CompositeControllerSpec {
  parentResource: ParentResourceRule;
  childResources?: ChildResourceRule[];
  hooks?: {
    sync?: Hook;
    finalize?: Hook;
    customize?: Hook;
    preUpdateChild?: Hook;
    postUpdateChild?: Hook;
  };
  resyncPeriodSeconds?: number;
  generateSelector?: boolean;
}

export interface CompositeController extends KubeObject {
  spec: CompositeControllerSpec;
}

/** What discovery says about one resource of a rule: the kind and its scope. */
export interface ResolvedResource {
  apiVersion: string;
  resource: string;
  kind: string;
  namespaced: boolean;
}

/**
 * `children` / `related` of a hook request: `<Kind>.<version>` or `<Kind>.<group>/<version>`,
 * then the object's key (see hook-request.ts for which key).
 */
export type ObjectMap = Record<string, Record<string, KubeObject>>;

/** Sent as JSON to the sync and finalize hooks (the same shape for v1 and v2). */
export interface CompositeHookRequest {
  controller: CompositeController;
  parent: KubeObject;
  children: ObjectMap;
  related: ObjectMap;
  finalizing: boolean;
}

/** The hook's answer once validated (hook-response.ts). */
export interface CompositeHookResponse {
  /** Replaces the parent's .status (observedGeneration is added); null/absent = {} plus observedGeneration. */
  status: Record<string, unknown> | null;
  children: KubeObject[];
  /** 0 = no delayed resync. */
  resyncAfterSeconds: number;
  /** Only meaningful from the finalize hook: the finalizer may go. */
  finalized: boolean;
}

/** Sent to the customize hook. */
export interface CustomizeHookRequest {
  controller: CompositeController;
  parent: KubeObject;
}

/** One rule of a customize hook's `relatedResources`. */
export interface RelatedResourceRule extends ResourceRule {
  labelSelector?: LabelSelector | null;
  namespaceSelector?: LabelSelector | null;
  namespace?: string;
  names?: string[] | null;
}

export interface CustomizeHookResponse {
  relatedResources: RelatedResourceRule[];
}

/** The outer key of `children`/`related`: GroupVersionKind.MarshalText upstream. */
export function groupVersionKindKey(apiVersion: string, kind: string): string {
  const { group, version } = parseApiVersion(apiVersion);
  return group ? `${kind}.${group}/${version}` : `${kind}.${version}`;
}

/** Group and kind, version ignored: how upstream keys update strategies (claimMapKey). */
export const groupKindKey = (apiVersion: string, kind: string): string => `${kind}.${parseApiVersion(apiVersion).group}`;

/** A hook cannot serve this request (bad parent, say): serve-hook.ts answers 400 with the message. */
export class HookRequestError extends Error {}
