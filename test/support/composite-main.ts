// A process serving the composite function, for planes in tests: what `functions/runtime/main.ts
// composite` does once the function is registered in functions/index.ts.
import composite from '../../functions/composite-controller/index.ts';
import { serve } from '../../functions/runtime/server.ts';

await serve(composite);
