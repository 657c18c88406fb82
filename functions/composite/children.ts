// The I/O around a parent's children: listing the candidates of each child kind, carrying out
// the claim (adopt matching orphans, release children that stopped matching) and the planned
// child operations. The decisions are functions/composite/metacontroller/claim.ts and manage-children.ts.
//
// Upstream: metacontroller pkg/controller/composite/controller.go claimChildren,
// pkg/dynamic/controllerref (adoptChild / releaseChild, with RecheckDeletionTimestamp before the
// first adoption) and pkg/controller/common/manage_children.go (ManageChildren: deletes first,
// keeps going past failures and reports them together; a uid precondition and Background
// propagation on deletes; AlreadyExists on create and NotFound/Conflict on update are fine: the
// next sync sees the truth).
import { objectToWrite, planClaim, type ClaimAction, type ChildOperation, type Selector } from './metacontroller/index.ts';
import {
  apiVersionOf,
  keyOf,
  sameKind,
  type KubeObject,
  type ResourceKind,
  isConflict,
  isNotFound,
  type KubeClient,
  applyChild,
  type ApplyOptions,
  forEachLimited,
  jsonEqual,
} from '../runtime/index.ts';

export interface ParentRef {
  parent: KubeObject;
  kind: ResourceKind;
}

/**
 * A child as the sync keeps it: with its apiVersion and kind (list items of built-in kinds carry
 * none; the hook request is keyed by them), without metadata.managedFields. Those are the API
 * server's record of which client set which field: no decision here reads them (the 3-way merge
 * keeps the observed ones, and an update without them leaves them as they are), and in a small
 * child they are about 40 % of its size, held for every child of a parent that may have tens of
 * thousands. Deliberate difference: a hook's request shows its children without them.
 * `shared` (sharedParts) keeps equal ownerReferences and labels of children kept together once.
 */
export function typed(kind: ResourceKind, object: KubeObject, shared?: SharedParts): KubeObject {
  const { managedFields: _, ...metadata } = object.metadata as KubeObject['metadata'] & { managedFields?: unknown };
  shared?.(metadata);
  return { ...object, apiVersion: apiVersionOf(kind), kind: kind.kind, metadata };
}

export type SharedParts = (metadata: KubeObject['metadata']) => void;

/**
 * The children of one parent mostly carry the same ownerReferences (the parent's) and often the
 * same labels: in a small child they are about 40 % of what it holds. A value equal to the
 * previous child's is replaced by that one, frozen: nothing writes into a kept child (a write
 * starts from a copy), and a write that did would throw rather than change every child. Only the
 * previous value is remembered, so nothing grows with the children.
 */
export function sharedParts(): SharedParts {
  const last: { ownerReferences?: unknown; labels?: unknown } = {};
  return (metadata) => {
    const fields = metadata as { ownerReferences?: unknown; labels?: unknown };
    for (const field of ['ownerReferences', 'labels'] as const) {
      const value = fields[field];
      if (value === undefined || value === null) continue;
      // Frozen once shared: a value no other child holds stays as it came.
      if (last[field] !== undefined && jsonEqual(value, last[field])) fields[field] = frozen(last[field]);
      else last[field] = value;
    }
  };
}

/** The value, frozen with what it holds (owner references and labels are two levels deep at most). */
function frozen<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    for (const inner of Object.values(value)) frozen(inner);
    Object.freeze(value);
  }
  return value;
}

/** The objects of a child kind in a namespace (undefined: all), typed. */
export type CandidateLists = (kind: ResourceKind, namespace: string | undefined) => Promise<KubeObject[]>;

/**
 * Lists shared by every parent of one sweep: each child kind is listed once per namespace (page
 * by page), not once per parent, as upstream shares its informer cache. A list a little older
 * than a parent's sync is safe: adoptions and releases are PUTs with the resourceVersion listed,
 * creations of an existing name answer AlreadyExists, and the next sync sees the truth.
 */
