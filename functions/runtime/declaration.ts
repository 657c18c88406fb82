// A function is declared once. The runtime's event intake, the local event plane's watches and
// triggers, the Knative manifests and the RBAC Role are all derived from this declaration, so
// adding a kind means adding one folder with one of these.
import type { Logger } from 'pino';
import { groupKind, type KindKey, type KubeObject, type ObjectKey, type ResourceKind } from './kinds.ts';
import { validateConfigDeclaration, type ConfigParameter } from './config.ts';
import { cronProblem } from './cron.ts';
import { CHANGE_ACTIONS, type ChangeAction, type ChangeEvent } from './events.ts';
import type { HttpClient } from './http.ts';
import type { KubeClient } from './kube/client.ts';
import type { EventRecorder } from './recorder.ts';

export type { ConfigParameter } from './config.ts';

/** One rule of an rbac.authorization.k8s.io/v1 (Cluster)Role. */
export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

/** Which changes of an owned or watched kind reach the function. */
export interface ChangeSelection {
  /**
   * The changes of this kind the function needs to hear about (default: all three). Like
   * controller-runtime's predicates, e.g. leaving out the adds of objects only the function
   * itself creates: the generated Trigger leaves the others out (Knative's `filters`), so they
   * cost no delivery, and the runtime answers any that still arrive without a reconcile.
   */
  changes?: ChangeAction[];
}

/** A kind whose objects the function creates and controls; changes map back to the owner. */
export interface OwnedKind extends ChangeSelection {
  kind: ResourceKind;
  /**
   * A label the function sets on each owned object whose value is the owner's name (owner in
   * the same namespace). It lets the event plane watch only the function's own objects and maps
   * an event to its owner even when the owned object is already gone.
   */
  ownerNameLabel?: string;
  /**
   * Labels on each owned object whose values are the owner's namespace and name: ownership
   * across namespaces, where ownerReferences cannot point (the garbage collector would delete the
   * child). Routing maps the child's event back to that owner; the source may select on the
   * presence of the `namespace` label. Write the name with `ownerLabelValue(name)`: a name longer
   * than a label value (63) becomes a stable hash form, which routing resolves by listing owners.
   */
  ownerLabels?: { namespace: string; name: string };
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
  /** The namespace an install limited to one runs in (its Role grants only there); undefined for a cluster-wide install. */
  installNamespace?: string;
}

/**
 * A kind the function reads but does not own; a mapper turns its changes into keys to reconcile.
 * A kind may be declared more than once, with selectors that split its objects, each asking for
 * its own `changes` (every change of most objects, only the deletes of those the function writes
 * itself): each is watched apart, and its Trigger leaves out what that one does not ask for. Its
 * events are mapped by the first entry's `keysFor`.
 */
export interface WatchedKind extends ChangeSelection {
  kind: ResourceKind;
  /** Only objects with these labels are of interest (passed to the watch as labelSelector). */
  labelSelector?: string;
  keysFor(change: WatchedChange, ctx: MapperContext): Promise<ObjectKey[]>;
}

/**
 * Kinds known only at run time, such as the parent and child kinds of Metacontroller's
 * CompositeControllers: the function itself says which keys a change of such a kind concerns,
 * and which kind a key names. The runtime treats the keys as any other: it validates them as
 * the API server would (an invalid one is dropped with a warning), coalesces, reconciles, and
 * replies about failed or requeued ones.
 */
