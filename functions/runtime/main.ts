// Entry point of a function process: `node functions/runtime/main.ts <function>` or FUNCTION=<function>.
// The container image runs this with the function chosen at start.
import { loadFunction } from '../index.ts';
import { serve } from './server.ts';

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
