#!/usr/bin/env node
// The `opfn` command of the npm package. Node strips types only outside node_modules, so the
// package runs its commands compiled (lib/bin/opfn.js, made by build/package.ts); this
// repository, which has the TypeScript sources, runs bin/opfn.ts.
import { existsSync } from 'node:fs';

const [major] = process.versions.node.split('.').map(Number);
if (major < 24) {
  console.error(
    `opfn needs Node 24 or later (this is Node ${process.versions.node}), which runs TypeScript functions as they are: install it, or add it to your project (npm install --save-dev node@24) and run npx opfn`,
  );
  process.exit(1);
}
const source = new URL('./opfn.ts', import.meta.url);
await import(existsSync(source) ? source.href : new URL('../lib/bin/opfn.js', import.meta.url).href);
