// The entry program of a function process: `node functions/main.ts <function> [<module>]` or
// FUNCTION=<function>. Picks the function by name from the registry, or from <module> (a
// function module outside this project, `opfn dev --functions … --no-bundle`), and serves it; the
// container image runs its bundled counterpart (build/build.ts) with the function chosen at start.
import { loadFunction, loadFunctionModule } from './index.ts';
import { serve } from './runtime/host/index.ts';

const name = process.argv[2] ?? process.env.FUNCTION;
const module = process.argv[3];
if (!name) {
  console.error('which function? pass its name as the argument or set FUNCTION (e.g. FUNCTION=immortal-container)');
  process.exit(2);
}
try {
  const declaration = module ? (await loadFunctionModule(module)).find((candidate) => candidate.name === name) : await loadFunction(name);
  if (!declaration) throw new Error(`${module} declares no function of that name`);
  await serve(declaration);
} catch (error) {
  console.error(`cannot start function ${name}: ${(error as Error).message}`);
  process.exit(1);
}
