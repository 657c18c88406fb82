// Every function of the project: its name and the module holding its declaration (relative to
// this file). Modules are imported on demand, so a function process loads only its own code,
// and build/build.ts bundles each one on its own.
import type { FunctionDeclaration } from './runtime/index.ts';

export const functionModules: Record<string, string> = {
  'immortal-container': './immortal-container/index.ts',
  copyrator: './copyrator/index.ts',
  'exchange-rate': './exchange-rate/index.ts',
  composite: './composite/index.ts',
};

export const functionNames = Object.keys(functionModules);

export async function loadFunction(name: string): Promise<FunctionDeclaration> {
  const module = functionModules[name];
  if (!module) throw new Error(`unknown function "${name}"; known: ${functionNames.join(', ')}`);
  return ((await import(module)) as { default: FunctionDeclaration }).default;
}

export async function loadAllFunctions(): Promise<FunctionDeclaration[]> {
  return Promise.all(functionNames.map(loadFunction));
}
