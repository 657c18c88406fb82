// esbuild plugins that keep out of the function bundles what a function never runs but would
// still load, parse and compile on every cold start. Each one fails the build, rather than
// silently bundling less, when the package it narrows changes shape.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import type { Plugin } from 'esbuild';

const require = createRequire(import.meta.url);

/** client-node's KubeConfig module, which two plugins below narrow. */
const CLIENT_NODE_CONFIG = /[\\/]@kubernetes[\\/]client-node[\\/]dist[\\/]config\.js$/;

/**
 * client-node's `config.js` (KubeConfig) takes two names from `./gen/index.js`, the index of its
 * generated code, which re-exports every API group, model and serializer (355 KiB minified).
 * That code runs nothing when loaded, but the package does not say so (no `sideEffects`
 * field), so esbuild would keep all of it. This gives config.js an index with just the two
 * names, from the modules that define them; if a later client-node takes more names from it,
 * the build fails ("No matching export"), it never silently misses code.
 */
const CONFIG_GEN_NAMES =
  "export { createConfiguration } from './gen/configuration.js';\nexport { ServerConfiguration } from './gen/servers.js';\n";
export const narrowClientNodeGen: Plugin = {
  name: 'narrow-client-node-gen',
  setup(build) {
    build.onResolve({ filter: /^\.\/gen\/index\.js$/ }, (args) =>
      CLIENT_NODE_CONFIG.test(args.importer) ? { path: args.importer, namespace: 'client-node-config-gen' } : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: 'client-node-config-gen' }, (args) => ({
      contents: CONFIG_GEN_NAMES,
      resolveDir: dirname(args.path),
      loader: 'js',
    }));
  },
};

/**
 * undici's index loads all of undici when it is imported: fetch, WebSocket, EventSource, the
 * caches (node:sqlite), mocks, every interceptor (node:dns, node:zlib). The bundles import it
 * from two places only: the runtime's kube/ client (Agent, request) and client-node (Agent and ProxyAgent in
 * config.js; fetch in the generated API clients, which no function uses). This module gives
 * them those names from undici's own modules, and loads fetch only if it is ever called.
 * `request` is undici's top-level shortcut (a URL, then `dispatcher.request`), for the form
 * the runtime's client uses; an import of any other name from 'undici' fails the build.
 */
const NARROW_UNDICI = `
import Dispatcher from 'undici/lib/dispatcher/dispatcher.js';
import api from 'undici/lib/api/index.js';
import Agent from 'undici/lib/dispatcher/agent.js';
import ProxyAgent from 'undici/lib/dispatcher/proxy-agent.js';
import { getGlobalDispatcher, setGlobalDispatcher } from 'undici/lib/global.js';
// As undici's index does: request, stream, pipeline… on every dispatcher.
Object.assign(Dispatcher.prototype, api);
export { Agent, ProxyAgent, getGlobalDispatcher, setGlobalDispatcher };
export function request(url, { dispatcher = getGlobalDispatcher(), ...options } = {}) {
  const target = new URL(url);
  return dispatcher.request({ ...options, origin: target.origin, path: target.pathname + target.search, method: options.method ?? 'GET' });
}
export function fetch(...args) {
  return require('undici/lib/web/fetch/index.js').fetch(...args);
}
`;
export const narrowUndici: Plugin = {
  name: 'narrow-undici',
  setup(build) {
    build.onResolve({ filter: /^undici$/ }, () => ({ path: 'undici', namespace: 'narrow-undici' }));
    build.onLoad({ filter: /.*/, namespace: 'narrow-undici' }, () => ({
      contents: NARROW_UNDICI,
      resolveDir: dirname(require.resolve('undici/package.json')),
      loader: 'js',
    }));
  },
};

/** A source edit: `from` (a string that must occur once, or a pattern that must match `count` times) becomes `to`. */
interface SourceEdit {
  from: string | RegExp;
  to: string;
  count?: number;
}

/**
 * A plugin that edits the source of one file of a package before bundling it. When the package
 * changes so that an edit no longer applies, the build fails saying which, instead of silently
 * bundling the file unchanged.
 */
function editSource(name: string, file: RegExp, why: string, edits: SourceEdit[]): Plugin {
  return {
    name,
    setup(build) {
      build.onLoad({ filter: file }, (args) => {
        let source = readFileSync(args.path, 'utf8');
        for (const { from, to, count = 1 } of edits) {
          const found = typeof from === 'string' ? source.split(from).length - 1 : [...source.matchAll(from)].length;
          if (found !== count)
            return {
              errors: [
                {
                  text: `${name} (build/bundle-narrowing.ts: ${why}): ${args.path} has ${found} × ${from}, expected ${count}; update the plugin for this version`,
                },
              ],
            };
          source = source.replace(from, to);
        }
        return { contents: source, loader: 'js' };
      });
    },
  };
}

