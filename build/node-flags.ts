// The Node and V8 flags a function bundle runs with: shared by the build, the image's entry
// program (programs/main.ts) and the tests that check the Dockerfile uses them.

/**
 * Node flags the image runs dist/main.mjs with (Dockerfile ENTRYPOINT, and its warm-up RUN, since
 * V8 accepts a code cache only from a process with the same flags; test/integration/bundle.test.ts
 * checks both). A function instance idles most of its life, so memory counts:
 *
 *   --max-semi-space-size=1   young generation capped at 1 MiB per semi-space (it grows to about
 *                             3 during start-up and stays). More scavenges under a burst (each
 *                             cheap: the garbage of a reconcile dies young). The local plane
 *                             (opfn dev) runs main.mjs without it.
 *
 * The other memory setting, WebAssembly kept at its baseline tier, is not a command-line flag:
 * see LATE_V8_FLAGS.
 */
export const IMAGE_NODE_FLAGS = ['--max-semi-space-size=1'];

/**
 * V8 flags dist/main.mjs sets once the bundle has loaded: undici parses HTTP with llhttp compiled
 * to WebAssembly, and once hot (the first reconcile) V8 recompiles it with TurboFan in a
 * background thread, which leaves a large malloc arena behind. Liftoff, the baseline tier,
 * parses an API server answer in microseconds.
 * Not `--liftoff-only` on the command line: a V8 flag like it given at start changes the flag
 * hash that Node's built-in modules' embedded code cache was made with, so V8 refuses it and
 * compiles https, tls, crypto… on every start. Set after the bundle has loaded, they only touch
 * what is compiled later; main.mjs sets them back (each negates a V8 default) before it writes
 * the bundle's code cache at exit, so that cache carries the hash of a fresh start. They apply
 * wherever main.mjs runs: the image and the local plane's bundled functions.
 */
export const LATE_V8_FLAGS = ['--no-wasm-tier-up', '--no-wasm-dynamic-tiering'];
