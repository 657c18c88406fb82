// The functions' own identities on the cluster the local plane uses: every local mode runs each
// function process (and, on the plane's own control plane, each ApiServerSource) as the
// ServiceAccount `opfn manifests` generates for it, with exactly the generated roles, so a rule
// missing from a declaration fails locally as it would on a cluster. A kubeconfig for an
// identity is minted from the plane's own client with the TokenRequest API, as kubelet mounts a
// projected token into a pod.
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type FunctionDeclaration, type KubeObject, KubeClient } from '../functions/runtime/index.ts';
import { applyObjects } from './knative/index.ts';
import { BROAD, DEFAULT_OPTIONS, generateManifests, serviceAccountName } from './manifests/index.ts';

const IDENTITY_KINDS = new Set(['Namespace', 'ServiceAccount', 'Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding']);

/**
 * How long a minted token is asked to last. The API server may shorten it (its
 * --service-account-max-token-expiration); a plane running longer needs a restart.
 */
const TOKEN_SECONDS = 7 * 24 * 3600;

/**
 * The identity objects `opfn manifests` generates for `functions` (their namespace,
 * ServiceAccounts, Roles, ClusterRoles and bindings), with the composite function's broad rights
 * as the local plane gives it.
 */
export function identityObjects(functions: FunctionDeclaration[], replace: Record<string, string> = {}): KubeObject[] {
  return generateManifests(functions, { ...DEFAULT_OPTIONS, replace }, BROAD)
    .flatMap((file) => file.objects)
    .filter((object) => IDENTITY_KINDS.has(object.kind ?? ''));
}

/** Creates or replaces the functions' identity objects on the cluster of `kube` (which must be allowed to grant their rules). */
export async function applyIdentities(kube: KubeClient, functions: FunctionDeclaration[], replace?: Record<string, string>): Promise<void> {
  try {
    await applyObjects(kube, identityObjects(functions, replace));
  } catch (error) {
    throw new Error(
      `cannot install the functions' ServiceAccounts and roles (every local mode runs each function as its own identity): ${(error as Error).message}`,
    );
  }
}

/**
 * A kubeconfig file (0600, in `dir`) authenticating as ServiceAccount `namespace/name` on the
 * cluster of `kube`, with a token from the TokenRequest API; the ServiceAccount must exist.
 */
export async function serviceAccountKubeconfig(kube: KubeClient, dir: string, namespace: string, name: string): Promise<string> {
  const issued = await kube.request<{ status: { token: string } }>(
    'POST',
    `/api/v1/namespaces/${encodeURIComponent(namespace)}/serviceaccounts/${encodeURIComponent(name)}/token`,
    { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: TOKEN_SECONDS } } },
  );
  const cluster = kube.config.getCurrentCluster();
  if (!cluster) throw new Error('the plane has no current cluster to mint identities for');
  const user = `system:serviceaccount:${namespace}:${name}`;
  const kubeconfig = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'cluster',
        cluster: {
          server: cluster.server,
          ...(cluster.caData ? { 'certificate-authority-data': cluster.caData } : {}),
          ...(cluster.caFile ? { 'certificate-authority': cluster.caFile } : {}),
          ...(cluster.skipTLSVerify ? { 'insecure-skip-tls-verify': true } : {}),
        },
      },
    ],
    users: [{ name: user, user: { token: issued.status.token } }],
    contexts: [{ name: user, context: { cluster: 'cluster', user, namespace } }],
    'current-context': user,
  };
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = join(dir, `sa-${namespace}-${name}.kubeconfig`);
  // JSON is YAML; the file holds a bearer token.
  writeFileSync(path, JSON.stringify(kubeconfig, null, 2), { mode: 0o600 });
  chmodSync(path, 0o600);
  return path;
}

/** Per function, a kubeconfig of its generated ServiceAccount (which must exist: applyIdentities, or the generated objects). */
export async function functionKubeconfigs(
  kube: KubeClient,
  functions: FunctionDeclaration[],
  dir: string,
): Promise<Record<string, string>> {
  return Object.fromEntries(
    await Promise.all(
      functions.map(
        async (fn) => [fn.name, await serviceAccountKubeconfig(kube, dir, DEFAULT_OPTIONS.namespace, serviceAccountName(fn))] as const,
      ),
    ),
  );
}

/** A client per ServiceAccount (each ApiServerSource authenticated as its own), minted from `kube`. */
export const serviceAccountClientsOf =
  (kube: KubeClient, dir: string) =>
  async (namespace: string, account: string): Promise<KubeClient> =>
    KubeClient.fromFile(await serviceAccountKubeconfig(kube, dir, namespace, account));