/**
 * undici's client loads its HTTP/2 half (and with it node:http2, about 5,000 lines of Node's
 * own code) when it is loaded, though it only runs when a server picks h2 by ALPN, which the
 * API client never offers (kube/config.ts: allowH2 false). Here it is loaded on first use instead.
 */
export const lazyUndiciH2 = editSource('lazy-undici-h2', /[\\/]undici[\\/]lib[\\/]dispatcher[\\/]client\.js$/, 'HTTP/2 on first use', [
  { from: "const connectH2 = require('./client-h2.js')", to: "const connectH2 = (...args) => require('./client-h2.js')(...args)" },
]);

/**
 * undici 8 carries a second HTTP/1 parser, milo, as two WebAssembly builds in base64 (150 KiB of
 * bundle text read on every start), used only when UNDICI_USE_MILO is set. The bundle leaves
 * them out: with that variable set, the first connection fails saying so.
 */
export const leaveOutUndiciMilo = editSource(
  'leave-out-undici-milo',
  /[\\/]undici[\\/]lib[\\/]dispatcher[\\/]parser-h1\.js$/,
  'llhttp only',
  [
    { from: "miloPackage = require('../milo/simd.js')", to: 'miloPackage = null' },
    {
      from: "require('../milo/no-simd.js')",
      to: `(() => { throw new Error("undici's milo parser (UNDICI_USE_MILO) is left out of the function bundles (build/bundle-narrowing.ts)") })()`,
    },
  ],
);

/**
 * prom-client's index loads its Pushgateway (node:https, node:zlib) and the cluster aggregator
 * (node:cluster) when it is loaded; a function only serves /metrics. Each loads on first use.
 */
export const lazyPromClientExtras = editSource(
  'lazy-prom-client-extras',
  /[\\/]prom-client[\\/]index\.js$/,
  'Pushgateway and AggregatorRegistry on first use',
  [
    {
      from: "exports.Pushgateway = require('./lib/pushgateway');",
      to: "Object.defineProperty(exports, 'Pushgateway', { enumerable: true, get: () => require('./lib/pushgateway') });",
    },
    {
      from: "exports.AggregatorRegistry = require('./lib/cluster');",
      to: "Object.defineProperty(exports, 'AggregatorRegistry', { enumerable: true, get: () => require('./lib/cluster') });",
    },
  ],
);

/**
 * Express loads all four body parsers and serve-static when it is loaded; a function's host
 * uses only `express.raw`. The urlencoded parser alone pulls in qs and its intrinsics
 * machinery on every cold start. Here each is loaded when first asked for.
 */
export const lazyExpressMiddleware = editSource(
  'lazy-express-middleware',
  /[\\/]express[\\/]lib[\\/]express\.js$/,
  'middleware on first use',
  [
    { from: "var bodyParser = require('body-parser')\n", to: '' },
    {
      from: "exports.json = bodyParser.json\nexports.raw = bodyParser.raw\nexports.static = require('serve-static');\nexports.text = bodyParser.text\nexports.urlencoded = bodyParser.urlencoded\n",
      to: "for (const name of ['json', 'raw', 'text', 'urlencoded']) Object.defineProperty(exports, name, { enumerable: true, get: () => require('body-parser')[name] });\nObject.defineProperty(exports, 'static', { enumerable: true, get: () => require('serve-static') });\n",
    },
  ],
);
export const lazyBodyParsers = editSource('lazy-body-parsers', /[\\/]body-parser[\\/]index\.js$/, 'each parser on first use', [
  {
    from: /^exports\.(json|raw|text|urlencoded) = require\('(\.\/lib\/types\/\w+)'\)$/gm,
    to: "Object.defineProperty(exports, '$1', { enumerable: true, get: () => require('$2') })",
    count: 4,
  },
]);

/**
 * client-node's KubeConfig imports its proxy agents (socks, socks-proxy-agent, hpagent, and
 * with them node:dns, ip-address, smart-buffer) when it is loaded; they only run for a cluster
 * with a `proxy-url`. Here config.js gets, for each, a module whose exports load the real one on
 * first use. The names are read from config.js's own import lines, so a name it adds is never
 * missing; an import in another form fails the build.
 */