export function sharedLists(kube: KubeClient): CandidateLists {
  const lists = new Map<string, Promise<KubeObject[]>>();
  return (kind, namespace) => {
    const id = `${kind.group}/${kind.plural}/${namespace ?? '*'}`;
    let list = lists.get(id);
    if (!list) {
      list = kube.list(kind, { namespace }).then((result) => {
        const shared = sharedParts();
        return result.items.map((item) => typed(kind, item, shared));
      });
      // A failed list is not kept: the next parent tries again.
      list.catch(() => lists.delete(id));
      lists.set(id, list);
    }
    return list;
  };
}

/**
 * The objects of a child kind that `selector` matches, listed for one parent (no sharing), page by
 * page and as of now (no resourceVersion). A parent may have tens of thousands of children: read
 * with resourceVersion=0 they would come in one answer whatever `limit` says (KubeClient.pages
 * `cached`), tens of MiB held at once as bytes, text and objects; and a sync that continues the
 * previous delivery's writes must see them, or it would create them again. kube-apiserver 1.34
 * and later serve such a list from the watch cache too, page by page (consistent reads and
 * paginated lists from the cache); older ones read it from etcd. The selector is never empty
 * (childSelector refuses that).
 */
export function selectedLists(kube: KubeClient, selector: Selector): CandidateLists {
  return async (kind, namespace) => {
    const items: KubeObject[] = [];
    const shared = sharedParts();
    for await (const page of kube.pages(kind, { namespace, labelSelector: selector.toQuery() || undefined }))
      // One at a time: spreading a page of 100 000 children into push's arguments overflows the stack.
      for (const item of page.items) items.push(typed(kind, item, shared));
    return items;
  };
}

/**
 * The parent's children of every child kind: owned ones still matching `selector`, plus orphans
 * adopted now. Children that stopped matching are released. Candidates are the child kind's
 * objects in the parent's namespace, or in all namespaces for a cluster-scoped parent.
 */
export async function claimChildren(
  kube: KubeClient,
  { parent, kind }: ParentRef,
  childKinds: ResourceKind[],
  selector: Selector,
  listed: CandidateLists,
): Promise<KubeObject[]> {
  const observed: KubeObject[] = [];
  let parentRechecked: boolean | undefined;
  for (const childKind of childKinds) {
    const candidates = await listed(childKind, kind.namespaced ? parent.metadata.namespace : undefined);
    const plan = planClaim({
      parent,
      parentApiVersion: apiVersionOf(kind),
      parentKind: kind.kind,
      parentNamespaced: kind.namespaced,
      selector,
      candidates,
    });
    for (const child of plan.claimed) observed.push(child);
    for (const release of plan.release) await writeOwners(kube, childKind, release);
    if (plan.adopt.length > 0) {
      // RecheckDeletionTimestamp: adopt nothing for a parent that was replaced or is going away.
      parentRechecked ??= await stillAdopting(kube, kind, parent);
      if (!parentRechecked) continue;
      for (const adopt of plan.adopt) {
        const adopted = await writeOwners(kube, childKind, adopt);
        if (adopted) observed.push(typed(childKind, adopted));
      }
    }
  }
  return observed;
}

async function stillAdopting(kube: KubeClient, kind: ResourceKind, parent: KubeObject): Promise<boolean> {
  const fresh = await kube.get(kind, keyOf(parent));
  return fresh !== undefined && fresh.metadata.uid === parent.metadata.uid && !fresh.metadata.deletionTimestamp;
}

/** PUT the child with its new ownerReferences (its resourceVersion inside); undefined when it moved on. */
async function writeOwners(kube: KubeClient, kind: ResourceKind, action: ClaimAction): Promise<KubeObject | undefined> {
  try {
    return await kube.replace(kind, { ...action.child, metadata: { ...action.child.metadata, ownerReferences: action.ownerReferences } });
  } catch (error) {
    if (isNotFound(error) || isConflict(error)) return undefined;
    throw error;
  }
}

