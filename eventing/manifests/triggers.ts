// A function's Trigger (eventing.knative.dev/v1): every event tagged with the function's name
// (`opfnfunction`, set by its sources' and its PingSource's ceOverrides) goes to its Knative
// Service (`filters`, wiring.ts), with Knative's delivery (retries, exponential backoff, a
// per-attempt timeout, optionally Retry-After honoured up to retryAfterMax) ending in the
// dead-letter sink.
// The local plane runs this very object (eventing/knative/triggers.ts).
//
// `--replace <function>=<target>` swaps only the subscriber: a URL (anything with a scheme)
// becomes `subscriber.uri`, anything else names a Knative Service in the same namespace
// (`subscriber.ref`). Nothing else changes, so the function's sources and resync keep feeding
// whatever now answers.
import type { FunctionDeclaration, KubeObject } from '../../functions/runtime/index.ts';
import { triggerFor } from './wiring.ts';
import { DEAD_LETTER_SERVICE, EVENTING_API, labels, REVISION_TIMEOUT_SECONDS, serviceRef, type ManifestOptions } from './options.ts';

/** Where a Trigger sends: the function's own Service, or what `--replace` names. */
export function subscriberFor(declaration: FunctionDeclaration, options: ManifestOptions): { uri: string } | ReturnType<typeof serviceRef> {
  const replacement = options.replace[declaration.name];
  if (replacement === undefined) return serviceRef(declaration.name);
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(replacement) ? { uri: replacement } : serviceRef(replacement);
}

/**
 * The delivery every Trigger (and the Broker) uses: the options', and the generated dead-letter
 * sink. Each attempt ends with the revision's timeout unless the options say otherwise: no
 * attempt can succeed after it (the revision answers 504), and without a timeout Knative's
 * dispatcher waits on an attempt that never gets an answer (a connection lost mid-request)
 * without end, holding the event.
 */
export function deliveryFor(options: ManifestOptions): Record<string, unknown> {
  return { timeout: `PT${REVISION_TIMEOUT_SECONDS}S`, ...options.delivery, deadLetterSink: serviceRef(DEAD_LETTER_SERVICE) };
}

export function trigger(declaration: FunctionDeclaration, options: ManifestOptions): KubeObject {
  const { name, filters } = triggerFor(declaration);
  return {
    apiVersion: EVENTING_API,
    kind: 'Trigger',
    metadata: { name, namespace: options.namespace, labels: labels('trigger', declaration) },
    spec: { broker: options.brokerName, filters, subscriber: subscriberFor(declaration, options), delivery: deliveryFor(options) },
  };
}
