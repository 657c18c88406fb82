// Test support: Knative's own data-plane programs (knative.dev/eventing of the release
// cluster/provision-knative.sh targets, built by its `adapters` part) run as plain processes
// against the test control plane, configured from the ApiServerSource and PingSource objects
// `opfn manifests` generates, exactly as Knative's controllers configure their Deployments:
//
// - ApiServerSource: pkg/reconciler/apiserversource/resources/receive_adapter.go (makeEnv) gives
//   the receive adapter K_SINK, K_SOURCE_CONFIG (namespaces, allNamespaces, resources as guessed
//   GVRs with their label selectors as strings, owner, mode), SYSTEM_NAMESPACE, NAMESPACE, NAME,
//   METRICS_DOMAIN, the logging/klog/observability config of the config watcher, K_CE_OVERRIDES;
//   the Deployment runs as spec.serviceAccountName. Here one process per ApiServerSource object,
//   (re)started when its spec changes, stopped when it goes, authenticated as that ServiceAccount.
// - PingSource: the multi-tenant adapter (cmd/mtping) watches every PingSource itself and sends
//   to each Ready one's status.sinkUri on its schedule; it runs as its own ServiceAccount with the
//   release's ClusterRole (config/core/roles/pingsource-mt-adapter-clusterrole.yaml) and reads the
//   release's config-logging and config-observability ConfigMaps from its namespace.
//
// The receive adapter's injection serves health probes on :8080 and both serve pprof on
// PROFILING_PORT (404 unless profiling is on); neither address can be set to loopback by
// environment. A second adapter finds :8080 taken and goes on without probes (the error is
// ignored upstream); nothing here uses the probes: readiness is read from the adapter's klog line
// "Caches populated" (verbosity 2), written once per reflector after its initial list.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { freePort, killOnExit, stopProcess } from '../../processes/index.ts';
import { runProvisionScript, type ControlPlane } from '../../cluster/index.ts';
import {
  ApiServerSource,
  Broker,
  hasLabels,
  namespacesFrom,
  PingSource,
  PROVISION_KNATIVE_SCRIPT,
  ready,
  writeStatus,
} from '../../eventing/knative/index.ts';
import { formatLabelSelector } from '../../eventing/manifests/index.ts';
import {
  keyOf,
  keyString,
  parseApiVersion,
  type KubeObject,
  type LabelSelector,
  type KubeClient,
  guessedResource,
} from '../../functions/runtime/index.ts';

/** The namespace Knative's system components run in (SYSTEM_NAMESPACE). */
export const KNATIVE_SYSTEM_NAMESPACE = 'knative-eventing';

/** The folder holding apiserver_receive_adapter and mtping, built once and cached. */
export function knativeAdapterBinaries(): Promise<string> {
  return runProvisionScript(PROVISION_KNATIVE_SCRIPT, ['adapters'], "building Knative's adapters");
}

/** The folder of the release's knative.dev/eventing module source (config/ among it), in the Go module cache. */
function knativeEventingModuleDir(): Promise<string> {
  return runProvisionScript(PROVISION_KNATIVE_SCRIPT, ['eventing-module'], "finding knative.dev/eventing's module");
}

interface SourceSpec {
  mode?: string;
  resources?: { apiVersion: string; kind: string; selector?: LabelSelector }[];
  namespaceSelector?: LabelSelector;
  owner?: { apiVersion?: string; kind?: string };
  serviceAccountName?: string;
  ceOverrides?: unknown;
  sink?: { ref?: { kind?: string; name?: string; namespace?: string }; uri?: string };
}

/** A source's sink as Knative's resolver finds it: `uri`, or a Broker's `status.address.url`. */
export async function resolveSink(kube: KubeClient, source: KubeObject): Promise<string> {
  const sink = ((source.spec ?? {}) as SourceSpec).sink;
  if (sink?.uri) return sink.uri;
  if (sink?.ref?.kind !== 'Broker' || !sink.ref.name)
    throw new Error(`${source.kind} ${source.metadata.name}: only a Broker or a URI sink is resolved here`);
  const broker = await kube.get<KubeObject & { status?: { address?: { url?: string } } }>(Broker, {
    namespace: sink.ref.namespace ?? source.metadata.namespace ?? '',
    name: sink.ref.name,
  });
  const url = broker?.status?.address?.url;
  if (!url) throw new Error(`${source.kind} ${source.metadata.name}: Broker ${sink.ref.name} has no address yet`);
  return url;
}

