// The Knative CRDs the LOCAL control plane gets, so the generated Service, Broker, Trigger,
// PingSource and ApiServerSource objects can live in its API server (kubectl get/apply/edit).
//
// Decision: the real CRDs of Knative 1.0.0 (the release line that installs on Kubernetes 1.20,
// the local control plane's version) when a `shared/knative-crds` folder is next to the checkout
// (or KNATIVE_CRDS_DIR names one): objects are then validated exactly as a cluster would. Else
// the stand-ins below: one version each, spec and status kept as given, the same Ready/Reason
// columns; they are labelled as stand-ins. Neither is ever installed on a cluster that has the
// kinds already (a real Knative): installKnativeCrds leaves existing CRDs alone, and `opfn dev`
// calls it only for a control plane it started itself.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import type { KubeObject } from '../../functions/runtime/kinds.ts';
import { isAlreadyExists, type KubeClient } from '../../functions/runtime/kube.ts';
import { applyCrds } from '../crds.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Folders searched, in order: $KNATIVE_CRDS_DIR, then `shared/knative-crds` beside the checkout (or beside a worktree's parent). */
export function knativeCrdCandidates(): string[] {
  return [process.env.KNATIVE_CRDS_DIR, join(ROOT, '..', 'shared', 'knative-crds'), join(ROOT, '..', '..', 'shared', 'knative-crds')].filter((dir): dir is string => Boolean(dir));
}

/** The first candidate folder holding the Knative CRDs, or undefined. */
export function knativeCrdDir(): string | undefined {
  return knativeCrdCandidates().find((dir) => existsSync(join(dir, 'trigger.yaml')));
}

/** The Knative CRDs of `dir` (every YAML file in it; they use YAML merge keys, `<<: *version`). */
export function knativeCrds(dir: string): KubeObject[] {
  return readdirSync(dir)
    .filter((file) => /\.ya?ml$/.test(file))
    .sort()
    .flatMap((file) => parseAllDocuments(readFileSync(join(dir, file), 'utf8'), { merge: true }).map((document) => document.toJS() as KubeObject))
    .filter((object) => object?.kind === 'CustomResourceDefinition');
}

export const STAND_IN_LABEL = 'operator-functions.dev/stand-in';

const column = (name: string, jsonPath: string, type = 'string') => ({ name, type, jsonPath });
const READY_COLUMNS = [column('Ready', ".status.conditions[?(@.type=='Ready')].status"), column('Reason', ".status.conditions[?(@.type=='Ready')].reason"), column('Age', '.metadata.creationTimestamp', 'date')];

/** Minimal CRDs for the five Knative kinds the plane runs (used when the real ones are absent). */
export function standInCrds(): KubeObject[] {
  const kinds: [group: string, kind: string, plural: string, extra: { name: string; type: string; jsonPath: string }[]][] = [
    ['serving.knative.dev', 'Service', 'services', [column('URL', '.status.url')]],
    ['eventing.knative.dev', 'Broker', 'brokers', [column('URL', '.status.address.url')]],
    ['eventing.knative.dev', 'Trigger', 'triggers', [column('Broker', '.spec.broker'), column('Subscriber_URI', '.status.subscriberUri')]],
    ['sources.knative.dev', 'PingSource', 'pingsources', [column('Sink', '.status.sinkUri'), column('Schedule', '.spec.schedule')]],
    ['sources.knative.dev', 'ApiServerSource', 'apiserversources', [column('Sink', '.status.sinkUri')]],
  ];
  const open = { type: 'object', 'x-kubernetes-preserve-unknown-fields': true };
  return kinds.map(([group, kind, plural, extra]) => ({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.${group}`, labels: { [STAND_IN_LABEL]: 'true' } },
    spec: {
      group,
      scope: 'Namespaced',
      names: { kind, plural, singular: kind.toLowerCase(), listKind: `${kind}List`, categories: ['all', 'knative'] },
      versions: [{ name: 'v1', served: true, storage: true, subresources: { status: {} }, additionalPrinterColumns: [...extra, ...READY_COLUMNS], schema: { openAPIV3Schema: { type: 'object', properties: { spec: open, status: open } } } }],
    },
  }));
}

/**
 * Installs the Knative CRDs (real ones when found, else the stand-ins) that are not there yet,
 * and waits until they are served. Returns where they came from.
 */
export async function installKnativeCrds(kube: KubeClient): Promise<string> {
  const dir = knativeCrdDir();
  const crds = dir ? knativeCrds(dir) : standInCrds();
  const missing: KubeObject[] = [];
  for (const crd of crds) {
    const existing = await kube.request('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`).catch(() => undefined);
    if (!existing) missing.push(crd);
  }
  try {
    await applyCrds(kube, missing);
  } catch (error) {
    if (!isAlreadyExists(error)) throw error;
  }
  return dir ? `Knative 1.0.0 CRDs from ${dir}` : 'stand-in Knative CRDs (no shared/knative-crds folder)';
}
