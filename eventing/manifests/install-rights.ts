// The rights an install grants a function that narrows its declared ones at install time (the
// declaration's `narrowRights`: the composite function's `*` narrowed to exactly what the
// CompositeControllers of `opfn manifests --composite <file>` need), unless the install chose
// the broad ones (`--composite-broad`, and the local plane's own control plane).
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import { type FunctionDeclaration, type KubeObject } from '../../functions/runtime/index.ts';
import { CRD_DIR, readManifests } from '../crds.ts';
import { labels, type ManifestOptions } from './options.ts';
import { serviceAccountName } from './rbac.ts';

/** A file given to the install: its objects, and how to name it in an error. */
export interface GivenObjects {
  objects: KubeObject[];
  source: string;
}

/** What an install was told about rights: the declared ones (broad), or narrowed to a given file (none given: to nothing). */
export type InstallRights = { broad: true } | { given?: GivenObjects };
export const NARROW_NOTHING_GIVEN: InstallRights = {};
export const BROAD: InstallRights = { broad: true };

/** The objects of a YAML text (empty documents left out); `source` names it in the error when it is not YAML. */
export function parseObjects(text: string, source: string): KubeObject[] {
  const documents = parseAllDocuments(text);
  const broken = documents.find((document) => document.errors.length);
  if (broken) throw new Error(`${source}: not YAML: ${broken.errors[0]!.message}`);
  return documents.map((document) => document.toJS() as KubeObject).filter((object) => object && typeof object === 'object');
}

/** The objects of the file a command-line `flag` names. */
export function readGivenFile(path: string, flag: string): GivenObjects {
  const source = `${flag} ${path}`;
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new Error(`${source}: cannot read it (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  return { objects: parseObjects(text, source), source };
}

/** The declaration with the rights the install grants it, and the further objects those need (placed after its identity). */
export function withInstallRights(
  declaration: FunctionDeclaration,
  options: ManifestOptions,
  rights: InstallRights,
): { declaration: FunctionDeclaration; objects: KubeObject[] } {
  if (!declaration.narrowRights || 'broad' in rights) return { declaration, objects: [] };
  const { namespace, brokerName, scope } = options;
  const narrowed = declaration.narrowRights({
    placement: { namespace, brokerName, scope },
    serviceAccountName: serviceAccountName(declaration),
    labels: labels('function', declaration),
    crds: rights.given ? readManifests(CRD_DIR) : [],
    ...(rights.given ? { given: rights.given } : {}),
  });
  return { declaration: { ...declaration, rbac: narrowed.rbac }, objects: narrowed.objects };
}
