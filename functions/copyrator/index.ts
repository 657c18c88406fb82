// CopyratorRule: copy matching ConfigMaps or Secrets from a source namespace into every active
// namespace, keep the copies up to date, remove them when no longer wanted (seed: flant/examples
// copyrator, with every defect of the original fixed; see DESIGN.md "Seed operators").
//
// Secrets are optional: with COPYRATOR_SECRETS=false (read when the declaration is loaded, so the
// generated RBAC and sources follow it) the function neither watches nor may touch any Secret,
// and a secret rule reports Ready=False/SecretsDisabled.
import {
  defineFunction,
  type FunctionDeclaration,
  type PolicyRule,
  type WatchedKind,
  type ResourceKind,
  ConfigMap,
  Namespace,
  Secret,
  allOf,
} from '../runtime/index.ts';
import { copyratorAdmission } from './admission.ts';
import { CopyratorRuleKind, FINALIZER, RULE_NAME_LABEL, type RuleType } from './desired.ts';
import { rulesForChange } from './mapping.ts';
import { sweepOrphanCopies } from './orphans.ts';
import { finalizeCopies, reconcileCopyratorRule } from './reconcile.ts';

const COPY_VERBS = ['get', 'list', 'create', 'update', 'delete'];

export function copyratorFunction(options: { secrets: boolean }): FunctionDeclaration {
  const ruleTypes: RuleType[] = options.secrets ? ['configmap', 'secret'] : ['configmap'];
  // Every object of a copied kind but the copies: no selector of the rules' can be used, as an
  // object that loses a rule's label must still wake it (ApiServerSource sends only the new
  // object). The copies (RULE_NAME_LABEL) are not heard at all: their changes are almost all the
  // echo of the function's own writes, and no event tells who made one. What is done to a copy by
  // hand is undone by the next resync, or the next change of its source or rule; a copy whose rule
  // labels are removed by hand enters this selection (an add) and is restored at once.
  const watchesOf = (kind: ResourceKind, ruleType: RuleType): WatchedKind[] => [
    { kind, labelSelector: `!${RULE_NAME_LABEL}`, keysFor: rulesForChange(ruleType) },
  ];
  const watches: WatchedKind[] = [{ kind: Namespace, keysFor: allOf(CopyratorRuleKind) }, ...watchesOf(ConfigMap, 'configmap')];
  // What reconcile and the mappers do themselves; reading rules, their finalizer and Events
  // follow from the declaration (functions/runtime/rbac.ts).
  const rbac: PolicyRule[] = [
    { apiGroups: ['flant.com'], resources: ['copyrators/status'], verbs: ['update'] },
    { apiGroups: [''], resources: ['namespaces'], verbs: ['list'] },
    { apiGroups: [''], resources: ['configmaps'], verbs: COPY_VERBS },
  ];
  if (options.secrets) {
    // The plane watches Secrets in Reference mode (sourcesFor): contents never travel in events.
    watches.push(...watchesOf(Secret, 'secret'));
    rbac.push({ apiGroups: [''], resources: ['secrets'], verbs: COPY_VERBS });
  }
  return defineFunction({
    name: 'copyrator',
    description:
      'Copies the ConfigMaps or Secrets a CopyratorRule selects from its source namespace into every active namespace and keeps the copies in step.',
    // The seed's CRD names the plural `copyrators`, which Knative's ApiServerSource would guess
    // wrong from the kind (`copyratorrules`): its source names the kind `Copyrator` instead
    // (sourceKindName in functions/runtime/knative-objects.ts).
    reconciles: CopyratorRuleKind,
    // A rule's labels and annotations mean nothing to it: an update that changes only them is
    // skipped, and a settled rule is told from its generation alone, in any instance.
    readsMetadata: false,
    crossesNamespaces: 'it copies from a source namespace into every namespace',
    // A rule makes the function read and write with its own rights: only who holds them may make one.
    admission: copyratorAdmission,
    watches,
    rbac,
    finalizer: { name: FINALIZER, finalize: (rule, ctx) => finalizeCopies(rule, ruleTypes, ctx.kube, ctx.log) },
    // Copies whose rule is gone (orphans.ts): no event names them.
    sweep: async (ctx) => void (await sweepOrphanCopies(ctx.kube, ruleTypes, ctx.log, () => ctx.now().getTime() >= ctx.deadline)),
    reconcile: reconcileCopyratorRule(ruleTypes),
  });
}

export default copyratorFunction({ secrets: process.env.COPYRATOR_SECRETS !== 'false' });
