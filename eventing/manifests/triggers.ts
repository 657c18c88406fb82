// A function's Trigger (eventing.knative.dev/v1): every event tagged with the function's name
// (`opfnfunction`, set by its sources' and its PingSource's ceOverrides) goes to its Knative
// Service, with Knative's delivery (retries, exponential backoff) ending in the dead-letter sink.
// The local plane runs this very object (eventing/knative/triggers.ts).
//
// `--replace <function>=<target>` swaps only the subscriber: a URL (anything with a scheme)
// becomes `subscriber.uri`, anything else names a Knative Service in the same namespace
// (`subscriber.ref`). Nothing else changes, so the function's sources and resync keep feeding
// whatever now answers.
import type { FunctionDeclaration } from '../../functions/runtime/declaration.ts';
import type { KubeObject } from '../../functions/runtime/kinds.ts';
import { triggerFor } from './wiring.ts';
import { DEAD_LETTER_SERVICE, EVENTING_API, labels, serviceRef, type ManifestOptions } from './options.ts';

/** Where a Trigger sends: the function's own Service, or what `--replace` names. */
export function subscriberFor(declaration: FunctionDeclaration, options: ManifestOptions): { uri: string } | ReturnType<typeof serviceRef> {
  const replacement = options.replace[declaration.name];
  if (replacement === undefined) return serviceRef(declaration.name);
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(replacement) ? { uri: replacement } : serviceRef(replacement);
}

/** The delivery every Trigger (and the Broker) uses: Knative's defaults and the generated dead-letter sink. */
export function deliveryFor(options: ManifestOptions): Record<string, unknown> {
  return { ...options.delivery, deadLetterSink: serviceRef(DEAD_LETTER_SERVICE) };
}

export function trigger(declaration: FunctionDeclaration, options: ManifestOptions): KubeObject {
  const { name, filter, filters } = triggerFor(declaration);
  return {
    apiVersion: EVENTING_API,
    kind: 'Trigger',
    metadata: { name, namespace: options.namespace, labels: labels('trigger', declaration) },
    spec: { broker: options.brokerName, filter, ...(filters ? { filters } : {}), subscriber: subscriberFor(declaration, options), delivery: deliveryFor(options) },
  };
}
