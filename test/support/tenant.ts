// Hostile tenants for security tests (issue 35): a ServiceAccount holding exactly the Roles a user
// of an operator would hold, a kubeconfig that authenticates as it (a TokenRequest token, as
// `kubectl create token` gives), and the evidence a test compares before and after an attack:
// what the tenant may do (SelfSubjectRulesReview per namespace and SelfSubjectAccessReview
// questions, what `kubectl auth can-i --list` and `kubectl auth can-i` ask), which bindings name
// it, which objects exist outside its reach, and everything it can read.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type PolicyRule, type KubeObject, type ResourceKind, ApiError, KubeClient } from '../../functions/runtime/index.ts';
import { parseRequestTotals } from '../../bench/apiserver-metrics.ts';
import { canI, type AccessQuestion } from './rbac.ts';

const rbacKind = (kind: string, plural: string, namespaced: boolean): ResourceKind => ({
  group: 'rbac.authorization.k8s.io',
  version: 'v1',
  kind,
  plural,
  namespaced,
});
export const ServiceAccount: ResourceKind = {
  group: '',
  version: 'v1',
  kind: 'ServiceAccount',
  plural: 'serviceaccounts',
  namespaced: true,
};
export const Role = rbacKind('Role', 'roles', true);
export const RoleBinding = rbacKind('RoleBinding', 'rolebindings', true);
export const ClusterRole = rbacKind('ClusterRole', 'clusterroles', false);
export const ClusterRoleBinding = rbacKind('ClusterRoleBinding', 'clusterrolebindings', false);

export interface Tenant {
  /** The ServiceAccount's name, e.g. `eve`. */
  name: string;
  namespace: string;
  /** As RBAC and audit name it: system:serviceaccount:<ns>:<name>. */
  user: string;
  kubeconfig: string;
  kube: KubeClient;
}

export interface TenantSpec {
  namespace: string;
  name: string;
  /** Rules granted by a Role (and RoleBinding) `<name>-grant` in each namespace listed. */
  grants: { namespace: string; rules: PolicyRule[] }[];
}

/** Server and CA of an admin kubeconfig written by cluster/control-plane.ts (certificate-authority is a file path). */
function clusterOf(adminKubeconfig: string): { server: string; ca: string } {
  const text = readFileSync(adminKubeconfig, 'utf8');
  const server = text.match(/^\s*server:\s*(\S+)\s*$/m)?.[1];
  const ca = text.match(/^\s*certificate-authority:\s*(\S+)\s*$/m)?.[1];
  if (!server || !ca) throw new Error(`${adminKubeconfig} names no server or certificate-authority file`);
  return { server, ca };
}

/** Creates the ServiceAccount, its Roles and RoleBindings as the admin, and a kubeconfig that is the ServiceAccount. */
export async function createTenant(admin: KubeClient, adminKubeconfig: string, dir: string, spec: TenantSpec): Promise<Tenant> {
  const { namespace, name } = spec;
  const user = `system:serviceaccount:${namespace}:${name}`;
  await createOrKeep(admin, ServiceAccount, { metadata: { name, namespace } });
  for (const grant of spec.grants) {
    const role = `${name}-grant`;
    await createOrKeep(admin, Role, { metadata: { name: role, namespace: grant.namespace }, rules: grant.rules } as KubeObject);
    await createOrKeep(admin, RoleBinding, {
      metadata: { name: role, namespace: grant.namespace },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: role },
      subjects: [{ kind: 'ServiceAccount', name, namespace }],
    } as KubeObject);
  }
  const issued = await admin.request<{ status: { token: string } }>(
    'POST',
    `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`,
    {
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 24 * 3600 } },
    },
  );
  const { server, ca } = clusterOf(adminKubeconfig);
  const kubeconfig = join(dir, `tenant-${namespace}-${name}.kubeconfig`);
  // JSON is YAML: kubectl and the runtime's client read it alike.
  writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'local', cluster: { server, 'certificate-authority': ca } }],
      users: [{ name: user, user: { token: issued.status.token } }],
      contexts: [{ name: 'tenant', context: { cluster: 'local', user, namespace } }],
      'current-context': 'tenant',
    }),
    { mode: 0o600 },
  );
  return { name, namespace, user, kubeconfig, kube: KubeClient.fromFile(kubeconfig) };
}

