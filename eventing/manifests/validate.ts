// What the Knative CRD schemas cannot check (they are partial: Trigger and ApiServerSource specs
// keep unknown fields, annotations are free-form), checked on the generated objects before they
// are written: a dry run would accept these mistakes and a cluster would run them wrongly.
//
// - Autoscaling annotations on the Service's own metadata are rejected by Knative's webhook;
//   they belong on the revision template (knative/serving pkg/apis/serving/v1
//   service_validation.go).
// - CloudEvent attribute names (Trigger filters, ceOverrides extensions) are lower-case letters
//   and digits, at most 20 characters (CloudEvents 1.0 spec, "Attribute Naming Convention").
// - Every Trigger subscriber and dead-letter sink names a generated Knative Service (or a target
//   given with --replace), every source's sink the generated Broker, and every ServiceAccount a
//   Service, source or binding names exists; a Role binding names a generated role.
// - Names Knative derives others from fit: a Service's first revision `<name>-00001` must be a
//   DNS-1035 label (63 characters).
// - A function's delivery budget (OPFN_DELIVERY_BUDGET_SECONDS) leaves room before its Service's
//   timeoutSeconds: the function cannot see the timeout, and answers after it come too late.
// - Trigger filters and delivery are what Knative's webhook accepts (filters.ts
//   validateTriggerFilters; delivery durations parse, a timeout is above zero: knative/eventing
//   pkg/apis/duck/v1 delivery_types.go), and a Trigger's per-attempt timeout is not shorter than
//   its function's delivery budget: the dispatcher would give up on attempts the function is
//   still answering, and send them again.
//
// declaredKindProblems checks the declarations' kinds against the CRDs the install carries
// (this package's crds/, or those beside a user's functions): a plural or version the CRD does not serve, or a kind whose CRD is missing.
import { DELIVERY_BUDGET_ENV, deliveryBudgetProblem } from '../../functions/runtime/host/index.ts';
import { apiVersionOf, guessedResource, type FunctionDeclaration, type KubeObject } from '../../functions/runtime/index.ts';
import { CRD_DIR, readManifests } from '../crds.ts';
import { parseDeliverySpec } from '../delivery.ts';
import { validateTriggerFilters } from '../filters.ts';
import { REVISION_TIMEOUT_SECONDS } from './options.ts';
import { AUTOSCALING } from './service.ts';

const ATTRIBUTE_NAME = /^[a-z0-9]{1,20}$/;
const DNS_1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;

type Ref = { ref?: { apiVersion?: string; kind?: string; name?: string; namespace?: string }; uri?: string };
const spec = (object: KubeObject) => (object.spec ?? {}) as Record<string, any>;
const id = (object: KubeObject) =>
  `${object.kind} ${object.metadata.namespace ? `${object.metadata.namespace}/` : ''}${object.metadata.name}`;

/**
 * Problems in a set of generated objects (empty when sound). `external` names Knative Services
 * that are not generated but may be referred to (the targets of --replace).
 */
