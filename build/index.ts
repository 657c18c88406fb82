// The build: one esbuild bundle per function and the two programs they run as (programs/main.ts,
// the image's entry; programs/warm-cache.ts, which writes their V8 code caches), in dist/.
export { buildFunctions, bundledFunctions, registeredFunctions, type BuildResult, type FunctionEntry } from './build.ts';
export { IMAGE_NODE_FLAGS, LATE_V8_FLAGS } from './node-flags.ts';