export interface RuntimeKinds {
  /**
   * The keys a change of an object whose kind the declaration does not name concerns; [] when
   * none. `event.object` (Resource mode) is possibly stale or forged: use it to find keys, never
   * to decide what to write.
   */
  keysFor(event: ChangeEvent, ctx: MapperContext): Promise<KindKey[]>;
  /** The kind a reconcile event's key names as `<group>/<Kind>` (kinds.ts groupKind), if the function reconciles it. */
  kindOf(groupKind: string, ctx: MapperContext): Promise<ResourceKind | undefined>;
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
  /** Kubernetes Events, aggregated like client-go's recorder and posted off the critical path. */
  events: EventRecorder;
  /** The declared `config`, resolved from the environment at start (defaults applied). */
  config: Readonly<Record<string, string>>;
  /** Outbound HTTP with a timeout on every request; retries are the caller's. */
  http: HttpClient;
  now(): Date;
  /** As MapperContext's: where an install limited to one namespace may list; undefined for a cluster-wide install. */
  installNamespace?: string;
  /**
   * The object a Resource-mode event carried, when the event maps to this one key: the
   * reconciled object itself, or the owned/watched object that maps to it (check `eventObject.kind`);
   * with `apiVersion` and `kind` set. Possibly stale or forged: use it only to decide to do LESS
   * (skip a read, find nothing to do); everything written must come from a read of the API
   * server (the body's resourceVersion may say where that read is served: getNoOlderThan in
   * reconciler.ts). For a Reference-mode event of the reconciled kind it is set by the
   * reconcile's own first read of the object (reference-reads.ts): read it after that read.
   * Absent for resyncs, fan-outs and runs shared by several events.
   */
  eventObject?: KubeObject;
  /**
   * The reconciled object as the runtime has just read it from the API server (or written it:
   * the answer to adding the declared finalizer), when it had to before calling reconcile (a
   * declared finalizer): as good as the reconcile's own read, so use it instead of reading again.
   * Absent when the runtime did not read it, or found it gone.
   */
  current?: KubeObject;
  /**
   * True when the runtime has just added the declared finalizer to `current`: as read from the
   * API server (never from an event body), the object had none. So a new object, unless the
   * finalizer was removed by hand or another replica is adding it at the same moment: nothing
   * this function made under the finalizer can exist yet but in those cases, which a reconcile
   * that relies on it must leave for its next one (the resync) to find.
   */
  finalizerAdded?: boolean;
  /**
   * In a resync or poll, the object as that run's listing read it, when this run is the
   * listing's own (not shared with an event's). Possibly older than a change another run has
   * already handled: like eventObject, use it only to decide to do LESS (find nothing to do and
   * skip the reads); anything to write is decided again from a read of the API server.
   */
  listed?: KubeObject;
  /**
   * A read shared by every key of this event (a resync, a poll, a mapper's keys): the first key
   * to ask for `name` runs `read`, the others get its answer. For reads that every key makes
   * alike and whose staleness harms nothing, e.g. the namespaces each CopyratorRule copies into:
   * 1000 rules in a resync list them once, not 1000 times. Each event reads afresh, and so does
   * a run several events share (workqueue.ts): an answer read for one event may predate another's change.
   */
  readOnce<T>(name: string, read: () => Promise<T>): Promise<T>;
  /**
   * When this delivery stops starting work (ms since the epoch; its budget, delivery-budget.ts,
   * after it arrived), so that its answer goes back before the request times out. A reconcile
   * that works through many items (a CompositeController's sweep) starts none after it and
   * reports the items it left as deferredKeys; the host does the same with an event's keys.
   */
  deadline: number;
}

/** "Reconcile this key again after D" (controller-runtime's Result.RequeueAfter). */
export interface ReconcileResult {
  requeueAfterSeconds?: number;
  /**
   * Other keys this reconcile worked on that failed (a CompositeController's sweep syncs its
   * parents), of the reconciled kind or a runtime kind: each is answered as a failed key of the
   * event, so it alone is retried, with the broker's backoff, and the keys that succeeded are not
   * redone (a TerminalError is not retried). A requeue goes the way of any requeue beside a
   * failed key: it waits for the resync (answers.ts).
   */
  failedKeys?: { key: KindKey; error: Error }[];
  /**
   * Other keys this reconcile worked on that asked to come back later (a CompositeController's
   * sweep: a parent's hook answered resyncAfterSeconds), of the reconciled kind or a runtime
   * kind: each is requeued on its own, at its own time, as requeueAfterSeconds requeues this key.
   * An answer carries at most MAX_KEYS_PER_EVENT requeued keys (the soonest); the others wait for
   * the resync, as do requeues beside a failed key.
   */
  requeueKeys?: { key: KindKey; afterSeconds: number }[];
  /**
   * Other keys this reconcile had to leave undone because the delivery's deadline passed, of the
   * reconciled kind or a runtime kind: the answer hands them back in its reply, to be done at once
   * in the reply's own delivery (answers.ts).
   */
  deferredKeys?: KindKey[];
}

/**
 * A finalizer the runtime drives: added to every reconciled object that is not being deleted
 * (before reconcile is called); when the object has a deletionTimestamp, `finalize` runs instead
 * of reconcile and the finalizer is removed once it resolves true (false or a throw: again later).
 */
export interface FinalizerDeclaration {
  /** A qualified name, e.g. "copyrator.flant.com/cleanup". */
  name: string;
  finalize(object: KubeObject, ctx: ReconcileContext): Promise<boolean>;
}

/** The parts of a ValidatingAdmissionPolicy's spec (admissionregistration.k8s.io/v1) a function declares. */
export interface AdmissionDeclaration {
  /** CEL; the request is checked only when all are true (e.g. what the function acts on changed). */
  matchConditions?: { name: string; expression: string }[];
  variables?: { name: string; expression: string }[];
  validations: {
    expression: string;
    message: string;
    messageExpression?: string;
    reason?: 'Unauthorized' | 'Forbidden' | 'Invalid' | 'RequestEntityTooLarge';
  }[];
}