async function createOrKeep(kube: KubeClient, kind: ResourceKind, object: KubeObject): Promise<void> {
  try {
    await kube.create(kind, object);
  } catch (error) {
    if ((error as ApiError).code !== 409) throw error;
  }
}

/**
 * What a request the tenant makes comes to: `ok` or the API server's refusal (code, reason,
 * message). Anything that is not an API answer is thrown.
 */
export async function attempt(
  action: () => Promise<unknown>,
): Promise<{ ok: true } | { ok: false; code: number; reason: string; message: string }> {
  try {
    await action();
    return { ok: true };
  } catch (error) {
    if (!(error instanceof ApiError) || error.code === 0) throw error;
    return { ok: false, code: error.code, reason: error.reason, message: error.message };
  }
}

/** The questions `kubectl auth can-i` would be asked about what a hostile tenant must never gain. */
export function sensitiveQuestions(namespaces: string[]): AccessQuestion[] {
  const cluster: AccessQuestion[] = [
    { verb: 'create', group: 'rbac.authorization.k8s.io', resource: 'clusterrolebindings', namespace: '' },
    { verb: 'create', group: 'rbac.authorization.k8s.io', resource: 'clusterroles', namespace: '' },
    { verb: 'escalate', group: 'rbac.authorization.k8s.io', resource: 'clusterroles', namespace: '' },
    { verb: 'bind', group: 'rbac.authorization.k8s.io', resource: 'clusterroles', namespace: '' },
    { verb: 'impersonate', group: '', resource: 'serviceaccounts', namespace: '' },
    { verb: 'create', group: '', resource: 'namespaces', namespace: '' },
    { verb: 'list', group: '', resource: 'secrets', namespace: '' },
    { verb: '*', group: '*', resource: '*', namespace: '' },
    { verb: 'create', group: 'metacontroller.k8s.io', resource: 'compositecontrollers', namespace: '' },
    { verb: 'create', group: 'admissionregistration.k8s.io', resource: 'validatingadmissionpolicybindings', namespace: '' },
    { verb: 'delete', group: 'admissionregistration.k8s.io', resource: 'validatingadmissionpolicies', namespace: '' },
  ];
  const perNamespace = namespaces.flatMap((namespace): AccessQuestion[] => [
    { verb: 'get', group: '', resource: 'secrets', namespace },
    { verb: 'list', group: '', resource: 'secrets', namespace },
    { verb: 'create', group: '', resource: 'secrets', namespace },
    { verb: 'get', group: '', resource: 'configmaps', namespace },
    { verb: 'create', group: '', resource: 'configmaps', namespace },
    { verb: 'update', group: '', resource: 'configmaps', namespace },
    { verb: 'delete', group: '', resource: 'configmaps', namespace },
    { verb: 'create', group: '', resource: 'pods', namespace },
    { verb: 'delete', group: '', resource: 'pods', namespace },
    { verb: 'create', group: '', resource: 'pods', subresource: 'exec', namespace },
    { verb: 'create', group: '', resource: 'serviceaccounts', subresource: 'token', namespace },
    { verb: 'create', group: 'rbac.authorization.k8s.io', resource: 'rolebindings', namespace },
    { verb: 'create', group: 'rbac.authorization.k8s.io', resource: 'roles', namespace },
    { verb: 'create', group: 'flant.com', resource: 'copyrators', namespace },
    { verb: 'create', group: 'immortalcontainer.flugel.it', resource: 'immortalcontainers', namespace },
    { verb: 'create', group: 'operators.brennerm.github.io', resource: 'exchangerates', namespace },
  ]);
  return [...cluster, ...perNamespace];
}

