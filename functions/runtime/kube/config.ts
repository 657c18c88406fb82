// Where the cluster is and how to reach it: kubeconfig files or the in-cluster service account,
// as kubectl finds them, and a KubeConfig that reuses its connections.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { createSecureContext } from 'node:tls';
// The two modules of client-node the client needs, not its index: that one loads every generated API
// group, watch, exec, attach, cp, port-forward and metrics client (and ws, tar-fs, jsonpath…).
import { KubeConfig } from '@kubernetes/client-node/dist/config.js';
import { Agent, type Dispatcher } from 'undici';

/**
 * client-node 2.0.1 builds a new undici Agent for every request when the cluster has TLS
 * settings, so no connection is ever reused and every call holds a socket of its own. This KubeConfig hands out one dispatcher per distinct
 * TLS identity (CA, client certificate, proxy) instead. `createDispatcher` is private in the
 * typings, so it is wrapped on the instance rather than overridden.
 *
 * The direct (TLS) dispatcher speaks HTTP/1.1 only. undici 8 offers h2 by ALPN unless told not
 * to (allowH2 defaults to true) and kube-apiserver picks h2, so every request and watch of a
 * client would share one HTTP/2 session. undici's HTTP/2 client leaves a session whose watch stream
 * was aborted before its response headers (a source stopped right after its list) with a
 * socket 'end' handler that throws an uncaught SocketError "other side closed" when the API
 * server later closes the connection (a restart), which crashes the process
 * (test/integration/connections.test.ts reproduces it). HTTP/1.1 over a keep-alive pool is
 * undici's mature path and what the plane's own dispatchers use.
 */
export class ConnectionReusingKubeConfig extends KubeConfig {
  constructor(options: ConnectionOptions = {}) {
    super();
    const self = this as unknown as { createDispatcher(cluster: unknown, agentOptions: unknown): Dispatcher | undefined };
    const build = self.createDispatcher.bind(this);
    const dispatchers = new Map<string, Dispatcher | undefined>();
    self.createDispatcher = (cluster, agentOptions) => {
      // Credentials can rotate (exec plugins); keying on everything the dispatcher is built
      // from gives a fresh pool exactly when the identity changes.
      const dispatcher = this.createDispatcherOptions(cluster as never, agentOptions as never);
      const key = createHash('sha256').update(JSON.stringify(dispatcher)).digest('hex');
      if (!dispatchers.has(key)) {
        // One TLS context for the pool: given only ca/cert/key, tls.connect parses them into a
        // new context for every connection.
        const connect =
          dispatcher.type === 'agent' ? { ...dispatcher.connect, secureContext: createSecureContext(dispatcher.connect) } : undefined;
        dispatchers.set(
          key,
          connect ? new Agent({ connect, allowH2: false, connections: options.maxConnections ?? null }) : build(cluster, agentOptions),
        );
      }
      return dispatchers.get(key);
    };
  }

  /** KUBECONFIG (or ~/.kube/config), else the in-cluster service account, as kubectl does. */
  static fromEnvironment(options: ConnectionOptions = {}): ConnectionReusingKubeConfig {
    // With nothing configured client-node falls back to http://localhost:8080, which then fails
    // with a TLS message that hides the real problem.
    const found = configuredKubeconfig();
    if (!found)
      throw new Error(
        'no Kubernetes cluster configured: set KUBECONFIG (or create ~/.kube/config), or run in a pod with a service account',
      );
    const config = new ConnectionReusingKubeConfig(options);
    if (found.inCluster) {
      // Without it (automountServiceAccountToken: false) every request would fail, each with a
      // message about something else; a function must not report ready like that.
      if (!existsSync(SERVICE_ACCOUNT_TOKEN))
        throw new Error(
          `in a pod (KUBERNETES_SERVICE_HOST is set) but no service-account token at ${SERVICE_ACCOUNT_TOKEN}: mount one (automountServiceAccountToken: true), or set KUBECONFIG`,
        );
      config.loadFromCluster();
    }
    const [first, ...rest] = found.files;
    if (first) config.loadFromFile(first);
    for (const file of rest) {
      const more = new KubeConfig();
      more.loadFromFile(file);
      config.mergeConfig(more);
    }
    if (!config.getCurrentCluster())
      throw new Error(`no current cluster in ${found.files.join(delimiter) || 'the in-cluster configuration'}`);
    return config;
  }
}

/** Where the kubelet mounts a pod's service-account token (client-node's loadFromCluster reads it there). */
const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

/**
 * Where the cluster is configured, as kubectl looks: the KUBECONFIG files that exist (merged in
 * order; a missing one is skipped, as kubectl skips it), else ~/.kube/config when KUBECONFIG is
 * unset, else a pod's service account. The plane and its function processes all use this.
 */
export function configuredKubeconfig(env: NodeJS.ProcessEnv = process.env): { files: string[]; inCluster: boolean } | undefined {
  const listed = (env.KUBECONFIG ?? '').split(delimiter).filter((file) => file.trim() !== '');
  const files = listed.filter((file) => existsSync(file));
  if (files.length > 0) return { files, inCluster: false };
  const home = join(env.HOME ?? env.USERPROFILE ?? '', '.kube', 'config');
  if (listed.length === 0 && existsSync(home)) return { files: [home], inCluster: false };
  if (env.KUBERNETES_SERVICE_HOST) return { files: [], inCluster: true };
  return undefined;
}

export interface ConnectionOptions {
  /**
   * Connections per pool at most (direct connections; a proxy's pool is client-node's); further
   * requests wait for one. Unset: one per concurrent request. Only for a client that never holds
   * a connection open (a watch holds its own for as long as it runs).
   */
  maxConnections?: number;
}