export interface ChildWrites {
  /** Children deleted (Recreate, or not desired any more): a sync soon creates what is missing. */
  deleted: number;
  /** Why some children could not be applied; the others were. */
  errors: string[];
  /** The children created or updated, as the API server answered (typed). */
  written: KubeObject[];
  /** Writes not started because the budget ran out: the parent is synced again at once to do them. */
  left: number;
}

/** Child writes of one parent in flight at once: a hook may answer thousands of children, and a sweep syncs 8 parents at once. */
export const CHILD_CONCURRENCY = 16;

/**
 * When a parent's sync stops starting child writes: the delivery's deadline. The writes of the
 * first round (CHILD_CONCURRENCY) start whatever the time, so that every sync gets something done.
 */
export interface WriteBudget {
  deadline: number;
  now: () => number;
}

/**
 * Carries out the operations, deletes first, a few at a time, and collects the failures instead of
 * stopping. Once the budget is spent no write is started: the ones started finish, the others are
 * counted as `left`, for the next sync, which finds the children written so far in place (the
 * 3-way merge leaves them alone) and writes only the rest.
 */
export async function applyChildOperations(
  kube: KubeClient,
  childKinds: ResourceKind[],
  operations: ChildOperation[],
  budget: WriteBudget = { deadline: Infinity, now: Date.now },
): Promise<ChildWrites> {
  const result: ChildWrites = { deleted: 0, errors: [], written: [], left: 0 };
  const shared = sharedParts();
  const kindOf = (object: KubeObject) => childKinds.find((kind) => sameKind(kind, object.apiVersion, object.kind));
  const writes: ChildOperation[] = [];
  for (const operation of operations) {
    if (operation.action === 'error') result.errors.push(`${describeChild(operationObject(operation))}: ${operation.reason}`);
    else if (operation.action !== 'unchanged') writes.push(operation);
  }
  let started = 0;
  const write = async (operation: ChildOperation) => {
    if (started >= CHILD_CONCURRENCY && budget.now() >= budget.deadline) {
      result.left++;
      return;
    }
    started++;
    const kind = kindOf(operationObject(operation))!;
    try {
      switch (operation.action) {
        case 'delete':
        case 'recreate':
          if (await kube.delete(kind, keyOf(operation.observed), { uid: operation.observed.metadata.uid, propagationPolicy: 'Background' }))
            result.deleted++;
          break;
        case 'create':
        case 'update': {
          // Made now, not when planned: only the writes in flight hold their objects.
          const applied = await applyChild(
            kube,
            kind,
            objectToWrite(operation),
            operation.action === 'update' ? { ...planned, observed: operation.observed } : planned,
          );
          if ((applied.result === 'created' || applied.result === 'updated') && applied.object)
            result.written.push(typed(kind, applied.object, shared));
          break;
        }
      }
    } catch (error) {
      result.errors.push(`can't ${operation.action} ${describeChild(operationObject(operation))}: ${(error as Error).message}`);
    }
  };
  // Deletes first, as upstream: they free what the new children may need (a quota, a name).
  await forEachLimited(writes.filter(isDelete), CHILD_CONCURRENCY, write);
  await forEachLimited(
    writes.filter((operation) => !isDelete(operation)),
    CHILD_CONCURRENCY,
    write,
  );
  return result;
}

const operationObject = (operation: ChildOperation): KubeObject =>
  operation.action === 'create' || operation.action === 'update'
    ? operation.desired
    : operation.action === 'error'
      ? operation.child
      : operation.observed;

const describeChild = (object: KubeObject): string =>
  `${object.kind} ${object.metadata.namespace ? `${object.metadata.namespace}/` : ''}${object.metadata.name}`;

/**
 * How a planned child is applied: the children were claimed (claim.ts), so they are the parent's;
 * the object written is the plan's, already through Metacontroller's 3-way merge (apply.ts); and
 * a create that finds the name taken or an update that finds the child changed or gone is left,
 * as upstream leaves it: the next sync sees the truth.
 */
const planned: ApplyOptions<KubeObject> = { isManaged: () => true, merge: (_observed, object) => object, onRace: 'leave' };

const isDelete = (operation: ChildOperation) => operation.action === 'delete' || operation.action === 'recreate';
