// Knative's own CustomResourceDefinitions, of the release the generated manifests target: read
// from its Go modules by cluster/provision-knative.sh (cached per release; KNATIVE_CRDS_DIR names
// a folder of CRD files instead). Both the server-side dry run of the generated objects
// (test/integration/knative-dry-run.test.ts) and the LOCAL control plane use them, so an object
// the plane stores is one Knative's schema accepts.
//
// Decision: the local plane installs these real CRDs, not permissive stand-ins. Knative's
// current schemas keep every field the generator emits (namespaceSelector, filters, delivery
// timeout), so nothing is pruned; what the schemas leave open (a Trigger's or source's spec keeps
// unknown fields, an annotation is free-form) the local controllers check and report on the
// object. A CRD an earlier plane installed as a stand-in (STAND_IN_LABEL) is replaced by the
// real one; any other existing CRD (a real Knative on the cluster) is left alone. standInCrds
// remains for tests that need the kinds served without Knative's schema; the plane never
// installs them.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { provisionScript, runProvisionScript } from '../../cluster/index.ts';
import { type KubeObject, type KubeClient } from '../../functions/runtime/index.ts';
import { applyCrds } from '../crds.ts';

/** Provisions Knative's CRDs (the default part), its adapters (`adapters`) or its eventing module's source folder (`eventing-module`). */
export const PROVISION_KNATIVE_SCRIPT = provisionScript('provision-knative.sh');

/** The CRDs (by metadata.name) of the kinds the local plane runs. */
export const PLANE_CRD_NAMES = [
  'services.serving.knative.dev',
  'brokers.eventing.knative.dev',
  'triggers.eventing.knative.dev',
  'pingsources.sources.knative.dev',
  'apiserversources.sources.knative.dev',
];

const OVERRIDE = 'KNATIVE_CRDS_DIR';

function checkOverride(dir: string): string {
  if (!existsSync(join(dir, 'trigger.yaml')))
    throw new Error(
      `${OVERRIDE}=${dir} has no trigger.yaml: point it at a folder of Knative's CRD files (config/core/resources of knative.dev/eventing and config/core/300-resources of knative.dev/serving), or unset it to provision them`,
    );
  return dir;
}

/**
 * The folder of Knative's CRDs: $KNATIVE_CRDS_DIR, else the one cluster/provision-knative.sh
 * prints (fetching them on first use). Throws an Error saying what to do when neither works.
 */
export async function provisionKnativeCrds(): Promise<string> {
  const override = process.env[OVERRIDE];
  if (override) return checkOverride(override);
  try {
    return await runProvisionScript(PROVISION_KNATIVE_SCRIPT, [], "provisioning Knative's CRDs");
  } catch (error) {
    throw new Error(`Knative's CRDs could not be provisioned: ${(error as Error).message}`);
  }
}

/** provisionKnativeCrds for a test deciding what to install; undefined when they cannot be provisioned (a bad KNATIVE_CRDS_DIR still throws). */
export async function knativeCrdDir(): Promise<string | undefined> {
  const override = process.env[OVERRIDE];
  if (override) return checkOverride(override);
  return runProvisionScript(PROVISION_KNATIVE_SCRIPT, [], "provisioning Knative's CRDs").catch(() => undefined);
}

/** The Knative CRDs of `dir` (every YAML file in it; they use YAML merge keys, `<<: *version`). */
export function knativeCrds(dir: string): KubeObject[] {
  return readdirSync(dir)
    .filter((file) => /\.ya?ml$/.test(file))
    .sort()
    .flatMap((file) =>
      parseAllDocuments(readFileSync(join(dir, file), 'utf8'), { merge: true }).map((document) => document.toJS() as KubeObject),
    )
    .filter((object) => object?.kind === 'CustomResourceDefinition');
}

export const STAND_IN_LABEL = 'operator-functions.dev/stand-in';

const column = (name: string, jsonPath: string, type = 'string') => ({ name, type, jsonPath });
const READY_COLUMNS = [
  column('Ready', ".status.conditions[?(@.type=='Ready')].status"),
  column('Reason', ".status.conditions[?(@.type=='Ready')].reason"),
  column('Age', '.metadata.creationTimestamp', 'date'),
];

/** Permissive CRDs for the five kinds the plane runs (spec and status unchecked), labelled STAND_IN_LABEL. */
export function standInCrds(): KubeObject[] {
  const kinds: [
    group: string,
    kind: string,
    plural: string,
    shortNames: string[],
    extra: { name: string; type: string; jsonPath: string }[],
  ][] = [
    ['serving.knative.dev', 'Service', 'services', ['kservice', 'ksvc'], [column('URL', '.status.url')]],
    ['eventing.knative.dev', 'Broker', 'brokers', [], [column('URL', '.status.address.url')]],
    [
      'eventing.knative.dev',
      'Trigger',
      'triggers',
      [],
      [column('Broker', '.spec.broker'), column('Subscriber_URI', '.status.subscriberUri')],
    ],
    ['sources.knative.dev', 'PingSource', 'pingsources', [], [column('Sink', '.status.sinkUri'), column('Schedule', '.spec.schedule')]],
    ['sources.knative.dev', 'ApiServerSource', 'apiserversources', [], [column('Sink', '.status.sinkUri')]],
  ];
  const open = { type: 'object', 'x-kubernetes-preserve-unknown-fields': true };
  return kinds.map(([group, kind, plural, shortNames, extra]) => ({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.${group}`, labels: { [STAND_IN_LABEL]: 'true' } },
    spec: {
      group,
      scope: 'Namespaced',
      names: {
        kind,
        plural,
        singular: kind.toLowerCase(),
        listKind: `${kind}List`,
        categories: ['all', 'knative'],
        ...(shortNames.length ? { shortNames } : {}),
      },
      versions: [
        {
          name: 'v1',
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [...extra, ...READY_COLUMNS],
          schema: { openAPIV3Schema: { type: 'object', properties: { spec: open, status: open } } },
        },
      ],
    },
  }));
}

/**
 * Installs Knative's CRDs of the kinds the plane runs where the API server lacks them (or has a
 * stand-in), and waits until they are served; returns how many were installed. `dir`: the CRD
 * folder (default: provisionKnativeCrds).
 */
export async function installKnativeCrds(kube: KubeClient, dir?: string): Promise<number> {
  const wanted = knativeCrds(dir ?? (await provisionKnativeCrds())).filter((crd) => PLANE_CRD_NAMES.includes(crd.metadata.name!));
  const missing = PLANE_CRD_NAMES.filter((name) => !wanted.some((crd) => crd.metadata.name === name));
  if (missing.length) throw new Error(`the Knative CRD folder lacks ${missing.join(', ')}`);
  const install: KubeObject[] = [];
  for (const crd of wanted) {
    const existing = await kube
      .request<KubeObject>('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`)
      .catch(() => undefined);
    if (!existing || existing.metadata.labels?.[STAND_IN_LABEL]) install.push(crd);
  }
  await applyCrds(kube, install); // one created meanwhile by another plane is replaced, not an error
  return install.length;
}
