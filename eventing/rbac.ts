// The RBAC objects of a function, generated from its declaration: a ServiceAccount, a ClusterRole
// granting exactly the declared rules plus those the declaration implies (rulesFor in
// functions/runtime/rbac.ts; functions act across namespaces), and the binding.
import type { FunctionDeclaration } from '../functions/runtime/declaration.ts';
import type { KubeObject } from '../functions/runtime/kinds.ts';
import { rulesFor } from '../functions/runtime/rbac.ts';

export const serviceAccountName = (declaration: FunctionDeclaration): string => `opfn-${declaration.name}`;

export function rbacObjects(declaration: FunctionDeclaration, namespace: string): KubeObject[] {
  const name = serviceAccountName(declaration);
  const labels = { 'app.kubernetes.io/part-of': 'operator-functions', 'operator-functions.dev/function': declaration.name };
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name, namespace, labels } },
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name, labels }, rules: rulesFor(declaration) },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name, labels },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
      subjects: [{ kind: 'ServiceAccount', name, namespace }],
    },
  ];
}
