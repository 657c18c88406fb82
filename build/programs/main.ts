// The image's entry, built to dist/main.mjs: `node dist/main.mjs`, the function chosen by
// FUNCTION (or the first argument) among those of the build (dist/functions.json). It runs the
// function's bundle, dist/<name>.cjs, from its V8 code cache dist/<name>.code-cache when there
// is one, else writes one at exit where it can (NODE_DISABLE_COMPILE_CACHE=1 turns that off).
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { debuglog } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { Script } from 'node:vm';
import { LATE_V8_FLAGS } from '../node-flags.ts';

const here = dirname(fileURLToPath(import.meta.url));
const known = JSON.parse(readFileSync(join(here, 'functions.json'), 'utf8')) as string[];
const name = process.argv[2] ?? process.env.FUNCTION;
if (!name) {
  console.error(`no function chosen: set FUNCTION to one of ${known.join(', ')} (e.g. FUNCTION=${known[0]})`);
  process.exit(2);
}
if (!known.includes(name)) {
  console.error(`unknown function "${name}" (FUNCTION): this build has ${known.join(', ')}`);
  process.exit(2);
}
const debug = debuglog('opfn');
const file = join(here, `${name}.cjs`);
const cacheFile = join(here, `${name}.code-cache`);
// Node's switch for its own compile cache turns this one off too.
const useCache = !process.env.NODE_DISABLE_COMPILE_CACHE;
let cachedData: Buffer | undefined;
try {
  if (useCache) cachedData = readFileSync(cacheFile);
} catch {
  debug('no code cache %s: compiling %s', cacheFile, file);
}
// The file is the module's CommonJS wrapper function (see build/build.ts): compiling the text as
// read keeps a single copy of it in memory, as the script's source.
const script = new Script(readFileSync(file, 'utf8'), { filename: file, cachedData });
if (cachedData && script.cachedDataRejected) {
  console.error(
    `code cache ${cacheFile} rejected (made by another Node version or with other V8 flags): compiling ${file}, which starts slower`,
  );
} else if (cachedData) {
  debug('code cache %s accepted', cacheFile);
}
if (useCache && (!cachedData || script.cachedDataRejected)) {
  // Taken at exit, the cache holds every function compiled by then. Where the folder is
  // read-only (the image at run time) there is nothing to do.
  process.once('exit', () => {
    try {
      // The cache records V8's flags: those of a fresh start, before the late ones.
      for (const flag of LATE_V8_FLAGS) setFlagsFromString(flag.replace(/^--no-/, '--'));
      const scratch = `${cacheFile}.${process.pid}`;
      writeFileSync(scratch, script.createCachedData());
      renameSync(scratch, cacheFile);
      debug('wrote code cache %s', cacheFile);
    } catch (error) {
      debug('cannot write code cache %s: %s', cacheFile, (error as Error).message);
    }
  });
}
cachedData = undefined;
const wrapper = { exports: {}, filename: file, id: '.', loaded: false };
script.runInThisContext()(wrapper.exports, createRequire(file), wrapper, file, dirname(file));
// Now, not as node flags: see LATE_V8_FLAGS in build/node-flags.ts.
for (const flag of LATE_V8_FLAGS) setFlagsFromString(flag);
