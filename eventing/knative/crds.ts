// Knative CRDs: the real ones of Knative 1.0.0 (the release line that installs on Kubernetes
// 1.20, the local control plane's version) for validating the generated manifests (server-side
// dry run, test/integration/knative-dry-run.test.ts), found in a `shared/knative-crds` folder
// next to the checkout or in KNATIVE_CRDS_DIR; and stand-ins for the LOCAL control plane.
//
// Decision: the local plane always installs the stand-ins below, not the real 1.0.0 CRDs. They
// keep spec and status as given (the controllers in this folder check what they use and say so
// in status), so the plane runs the current Knative API: 1.0.0's ApiServerSource schema would
// silently prune `namespaceSelector` (added later, knative/eventing#6665), turning every
// generated source into one that watches its own namespace only. Same Ready/Reason columns as
// Knative's; labelled as stand-ins. They are never installed on a cluster that has the kinds
// (a real Knative): installKnativeCrds leaves existing CRDs alone, and `opfn dev` calls it only
// for a control plane it started itself.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import type { KubeObject } from '../../functions/runtime/kinds.ts';
import type { KubeClient } from '../../functions/runtime/kube.ts';
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
  const kinds: [group: string, kind: string, plural: string, shortNames: string[], extra: { name: string; type: string; jsonPath: string }[]][] = [
    ['serving.knative.dev', 'Service', 'services', ['kservice', 'ksvc'], [column('URL', '.status.url')]],
    ['eventing.knative.dev', 'Broker', 'brokers', [], [column('URL', '.status.address.url')]],
    ['eventing.knative.dev', 'Trigger', 'triggers', [], [column('Broker', '.spec.broker'), column('Subscriber_URI', '.status.subscriberUri')]],
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
      names: { kind, plural, singular: kind.toLowerCase(), listKind: `${kind}List`, categories: ['all', 'knative'], ...(shortNames.length ? { shortNames } : {}) },
      versions: [{ name: 'v1', served: true, storage: true, subresources: { status: {} }, additionalPrinterColumns: [...extra, ...READY_COLUMNS], schema: { openAPIV3Schema: { type: 'object', properties: { spec: open, status: open } } } }],
    },
  }));
}

/** Installs the stand-in CRDs whose kinds the API server does not have yet, and waits until they are served; returns how many. */
export async function installKnativeCrds(kube: KubeClient): Promise<number> {
  const missing: KubeObject[] = [];
  for (const crd of standInCrds()) {
    const existing = await kube.request('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`).catch(() => undefined);
    if (!existing) missing.push(crd);
  }
  await applyCrds(kube, missing); // one created meanwhile by another plane is replaced, not an error
  return missing.length;
}
