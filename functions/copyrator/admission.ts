// Who may create or change a CopyratorRule: whoever holds what the rule makes the function do
// with its own cluster-wide rights. Read the kind (configmaps or secrets) in the source namespace
// (get, list), and write it into every namespace (create; update and delete keep the copies in
// step). A rule copies into every namespace, so the writes are checked at cluster scope, which
// only a ClusterRoleBinding grants (a RoleBinding in each namespace would not: namespaces are
// created later too).
//
// Said as the checks of a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA since
// Kubernetes 1.30), whose CEL `authorizer` asks the API server's authorizer about the requesting
// user (k8s.io/apiserver pkg/cel/library/authz.go: a ResourceCheck without a namespace checks
// cluster scope). `opfn manifests` wraps them into the policy and its binding. One validation per
// right, in the order below, because the user sees the message of the first that fails alone
// (pkg/admission/plugin/policy/validating/dispatcher.go), and a message expression cannot ask
// the authorizer itself (validator.go evaluates it without one); each message also says
// everything a rule needs, so the next missing right comes as no surprise.
import type { AdmissionDeclaration } from '../runtime/index.ts';

/** The verbs checked where the rule reads (its source namespace) and where it writes (every namespace), in the order checked. */
export const READ_VERBS = ['get', 'list'] as const;
export const WRITE_VERBS = ['create', 'update', 'delete'] as const;

const needs =
  "', and a rule needs that: it has the copyrator get and list ' + variables.resource + ' in namespace ' + object.namespace + ' and create, update and delete them in every namespace'";
/** Where a right is checked, as the message expression (CEL) and the static message say it. */
const WHERE = {
  source: { cel: "' in namespace ' + object.namespace", words: 'in its source namespace' },
  everywhere: { cel: "' in every namespace'", words: 'in every namespace' },
};
const denial = (verb: string, where: keyof typeof WHERE) => ({
  messageExpression: `'CopyratorRule ' + request.namespace + '/' + object.metadata.name + ': ' + request.userInfo.username + ' may not ${verb} ' + variables.resource + ${WHERE[where].cel} + ${needs}`,
  message: `a CopyratorRule is admitted only from a user who may ${verb} what it copies ${WHERE[where].words}`,
  reason: 'Forbidden' as const,
});

export const copyratorAdmission: AdmissionDeclaration = {
  matchConditions: [
    {
      // What the function acts on: type, source namespace, selector. The function itself adds and
      // removes its finalizer (metadata alone); that update must not need the rights above.
      name: 'rule-changes-what-is-copied',
      expression:
        "request.operation == 'CREATE' || !has(oldObject.ruleType) || !has(oldObject.namespace) || !has(oldObject.selector) || object.ruleType != oldObject.ruleType || object.namespace != oldObject.namespace || object.selector != oldObject.selector",
    },
  ],
  variables: [
    { name: 'resource', expression: "object.ruleType == 'secret' ? 'secrets' : 'configmaps'" },
    { name: 'inSource', expression: "authorizer.group('').resource(variables.resource).namespace(object.namespace)" },
    // No namespace: cluster scope, which only a ClusterRoleBinding grants.
    { name: 'everywhere', expression: "authorizer.group('').resource(variables.resource)" },
  ],
  validations: [
    ...READ_VERBS.map((verb) => ({ expression: `variables.inSource.check('${verb}').allowed()`, ...denial(verb, 'source') })),
    ...WRITE_VERBS.map((verb) => ({ expression: `variables.everywhere.check('${verb}').allowed()`, ...denial(verb, 'everywhere') })),
  ],
};
