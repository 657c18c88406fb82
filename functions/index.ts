// Where functions come from. This project's own functions: each name and the module holding its
// declaration (relative to this file), imported on demand, so a function process loads only its
// own code and build/build.ts bundles each one on its own. A set from outside the project (a
// user's folder or module, `opfn dev --functions`) is loaded by loadFunctionSet, the one loader
// every command shares.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { FunctionDeclaration } from './runtime/index.ts';

export const functionModules: Record<string, string> = {
  'immortal-container': './immortal-container/index.ts',
  copyrator: './copyrator/index.ts',
  'exchange-rate': './exchange-rate/index.ts',
  composite: './composite/index.ts',
};

export const functionNames = Object.keys(functionModules);

const HERE = dirname(fileURLToPath(import.meta.url));

/** The extension of this project's own modules as they run: .ts from the sources, .js in the npm package (compiled). */
const OWN_EXTENSION = extname(fileURLToPath(import.meta.url));

/** The absolute path of one of this project's function modules, as it runs (sources or package). */
export const builtInModulePath = (name: string): string => resolve(HERE, functionModules[name].replace(/\.ts$/, OWN_EXTENSION));

export async function loadFunction(name: string): Promise<FunctionDeclaration> {
  const module = functionModules[name];
  if (!module) throw new Error(`unknown function "${name}"; known: ${functionNames.join(', ')}`);
  return ((await import(module)) as { default: FunctionDeclaration }).default;
}

export async function loadAllFunctions(): Promise<FunctionDeclaration[]> {
  return Promise.all(functionNames.map(loadFunction));
}

/** A function and the module its declaration comes from (an absolute path). */
export interface LoadedFunction {
  declaration: FunctionDeclaration;
  module: string;
}

export interface FunctionSet {
  functions: LoadedFunction[];
  /** The folder or module the set was loaded from (absolute); undefined for this project's own functions. */
  from?: string;
  /**
   * The YAML files beside an outside set's functions, where their CustomResourceDefinitions live:
   * those at the top of each function's folder (a single module: of its folder), and of a `crds/`
   * folder beside the functions folder.
   */
  manifestFiles: string[];
}

/** The module names a function folder may hold its declaration in. */
const INDEX_FILES = ['index.ts', 'index.mts', 'index.js', 'index.mjs'];

const isDeclaration = (value: unknown): value is FunctionDeclaration =>
  typeof value === 'object' &&
  value !== null &&
  typeof (value as FunctionDeclaration).name === 'string' &&
  typeof (value as FunctionDeclaration).reconcile === 'function' &&
  Array.isArray((value as FunctionDeclaration).owns);

/** The declarations a module default-exports (one, or an array), or an Error saying what it exports instead. */
export async function loadFunctionModule(path: string): Promise<FunctionDeclaration[]> {
  const exported = ((await import(pathToFileURL(path).href)) as { default?: unknown }).default;
  const declarations = Array.isArray(exported) ? exported : [exported];
  if (declarations.length === 0 || !declarations.every(isDeclaration))
    throw new Error(
      `${path} must default-export a function declaration (export default defineFunction({…}) from 'operator-functions') or an array of them`,
    );
  return declarations;
}

const yamlFilesIn = (folder: string): string[] =>
  existsSync(folder)
    ? readdirSync(folder)
        .filter((file) => /\.ya?ml$/.test(file))
        .sort()
        .map((file) => join(folder, file))
    : [];

/** What `--functions` names: a folder of function folders, or one module. */
function outsideModules(from: string): { modules: string[]; manifestFiles: string[] } {
  if (!existsSync(from)) throw new Error(`no folder or module ${from}`);
  if (!statSync(from).isDirectory()) return { modules: [from], manifestFiles: yamlFilesIn(dirname(from)) };
  const folders = readdirSync(from, { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && entry.name !== 'node_modules' && !entry.name.startsWith('.'))
    .map((entry) => join(from, entry.name))
    .sort();
  // Folders without an index module (shared helpers, tests) are not functions.
  const withIndex = folders.flatMap((folder) => {
    const index = INDEX_FILES.map((file) => join(folder, file)).find((file) => existsSync(file));
    return index ? [{ folder, index }] : [];
  });
  if (withIndex.length === 0)
    throw new Error(`no function in ${from}: each function is a folder there with an index.ts that default-exports its declaration`);
  return {
    modules: withIndex.map(({ index }) => index),
    manifestFiles: [...withIndex.flatMap(({ folder }) => yamlFilesIn(folder)), ...yamlFilesIn(join(dirname(from), 'crds'))],
  };
}

/**
 * The functions to run or install: this project's own, or with `from` those of a folder (each
 * subfolder with an index.ts default-exporting a declaration) or of one module (a declaration or
 * an array of them); with `only`, just the functions of those names. An unknown name, a
 * missing path, a module exporting no declaration or two functions of one name are errors.
 */
export async function loadFunctionSet(options: { from?: string; only?: string[] } = {}): Promise<FunctionSet> {
  const only = options.only?.length ? [...new Set(options.only)] : undefined;
  if (options.from === undefined) {
    const unknown = only?.filter((name) => !functionNames.includes(name)) ?? [];
    if (unknown.length) throw new Error(`unknown function "${unknown.join('", "')}"; known: ${functionNames.join(', ')}`);
    const names = only ?? functionNames;
    return {
      functions: await Promise.all(names.map(async (name) => ({ declaration: await loadFunction(name), module: builtInModulePath(name) }))),
      manifestFiles: [],
    };
  }
  const from = resolve(options.from);
  const { modules, manifestFiles } = outsideModules(from);
  const functions: LoadedFunction[] = [];
  for (const module of modules) {
    for (const declaration of await loadFunctionModule(module)) {
      const twin = functions.find((loaded) => loaded.declaration.name === declaration.name);
      if (twin) throw new Error(`two functions are named "${declaration.name}": in ${twin.module} and ${module}`);
      functions.push({ declaration, module });
    }
  }
  const names = functions.map((loaded) => loaded.declaration.name);
  const unknown = only?.filter((name) => !names.includes(name)) ?? [];
  if (unknown.length) throw new Error(`unknown function "${unknown.join('", "')}" in ${from}; known: ${names.join(', ')}`);
  return { functions: only ? functions.filter((loaded) => only.includes(loaded.declaration.name)) : functions, from, manifestFiles };
}
