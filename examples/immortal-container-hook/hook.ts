// The seed's Metacontroller ImmortalContainer sync hook (group immortalcontainers.flugel.it),
// rewritten as a pure function from the hook request to the hook response.
//
// Seed: the Python `sync.py` served with http.server next to the CompositeController manifest
// (crds/examples/immortalcontainer-metacontroller.yaml): status `{currentPod}` names the observed
// pod ('' when there is none), and the one desired child is the Pod `<parent>-immortalpod` in the
// parent's namespace with `restartPolicy: OnFailure` and one container `acontainer` running
// `spec.image`. The pod spec is kept exactly, so pods made by the seed's hook are not recreated
// when this hook takes over.
//
// The seed's defect fixed here: with `restartPolicy: OnFailure` a container that exits 0 leaves
// its pod Succeeded forever (and a pod can also end Failed), and the seed keeps returning that
// pod as desired, so nothing ever replaces it. This hook leaves a finished pod out of its answer:
// Metacontroller deletes observed children that are not desired, and the delete brings the next
// sync, which creates the pod afresh. An image change is the update strategy's business (the
// manifest's `Recreate` recreates the pod; the hook only states the desired spec).
import { type KubeObject } from '../../functions/runtime/index.ts';
import { HookRequestError, type CompositeHookResponse, type ObjectMap } from '../../functions/composite/metacontroller/index.ts';

export const POD_SUFFIX = '-immortalpod';
export const CONTAINER_NAME = 'acontainer';
const POD_GROUP = 'Pod.v1';

/** The request fields this hook reads (the rest of CompositeHookRequest is ignored). */
export interface ImmortalContainerHookRequest {
  parent: KubeObject & { spec?: { image?: unknown } };
  children?: ObjectMap;
}

const FINISHED_PHASES = new Set(['Succeeded', 'Failed']);

export const isFinished = (pod: KubeObject): boolean => FINISHED_PHASES.has((pod as { status?: { phase?: string } }).status?.phase ?? '');

export function sync(request: ImmortalContainerHookRequest): Pick<CompositeHookResponse, 'status' | 'children'> {
  const parent = request.parent;
  const name = parent?.metadata?.name;
  const image = parent?.spec?.image;
  if (typeof name !== 'string' || name === '') throw new HookRequestError('parent.metadata.name is missing');
  if (typeof image !== 'string' || image === '')
    throw new HookRequestError(`ImmortalContainer ${name}: spec.image must be a non-empty string`);

  const podName = `${name}${POD_SUFFIX}`;
  // v1 keys pods by name, v2 by namespace/name: look at the objects, not the keys.
  const pods = Object.values(request.children?.[POD_GROUP] ?? {}).sort((a, b) =>
    (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''),
  );
  const current = pods.find((pod) => pod.metadata.name === podName) ?? pods[0];
  const finished = current !== undefined && current.metadata.name === podName && isFinished(current);

  const desired: KubeObject = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: podName, namespace: parent.metadata.namespace },
    spec: { restartPolicy: 'OnFailure', containers: [{ name: CONTAINER_NAME, image }] },
  };
  return {
    status: { currentPod: current && !finished ? (current.metadata.name ?? '') : '' },
    children: finished ? [] : [desired],
  };
}
