// Kubeconfig files for the control plane: the admin's, and one per ServiceAccount a test asks for.
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Agent, fetch } from 'undici';
import { CERTIFICATE_DAYS } from './certificates.ts';

/** A kubeconfig that reaches `server` (trusting the CA at `caPath`) as `user` with a bearer token. */
export function kubeconfigYaml(server: string, caPath: string, user: string, token: string): string {
  return `apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: ${server}
    certificate-authority: ${caPath}
users:
- name: ${user}
  user:
    token: ${token}
contexts:
- name: ${user}@local
  context: {cluster: local, user: ${user}}
current-context: ${user}@local
`;
}

/** The shell line that puts `binDir`'s kubectl first on PATH, for the walkthroughs. */
export const kubectlPathLine = (binDir: string): string => `export PATH=${binDir}:$PATH`;

/** The admin's access: a token (tokens.csv, for kube-apiserver's --token-auth-file), its kubeconfig, and REST calls as it. */
export interface AdminAccess {
  tokenFile: string;
  kubeconfigPath: string;
  request(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  close(): Promise<void>;
}

/** A system:masters token for `server`, whose serving certificate the CA at `caPath` signed. */
export function adminAccess(dir: string, server: string, caPath: string): AdminAccess {
  const token = randomBytes(24).toString('hex');
  const tokenFile = join(dir, 'tokens.csv');
  writeFileSync(tokenFile, `${token},admin,admin-uid,"system:masters"\n`);
  const kubeconfigPath = join(dir, 'admin.kubeconfig');
  writeFileSync(kubeconfigPath, kubeconfigYaml(server, caPath, 'admin', token));
  const tls = new Agent({ connect: { ca: readFileSync(caPath) } });
  const request = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(server + path, {
      method,
      dispatcher: tls,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* plain text, e.g. /readyz */
    }
    return { status: response.status, body: parsed as any };
  };
  return { tokenFile, kubeconfigPath, request, close: () => tls.close() };
}

/**
 * A kubeconfig file authenticating as ServiceAccount `namespace/name` (created if missing), with a
 * token from the TokenRequest API (ServiceAccounts no longer get token Secrets) valid as long as
 * the control plane's certificates.
 */
export async function serviceAccountKubeconfig(
  admin: AdminAccess,
  options: { dir: string; server: string; caPath: string; namespace: string; name: string },
): Promise<string> {
  const { namespace, name } = options;
  const created = await admin.request('POST', `/api/v1/namespaces/${namespace}/serviceaccounts`, { metadata: { name } });
  if (created.status !== 201 && created.status !== 409)
    throw new Error(`creating ServiceAccount ${namespace}/${name}: ${created.status} ${JSON.stringify(created.body)}`);
  const issued = await admin.request('POST', `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`, {
    apiVersion: 'authentication.k8s.io/v1',
    kind: 'TokenRequest',
    spec: { expirationSeconds: CERTIFICATE_DAYS * 24 * 3600 },
  });
  if (issued.status !== 201)
    throw new Error(`requesting a token for ServiceAccount ${namespace}/${name}: ${issued.status} ${JSON.stringify(issued.body)}`);
  const path = join(options.dir, `sa-${namespace}-${name}.kubeconfig`);
  writeFileSync(
    path,
    kubeconfigYaml(options.server, options.caPath, `system:serviceaccount:${namespace}:${name}`, issued.body.status.token),
  );
  return path;
}