export function validateManifests(objects: KubeObject[], external: Set<string> = new Set()): string[] {
  const problems: string[] = [];
  const named = (kind: string, namespace: string | undefined, name: string | undefined) =>
    objects.some(
      (object) => object.kind === kind && object.metadata.name === name && (object.metadata.namespace ?? '') === (namespace ?? ''),
    );
  const checkRef = (owner: KubeObject, what: string, target: Ref | undefined, kind: 'Service' | 'Broker') => {
    if (!target) return problems.push(`${id(owner)}: ${what} is missing`);
    if (target.uri !== undefined) {
      if (kind === 'Broker' || !/^[a-z][a-z0-9+.-]*:\/\/./i.test(target.uri))
        problems.push(
          `${id(owner)}: ${what} uri "${target.uri}" is not ${kind === 'Broker' ? 'allowed (the sink is the Broker)' : 'an absolute URL'}`,
        );
      return;
    }
    const ref = target.ref;
    const namespace = ref?.namespace ?? owner.metadata.namespace;
    if (ref?.kind !== kind) return problems.push(`${id(owner)}: ${what} refers to a ${ref?.kind ?? 'nothing'}, not a ${kind}`);
    if (!named(kind, namespace, ref.name) && !(kind === 'Service' && external.has(ref.name!)))
      problems.push(`${id(owner)}: ${what} ${kind} ${namespace}/${ref.name} is not generated`);
  };
  const checkServiceAccount = (owner: KubeObject, name: string | undefined, namespace = owner.metadata.namespace) => {
    if (name && !named('ServiceAccount', namespace, name))
      problems.push(`${id(owner)}: ServiceAccount ${namespace}/${name} is not generated`);
  };
  const checkAttributes = (owner: KubeObject, what: string, names: string[]) => {
    for (const name of names)
      if (!ATTRIBUTE_NAME.test(name))
        problems.push(`${id(owner)}: ${what} "${name}" is not a CloudEvent attribute name ([a-z0-9], 1-20 characters)`);
  };
  /** The delivery's timeout in seconds (undefined when unset), after checking its fields as Knative's webhook does. */
  const checkDelivery = (owner: KubeObject): number | undefined => {
    const { deadLetterSink: _, ...delivery } = spec(owner).delivery ?? {};
    try {
      const parsed = parseDeliverySpec(delivery, 'delivery');
      return delivery.timeout === undefined ? undefined : parsed.timeoutMs / 1000;
    } catch (error) {
      problems.push(`${id(owner)}: ${(error as Error).message}`);
      return undefined;
    }
  };
  const budgetOf = (namespace: string | undefined, name: string | undefined): number | undefined => {
    const service = objects.find(
      (object) =>
        object.kind === 'Service' &&
        object.apiVersion === 'serving.knative.dev/v1' &&
        object.metadata.name === name &&
        object.metadata.namespace === namespace,
    );
    const value = (
      spec(service ?? { metadata: {} }).template?.spec?.containers?.[0]?.env as { name: string; value?: string }[] | undefined
    )?.find((e) => e.name === DELIVERY_BUDGET_ENV)?.value;
    return value === undefined ? undefined : Number(value);
  };

  for (const object of objects) {
    const { metadata } = object;
    switch (object.kind) {
      case 'Service': {
        if (object.apiVersion !== 'serving.knative.dev/v1') break;
        const onService = Object.keys(metadata.annotations ?? {}).filter((key) => key.startsWith(`${AUTOSCALING}/`));
        if (onService.length)
          problems.push(
            `${id(object)}: autoscaling annotations on the Service's metadata (${onService.join(', ')}) belong on spec.template.metadata.annotations`,
          );
        const revision = `${metadata.name}-00001`;
        if (revision.length > 63 || !DNS_1035_LABEL.test(revision))
          problems.push(`${id(object)}: its revision name ${revision} is not a DNS-1035 label of at most 63 characters`);
        checkServiceAccount(object, spec(object).template?.spec?.serviceAccountName);
        const budget = (spec(object).template?.spec?.containers?.[0]?.env as { name: string; value?: string }[] | undefined)?.find(
          (e) => e.name === DELIVERY_BUDGET_ENV,
        )?.value;
        const budgetProblem =
          budget === undefined
            ? undefined
            : deliveryBudgetProblem(Number(budget), spec(object).template?.spec?.timeoutSeconds ?? REVISION_TIMEOUT_SECONDS);
        if (budgetProblem) problems.push(`${id(object)}: ${budgetProblem}`);
        break;
      }
      case 'Trigger': {
        const attributeNames: string[] = [];
        const filters = validateTriggerFilters({ filter: spec(object).filter, filters: spec(object).filters }, 'spec', attributeNames);
        checkAttributes(object, 'filter attribute', attributeNames);
        for (const problem of [...filters.errors, ...filters.warnings]) problems.push(`${id(object)}: ${problem}`);
        checkRef(object, 'subscriber', spec(object).subscriber, 'Service');
        const timeout = checkDelivery(object);
        const subscriber = spec(object).subscriber?.ref as Ref['ref'];
        const budget = subscriber?.kind === 'Service' ? budgetOf(subscriber.namespace ?? metadata.namespace, subscriber.name) : undefined;
        if (timeout !== undefined && budget !== undefined && timeout < budget)
          problems.push(
            `${id(object)}: delivery.timeout (${timeout} s) is shorter than its function's delivery budget (${DELIVERY_BUDGET_ENV} ${budget} s): attempts the function is still answering would be sent again`,
          );
        if (spec(object).delivery?.deadLetterSink) checkRef(object, 'deadLetterSink', spec(object).delivery.deadLetterSink, 'Service');
        if (!named('Broker', metadata.namespace, spec(object).broker))
          problems.push(`${id(object)}: Broker ${spec(object).broker} is not generated`);
        break;
      }
      case 'Broker':
        checkDelivery(object);
        if (spec(object).delivery?.deadLetterSink) checkRef(object, 'deadLetterSink', spec(object).delivery.deadLetterSink, 'Service');
        break;
      case 'ApiServerSource':
      case 'PingSource':
        checkAttributes(object, 'ceOverrides extension', Object.keys(spec(object).ceOverrides?.extensions ?? {}));
        checkRef(object, 'sink', spec(object).sink, 'Broker');
        if (object.kind === 'ApiServerSource') {
          if (!spec(object).serviceAccountName) problems.push(`${id(object)}: no serviceAccountName (the adapter would run as "default")`);
          checkServiceAccount(object, spec(object).serviceAccountName);
        }
        break;
      case 'RoleBinding':
      case 'ClusterRoleBinding': {
        const roleRef = object.roleRef as { kind: string; name: string };
        if (!named(roleRef.kind, roleRef.kind === 'Role' ? metadata.namespace : undefined, roleRef.name))
          problems.push(`${id(object)}: ${roleRef.kind} ${roleRef.name} is not generated`);
        for (const subject of (object.subjects ?? []) as { kind: string; name: string; namespace?: string }[]) {
          if (subject.kind === 'ServiceAccount') checkServiceAccount(object, subject.name, subject.namespace);
        }
        break;
      }
      default:
        break;
    }
  }
  return problems;
}