const PROXY_MODULES = ['socks-proxy-agent', 'socks', 'hpagent'];
export const lazyClientNodeProxies: Plugin = {
  name: 'lazy-client-node-proxies',
  setup(build) {
    const moduleFilter = new RegExp(`^(${PROXY_MODULES.join('|')})$`);
    build.onResolve({ filter: moduleFilter }, (args) =>
      CLIENT_NODE_CONFIG.test(args.importer)
        ? { path: args.path, namespace: 'lazy-client-node-proxies', pluginData: args.importer }
        : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: 'lazy-client-node-proxies' }, (args) => {
      const importer = readFileSync(args.pluginData as string, 'utf8');
      const escaped = args.path.replace(/[-/\\^$*+?.()|[\]{}]/g, '\\$&');
      const imports = [...importer.matchAll(new RegExp(`^import \\{([^}]*)\\} from '${escaped}';$`, 'gm'))];
      if (imports.length !== 1)
        return {
          errors: [
            {
              text: `lazy-client-node-proxies (build/bundle-narrowing.ts): ${args.pluginData} does not import { … } from '${args.path}' on one line; update the plugin for this client-node`,
            },
          ],
        };
      const names = imports[0][1]
        .split(',')
        .map((name) => name.trim())
        .filter(Boolean);
      const getters = names.map((name) => `  get ${name}() { return require(${JSON.stringify(args.path)}).${name}; },`).join('\n');
      return { contents: `module.exports = {\n${getters}\n};\n`, resolveDir: dirname(args.pluginData as string), loader: 'js' };
    });
  },
};

/**
 * mime-db, the media type database under Express, is 2,500 types (150 KiB of object literal,
 * compiled into every start and kept in the code cache), and mime-types builds its extension
 * maps from all of them when loaded. A function's host only answers JSON, text and CloudEvents
 * and never serves files, so it keeps what Express's `res.type`, `res.json`, `res.send` and
 * `Content-Type` handling can reach: every type with a charset (the full database's answer for
 * `contentType(type)` is unchanged), every `text/*`, and `application/octet-stream`. A lookup
 * by file extension of another type (res.sendFile, res.type('png')) finds nothing, which a
 * function never does.
 */
const keptMimeType = (type: string, entry: { charset?: string }): boolean =>
  Boolean(entry.charset) || type.startsWith('text/') || type === 'application/octet-stream';
export const narrowMimeDb: Plugin = {
  name: 'narrow-mime-db',
  setup(build) {
    build.onResolve({ filter: /^mime-db$/ }, () => ({ path: 'mime-db', namespace: 'narrow-mime-db' }));
    build.onLoad({ filter: /.*/, namespace: 'narrow-mime-db' }, () => {
      const all = require('mime-db') as Record<string, { charset?: string }>;
      const kept = Object.fromEntries(Object.entries(all).filter(([type, entry]) => keptMimeType(type, entry)));
      return { contents: JSON.stringify(kept), loader: 'json' };
    });
  },
};

/**
 * iconv-lite (480 KiB of code tables) is what body-parser and raw-body decode text bodies in
 * other charsets with. A function takes its body as raw bytes (express.raw, no decoding; the
 * CloudEvent's own charset is read by events.ts), so nothing calls it. If something ever does,
 * it fails with this message rather than mis-decoding.
 */
export const ICONV_LEFT_OUT =
  'iconv-lite is left out of the function bundles (build/bundle-narrowing.ts): a function reads bodies as raw bytes';
const ICONV_STUB = `
const leftOut = () => { throw new Error(${JSON.stringify(ICONV_LEFT_OUT)}); };
module.exports = { decode: leftOut, encode: leftOut, getDecoder: leftOut, getEncoder: leftOut, encodingExists: leftOut };
`;
export const leaveOutIconvLite: Plugin = {
  name: 'leave-out-iconv-lite',
  setup(build) {
    build.onResolve({ filter: /^iconv-lite$/ }, () => ({ path: 'iconv-lite', namespace: 'leave-out-iconv-lite' }));
    build.onLoad({ filter: /.*/, namespace: 'leave-out-iconv-lite' }, () => ({ contents: ICONV_STUB, loader: 'js' }));
  },
};

/** Every plugin above, in the order the function bundles use them. */
export const bundleNarrowing: Plugin[] = [
  narrowClientNodeGen,
  narrowUndici,
  lazyUndiciH2,
  leaveOutUndiciMilo,
  lazyPromClientExtras,
  lazyExpressMiddleware,
  lazyBodyParsers,
  lazyClientNodeProxies,
  narrowMimeDb,
  leaveOutIconvLite,
];
