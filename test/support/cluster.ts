// Test support: a real control plane with the CRDs installed, clients for it, and function
// hosts served on loopback exactly as in production (HTTP + CloudEvents).
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { HTTP, type CloudEvent } from 'cloudevents';
import { pino } from 'pino';
import { applyCrds } from '../../eventing/crds.ts';
import {
  type FunctionDeclaration,
  type KubeObject,
  type ObjectKey,
  type ResourceKind,
  ConnectionReusingKubeConfig,
  KubeClient,
  type RequestObserver,
} from '../../functions/runtime/index.ts';
import {
  createMetrics,
  type FunctionMetrics,
  createFunctionHost,
  OUTCOME_HEADER,
  type FunctionHost,
  type FunctionHostOptions,
} from '../../functions/runtime/host/index.ts';
import { startControlPlane, type ControlPlane } from '../../cluster/index.ts';

export const quietLog = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

export const kubeFor = (kubeconfigPath: string): KubeClient => KubeClient.fromFile(kubeconfigPath);

export interface TestCluster {
  cp: ControlPlane;
  /** Admin client. */
  kube: KubeClient;
  stop(): Promise<void>;
}

export interface TestClusterOptions {
  controllerManager?: boolean;
  apiServerFlags?: string[];
  /**
   * What the test installs before kube-controller-manager starts, besides the project's CRDs
   * (applied first): the CRDs of kinds whose objects' dependents the garbage collector must
   * collect (ControlPlaneOptions.beforeControllerManager).
   */
  install?: (kube: KubeClient) => Promise<unknown>;
}

export async function startTestCluster(options: TestClusterOptions = {}): Promise<TestCluster> {
  let kube: KubeClient | undefined;
  const cp = await startControlPlane({
    ...options,
    beforeControllerManager: async (kubeconfigPath) => {
      kube = kubeFor(kubeconfigPath);
      await applyCrds(kube);
      await options.install?.(kube);
    },
  });
  return { cp, kube: kube!, stop: () => cp.stop() };
}

export interface RunningFunction {
  url: string;
  host: FunctionHost;
  /** The function's own metrics (its API requests among them), as /metrics serves them. */
  metrics: FunctionMetrics;
  close(): Promise<void>;
}

/**
 * Serves a function on a free loopback port, authenticated by the given kubeconfig; `overrides`
 * sets what the environment would (config, a clock, a logger).
 */
export async function serveFunction(
  declaration: FunctionDeclaration,
  kubeconfigPath: string,
  overrides: Partial<FunctionHostOptions> = {},
): Promise<RunningFunction> {
  const metrics = createMetrics(declaration.name);
  const host = createFunctionHost(declaration, { kubeconfigPath, log: quietLog, metrics, ...overrides });
  const server = host.app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  return {
    url,
    host,
    metrics,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The function's reads made while a burst watch was open (opfn_burst_watch_reads_total), by who answered them. */
export async function burstWatchReads(fn: RunningFunction): Promise<{ watch: number; api: number }> {
  const values = (await fn.metrics.burstWatchReads.get()).values;
  const count = (by: string) => values.find((value) => value.labels.answered_by === by)?.value ?? 0;
  return { watch: count('watch'), api: count('api') };
}

/**
 * A client for an API server that never answers (a closed loopback port): for tests of what a
 * function does before, or without, any API request. `observe` sees every attempted request.
 */
export function unreachableKube(observe?: RequestObserver): KubeClient {
  const config = new ConnectionReusingKubeConfig();
  config.loadFromOptions({
    clusters: [{ name: 'nowhere', server: 'https://127.0.0.1:1', skipTLSVerify: true }],
    users: [{ name: 'someone', token: 'not-a-real-token' }],
    contexts: [{ name: 'nowhere', cluster: 'nowhere', user: 'someone' }],
    currentContext: 'nowhere',
  });
  return new KubeClient(config, observe);
}

/** POSTs a CloudEvent in binary mode, as Knative delivers it. */
export async function deliver(url: string, event: CloudEvent<unknown>): Promise<{ status: number; body: any }> {
  const message = HTTP.binary(event);
  const response = await fetch(url, { method: 'POST', headers: message.headers as Record<string, string>, body: message.body as string });
  // Successes have an empty body and report what they did in a header (see OUTCOME_HEADER).
  const text = (await response.text()) || response.headers.get(OUTCOME_HEADER) || '';
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: response.status, body };
}

/**
 * Polls until `check` returns a truthy value (returned) or fails with the last error after
 * `timeoutMs`; `diagnose` adds the state of the system at that moment to the failure.
 */
export async function eventually<T>(
  check: () => Promise<T | undefined | false>,
  timeoutMs = 15_000,
  what = 'condition',
  diagnose?: () => Promise<string>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      lastError = error;
    }
    await sleep(50);
  }
  const state = diagnose ? `\n${await diagnose().catch((error: unknown) => `(no diagnosis: ${String(error)})`)}` : '';
  throw new Error(`timed out waiting for ${what}${lastError ? `: ${(lastError as Error).message}` : ''}${state}`);
}

/**
 * Waits until kube-apiserver's watch cache holds `object` at its resourceVersion. The cache
 * serves a version a moment after etcd has it; an ApiServerSource's event comes from a watch, so
 * a real event is never ahead of the cache, and a test that posts one right after a write waits.
 */
export async function untilWatchCacheHolds(kube: KubeClient, kind: ResourceKind, object: KubeObject): Promise<void> {
  const key = { namespace: object.metadata.namespace ?? '', name: object.metadata.name! };
  await eventually(
    async () => (await kube.get(kind, key, { cached: true }))?.metadata.resourceVersion === object.metadata.resourceVersion,
    2000,
    `the watch cache to hold ${key.name} at resourceVersion ${object.metadata.resourceVersion}`,
  );
}

/**
 * Waits until the API server's watch cache no longer holds the object: what an event delivered
 * by the plane implies, as the ApiServerSource's watch is served from that cache.
 */
export async function untilWatchCacheForgets(kube: KubeClient, kind: ResourceKind, key: ObjectKey): Promise<void> {
  await eventually(
    async () => (await kube.get(kind, key, { cached: true })) === undefined,
    2000,
    `the watch cache to forget ${key.namespace}/${key.name}`,
  );
}