/** Where an install puts the objects it makes: its namespace, its Broker, and how far its rights reach. */
export interface InstallPlacement {
  namespace: string;
  brokerName: string;
  scope: 'cluster' | 'namespace';
}

/**
 * Event sources a function derives at run time from each object of its reconciled kind, when the
 * kinds it must hear about are known only then (a CompositeController names its parent and child
 * kinds). On a cluster the function writes these ApiServerSources itself; a local plane holding
 * its Knative objects in memory runs them instead: it watches the reconciled kind, asks
 * `sourcesFor` for each object, and starts the function with `planeConfig` so that it writes none.
 */
export interface DerivedSourcesDeclaration {
  /** Configuration the plane gives the function when the plane runs these sources itself. */
  planeConfig: Record<string, string>;
  /** How the names of the ServiceAccounts these sources run as begin (an EventPolicy admits them as senders). */
  identityPrefix: string;
  /**
   * The ApiServerSources one object needs, placed as `placement` says. A TerminalError: the
   * object is invalid and gets none; any other error: asked again later, with backoff.
   */
  sourcesFor(object: KubeObject, ctx: { kube: KubeClient; placement: InstallPlacement }): Promise<KubeObject[]>;
}

/** What `opfn manifests` tells a function that narrows its rights at install time (`narrowRights`). */
export interface InstallContext {
  placement: InstallPlacement;
  /** The function's ServiceAccount, in the install's namespace. */
  serviceAccountName: string;
  /** The labels of the function's generated objects. */
  labels: Record<string, string>;
  /** The CRDs the install knows (crds/), for the kinds the given objects name. */
  crds: KubeObject[];
  /** The objects of the file the install was given for the function, and how to name that file in an error; absent when none was given. */
  given?: { objects: KubeObject[]; source: string };
}

/** The rights an install grants a function instead of its declared ones. */
export interface NarrowedRights {
  /** Replaces the declaration's `rbac`. */
  rbac: PolicyRule[];
  /** Further objects the install needs, placed right after the function's identity. */
  objects: KubeObject[];
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
   * Whether reconcile acts on the reconciled object's labels or annotations (e.g. copies them to
   * children). Default true. When false, an update event whose body shows
   * `metadata.generation == status.observedGeneration` (and no deletion, and the declared
   * finalizer in place) is a status-only change and is skipped without any API call, in every
   * instance; when true, only in an instance that last saw the same labels and annotations.
   */
  readsMetadata: boolean;
  /**
   * Serve reconcile's reads of its object at the event's version (getNoOlderThan) from a watch of
   * the reconciled kind while events come in a burst, instead of a GET each
   * (kube/burst-watch.ts). Grants `watch` on the reconciled kind. For a function that reads its
   * objects with getNoOlderThan; absent for the others.
   */
  watchDuringBursts?: boolean;
  /** Configuration from the environment (secret ones from a Secret on Knative). */
  config: ConfigParameter[];
  finalizer?: FinalizerDeclaration;
  /** Kinds the function learns at run time (their events and keys); absent for most functions. */
  runtimeKinds?: RuntimeKinds;
  /**
   * Why the function's work spans namespaces by nature (a CopyratorRule copies into every
   * namespace). An install limited to one namespace cannot grant that, so `opfn manifests
   * --namespace` leaves the function out and says why. Absent for most functions.
   */
  crossesNamespaces?: string;
  /**
   * Who may create or change an object of the reconciled kind, when holding the right to do that
   * is not enough (a CopyratorRule makes the function read and write in other namespaces): a
   * ValidatingAdmissionPolicy's checks, which `opfn manifests` wraps into a policy matching the
   * kind's CREATE and UPDATE plus its binding (eventing/manifests/admission-policy.ts), and the
   * local plane installs. Absent for most functions.
   */
  admission?: AdmissionDeclaration;
  /** Event sources the function derives from its objects at run time; absent for most functions. */
  derivedSources?: DerivedSourcesDeclaration;
  /**
   * For a function whose declared `rbac` is broad because its kinds are known only at run time
   * (Metacontroller's `*`): the narrower rights an install grants instead, from what the install
   * was told (`opfn manifests --composite <file>`), unless the broad ones were chosen
   * (`--composite-broad`, or the local plane's own control plane). Absent for most functions.
   */
  narrowRights?(install: InstallContext): NarrowedRights;
  /**
   * Work each resync does besides reconciling every object: finding what no existing object
   * names any more, which no event will bring (a copy whose rule is gone, left by a replica
   * killed between two writes). Runs once per resync event, before the reconciles, even when
   * there is no object to reconcile, with the delivery's deadline (`ctx.deadline`); a failure
   * is logged and fails nothing (the next resync tries again). No event object, no readOnce.
   */
  sweep?(ctx: ReconcileContext): Promise<void>;
  /**
   * Bring the cluster to the desired state for one object, reading everything it needs afresh.
   * Must be idempotent and safe to run concurrently for the same key. Throws on transient
   * failure (TransientError or any error: redelivered); TerminalError when retrying cannot
   * help (recorded as a Warning Event; the function sets its own Ready=False condition).
   */
  reconcile(key: KindKey, ctx: ReconcileContext): Promise<ReconcileResult | void>;
}

