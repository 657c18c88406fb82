// A function is declared once. The runtime's event intake, the local event plane's watches and
// triggers, the Knative manifests and the RBAC Role are all derived from this declaration, so
// adding a kind means adding one folder with one of these.
import type { Logger } from 'pino';
import type { KubeObject, ObjectKey, ResourceKind } from './kinds.ts';
import type { KubeClient } from './kube.ts';
import type { EventRecorder } from './reconciler.ts';

/** One rule of an rbac.authorization.k8s.io/v1 (Cluster)Role. */
export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

/** A kind whose objects the function creates and controls; changes map back to the owner. */
export interface OwnedKind {
  kind: ResourceKind;
  /**
   * A label the function sets on each owned object whose value is the owner's name (owner in
   * the same namespace). It lets the event plane watch only the function's own objects and maps
   * an event to its owner even when the owned object is already gone.
   */
  ownerNameLabel?: string;
}

/** A change of a watched (not owned) object, as far as the event tells it. */
export interface WatchedChange {
  key: ObjectKey;
  /** The object from a Resource-mode event: possibly stale, never trusted for desired state. */
  object?: KubeObject;
  deleted: boolean;
}

export interface MapperContext {
  kube: KubeClient;
  log: Logger;
}

/** A kind the function reads but does not own; a mapper turns its changes into keys to reconcile. */
export interface WatchedKind {
  kind: ResourceKind;
  /** Only objects with these labels are of interest (passed to the watch as labelSelector). */
  labelSelector?: string;
  keysFor(change: WatchedChange, ctx: MapperContext): Promise<ObjectKey[]>;
}

/** Knative's autoscaling annotations / revision field, with their meanings; the local activator honours them too. */
export interface Scaling {
  /** 0 = scale to zero when idle. */
  minScale: number;
  /** 0 = no upper bound (Knative's max-scale "0"). */
  maxScale: number;
  /** Soft limit: concurrent requests per instance the autoscaler aims for (0 = default 100). */
  target: number;
  /** Hard limit of concurrent requests per instance (0 = unlimited). */
  containerConcurrency: number;
}

export interface ReconcileContext {
  kube: KubeClient;
  log: Logger;
  events: EventRecorder;
}

export interface FunctionDeclaration {
  /** DNS-1123 label: names the Knative Service, ServiceAccount, Role and Triggers. */
  name: string;
  description: string;
  /** The kind whose objects `reconcile` is called for; a resync lists it. */
  reconciles: ResourceKind;
  owns: OwnedKind[];
  watches: WatchedKind[];
  /** Everything the function may do, and nothing more: the generated Role grants exactly this. */
  rbac: PolicyRule[];
  /** Cron schedule of the resync PingSource (every object reconciled, catches lost events). */
  resyncSchedule: string;
  scaling: Scaling;
  /**
   * Bring the cluster to the desired state for one object, reading everything it needs afresh.
   * Must be idempotent and safe to run concurrently for the same key. Throws on transient
   * failure (the event is redelivered); reports invalid objects in their status instead.
   */
  reconcile(key: ObjectKey, ctx: ReconcileContext): Promise<void>;
}

// Knative's default target (100). A reconcile mostly waits on the API, so one Node process
// serves many at once; measured with bench/plane.ts, target 10 spawned 4 processes for a burst of
// 200 objects and reached 79 events/s on 2 cores, target 100 reached 291 events/s.
const DEFAULT_SCALING: Scaling = { minScale: 0, maxScale: 4, target: 100, containerConcurrency: 0 };

type DeclarationInput = Omit<FunctionDeclaration, 'owns' | 'watches' | 'resyncSchedule' | 'scaling'> &
  Partial<Pick<FunctionDeclaration, 'owns' | 'watches' | 'resyncSchedule' | 'scaling'>>;

export function defineFunction(input: DeclarationInput): FunctionDeclaration {
  if (!/^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/.test(input.name)) {
    throw new Error(`function name "${input.name}" must be a DNS-1123 label (lower-case letters, digits, '-')`);
  }
  return {
    owns: [],
    watches: [],
    resyncSchedule: '*/5 * * * *',
    ...input,
    scaling: { ...DEFAULT_SCALING, ...input.scaling },
  };
}
