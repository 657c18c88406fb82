// Built to dist/warm-cache.mjs. Writes each function's V8 code cache (dist/<name>.code-cache):
// starts it through main.mjs, asks its probes and metrics, sends it an event it refuses (so the
// intake's code is compiled too), and stops it with SIGTERM, the way Knative does; main.mjs
// writes the cache at exit. No cluster is needed: the kubeconfig below only lets the function
// start; nothing contacts that address.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const known = JSON.parse(readFileSync(join(here, 'functions.json'), 'utf8')) as string[];
const scratch = mkdtempSync(join(tmpdir(), 'opfn-warm-'));
const kubeconfig = join(scratch, 'kubeconfig');
writeFileSync(
  kubeconfig,
  'apiVersion: v1\nkind: Config\nclusters: [{name: warm, cluster: {server: "https://127.0.0.1:9"}}]\nusers: [{name: warm, user: {token: warm}}]\ncontexts: [{name: warm, context: {cluster: warm, user: warm}}]\ncurrent-context: warm\n',
);
const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
      .once('error', reject)
      .listen(0, '127.0.0.1', () => {
        const { port } = server.address() as AddressInfo;
        server.close(() => resolve(port));
      });
  });
let failed = false;
for (const name of known) {
  const started = performance.now();
  const port = await freePort();
  const cacheFile = join(here, `${name}.code-cache`);
  rmSync(cacheFile, { force: true });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    FUNCTION: name,
    KUBECONFIG: kubeconfig,
    PORT: String(port),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
  };
  delete env.NODE_OPTIONS; // the cache is only accepted by a process with the same V8 flags
  delete env.NODE_DISABLE_COMPILE_CACHE; // which would stop main.mjs writing it
  // With this process's node flags: run it as the image runs main.mjs (see IMAGE_NODE_FLAGS).
  const child = spawn(process.execPath, [...process.execArgv, join(here, 'main.mjs')], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  let warming = false;
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  child.stdout.setEncoding('utf8').on('data', async (chunk: string) => {
    out += chunk;
    if (!/"msg":"[^"]* ready"/.test(out) || warming) return;
    warming = true;
    const base = `http://127.0.0.1:${port}`;
    try {
      for (const path of ['/health/readiness', '/health/liveness', '/metrics']) await (await fetch(base + path)).arrayBuffer();
      await (await fetch(base + '/', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).arrayBuffer();
    } catch (error) {
      console.error(`warm-cache: ${name}: ${(error as Error).message}`);
    }
    child.kill('SIGTERM');
  });
  const code = await new Promise<number | string | null>((resolve) => child.on('exit', (exitCode, signal) => resolve(exitCode ?? signal)));
  clearTimeout(timer);
  if (code !== 0 || !existsSync(cacheFile)) {
    failed = true;
    console.error(
      `warm-cache: ${name} did not start and stop cleanly (exit ${code}${existsSync(cacheFile) ? '' : ', no code cache written'}); its output:\n${out.trim().split('\n').slice(-5).join('\n')}`,
    );
  } else {
    console.log(`warm-cache: ${name}: ${cacheFile} (${Math.round(performance.now() - started)} ms)`);
  }
}
rmSync(scratch, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
