// The functions a command works on, from its `--functions <folder or module>` and `--only <names>`:
// this package's own, or a user's (functions/index.ts loadFunctionSet), with the CRDs found
// beside them. `opfn dev`, `opfn manifests` and `opfn conformance` share it.
import { existsSync } from 'node:fs';
import { CRD_DIR, CustomResourceDefinition, readManifestFile, readManifests } from '../eventing/crds.ts';
import { loadFunctionSet, type FunctionSet } from '../functions/index.ts';
import type { FunctionDeclaration, KubeObject } from '../functions/runtime/index.ts';

export interface FunctionSetOptions {
  /** A folder of function folders, or one module; default: this package's own functions. */
  functions?: string;
  /** Only these functions of the set. */
  only?: string[];
}

export interface CommandFunctions extends FunctionSet {
  declarations: FunctionDeclaration[];
  /**
   * Every CustomResourceDefinition that comes with the set: this package's crds/, or those in the
   * YAML files beside a user's functions. The generator keeps those of the functions' kinds.
   */
  crds: KubeObject[];
}

/** Comma-separated names, as `--only` takes them. */
export const nameList = (value: string): string[] =>
  value
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);

/** What looks like function names rather than a path: lower-case words, commas, no slash or dot. */
const LOOKS_LIKE_NAMES = /^[a-z0-9][-a-z0-9]*(,[a-z0-9][-a-z0-9]*)*$/;

/** The set the options name, loaded (before any cluster is touched), or an Error saying what is wrong. */
export async function commandFunctions(options: FunctionSetOptions): Promise<CommandFunctions> {
  const from = options.functions;
  // `--functions` once took names; those now go to --only.
  if (from !== undefined && !existsSync(from) && LOOKS_LIKE_NAMES.test(from))
    throw new Error(
      `--functions takes a folder or a module of functions, and there is no "${from}" here; to choose functions by name, use --only ${from}`,
    );
  let set: FunctionSet;
  try {
    set = await loadFunctionSet({ from, only: options.only });
  } catch (error) {
    throw new Error(`${from === undefined ? '' : `--functions ${from}: `}${(error as Error).message}`, { cause: error });
  }
  const crds =
    set.from === undefined
      ? readManifests(CRD_DIR)
      : set.manifestFiles.flatMap(readManifestFile).filter((object) => object.kind === CustomResourceDefinition.kind);
  return { ...set, declarations: set.functions.map((loaded) => loaded.declaration), crds };
}
