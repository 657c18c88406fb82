// Runs a function as its own ServiceAccount with exactly the generated RBAC objects, so a test
// proves the declared rules are enough (and, by probing, that they are not more).
import { resourceKindOf } from '../../eventing/knative/index.ts';
import { rbacObjects, serviceAccountName } from '../../eventing/manifests/index.ts';
import { type FunctionDeclaration, collectionPath, type KubeObject, type KubeClient } from '../../functions/runtime/index.ts';
import type { ControlPlane } from '../../cluster/index.ts';

const PATHS: Record<string, string> = {
  ServiceAccount: '/api/v1/namespaces/{ns}/serviceaccounts',
  ClusterRole: '/apis/rbac.authorization.k8s.io/v1/clusterroles',
  ClusterRoleBinding: '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings',
};

/** Creates the function's generated RBAC objects and returns a kubeconfig for its ServiceAccount. */
export async function kubeconfigWithDeclaredRbac(
  cp: ControlPlane,
  declaration: FunctionDeclaration,
  namespace = 'default',
): Promise<string> {
  for (const object of rbacObjects(declaration, namespace)) {
    const path = PATHS[object.kind!].replace('{ns}', namespace);
    const created = await cp.request('POST', path, object);
    if (created.status !== 201 && created.status !== 409)
      throw new Error(`creating ${object.kind}: ${created.status} ${JSON.stringify(created.body)}`);
  }
  return cp.serviceAccountKubeconfig(namespace, serviceAccountName(declaration));
}

/** Creates generated objects as the admin (409 counts as done); throws naming the first refused one. */
export async function createObjects(cp: ControlPlane, objects: KubeObject[]): Promise<void> {
  for (const object of objects) {
    const created = await cp.request('POST', collectionPath(resourceKindOf(object), object.metadata.namespace), object);
    if (created.status !== 201 && created.status !== 409)
      throw new Error(`${object.kind} ${object.metadata.name}: ${created.status} ${JSON.stringify(created.body)}`);
  }
}

/** One question of a can-i matrix: a verb on a resource (and subresource, and name) in a namespace ('' = cluster scope). */
export interface AccessQuestion {
  verb: string;
  group: string;
  resource: string;
  subresource?: string;
  namespace: string;
  name?: string;
}

/** The API server's answer to `kube`'s identity asking itself (SelfSubjectAccessReview). */
export async function canI(kube: KubeClient, question: AccessQuestion): Promise<boolean> {
  const review = await kube.request<{ status: { allowed: boolean } }>('POST', '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', {
    body: {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SelfSubjectAccessReview',
      spec: {
        resourceAttributes: {
          verb: question.verb,
          group: question.group,
          resource: question.resource,
          subresource: question.subresource ?? '',
          namespace: question.namespace,
          name: question.name ?? '',
        },
      },
    },
  });
  return review.status.allowed;
}
