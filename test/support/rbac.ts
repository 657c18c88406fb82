// Runs a function as its own ServiceAccount with exactly the generated RBAC objects, so a test
// proves the declared rules are enough (and, by probing, that they are not more).
import { rbacObjects, serviceAccountName } from '../../eventing/rbac.ts';
import type { FunctionDeclaration } from '../../functions/runtime/declaration.ts';
import type { ControlPlane } from '../../cluster/control-plane.ts';

const PATHS: Record<string, string> = {
  ServiceAccount: '/api/v1/namespaces/{ns}/serviceaccounts',
  ClusterRole: '/apis/rbac.authorization.k8s.io/v1/clusterroles',
  ClusterRoleBinding: '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings',
};

/** Creates the function's generated RBAC objects and returns a kubeconfig for its ServiceAccount. */
export async function kubeconfigWithDeclaredRbac(cp: ControlPlane, declaration: FunctionDeclaration, namespace = 'default'): Promise<string> {
  for (const object of rbacObjects(declaration, namespace)) {
    const path = PATHS[object.kind!].replace('{ns}', namespace);
    const created = await cp.request('POST', path, object);
    if (created.status !== 201 && created.status !== 409) throw new Error(`creating ${object.kind}: ${created.status} ${JSON.stringify(created.body)}`);
  }
  return cp.serviceAccountKubeconfig(namespace, serviceAccountName(declaration));
}