export interface AccessSnapshot {
  /** Per namespace, the rules SelfSubjectRulesReview lists (what `kubectl auth can-i --list -n <ns>` prints), sorted. */
  rules: Record<string, string[]>;
  /** `kubectl auth can-i` answers: "verb group/resource[/sub] ns" → allowed. */
  answers: Record<string, boolean>;
}

const questionText = (q: AccessQuestion) =>
  `${q.verb} ${q.group || 'core'}/${q.resource}${q.subresource ? `/${q.subresource}` : ''} ${q.namespace || '(cluster)'}`;

/** What the tenant may do, asked as the tenant (SelfSubjectRulesReview and SelfSubjectAccessReview). */
export async function accessSnapshot(tenant: Tenant, namespaces: string[], questions: AccessQuestion[]): Promise<AccessSnapshot> {
  const rules: Record<string, string[]> = {};
  for (const namespace of namespaces) {
    const review = await tenant.kube.request<{
      status: { resourceRules?: Record<string, string[] | undefined>[]; nonResourceRules?: Record<string, string[] | undefined>[] };
    }>('POST', '/apis/authorization.k8s.io/v1/selfsubjectrulesreviews', {
      body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectRulesReview', spec: { namespace } },
    });
    const text = (rule: Record<string, string[] | undefined>) =>
      Object.keys(rule)
        .sort()
        .map((key) => `${key}=${[...(rule[key] ?? [])].sort().join(',')}`)
        .join(' ');
    rules[namespace] = [...(review.status.resourceRules ?? []), ...(review.status.nonResourceRules ?? [])].map(text).sort();
  }
  const answers: Record<string, boolean> = {};
  for (const question of questions) answers[questionText(question)] = await canI(tenant.kube, question);
  return { rules, answers };
}

/** Where two snapshots differ, in words; empty when they agree. */
export function accessChanges(before: AccessSnapshot, after: AccessSnapshot): string[] {
  const changes: string[] = [];
  for (const namespace of new Set([...Object.keys(before.rules), ...Object.keys(after.rules)])) {
    const was = new Set(before.rules[namespace] ?? []);
    const now = new Set(after.rules[namespace] ?? []);
    for (const rule of now) if (!was.has(rule)) changes.push(`gained in ${namespace}: ${rule}`);
    for (const rule of was) if (!now.has(rule)) changes.push(`lost in ${namespace}: ${rule}`);
  }
  for (const [question, allowed] of Object.entries(after.answers)) {
    if (before.answers[question] !== allowed) changes.push(`can-i ${question}: ${before.answers[question]} → ${allowed}`);
  }
  return changes;
}

/** Every RoleBinding and ClusterRoleBinding that names one of `users` (ServiceAccount subjects), as `Kind ns/name → role`. */
export async function bindingsNaming(admin: KubeClient, users: string[]): Promise<string[]> {
  const found: string[] = [];
  for (const kind of [RoleBinding, ClusterRoleBinding]) {
    for (const binding of (
      await admin.list<
        KubeObject & { subjects?: { kind: string; name: string; namespace?: string }[]; roleRef: { kind: string; name: string } }
      >(kind)
    ).items) {
      const named = (binding.subjects ?? []).some((subject) =>
        users.includes(
          subject.kind === 'ServiceAccount'
            ? `system:serviceaccount:${subject.namespace ?? binding.metadata.namespace}:${subject.name}`
            : subject.name,
        ),
      );
      if (named)
        found.push(
          `${kind.kind} ${binding.metadata.namespace ?? ''}/${binding.metadata.name} → ${binding.roleRef.kind} ${binding.roleRef.name}`,
        );
    }
  }
  return found.sort();
}