/**
 * K_SOURCE_CONFIG as makeEnv writes it: `namespaces` are the source's own namespace without a
 * namespaceSelector, else the namespaces it selects (listed by the caller); an empty selector is
 * `allNamespaces`.
 */
function receiveAdapterConfig(source: KubeObject, selectedNamespaces: string[]): Record<string, unknown> {
  const spec = (source.spec ?? {}) as SourceSpec;
  const selector = spec.namespaceSelector;
  const allNamespaces = selector !== undefined && !hasLabels(selector);
  return {
    namespaces: selector === undefined ? [source.metadata.namespace] : selectedNamespaces,
    allNamespaces,
    resources: (spec.resources ?? []).map((resource) => {
      const { group, version } = parseApiVersion(resource.apiVersion);
      return {
        gvr: { Group: group, Version: version, Resource: guessedResource(resource.kind) },
        ...(resource.selector ? { selector: formatLabelSelector(resource.selector) } : {}),
      };
    }),
    ...(spec.owner ? { owner: spec.owner } : {}),
    mode: spec.mode ?? 'Reference',
  };
}

/** The receive adapter's environment for `source` (makeEnv plus the config watcher's variables), sending to `sink`. */
export function receiveAdapterEnv(source: KubeObject, sink: string, selectedNamespaces: string[]): Record<string, string> {
  const spec = (source.spec ?? {}) as SourceSpec;
  return {
    K_SINK: sink,
    K_SOURCE_CONFIG: JSON.stringify(receiveAdapterConfig(source, selectedNamespaces)),
    SYSTEM_NAMESPACE: KNATIVE_SYSTEM_NAMESPACE,
    NAMESPACE: source.metadata.namespace ?? '',
    NAME: source.metadata.name!,
    METRICS_DOMAIN: 'knative.dev/eventing',
    K_LOGGING_CONFIG: '{}',
    // The reflectors' "Caches populated" line, which says when the adapter watches.
    K_KLOG_VERBOSITY: '2',
    K_OBSERVABILITY_CONFIG: '{}',
    ...(spec.ceOverrides ? { K_CE_OVERRIDES: JSON.stringify(spec.ceOverrides) } : {}),
  };
}

/** One adapter process: its output kept (for failure messages), ready once every reflector listed. */
export class AdapterProcess {
  readonly output: string[] = [];
  readonly label: string;
  readonly #child: ChildProcess;
  readonly #ready = Promise.withResolvers<void>();
  #populated = 0;

  constructor(binary: string, env: Record<string, string>, reflectors: number, label: string, args: string[] = []) {
    this.label = label;
    this.#child = killOnExit(spawn(binary, args, { env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] }));
    const take = (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n').filter(Boolean)) {
        if (this.output.length < 2000) this.output.push(line);
        if (line.includes('Caches populated') && ++this.#populated === reflectors) this.#ready.resolve();
      }
    };
    this.#child.stdout!.on('data', take);
    this.#child.stderr!.on('data', take);
    this.#child.on('exit', (code, signal) =>
      this.#ready.reject(new Error(`${label} exited (${signal ?? code}) before it watched:\n  ${this.output.slice(-20).join('\n  ')}`)),
    );
    this.#child.on('error', (error) => this.#ready.reject(error));
    if (reflectors === 0) this.#ready.resolve();
    // An adapter that ends unwatched is reported to whoever waits in ready(), never as an unhandled rejection.
    this.#ready.promise.catch(() => {});
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  get running(): boolean {
    return this.#child.exitCode === null && this.#child.signalCode === null;
  }

