// `opfn conformance <url> --function <name>`: the function contract (docs/function-contract.md)
// run against any HTTP endpoint, with a real API server behind it: the configured cluster, or a
// new local control plane whose KUBECONFIG line is printed for the endpoint to use. Prints the
// table of checks; exits 1 when any check failed.
import { setTimeout as sleep } from 'node:timers/promises';
import { formatTable, runConformance } from '../conformance/index.ts';
import { applyCrds, readManifestFile } from '../eventing/crds.ts';
import { commandFunctions } from './function-set.ts';
import { KubeClient } from '../functions/runtime/index.ts';
import { startControlPlane, type ControlPlane } from '../cluster/index.ts';
import { configuredCluster, reachableCluster } from './dev.ts';
import { say } from './terminal.ts';

export interface ConformanceCommandOptions {
  function: string;
  /** A folder or module of functions from outside this package, the function among them. */
  functions?: string;
  local?: boolean;
  /** Seconds one answer may take. */
  timeout: number;
  /** Seconds an object may take to converge. */
  convergeTimeout: number;
  /** Seconds to wait for the endpoint's readiness before the checks start. */
  wait: number;
}

export async function conformanceCommand(url: string, options: ConformanceCommandOptions): Promise<void> {
  let controlPlane: ControlPlane | undefined;
  try {
    if (!URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol))
      throw new Error(`"${url}" is not an http(s) URL of the endpoint, e.g. http://127.0.0.1:8080/`);
    const endpoint = new URL(url);
    // Before any cluster is touched: a mistyped function costs nothing.
    const set = await commandFunctions({ functions: options.functions, only: [options.function] });
    const declaration = set.declarations[0]!;
    // An outside function's example object is among the YAML files beside it.
    const examples = set.from === undefined ? undefined : set.manifestFiles.flatMap(readManifestFile);
    let kube: KubeClient;
    const configured = options.local ? undefined : configuredCluster();
    if (configured) {
      const cluster = await reachableCluster();
      if ('problem' in cluster)
        throw new Error(`the configured cluster (${configured}) ${cluster.problem}. ${cluster.fix}, or run with --local.`);
      kube = cluster.kube;
      say(`Using the cluster at ${kube.server} (${configured}); the endpoint must use the same one.`);
    } else {
      say('Starting a local control plane: etcd + kube-apiserver + kube-controller-manager.');
      controlPlane = await startControlPlane({ progress: say });
      kube = KubeClient.fromFile(controlPlane.kubeconfigPath);
      say(
        `Local control plane at ${controlPlane.server}. Start the endpoint with:\n\n  export KUBECONFIG=${controlPlane.kubeconfigPath}\n`,
      );
    }
    await applyCrds(kube, set.crds);
    await untilReady(endpoint, options.wait);
    say(`Checking ${endpoint.href} against the contract of ${declaration.name}...`);
    const rows = await runConformance({
      url: endpoint.href,
      declaration,
      examples,
      kube,
      answerTimeoutMs: options.timeout * 1000,
      convergeTimeoutMs: options.convergeTimeout * 1000,
    });
    process.stdout.write(`${formatTable(rows)}\n`);
    process.exitCode = rows.some((row) => row.result === 'fail') ? 1 : 0;
  } catch (error) {
    say(`opfn conformance: ${(error as Error).message}`);
    process.exitCode = 2;
  } finally {
    await controlPlane?.stop();
  }
}

/** Waits until the endpoint answers its readiness probe 200, so a slow start is not a row of failures. */
async function untilReady(url: URL, seconds: number): Promise<void> {
  const readiness = new URL('health/readiness', url);
  const deadline = Date.now() + seconds * 1000;
  let last = '';
  for (let announced = false; ; announced = true) {
    try {
      const response = await fetch(readiness, { signal: AbortSignal.timeout(2000) });
      if (response.ok) return;
      last = `answered ${response.status}`;
    } catch (error) {
      last = (error as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`${readiness.href} is not ready after ${seconds} s (${last})`);
    if (!announced) say(`Waiting up to ${seconds} s for ${readiness.href} (${last})...`);
    await sleep(500);
  }
}
