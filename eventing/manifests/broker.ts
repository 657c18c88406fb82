// The shared part of a deployment: the Broker every source sends to and every Trigger reads
// from, and the dead-letter sink where events end that no retry could deliver.
//
// Broker class (annotation `eventing.knative.dev/broker.class`): the default
// MTChannelBasedBroker keeps events in the namespace's default channel (InMemoryChannel unless
// the cluster configures another, so a restart of the dispatcher loses what is queued: the
// resync repairs it). `--broker-class Kafka` selects Knative's Kafka broker (knative-extensions/
// eventing-kafka-broker), whose events survive restarts; it reads its topic settings from the
// ConfigMap `kafka-broker-config` in `knative-eventing`, which that installation provides.
//
// Dead letters: a Knative Service running Knative's event_display, which logs every CloudEvent it
// receives with the `knativeerror*` extensions that say where and why delivery failed
// (`kubectl logs -l serving.knative.dev/service=opfn-dead-letters -c user-container`). It
// is kept at one instance (min-scale 1) so its log is not lost with a pod scaled to zero. Secret
// data never reaches it: Secrets are sent in Reference mode.
import type { KubeObject } from '../../functions/runtime/index.ts';
import {
  DEAD_LETTER_SERVICE,
  EVENTING_API,
  KAFKA_BROKER_CLASS,
  KNATIVE_SERVICE_API,
  labels,
  PART_OF,
  type ManifestOptions,
} from './options.ts';
import { AUTOSCALING, VISIBILITY_LABEL } from './service.ts';
import { deliveryFor } from './triggers.ts';

export const BROKER_CLASS_ANNOTATION = 'eventing.knative.dev/broker.class';

export function namespaceObject(options: ManifestOptions): KubeObject {
  return { apiVersion: 'v1', kind: 'Namespace', metadata: { name: options.namespace, labels: PART_OF } };
}

export function broker(options: ManifestOptions): KubeObject {
  return {
    apiVersion: EVENTING_API,
    kind: 'Broker',
    metadata: {
      name: options.brokerName,
      namespace: options.namespace,
      labels: labels('broker'),
      annotations: { [BROKER_CLASS_ANNOTATION]: options.brokerClass },
    },
    spec: {
      ...(options.brokerClass === KAFKA_BROKER_CLASS
        ? { config: { apiVersion: 'v1', kind: 'ConfigMap', name: 'kafka-broker-config', namespace: 'knative-eventing' } }
        : {}),
      delivery: deliveryFor(options),
    },
  };
}

export function deadLetterSink(options: ManifestOptions): KubeObject {
  const objectLabels = labels('dead-letters');
  return {
    apiVersion: KNATIVE_SERVICE_API,
    kind: 'Service',
    metadata: { name: DEAD_LETTER_SERVICE, namespace: options.namespace, labels: { ...objectLabels, [VISIBILITY_LABEL]: 'cluster-local' } },
    spec: {
      template: {
        metadata: { labels: objectLabels, annotations: { [`${AUTOSCALING}/min-scale`]: '1', [`${AUTOSCALING}/max-scale`]: '1' } },
        spec: {
          containers: [
            {
              name: 'event-display',
              image: options.deadLetterImage,
              resources: { requests: { cpu: '10m', memory: '32Mi' }, limits: { memory: '64Mi' } },
              securityContext: { runAsNonRoot: true, runAsUser: 65532, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
            },
          ],
        },
      },
    },
  };
}