  /** Resolves once every reflector listed (and watches); rejects if the process ends first or `timeoutMs` passes. */
  ready(timeoutMs = 30_000): Promise<void> {
    const timer = new Promise<void>((_, reject) =>
      setTimeout(
        () => reject(new Error(`${this.label} not watching after ${timeoutMs} ms:\n  ${this.output.slice(-20).join('\n  ')}`)),
        timeoutMs,
      ).unref(),
    );
    return Promise.race([this.#ready.promise, timer]);
  }

  stop(): Promise<void> {
    return stopProcess(this.#child, 3000);
  }
}

/** Reflectors the adapter starts for `config`: one per resource, times the namespaces unless all or cluster-scoped (the caller says which are). */
function reflectorCount(config: Record<string, unknown>, namespaced: (resource: string) => boolean): number {
  const resources = config.resources as { gvr: { Resource: string } }[];
  const namespaces = (config.namespaces as string[]).length;
  return resources.reduce((sum, resource) => sum + (config.allNamespaces || !namespaced(resource.gvr.Resource) ? 1 : namespaces), 0);
}

export interface ReceiveAdapterOptions {
  binDir: string;
  /** Admin client: reads the ApiServerSources and the namespaces a selector picks. */
  kube: KubeClient;
  cp: Pick<ControlPlane, 'serviceAccountKubeconfig' | 'kubeconfigPath'>;
  /** Checked this often for new, changed and deleted ApiServerSources. */
  pollMs?: number;
}

/**
 * Runs Knative's receive adapter for every ApiServerSource in the API server, as Knative's
 * ApiServerSource controller runs one Deployment per source: started when one appears, restarted
 * when its spec changes, stopped when it is deleted.
 */
export class ReceiveAdapters {
  readonly #options: ReceiveAdapterOptions;
  readonly #running = new Map<string, { generation: number | undefined; adapter: AdapterProcess }>();
  /** Adapters stopped so far (restarts, deletions), for diagnostics. */
  readonly retired: AdapterProcess[] = [];
  #timer?: ReturnType<typeof setTimeout>;
  #stopped = false;
  #pass: Promise<void> = Promise.resolve();
  #lastError?: string;

  constructor(options: ReceiveAdapterOptions) {
    this.#options = options;
  }

  /** Starts an adapter for every ApiServerSource that exists now and resolves once each watches; then follows changes. */
  async start(): Promise<void> {
    await this.#sync();
    await Promise.all([...this.#running.values()].map(({ adapter }) => adapter.ready()));
    const tick = () => {
      this.#pass = this.#sync()
        .catch((error: unknown) => {
          this.#lastError = String(error);
        })
        .finally(() => {
          if (!this.#stopped) this.#timer = setTimeout(tick, this.#options.pollMs ?? 200);
        });
    };
    this.#timer = setTimeout(tick, this.#options.pollMs ?? 200);
  }

  /** The adapter of an ApiServerSource once it watches (waiting for the source to appear first). */
  async ready(namespace: string, name: string, timeoutMs = 60_000): Promise<AdapterProcess> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const running = this.#running.get(`${namespace}/${name}`);
      if (running) {
        await running.adapter.ready(Math.max(1, deadline - Date.now()));
        return running.adapter;
      }
      if (Date.now() > deadline)
        throw new Error(
          `no receive adapter for ApiServerSource ${namespace}/${name} after ${timeoutMs} ms${this.#lastError ? ` (last error: ${this.#lastError})` : ''}`,
        );
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  adapters(): Map<string, AdapterProcess> {
    return new Map([...this.#running].map(([key, { adapter }]) => [key, adapter]));
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#pass;
    await Promise.all([...this.#running.values()].map(({ adapter }) => adapter.stop()));
    this.#running.clear();
  }

  async #sync(): Promise<void> {
    if (this.#stopped) return;
    const { kube } = this.#options;
    const sources = (await kube.list(ApiServerSource)).items;
    const seen = new Set<string>();
    for (const source of sources) {
      const key = keyString(keyOf(source));
      seen.add(key);
      const running = this.#running.get(key);
      if (running && running.generation === source.metadata.generation) continue;
      if (running) {
        this.#running.delete(key);
        this.retired.push(running.adapter);
        await running.adapter.stop();
      }
      if (this.#stopped) return;
      this.#running.set(key, { generation: source.metadata.generation, adapter: await this.#startAdapter(source) });
    }
    for (const [key, running] of [...this.#running]) {
      if (seen.has(key)) continue;
      this.#running.delete(key);
      this.retired.push(running.adapter);
      await running.adapter.stop();
    }
  }

  async #startAdapter(source: KubeObject): Promise<AdapterProcess> {
    const { kube, cp, binDir } = this.#options;
    const sink = await resolveSink(kube, source);
    const spec = (source.spec ?? {}) as SourceSpec;
    const selector = spec.namespaceSelector;
    const selected = selector ? await namespacesFrom(kube)(selector) : [];
    const env = receiveAdapterEnv(source, sink, selected);
    const config = JSON.parse(env.K_SOURCE_CONFIG);
    // Cluster-scoped resources get one reflector whatever the namespaces: ask discovery which are.
    const scoped = new Map<string, boolean>();
    for (const resource of spec.resources ?? []) {
      const { group, version } = parseApiVersion(resource.apiVersion);
      const list = await kube
        .request<{ resources: { name: string; namespaced: boolean }[] }>('GET', group ? `/apis/${group}/${version}` : `/api/${version}`)
        .catch(() => ({ resources: [] }));
      for (const served of list.resources) scoped.set(served.name, served.namespaced);
    }
    const kubeconfig = spec.serviceAccountName
      ? await cp.serviceAccountKubeconfig(source.metadata.namespace!, spec.serviceAccountName)
      : cp.kubeconfigPath;
    return new AdapterProcess(
      join(binDir, 'apiserver_receive_adapter'),
      { ...env, KUBECONFIG: kubeconfig, PROFILING_PORT: String(await freePort()) },
      reflectorCount(config, (resource) => scoped.get(resource) ?? true),
      `receive adapter of ApiServerSource ${keyString(keyOf(source))}`,
    );
  }
}

/**
 * Installs what the PingSource adapter needs as Knative's release installs it: its namespace,
 * its ServiceAccount bound to the release's ClusterRole, and the release's config-logging and
 * config-observability ConfigMaps (read from the module's config/). Returns its kubeconfig.
 */
export async function installPingAdapterIdentity(cp: Pick<ControlPlane, 'serviceAccountKubeconfig' | 'request'>): Promise<string> {
  const config = join(await knativeEventingModuleDir(), 'config/core');
  const read = (file: string) => parseYaml(readFileSync(join(config, file), 'utf8')) as KubeObject;
  const must = async (method: string, path: string, body: unknown) => {
    const answer = await cp.request(method, path, body);
    if (answer.status >= 300 && answer.status !== 409)
      throw new Error(`${method} ${path}: ${answer.status} ${JSON.stringify(answer.body)}`);
  };
  const ns = KNATIVE_SYSTEM_NAMESPACE;
  await must('POST', '/api/v1/namespaces', { metadata: { name: ns } });
  for (const file of ['configmaps/logging.yaml', 'configmaps/observability.yaml']) {
    const map = read(file);
    await must('POST', `/api/v1/namespaces/${ns}/configmaps`, { ...map, metadata: { name: map.metadata.name, namespace: ns } });
  }
  const role = read('roles/pingsource-mt-adapter-clusterrole.yaml');
  await must('POST', '/apis/rbac.authorization.k8s.io/v1/clusterroles', { ...role, metadata: { name: role.metadata.name } });
  const account = 'pingsource-mt-adapter';
  const kubeconfig = await cp.serviceAccountKubeconfig(ns, account);
  await must('POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
    metadata: { name: `${account}-test` },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role.metadata.name },
    subjects: [{ kind: 'ServiceAccount', name: account, namespace: ns }],
  });
  return kubeconfig;
}

/**
 * What Knative's PingSource controller writes for every PingSource, which the multi-tenant adapter
 * waits for: Ready, and `status.sinkUri` resolved from the sink.
 */
export async function markPingSourcesReady(kube: KubeClient): Promise<KubeObject[]> {
  const sources = (await kube.list(PingSource)).items;
  for (const source of sources) {
    await writeStatus(kube, PingSource, source, {
      conditions: [
        { type: 'SinkProvided', status: 'True', reason: 'SinkProvided' },
        { type: 'Deployed', status: 'True', reason: 'Deployed' },
        ready(),
      ],
      fields: { sinkUri: await resolveSink(kube, source) },
    });
  }
  return sources;
}

/** The PingSource adapter, as the release's Deployment runs it (config/core/deployments/pingsource-mt-adapter.yaml), without leader election. */
export async function startPingAdapter(binDir: string, kubeconfig: string): Promise<AdapterProcess> {
  return new AdapterProcess(
    join(binDir, 'mtping'),
    {
      KUBECONFIG: kubeconfig,
      PROFILING_PORT: String(await freePort()),
      SYSTEM_NAMESPACE: KNATIVE_SYSTEM_NAMESPACE,
      NAMESPACE: KNATIVE_SYSTEM_NAMESPACE,
      K_OBSERVABILITY_CONFIG: '{}',
      K_LOGGING_CONFIG: '',
      K_LEADER_ELECTION_CONFIG: '',
      K_NO_SHUTDOWN_AFTER: '',
      K_SINK_TIMEOUT: '-1',
      K_KLOG_VERBOSITY: '2',
      POD_NAME: 'pingsource-mt-adapter-test',
    },
    0,
    'PingSource adapter',
    ['--disable-ha'],
  );
}
