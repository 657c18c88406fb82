// A real Kubernetes control plane on loopback: etcd + kube-apiserver + kube-controller-manager,
// for tests, benchmarks and `opfn cluster up`. Each start gets its own folder, certificates and
// free ports, so concurrent test files never collide. There is no kubelet: pods never run, and a
// test that needs a phase writes pods/status itself, as a kubelet would.
//
// The steps, each in a file of its own: the folder and its owner record (folders.ts), the
// certificates (certificates.ts), the admin's token and kubeconfig (kubeconfig.ts), then etcd,
// kube-apiserver and kube-controller-manager (components.ts).
import type { ChildProcess } from 'node:child_process';
import { freePorts, stopProcess } from '../processes/index.ts';
import { writeCertificates } from './certificates.ts';
import { startComponentProcess, type StartComponent } from './component-process.ts';
import { apiServerArgs, apiServerReady, controllerManagerReady, startApiServer, startControllerManager, startEtcd } from './components.ts';
import { createControlPlaneFolder, reclaimAbandonedControlPlanes } from './folders.ts';
import { adminAccess, serviceAccountKubeconfig } from './kubeconfig.ts';
import { provisionScript, runProvisionScript } from './provision-script.ts';

const PROVISION_SCRIPT = provisionScript('provision.sh');

export interface ControlPlane {
  /** https://127.0.0.1:<port> */
  server: string;
  /** Admin (system:masters) kubeconfig file. */
  kubeconfigPath: string;
  /** Folder holding certificates, kubeconfigs, etcd data and component logs. */
  dir: string;
  /** Folder of the binaries it runs, kubectl of the same release among them (unless KUBEBUILDER_ASSETS has none). */
  binDir: string;
  /** http://127.0.0.1:<port>, etcd's client URL (plain HTTP): for tests that act on etcd itself, such as compacting it. */
  etcdUrl: string;
  /** Kubeconfig file authenticating as a ServiceAccount (created if missing), for RBAC tests. */
  serviceAccountKubeconfig(namespace: string, name: string): Promise<string>;
  /** Admin REST call, for harness-level set-up that should not depend on the code under test. */
  request(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  /** Stops kube-controller-manager / kube-apiserver / etcd; with `keep`, the folder stays. */
  stop(options?: { keep?: boolean }): Promise<void>;
  /** Stops only kube-apiserver and starts it again on the same port (for failure tests). */
  restartApiServer(): Promise<void>;
  /** Freezes etcd (SIGSTOP) until resumeEtcd (SIGCONT): a stalled disk or a long GC pause, for failure tests. */
  pauseEtcd(): void;
  resumeEtcd(): void;
}

export interface ControlPlaneOptions {
  /** Folder with kube-apiserver, kube-controller-manager and etcd; provisioned when omitted. */
  binDir?: string;
  /** Start kube-controller-manager (garbage collection, namespaces, SA tokens). Default true. */
  controllerManager?: boolean;
  /** Where progress lines go (binary build, start). Default: stderr. */
  progress?: (line: string) => void;
  /**
   * Run etcd, kube-apiserver and kube-controller-manager in a process group of their own. A
   * terminal's Ctrl-C sends SIGINT to every process of the foreground group: in the caller's
   * group they would die at once, under the deliveries `opfn dev` is still draining. For callers
   * that stop the control plane themselves on SIGINT; either way they are killed when this
   * process ends (killOnExit). Default false.
   */
  ownProcessGroup?: boolean;
  /** More kube-apiserver flags (a test that needs a feature gate off). */
  apiServerFlags?: string[];
  /**
   * Runs once kube-apiserver answers, before kube-controller-manager starts (with the admin
   * kubeconfig): CRDs installed here are in the garbage collector's first discovery, where
   * later ones wait for its next (every 30 s) before their objects' dependents are collected.
   */
  beforeControllerManager?: (kubeconfigPath: string) => Promise<void>;
}

/** Where the binaries are: KUBEBUILDER_ASSETS, the cache, or a build from Kubernetes' Go modules (cluster/provision.sh). */
export function provisionBinaries(progress: (line: string) => void = (l) => process.stderr.write(l + '\n')): Promise<string> {
  return runProvisionScript(PROVISION_SCRIPT, [], 'provisioning the control plane binaries', progress);
}

export async function startControlPlane(options: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const progress = options.progress ?? ((line: string) => process.stderr.write(line + '\n'));
  for (const line of reclaimAbandonedControlPlanes()) progress(line);
  const binDir = options.binDir ?? (await provisionBinaries(progress));
  const folder = createControlPlaneFolder();
  const { dir } = folder;
  const certificates = await writeCertificates(dir);
  const [etcdPort, peerPort, apiPort] = await freePorts(3);
  const server = `https://127.0.0.1:${apiPort}`;
  const admin = adminAccess(dir, server, certificates.caPath);
  const probe = async (path: string) => (await admin.request('GET', path)).status;

  const start: StartComponent = (name, binary, args) => {
    const child = startComponentProcess(dir, name, binary, args, options.ownProcessGroup ?? false);
    folder.addChild(child.pid);
    return child;
  };
  const { etcd, etcdUrl } = startEtcd(start, binDir, dir, { client: etcdPort, peer: peerPort });
  const apiServerFlags = apiServerArgs({
    etcdUrl,
    port: apiPort,
    certificates,
    tokenFile: admin.tokenFile,
    extraFlags: options.apiServerFlags,
  });
  let apiServer = startApiServer(start, binDir, apiServerFlags);
  let controllerManager: ChildProcess | undefined;

  const stop = async (stopOptions: { keep?: boolean } = {}) => {
    etcd.kill('SIGCONT'); // a frozen etcd would only die at SIGKILL, after the grace period
    await stopProcess(controllerManager);
    await stopProcess(apiServer);
    await stopProcess(etcd);
    await admin.close();
    // Stopped: from now on the folder is stop()'s to keep (a failed start keeps it for the logs
    // its error names) or remove.
    folder.release(stopOptions);
  };

  try {
    await apiServerReady(apiServer, dir, probe);
    await options.beforeControllerManager?.(admin.kubeconfigPath);
    if (options.controllerManager ?? true) {
      controllerManager = startControllerManager(start, { binDir, kubeconfigPath: admin.kubeconfigPath, certificates, progress });
      if (controllerManager) await controllerManagerReady(controllerManager, dir, probe);
    }
  } catch (error) {
    await stop({ keep: true });
    throw error;
  }

  return {
    server,
    kubeconfigPath: admin.kubeconfigPath,
    dir,
    binDir,
    etcdUrl,
    serviceAccountKubeconfig: (namespace, name) =>
      serviceAccountKubeconfig(admin, { dir, server, caPath: certificates.caPath, namespace, name }),
    request: admin.request,
    stop,
    restartApiServer: async () => {
      await stopProcess(apiServer);
      apiServer = startApiServer(start, binDir, apiServerFlags);
      await apiServerReady(apiServer, dir, probe);
    },
    pauseEtcd: () => void etcd.kill('SIGSTOP'),
    resumeEtcd: () => void etcd.kill('SIGCONT'),
  };
}