/** What `declaredKindProblems` found: errors stop the generation, warnings are printed with it. */
export interface KindProblems {
  errors: string[];
  warnings: string[];
}

/** Groups Kubernetes itself serves (the core group, the unqualified ones, `*.k8s.io`) or Knative's install does. */
const builtInGroup = (group: string): boolean => !group.includes('.') || group.endsWith('.k8s.io') || group.endsWith('.knative.dev');

/**
 * The kinds the declarations name (reconciled, owned, watched) checked against the CRDs the
 * install carries (`crds`, those in crds/): a kind whose CRD serves it under another plural, or
 * not at the declared version, is an error (the function would meet 404s, its source would never
 * be Ready); a kind of another group with no CRD among them is a warning (its CRD must be applied
 * some other way before the function can work). Built-in kinds need no CRD; one declared under a
 * plural Kubernetes does not use is a warning.
 */
export function declaredKindProblems(declarations: FunctionDeclaration[], crds: KubeObject[] = readManifests(CRD_DIR)): KindProblems {
  const problems: KindProblems = { errors: [], warnings: [] };
  type CrdSpec = { group?: string; names?: { kind?: string; plural?: string }; versions?: { name?: string; served?: boolean }[] };
  const specs = crds.map((crd) => ({ name: crd.metadata.name, spec: (crd.spec ?? {}) as CrdSpec }));
  const reported = new Set<string>();
  for (const declaration of declarations) {
    const kinds = [
      declaration.reconciles,
      ...declaration.owns.map((owned) => owned.kind),
      ...declaration.watches.map((watched) => watched.kind),
    ];
    for (const kind of kinds) {
      const id = JSON.stringify([declaration.name, kind.group, kind.version, kind.kind, kind.plural]);
      if (reported.has(id)) continue;
      reported.add(id);
      const what = `${declaration.name}: ${kind.kind} (${kind.group ? `${kind.plural}.${kind.group}` : kind.plural}, ${apiVersionOf(kind)})`;
      const inGroup = specs.filter(({ spec }) => spec.group === kind.group);
      const crd = inGroup.find(({ spec }) => spec.names?.plural === kind.plural);
      if (crd) {
        const served = (crd.spec.versions ?? []).filter((version) => version.served).map((version) => version.name);
        if (!served.includes(kind.version))
          problems.errors.push(`${what}: its CRD ${crd.name} serves ${served.join(', ') || 'no version'}, not ${kind.version}`);
        else if (crd.spec.names?.kind !== kind.kind)
          problems.errors.push(`${what}: its CRD ${crd.name} names the kind ${crd.spec.names?.kind}, not ${kind.kind}`);
        continue;
      }
      const sameKind = inGroup.find(({ spec }) => spec.names?.kind === kind.kind);
      if (sameKind) {
        problems.errors.push(
          `${what}: the CRD ${sameKind.name} serves ${kind.kind} as "${sameKind.spec.names?.plural}", not "${kind.plural}": did you mean ${sameKind.spec.names?.plural}?`,
        );
        continue;
      }
      if (builtInGroup(kind.group)) {
        const guessed = guessedResource(kind.kind);
        if (kind.plural !== guessed)
          problems.warnings.push(`${what}: Kubernetes serves its kinds under the plural "${guessed}", not "${kind.plural}": a typo?`);
        continue;
      }
      problems.warnings.push(
        `${what}: no CRD in crds/ defines ${kind.plural}.${kind.group}, so the install carries none; apply it before the function, or the function meets 404s and its source is not Ready`,
      );
    }
  }
  return problems;
}