// Knative's default target (100). A reconcile mostly waits on the API, so one Node process
// serves many at once: a low target spawns more processes for a burst and gets through it slower
// (bench/plane.ts compares them).
const DEFAULT_SCALING: Scaling = { minScale: 0, maxScale: 4, target: 100, containerConcurrency: 0 };

type Defaulted = 'owns' | 'watches' | 'resyncSchedule' | 'scaling' | 'config' | 'readsMetadata';
type DeclarationInput = Omit<FunctionDeclaration, Defaulted> &
  Partial<Omit<Pick<FunctionDeclaration, Defaulted>, 'scaling'>> & { scaling?: Partial<Scaling> };

export function defineFunction(input: DeclarationInput): FunctionDeclaration {
  if (!/^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/.test(input.name)) {
    throw new Error(`function name "${input.name}" must be a DNS-1123 label (lower-case letters, digits, '-')`);
  }
  const declaration: FunctionDeclaration = {
    owns: [],
    watches: [],
    resyncSchedule: '*/5 * * * *',
    config: [],
    readsMetadata: true,
    ...input,
    scaling: { ...DEFAULT_SCALING, ...input.scaling },
  };
  const schedule = cronProblem(declaration.resyncSchedule);
  if (schedule) throw new Error(`function ${input.name}: resyncSchedule "${declaration.resyncSchedule}" ${schedule}`);
  validateConfigDeclaration(input.name, declaration.config);
  for (const { kind, changes } of [...declaration.owns, ...declaration.watches]) {
    if (changes === undefined) continue;
    if (changes.length === 0 || new Set(changes).size !== changes.length || changes.some((change) => !CHANGE_ACTIONS.includes(change))) {
      throw new Error(
        `function ${input.name}: changes of ${kind.kind} must name some of ${CHANGE_ACTIONS.join(', ')}, each once (got ${JSON.stringify(changes)})`,
      );
    }
  }
  if (
    declaration.finalizer &&
    !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?\/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/.test(declaration.finalizer.name)
  ) {
    throw new Error(
      `function ${input.name}: finalizer "${declaration.finalizer.name}" must be a qualified name like "example.com/cleanup"`,
    );
  }
  return declaration;
}

/**
 * The changes of owned and watched kinds the function does not ask for (`changes`), per kind:
 * what its Trigger leaves out. A kind declared more than once hears what any of its entries asks
 * for; the reconciled kind always hears everything.
 */
export function unwantedChanges(declaration: FunctionDeclaration): readonly { kind: ResourceKind; actions: ChangeAction[] }[] {
  let unwanted = unwantedByDeclaration.get(declaration);
  if (!unwanted) unwantedByDeclaration.set(declaration, (unwanted = computeUnwantedChanges(declaration)));
  return unwanted;
}

/** Asked once per event: worked out once per declaration. */
const unwantedByDeclaration = new WeakMap<FunctionDeclaration, { kind: ResourceKind; actions: ChangeAction[] }[]>();

function computeUnwantedChanges(declaration: FunctionDeclaration): { kind: ResourceKind; actions: ChangeAction[] }[] {
  const wanted = new Map<string, { kind: ResourceKind; actions: Set<ChangeAction> }>();
  for (const { kind, changes } of [...declaration.owns, ...declaration.watches]) {
    const id = groupKind(kind);
    const entry = wanted.get(id) ?? wanted.set(id, { kind, actions: new Set() }).get(id)!;
    for (const action of changes ?? CHANGE_ACTIONS) entry.actions.add(action);
  }
  wanted.delete(groupKind(declaration.reconciles));
  return [...wanted.values()]
    .map(({ kind, actions }) => ({ kind, actions: CHANGE_ACTIONS.filter((action) => !actions.has(action)) }))
    .filter(({ actions }) => actions.length > 0);
}
