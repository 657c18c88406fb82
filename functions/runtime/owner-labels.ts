// Ownership by label, for children an ownerReference cannot name (another namespace) or for
// finding a child's owner after the child is gone. A label value holds at most 63 characters
// while a name may have 253, so a long name is written in a stable hash form that no name can
// take (names have no '_'); routing resolves that form by listing the owners and comparing.
import { createHash } from 'node:crypto';
import { isValidName, isValidNamespace, type KubeObject, type ObjectKey, type ResourceKind } from './kinds.ts';
import type { KubeClient } from './kube/client.ts';
import { quote } from './bounded-messages.ts';

const LABEL_VALUE_MAX = 63;
const HASH_CHARS = 16;

/** The label value naming `name`: the name itself when it fits, else `<prefix>_<sha256 prefix>`. */
export function ownerLabelValue(name: string): string {
  if (name.length <= LABEL_VALUE_MAX) return name;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, HASH_CHARS);
  return `${name.slice(0, LABEL_VALUE_MAX - HASH_CHARS - 1)}_${hash}`;
}

export const isHashedLabelValue = (value: string): boolean => value.includes('_');

/** Exactly ownerLabelValue's hash form: a value that is not cannot name any owner, so needs no list. */
const HASHED_FORM = new RegExp(`^[a-z0-9.-]{${LABEL_VALUE_MAX - HASH_CHARS - 1}}_[0-9a-f]{${HASH_CHARS}}$`);

/**
 * The owner key a child's labels name, or the reason they name none. A hashed name is resolved
 * by listing the names of `ownerKind` in the owner's namespace (the only API call; plain names,
 * and values no name hashes to, need none).
 */
export async function ownerFromLabels(
  child: KubeObject,
  labels: { namespace?: string; name: string },
  ownerKind: ResourceKind,
  kube: KubeClient,
): Promise<ObjectKey | string> {
  const value = child.metadata.labels?.[labels.name];
  if (!value) return `no ${labels.name} label`;
  const namespace = labels.namespace ? (child.metadata.labels?.[labels.namespace] ?? '') : (child.metadata.namespace ?? '');
  if (ownerKind.namespaced && !isValidNamespace(namespace)) return `owner namespace ${quote(namespace)} is not a valid namespace`;
  const scope = ownerKind.namespaced ? namespace : '';
  if (!isHashedLabelValue(value))
    return isValidName(value) ? { namespace: scope, name: value } : `owner name ${quote(value)} is not a valid name`;
  if (!HASHED_FORM.test(value)) return `owner label ${quote(value)} is not the hash form of a name`;
  // Names only (metadata): the list grows with the owners in the namespace, so each page is kept small.
  for await (const page of kube.pages(ownerKind, { namespace: scope || undefined, metadataOnly: true })) {
    const owner = page.items.find((item) => ownerLabelValue(item.metadata.name ?? '') === value);
    if (owner) return { namespace: scope, name: owner.metadata.name! };
  }
  return `no ${ownerKind.kind} in ${scope || 'the cluster'} has a name that hashes to ${quote(value)}`;
}