/** `Kind ns/name` → `uid@resourceVersion` of every object of `kinds` in `namespaces` (cluster-scoped kinds: all). */
export async function objectsSnapshot(admin: KubeClient, namespaces: string[], kinds: ResourceKind[]): Promise<Map<string, string>> {
  const snapshot = new Map<string, string>();
  for (const kind of kinds) {
    for (const namespace of kind.namespaced ? namespaces : ['']) {
      const { items } = await admin.list(kind, { namespace: namespace || undefined, metadataOnly: true });
      for (const item of items)
        snapshot.set(
          `${kind.kind} ${item.metadata.namespace ?? ''}/${item.metadata.name}`,
          `${item.metadata.uid}@${item.metadata.resourceVersion}`,
        );
    }
  }
  return snapshot;
}

/** Objects added, removed or changed between two snapshots, in words. */
export function objectChanges(before: Map<string, string>, after: Map<string, string>): string[] {
  const changes: string[] = [];
  for (const [key, version] of after) {
    if (!before.has(key)) changes.push(`added ${key}`);
    else if (before.get(key) !== version) changes.push(`changed ${key}`);
  }
  for (const key of before.keys()) if (!after.has(key)) changes.push(`removed ${key}`);
  return changes.sort();
}

/**
 * Everything the tenant can list in `namespace` among `kinds`, as one JSON text: the haystack in
 * which a stolen value would show (list refused: that kind is simply not in reach).
 */
export async function reachOf(tenant: Tenant, namespace: string, kinds: ResourceKind[]): Promise<string> {
  const texts: string[] = [];
  for (const kind of kinds) {
    try {
      texts.push(JSON.stringify((await tenant.kube.list(kind, { namespace })).items));
    } catch (error) {
      if ((error as ApiError).code !== 403) throw error;
    }
  }
  return texts.join('\n');
}

/** The tenant matrix: identity × attempt → outcome, printed as TAP comment lines. */
export class TenantMatrix {
  readonly rows: { identity: string; attempt: string; outcome: string }[] = [];

  record(identity: string, attempt: string, outcome: string): void {
    this.rows.push({ identity, attempt, outcome });
  }

  lines(): string[] {
    const width = (pick: (row: TenantMatrix['rows'][number]) => string) => Math.max(...this.rows.map((row) => pick(row).length), 8);
    const identityWidth = width((row) => row.identity);
    const attemptWidth = Math.min(
      width((row) => row.attempt),
      72,
    );
    return [
      `${'identity'.padEnd(identityWidth)}  ${'attempt'.padEnd(attemptWidth)}  outcome`,
      ...this.rows.map((row) => `${row.identity.padEnd(identityWidth)}  ${row.attempt.padEnd(attemptWidth)}  ${row.outcome}`),
    ];
  }
}

/**
 * kube-apiserver's own count of requests for `resource` (every verb but WATCH, whoever asked),
 * from its /metrics (apiserver_request_total), read as the admin of `adminKubeconfig`.
 */
export async function apiServerRequests(adminKubeconfig: string, resource: string, verb?: string): Promise<number> {
  const text = readFileSync(adminKubeconfig, 'utf8');
  const token = text.match(/^\s*token:\s*(\S+)\s*$/m)?.[1];
  const { server, ca } = clusterOf(adminKubeconfig);
  const { request } = await import('node:https');
  const body = await new Promise<string>((resolve, reject) => {
    const req = request(`${server}/metrics`, { ca: readFileSync(ca), headers: { authorization: `Bearer ${token}` } }, (res) => {
      let data = '';
      res
        .setEncoding('utf8')
        .on('data', (chunk: string) => (data += chunk))
        .on('end', () => (res.statusCode === 200 ? resolve(data) : reject(new Error(`/metrics: ${res.statusCode}`))));
    });
    req.on('error', reject).end();
  });
  let total = 0;
  for (const series of parseRequestTotals(body).values()) {
    // The resource and its subresources (status, finalizers).
    if (series.resource.split('/')[0] !== resource || series.verb === 'WATCH' || (verb && series.verb !== verb)) continue;
    total += series.value;
  }
  return total;
}
