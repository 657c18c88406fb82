// A function's admission checks (FunctionDeclaration.admission) as the objects that enforce them:
// a ValidatingAdmissionPolicy matching CREATE and UPDATE of the reconciled kind, and a
// ValidatingAdmissionPolicyBinding that denies what it refuses (admissionregistration.k8s.io/v1,
// GA since Kubernetes 1.30; the API server evaluates the CEL itself, no webhook server).
//
// Both are cluster-scoped, so only an install with cluster scope carries them; a function with
// admission checks crosses namespaces and is left out of a namespace install anyway.
import type { FunctionDeclaration, KubeObject } from '../../functions/runtime/index.ts';
import { labels, type ManifestOptions } from './options.ts';

const ADMISSION_API = 'admissionregistration.k8s.io/v1';

/** The policy's (and its binding's) name. */
export const admissionPolicyName = (declaration: FunctionDeclaration): string => `opfn-${declaration.name}`;

export function admissionObjects(declaration: FunctionDeclaration, options: Pick<ManifestOptions, 'scope'>): KubeObject[] {
  const admission = declaration.admission;
  if (!admission || options.scope !== 'cluster') return [];
  const { group, plural } = declaration.reconciles;
  const name = admissionPolicyName(declaration);
  const metadata = { name, labels: labels('admission', declaration) };
  return [
    {
      apiVersion: ADMISSION_API,
      kind: 'ValidatingAdmissionPolicy',
      metadata,
      spec: {
        // A check that cannot be evaluated refuses: the checks guard rights, not convenience.
        failurePolicy: 'Fail',
        matchConstraints: {
          resourceRules: [{ apiGroups: [group], apiVersions: ['*'], resources: [plural], operations: ['CREATE', 'UPDATE'] }],
        },
        ...(admission.matchConditions ? { matchConditions: admission.matchConditions } : {}),
        ...(admission.variables ? { variables: admission.variables } : {}),
        validations: admission.validations,
      },
    },
    {
      apiVersion: ADMISSION_API,
      kind: 'ValidatingAdmissionPolicyBinding',
      metadata,
      spec: { policyName: name, validationActions: ['Deny'] },
    },
  ];
}
