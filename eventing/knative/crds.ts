// Where the Knative CRDs come from: the real ones of Knative 1.0.0 (the release line that
// installs on Kubernetes 1.20, the local control plane's version), kept outside the repository
// in a `shared/knative-crds` folder next to it (or KNATIVE_CRDS_DIR). Tests that need them skip
// with a message naming the folders searched when there is none.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { KubeObject } from '../../functions/runtime/kinds.ts';
import { parseAllDocuments } from 'yaml';

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
