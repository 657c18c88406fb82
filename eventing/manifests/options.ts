// What `opfn manifests` can be told, and the names and labels every generated object shares.
// Names are derived here once, so a Trigger's subscriber, a source's ServiceAccount and the
// checks in validate.ts all agree on them.
import {
  type FunctionDeclaration,
  brokerRef as brokerRefNamed,
  INSTALL_DEFAULTS,
  KNATIVE_SERVICE_API,
  objectLabels,
} from '../../functions/runtime/index.ts';
import type { DeliverySpec } from '../delivery.ts';

export { EVENTING_API, FUNCTION_LABEL, KNATIVE_SERVICE_API, PART_OF, RBAC_API, SOURCES_API } from '../../functions/runtime/index.ts';

export interface ManifestOptions {
  /** Container image of every function (one image, the function chosen by FUNCTION). */
  image: string;
  /**
   * Where the objects live. In 'cluster' scope the functions act in every namespace (ClusterRoles,
   * sources watching all namespaces); in 'namespace' scope only in this one (Roles).
   */
  namespace: string;
  scope: 'cluster' | 'namespace';
  brokerName: string;
  /** Knative Broker class: MTChannelBasedBroker (default, in-memory channel unless configured) or Kafka. */
  brokerClass: string;
  /** Function name → URL or Knative Service name its Trigger sends to instead (`--replace`). */
  replace: Record<string, string>;
  /**
   * Delivery of the Broker and every Trigger: retries, backoff, the per-attempt timeout (default
   * the revision's, REVISION_TIMEOUT_SECONDS) and, when set, the cap of an honoured Retry-After.
   * The dead-letter sink is always the generated one.
   */
  delivery: Required<Pick<DeliverySpec, 'retry' | 'backoffPolicy' | 'backoffDelay'>> & Pick<DeliverySpec, 'timeout' | 'retryAfterMax'>;
  /** Image of the dead-letter sink (Knative's event_display logs each dead letter it receives). */
  deadLetterImage: string;
}

export const DEFAULT_NAMESPACE = INSTALL_DEFAULTS.namespace;
export const KAFKA_BROKER_CLASS = 'Kafka';
export const DEFAULT_BROKER_CLASS = 'MTChannelBasedBroker';
/**
 * The generated Services' revision timeoutSeconds (Knative's default, revision-timeout-seconds):
 * past it the revision answers 504 itself, so no delivery attempt can succeed later.
 */
export const REVISION_TIMEOUT_SECONDS = 300;

export const DEFAULT_OPTIONS: ManifestOptions = {
  image: 'operator-functions:latest',
  namespace: DEFAULT_NAMESPACE,
  scope: INSTALL_DEFAULTS.scope,
  brokerName: INSTALL_DEFAULTS.brokerName,
  brokerClass: DEFAULT_BROKER_CLASS,
  replace: {},
  // Knative's own defaults (retry 10, exponential from 0.2 s: about 3.5 min before dead letter).
  delivery: { retry: 10, backoffPolicy: 'exponential', backoffDelay: 'PT0.2S' },
  deadLetterImage: 'gcr.io/knative-releases/knative.dev/eventing/cmd/event_display',
};

export function labels(component: string, declaration?: FunctionDeclaration): Record<string, string> {
  return objectLabels(component, declaration?.name);
}

/** The Knative Service of the dead-letter sink. */
export const DEAD_LETTER_SERVICE = 'opfn-dead-letters';
/** A function's PingSource, named as resyncEvent() in plane.ts names its source. */
export const pingSourceName = (declaration: FunctionDeclaration): string => `${declaration.name}-resync`;
/** A function's poll PingSource (eventing/manifests/ping-source.ts), named as pollEvent() in plane.ts names its source. */
export const pollSourceName = (declaration: FunctionDeclaration): string => `${declaration.name}-poll`;
/** The ServiceAccount an ApiServerSource's adapter runs as. */
export const sourceServiceAccountName = (sourceName: string): string => `opfn-${sourceName}-source`;

export const brokerRef = (options: ManifestOptions) => brokerRefNamed(options.brokerName);
export const serviceRef = (name: string) => ({ ref: { apiVersion: KNATIVE_SERVICE_API, kind: 'Service', name } });
