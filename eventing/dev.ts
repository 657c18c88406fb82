// `opfn dev` / `npm start`: install the CRDs and run every function on the local event plane
// against the current KUBECONFIG cluster, or against a local control plane when there is none.
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Logger } from 'pino';
import { loadAllFunctions, loadFunction } from '../functions/index.ts';
import { KubeClient } from '../functions/runtime/kube.ts';
import { startControlPlane, type ControlPlane } from '../cluster/control-plane.ts';
import { applyCrds, readManifestFile } from './crds.ts';
import { bundledFunctions, EventPlane, triggersFromManifests } from './plane.ts';

export interface DevOptions {
  functions?: string[];
  /** YAML files of Knative Triggers to add to the broker (e.g. routing a kind to another implementation). */
  triggerFiles?: string[];
  /** Run the functions from their bundles, as the image does (default), or from TypeScript sources. */
  bundle: boolean;
  idleSeconds: number;
  resyncSeconds: number;
  stateDir: string;
  log: Logger;
  /** Where human-facing lines go (the KUBECONFIG line, what happens). */
  say: (line: string) => void;
}

/** The cluster of KUBECONFIG (or ~/.kube/config) if it answers, else undefined with the reason. */
export async function reachableCluster(): Promise<{ kube: KubeClient; kubeconfigPath: string } | { reason: string }> {
  let kube: KubeClient;
  try {
    kube = KubeClient.fromEnvironment();
  } catch (error) {
    return { reason: (error as Error).message };
  }
  try {
    await Promise.race([
      kube.request('GET', '/version'),
      new Promise((_, reject) => setTimeout(() => reject(new Error('no answer within 3s')), 3000).unref()),
    ]);
  } catch (error) {
    return { reason: `${kube.server}: ${(error as Error).message}` };
  }
  const kubeconfigPath = process.env.KUBECONFIG?.split(':')[0] ?? resolve(process.env.HOME ?? '.', '.kube/config');
  return { kube, kubeconfigPath };
}

export async function runDev(options: DevOptions): Promise<{ stop(): Promise<void> }> {
  const { say } = options;
  mkdirSync(options.stateDir, { recursive: true });
  let controlPlane: ControlPlane | undefined;
  let cluster = await reachableCluster();
  if ('reason' in cluster) {
    say(`No reachable cluster (${cluster.reason}); starting a local control plane (etcd + kube-apiserver + kube-controller-manager).`);
    controlPlane = await startControlPlane({ progress: say });
    cluster = { kube: KubeClient.fromFile(controlPlane.kubeconfigPath), kubeconfigPath: controlPlane.kubeconfigPath };
    say(`Local control plane at ${controlPlane.server}. In another terminal:\n\n  export KUBECONFIG=${controlPlane.kubeconfigPath}\n`);
  } else {
    say(`Using the cluster at ${cluster.kube.server} (KUBECONFIG ${cluster.kubeconfigPath}).`);
  }

  try {
    const plane = await startPlane(cluster, options);
    if (controlPlane) say(`Try: kubectl apply -f crds/examples/immortalcontainer.yaml && kubectl get immortalcontainers,pods`);
    return {
      stop: async () => {
        await plane.stop();
        await controlPlane?.stop();
      },
    };
  } catch (error) {
    // A control plane we started must not outlive a failed start (its folder would stay behind).
    await controlPlane?.stop();
    throw error;
  }
}

async function startPlane(cluster: { kube: KubeClient; kubeconfigPath: string }, options: DevOptions): Promise<EventPlane> {
  const { log, say } = options;
  await applyCrds(cluster.kube);
  say('CRDs installed and established.');
  const functions = options.functions?.length ? await Promise.all(options.functions.map(loadFunction)) : await loadAllFunctions();
  const triggers = triggersFromManifests((options.triggerFiles ?? []).flatMap(readManifestFile));
  const bundleDir = join(options.stateDir, 'dist');
  const launch = options.bundle ? await bundledFunctions(bundleDir) : undefined;
  say(options.bundle ? `Functions bundled (esbuild); they run from ${bundleDir}, as in the image.` : 'Functions run from their TypeScript sources; edits apply at the next cold start.');
  const plane = new EventPlane({
    functions,
    kube: cluster.kube,
    kubeconfigPath: cluster.kubeconfigPath,
    log,
    stateDir: options.stateDir,
    idleTimeoutMs: options.idleSeconds * 1000,
    resyncIntervalMs: options.resyncSeconds * 1000,
    triggers,
    ...launch,
  });
  const { brokerUrl } = await plane.start();
  for (const trigger of triggers) say(`Trigger ${trigger.name} → ${trigger.subscriber}`);
  say(`Running ${functions.map((f) => f.name).join(', ')} (each at zero until its first event). Broker ingress: ${brokerUrl}. Dead letters: ${resolve(options.stateDir, 'dead-letters.jsonl')}. Ctrl-C stops everything.`);
  return plane;
}
