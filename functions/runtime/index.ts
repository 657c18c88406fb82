// The author's face of the runtime: everything a function needs, from one import. Functions
// (functions/<name>/) import the runtime only through this file; the host (host/) is the
// process they run in and is never imported by them.

// Declaring a function.
export { defineFunction, unwantedChanges } from './declaration.ts';
export type {
  AdmissionDeclaration,
  ChangeSelection,
  ConfigParameter,
  DerivedSourcesDeclaration,
  InstallContext,
  InstallPlacement,
  NarrowedRights,
  FinalizerDeclaration,
  FunctionDeclaration,
  MapperContext,
  OwnedKind,
  PolicyRule,
  ReconcileContext,
  ReconcileResult,
  RuntimeKinds,
  Scaling,
  WatchedChange,
  WatchedKind,
} from './declaration.ts';
export { resolveConfig, validateConfigDeclaration } from './config.ts';
export { CRON_DESCRIPTORS, CRON_FIELDS, cronFieldValue, cronProblem, type CronField } from './cron.ts';

// Kinds, keys and objects.
export {
  apiVersionOf,
  collectionPath,
  compareResourceVersions,
  ConfigMap,
  CoreEvent,
  groupKind,
  InvalidPathSegmentError,
  isValidGroupVersion,
  isValidKindName,
  isValidName,
  isValidNameOf,
  isValidNamespace,
  keyOf,
  keyProblem,
  keyString,
  kindKey,
  kindKeyString,
  Namespace,
  objectPath,
  parseApiVersion,
  parseKindKey,
  pathSegmentProblem,
  Pod,
  rfc3339,
  sameKind,
  Secret,
  splitKindKey,
} from './kinds.ts';
export type {
  KindKey,
  KubeObject,
  LabelSelector,
  LabelSelectorRequirement,
  ObjectKey,
  ObjectMeta,
  OwnerReference,
  ResourceKind,
} from './kinds.ts';

// The Kubernetes client.
export { KubeClient, LIST_PAGE_SIZE } from './kube/client.ts';
export type { FullListOptions, ListOptions, MetadataListOptions, ObjectList, PartialObjectMetadata } from './kube/client.ts';
export { ApiError, isAlreadyExists, isConflict, isNotFound, isRbacDenial, NOT_SERVED, type KubeStatus } from './kube/errors.ts';
export { ConnectionReusingKubeConfig, configuredKubeconfig, type ConnectionOptions } from './kube/config.ts';
export type { RequestObserver } from './kube/transport.ts';
export type { WatchEvent } from './kube/watch.ts';
export { OwnWrites } from './own-writes.ts';
export { compileSelector, SELECTS_EVERYTHING, type Selector, type SelectorResult } from './label-selectors.ts';
export { Discovery, discoveryFor, MAX_GROUP_VERSIONS, unservedKinds } from './discovery.ts';

// Errors and what the delivery does with them.
export { agreedRetryAfter, BadKeyError, StatusConflictError, statusForError, TerminalError, TransientError } from './errors.ts';
export {
  FORBIDDEN_RETRY_SECONDS,
  refusedRequest,
  refusedWrite,
  unmendableReason,
  type RefusedRequest,
  type RefusedWrite,
  type UnmendableReason,
} from './refusals.ts';

// Reconciling: children, status, conditions, finalizers.
export { applyChild, childMatches, keepExisting, mergeChild, type Applied, type ApplyOptions, type ApplyResult } from './child-applier.ts';
export {
  controllerOf,
  controllerReference,
  ensureFinalizer,
  getNoOlderThan,
  isControlledBy,
  jsonEqual,
  removeFinalizer,
  setCondition,
  updateStatus,
} from './reconciler.ts';
export type { Condition, ConditionInput } from './reconciler.ts';
export { isHashedLabelValue, ownerFromLabels, ownerLabelValue } from './owner-labels.ts';
export { allOf, matching, type Mapper } from './mappers.ts';
export { EventSink, MAX_QUEUED, NORMAL_BURST, NORMAL_PER_SECOND, type EventRecorder } from './recorder.ts';

// Events a function receives.
export {
  APISERVER_TYPE_PREFIX,
  apiServerEventType,
  BadEventError,
  CHANGE_ACTIONS,
  decodeCloudEvent,
  decodeWithSdk,
  dueTimeMs,
  FUNCTION_EXTENSION,
  interpretEvent,
  MAX_KEYS_PER_EVENT,
  metadataProblem,
  NOT_BEFORE_EXTENSION,
  PING_TYPE,
  POLL_DATA,
  RECONCILE_TYPE,
} from './events.ts';
export type { ChangeAction, ChangeEvent, FunctionEvent, ObjectReference } from './events.ts';

// The Knative objects a function's declaration implies, and its RBAC rules.
export {
  apiServerSourceObject,
  brokerRef,
  clusterRoleName,
  clusterScopedOf,
  EVENTING_API,
  FUNCTION_LABEL,
  guessedResource,
  identity,
  INSTALL_CONFIG,
  INSTALL_DEFAULTS,
  installConfigValues,
  installNamespaceFrom,
  KNATIVE_SERVICE_API,
  objectLabels,
  PART_OF,
  RBAC_API,
  sourceKindName,
  sourceResource,
  SOURCES_API,
  splitByScope,
  watchableBySource,
} from './knative-objects.ts';
export type { Placement, SourceResource } from './knative-objects.ts';
export { impliedRules, mergeRules, rulesFor, sourceRulesFor } from './rbac.ts';

// HTTP to other services.
export { DEFAULT_HTTP_TIMEOUT_MS, DEFAULT_MAX_RESPONSE_BYTES, httpClient, ResponseTooLargeError, retryAfterMs } from './http.ts';
export type { HttpClient, HttpRequest } from './http.ts';

// Small helpers.
export { boundedMessage, cut, MAX_MESSAGE_CHARS, quote } from './bounded-messages.ts';
export { forEachLimited } from './concurrency.ts';
export { setRecent } from './lru-map.ts';
export { MAX_TIMER_MS } from './timer-limit.ts';
