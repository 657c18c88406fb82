// What an ApiServerSource is configured with and reports.
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import type { ResourceKind, KubeClient } from '../../functions/runtime/index.ts';
import type { SourceMode } from '../apiserver-events.ts';
import type { PartitionRule } from './partition.ts';

export interface SourceResource {
  kind: ResourceKind;
  labelSelector?: string;
  /** Sets each event's `partitionkey` extension (partition.ts); default: the controller owner, else the object. */
  partition?: PartitionRule;
}

/** One ApiServerSource. */
export interface SourceSpec {
  name: string;
  mode: SourceMode;
  resources: SourceResource[];
  /** Only this namespace's objects of namespaced kinds (a Knative source without namespaceSelector: its own); undefined: every namespace. */
  namespace?: string;
  /** ceOverrides.extensions: added to every event (the plane tags events with their function, e.g. {opfnfunction: 'immortal-container'}). */
  extensions?: Record<string, string>;
  /** spec.owner: only objects whose controller ownerReference has this apiVersion and kind (either empty: any). */
  owner?: { apiVersion?: string; kind?: string };
}

export interface SourceOptions {
  kube: KubeClient;
  sources: SourceSpec[];
  /** Where events go; resolves when accepted (the broker applies back-pressure by resolving late). Rejections are retried with backoff, never dropped. */
  sink: (event: CloudEventV1<unknown>) => Promise<void>;
  log: Logger;
  /** Periodic full pass that emits `update` for every known object (0 = off); default 10 min. */
  resyncIntervalMs?: number;
  /** Server-side watch timeout; default 300. */
  watchTimeoutSeconds?: number;
  /** Events accepted from the watches but not yet accepted by the sink beyond which the watches wait; default 256. */
  maxPendingEvents?: number;
  /** Objects per LIST page (limit); default 500, as client-go's pager. */
  listPageSize?: number;
}

export interface SourceStats {
  /** Events the sink accepted. */
  emitted: number;
  /** Lists after the initial one (only after 410 Gone). */
  relists: number;
  /** Watches started after one ended, whatever the reason. */
  watchRestarts: number;
  /** The last failure (watch, list or sink), with the source and resource it concerned. */
  lastError?: string;
  /** Events waiting for the sink or being retried. */
  pending: number;
  /** Sink rejections (each one retried). */
  sinkRetries: number;
}
