// The entry program of a function process: `node functions/main.ts <function>` or
// FUNCTION=<function>. Picks the function by name from the registry and serves it; the
// container image runs its bundled counterpart (build/build.ts) with the function chosen at start.
import { loadFunction } from './index.ts';
import { serve } from './runtime/host/index.ts';

const name = process.argv[2] ?? process.env.FUNCTION;
if (!name) {
  console.error('which function? pass its name as the argument or set FUNCTION (e.g. FUNCTION=immortal-container)');
  process.exit(2);
}
try {
  await serve(await loadFunction(name));
} catch (error) {
  console.error(`cannot start function ${name}: ${(error as Error).message}`);
  process.exit(1);
}
