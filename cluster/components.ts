// The three components of the control plane and the flags each runs with.
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Certificates } from './certificates.ts';
import { waitFor, type StartComponent } from './component-process.ts';

/** Admin REST call: `status` of the answer. */
type Probe = (path: string) => Promise<number>;

/** etcd on loopback, plain HTTP: its process and client URL. */
export function startEtcd(
  start: StartComponent,
  binDir: string,
  dir: string,
  ports: { client: number; peer: number },
): { etcd: ChildProcess; etcdUrl: string } {
  const etcdUrl = `http://127.0.0.1:${ports.client}`;
  const peerUrl = `http://127.0.0.1:${ports.peer}`;
  const etcd = start('etcd', join(binDir, 'etcd'), [
    '--name',
    'default',
    '--data-dir',
    join(dir, 'etcd'),
    '--listen-client-urls',
    etcdUrl,
    '--advertise-client-urls',
    etcdUrl,
    '--listen-peer-urls',
    peerUrl,
    '--initial-advertise-peer-urls',
    peerUrl,
    '--initial-cluster',
    `default=${peerUrl}`,
    '--log-level',
    'warn',
  ]);
  return { etcd, etcdUrl };
}

/** kube-apiserver's flags: etcd at `etcdUrl`, TLS on 127.0.0.1:`port`, token authentication, RBAC. */
export function apiServerArgs(options: {
  etcdUrl: string;
  port: number;
  certificates: Certificates;
  tokenFile: string;
  extraFlags?: string[];
}): string[] {
  const { certificates } = options;
  return [
    '--etcd-servers',
    options.etcdUrl,
    '--bind-address',
    '127.0.0.1',
    '--advertise-address',
    '127.0.0.1',
    '--secure-port',
    String(options.port),
    '--tls-cert-file',
    certificates.servingCertificate,
    '--tls-private-key-file',
    certificates.servingKey,
    '--client-ca-file',
    certificates.caPath,
    '--token-auth-file',
    options.tokenFile,
    '--authorization-mode',
    'RBAC',
    '--service-account-key-file',
    certificates.serviceAccountPublicKey,
    '--service-account-signing-key-file',
    certificates.serviceAccountPrivateKey,
    '--service-account-issuer',
    'https://kubernetes.default.svc',
    '--service-cluster-ip-range',
    '10.0.0.0/24',
    // The reconciler publishes the advertise address as the `kubernetes` Service's endpoint, and
    // 1.37 refuses a loopback one; nothing here reaches the API server through that Service.
    '--endpoint-reconciler-type',
    'none',
    // Without a kubelet nothing mounts tokens; the ServiceAccount admission plugin would only make
    // pod creation in a brand-new namespace fail until its default ServiceAccount exists.
    '--disable-admission-plugins',
    'ServiceAccount',
    // As OpenShift and many hardened clusters run: setting blockOwnerDeletion on a child needs
    // `update` on the owner's finalizers subresource, so tests catch a role that lacks it.
    '--enable-admission-plugins',
    'OwnerReferencesPermissionEnforcement',
    '--profiling=false',
    '--v',
    '0',
    ...(options.extraFlags ?? []),
  ];
}

export const startApiServer = (start: StartComponent, binDir: string, args: string[]): ChildProcess =>
  start('kube-apiserver', join(binDir, 'kube-apiserver'), args);

/** Resolves once kube-apiserver answers /readyz. */
export const apiServerReady = (apiServer: ChildProcess, dir: string, probe: Probe): Promise<void> =>
  waitFor('kube-apiserver', apiServer, join(dir, 'kube-apiserver.log'), 60_000, async () => (await probe('/readyz')) === 200);

/**
 * kube-controller-manager with the controllers the tests rely on (ServiceAccounts and their
 * tokens, garbage collection, namespace deletion); undefined where `binDir` has none (a
 * setup-envtest folder, KUBEBUILDER_ASSETS, has etcd and kube-apiserver only, as envtest runs).
 */
export function startControllerManager(
  start: StartComponent,
  options: { binDir: string; kubeconfigPath: string; certificates: Certificates; progress: (line: string) => void },
): ChildProcess | undefined {
  const binary = join(options.binDir, 'kube-controller-manager');
  if (!existsSync(binary)) {
    options.progress(
      `${options.binDir} has no kube-controller-manager: running without it (no garbage collection, namespace deletion or ServiceAccount tokens)`,
    );
    return undefined;
  }
  return start('kube-controller-manager', binary, [
    '--kubeconfig',
    options.kubeconfigPath,
    '--controllers',
    'serviceaccount-token,serviceaccount,garbagecollector,namespace',
    '--service-account-private-key-file',
    options.certificates.serviceAccountPrivateKey,
    '--root-ca-file',
    options.certificates.caPath,
    '--leader-elect=false',
    '--secure-port',
    '0',
    '--v',
    '0',
  ]);
}

/** Resolves once the controller manager is up: it has created the default namespace's ServiceAccount. */
export const controllerManagerReady = (controllerManager: ChildProcess, dir: string, probe: Probe): Promise<void> =>
  waitFor(
    'kube-controller-manager',
    controllerManager,
    join(dir, 'kube-controller-manager.log'),
    60_000,
    async () => (await probe('/api/v1/namespaces/default/serviceaccounts/default')) === 200,
  );
