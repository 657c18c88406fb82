// The esbuild plugins that keep out of the function bundles what a function never runs
// (build/bundle-narrowing.ts): each snippet below is bundled with them, as build/build.ts bundles a
// function, and run in a child process, so the modules Node loads are its own.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, test } from 'node:test';
import { build } from 'esbuild';
import { bundleNarrowing, ICONV_LEFT_OUT, lazyUndiciH2 } from '../../build/bundle-narrowing.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const scratch = mkdtempSync(join(tmpdir(), 'opfn-narrowing-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

let bundles = 0;
/** Bundles `source` (CommonJS, resolved from the repository root) with the plugins, runs it, and returns what it printed as JSON. */
async function runBundled(source: string, env: Record<string, string> = {}): Promise<any> {
  const outfile = join(scratch, `snippet-${++bundles}.cjs`);
  await build({
    stdin: { contents: source, resolveDir: ROOT, loader: 'js' },
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node24',
    outfile,
    logLevel: 'silent',
    plugins: bundleNarrowing,
  });
  const run = spawnSync(process.execPath, [outfile], { encoding: 'utf8', env: { ...process.env, ...env } });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout);
}

const LOADED = "const loaded = (name) => process.moduleLoadList.includes('NativeModule ' + name);";

describe('bundle narrowing (build/bundle-narrowing.ts)', () => {
  test('the narrowed mime database answers contentType and charset as the full one for every type, and for the extensions a host uses', async () => {
    const db = createRequire(import.meta.url)('mime-db') as Record<string, unknown>;
    const full = createRequire(import.meta.url)('mime-types') as {
      contentType(type: string): string | false;
      charset(type: string): string | false;
    };
    const queries = [
      ...Object.keys(db),
      'json',
      'html',
      'text',
      'txt',
      'bin',
      'application/cloudevents+json',
      'application/cloudevents-batch+json',
    ];
    writeFileSync(join(scratch, 'queries.json'), JSON.stringify(queries));
    const narrowed = await runBundled(`const m = require('mime-types');
      const queries = JSON.parse(require('node:fs').readFileSync(${JSON.stringify(join(scratch, 'queries.json'))}, 'utf8'));
      console.log(JSON.stringify(queries.map((q) => [m.contentType(q), m.charset(q)])));`);
    assert.equal(narrowed.length, queries.length);
    const differing = queries.filter(
      (query, index) => JSON.stringify(narrowed[index]) !== JSON.stringify([full.contentType(query), full.charset(query)]),
    );
    assert.deepEqual(differing, [], 'every answer as the full database gives it');
  });

  test('Express loads its body parsers and serve-static on first use, and each still works', async () => {
    const result = await runBundled(`${LOADED}
      const express = require('express');
      const zlibAtLoad = loaded('zlib'); // body-parser's reader needs it
      const kinds = ['json', 'raw', 'text', 'urlencoded', 'static'].map((name) => typeof express[name]);
      const middleware = [express.json(), express.raw(), express.text(), express.urlencoded(), express.static(__dirname)].map((m) => typeof m);
      console.log(JSON.stringify({ zlibAtLoad, zlibAfter: loaded('zlib'), kinds, middleware, enumerable: Object.keys(express).filter((k) => ['json', 'raw', 'static'].includes(k)) }));`);
    assert.equal(result.zlibAtLoad, false, 'no body parser loaded with Express');
    assert.equal(result.zlibAfter, true);
    assert.deepEqual(result.kinds, Array(5).fill('function'));
    assert.deepEqual(result.middleware, Array(5).fill('function'));
    assert.deepEqual(result.enumerable, ['json', 'raw', 'static']);
  });

  test("client-node's proxy agents load on first use: a socks or an HTTPS proxy-url still gets its agent", async () => {
    const kubeconfig = (proxy: string) =>
      `apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", proxy-url: "${proxy}"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n`;
    const result = await runBundled(`${LOADED}
      const { KubeConfig } = require('@kubernetes/client-node/dist/config.js');
      const socksAtLoad = loaded('dns'); // socks-proxy-agent loads node:dns
      const agentFor = async (text) => { const config = new KubeConfig(); config.loadFromString(text); const options = {}; await config.applyToHTTPSOptions(options); return options.agent.constructor.name; };
      (async () => console.log(JSON.stringify({ socksAtLoad, socks: await agentFor(${JSON.stringify(kubeconfig('socks5://127.0.0.1:1080'))}), https: await agentFor(${JSON.stringify(kubeconfig('http://127.0.0.1:3128'))}) })))();`);
    assert.equal(result.socksAtLoad, false, 'no proxy agent loaded with KubeConfig');
    // esbuild may number a class name that occurs twice in the bundle.
    assert.match(result.socks, /^SocksProxyAgent\d*$/);
    assert.match(result.https, /^HttpsProxyAgent\d*$/);
  });

  test('undici leaves node:http2 unloaded until a connection needs it', async () => {
    const result = await runBundled(`${LOADED}
      const { Agent } = require('undici');
      const server = require('node:http').createServer((req, res) => res.end('plain')).listen(0, '127.0.0.1', async () => {
        const agent = new Agent({ allowH2: false });
        const answer = await agent.request({ origin: 'http://127.0.0.1:' + server.address().port, path: '/', method: 'GET' });
        const text = await answer.body.text();
        console.log(JSON.stringify({ text, http2: loaded('http2') }));
        await agent.close(); server.close();
      });`);
    assert.deepEqual(result, { text: 'plain', http2: false });
  });

  test("undici's milo parser, left out, fails a connection saying why when UNDICI_USE_MILO asks for it", async () => {
    const result = await runBundled(
      `const { Agent } = require('undici');
      const server = require('node:http').createServer((req, res) => res.end('plain')).listen(0, '127.0.0.1', async () => {
        const agent = new Agent();
        const outcome = await agent.request({ origin: 'http://127.0.0.1:' + server.address().port, path: '/', method: 'GET' }).then((answer) => answer.body.text(), (error) => error.message);
        console.log(JSON.stringify(outcome));
        await agent.destroy(); server.close();
      });`,
      { UNDICI_USE_MILO: '1' },
    );
    assert.match(result, /milo parser \(UNDICI_USE_MILO\) is left out of the function bundles/);
  });

  test('prom-client loads its Pushgateway and cluster aggregator on first use, and both still work', async () => {
    const result = await runBundled(`${LOADED}
      const client = require('prom-client');
      const atLoad = { zlib: loaded('zlib'), cluster: loaded('cluster') };
      const gateway = new client.Pushgateway('http://127.0.0.1:9091');
      console.log(JSON.stringify({ atLoad, gateway: typeof gateway.pushAdd, aggregator: typeof new client.AggregatorRegistry().clusterMetrics }));`);
    assert.deepEqual(result, { atLoad: { zlib: false, cluster: false }, gateway: 'function', aggregator: 'function' });
  });

  test('iconv-lite, left out, fails every call saying why instead of mis-decoding', async () => {
    const result = await runBundled(`const iconv = require('iconv-lite');
      console.log(JSON.stringify(['decode', 'encode', 'getDecoder', 'encodingExists'].map((name) => { try { iconv[name](Buffer.from('x'), 'latin1'); return 'returned'; } catch (error) { return error.message; } })));`);
    assert.deepEqual(result, Array(4).fill(ICONV_LEFT_OUT));
  });

  test('an edit that no longer applies to a new version of the package fails the build, naming the plugin', async () => {
    const changed = join(scratch, 'node_modules', 'undici', 'lib', 'dispatcher', 'client.js');
    mkdirSync(dirname(changed), { recursive: true });
    writeFileSync(changed, "const connectH2 = require('./http2-client.js')\nmodule.exports = connectH2\n");
    await assert.rejects(
      build({ entryPoints: [changed], bundle: false, write: false, logLevel: 'silent', plugins: [lazyUndiciH2] }),
      (error: Error) =>
        /lazy-undici-h2 \(build\/bundle-narrowing\.ts.*0 × const connectH2 = require\('\.\/client-h2\.js'\), expected 1; update the plugin/.test(
          error.message,
        ),
    );
  });
});
