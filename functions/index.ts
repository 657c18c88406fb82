// Every function of the project, by name. Imports are lazy so a function process loads only
// its own code (cold start), while tools that need every declaration can have them all.
import type { FunctionDeclaration } from './runtime/declaration.ts';

export const functionModules: Record<string, () => Promise<{ default: FunctionDeclaration }>> = {
  'immortal-container': () => import('./immortal-container/index.ts'),
};

export async function loadFunction(name: string): Promise<FunctionDeclaration> {
  const load = functionModules[name];
  if (!load) throw new Error(`unknown function "${name}"; known: ${Object.keys(functionModules).join(', ')}`);
  return (await load()).default;
}

export async function loadAllFunctions(): Promise<FunctionDeclaration[]> {
  return Promise.all(Object.keys(functionModules).map(loadFunction));
}
