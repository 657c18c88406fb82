// The partition key of an event: the CloudEvents Partitioning extension `partitionkey`
// (cloudevents/spec extensions/partitioning.md), "all events with the same key go to the same
// partition". The source sets it to the object whose reconcile an event causes: for the reconciled
// kind the object itself, for an owned kind its controller owner (ownerReference, else the
// owner-name label), for a watched kind nothing (a mapper decides, possibly many keys). The plane
// routes by it (one object's events meet in one instance, whose workqueue coalesces them); a
// Knative Kafka broker orders by it. A key is only a routing hint, never trusted for access.
//
// A resource without a rule (the plane's sources come from generated Knative ApiServerSources,
// which do not say which kind a function reconciles) is keyed by its controller owner when it has
// one, else by itself: right for the reconciled kind and for children with an ownerReference; a
// watched kind then gets a key it does not need, which costs nothing (any instance serves it).
import { parseApiVersion, type KubeObject, type ResourceKind, ownerLabelValue } from '../../functions/runtime/index.ts';

export const PARTITION_KEY_EXTENSION = 'partitionkey';

/** How a resource's events are partitioned. */
export type PartitionRule =
  | { by: 'none' }
  | { by: 'self' }
  /** By the controller owner of kind `owner` (ownerReference), else by the labels naming it. */
  | { by: 'owner'; owner: ResourceKind; labels?: { namespace?: string; name: string } };

/**
 * `<namespace>/<name>` of the object the event is about, or undefined. The name is written as
 * ownerLabelValue writes it, so a key found through a (possibly hashed) label equals the one
 * found from the owner itself.
 */
export function partitionKey(rule: PartitionRule | undefined, object: KubeObject): string | undefined {
  const namespace = object.metadata.namespace ?? '';
  if (!rule) {
    const owner = object.metadata.ownerReferences?.find((ref) => ref.controller === true && ref.name);
    // A namespaced object's owner is in its namespace; a cluster-scoped one's is cluster-scoped.
    if (owner) return keyOf(namespace, owner.name);
    return partitionKey({ by: 'self' }, object);
  }
  if (rule.by === 'none') return undefined;
  if (rule.by === 'self') return object.metadata.name ? keyOf(namespace, object.metadata.name) : undefined;
  const reference = object.metadata.ownerReferences?.find(
    (ref) => ref.controller === true && ref.kind === rule.owner.kind && groupOf(ref.apiVersion) === rule.owner.group,
  );
  if (reference?.name) return keyOf(rule.owner.namespaced ? namespace : '', reference.name);
  if (!rule.labels) return undefined;
  const labels = object.metadata.labels ?? {};
  const name = labels[rule.labels.name];
  if (!name) return undefined;
  const ownerNamespace = rule.owner.namespaced ? (rule.labels.namespace ? (labels[rule.labels.namespace] ?? '') : namespace) : '';
  return `${ownerNamespace}/${name}`;
}

const keyOf = (namespace: string, name: string) => `${namespace}/${ownerLabelValue(name)}`;
const groupOf = (apiVersion: string | undefined) => (apiVersion ? parseApiVersion(apiVersion).group : '');
