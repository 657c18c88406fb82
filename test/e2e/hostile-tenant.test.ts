// Issue 35: no one gains through a function a right they do not hold. Every function is attacked
// by a hostile tenant on the real control plane of `npm start` (`opfn dev --local`: etcd,
// kube-apiserver, kube-controller-manager, the CRDs, the generated Knative objects and admission
// policies, each function as its generated ServiceAccount). A tenant is a ServiceAccount holding
// what a user of that operator would hold in namespace `attacker`; it tries to make the function
// read, write or delete what it cannot. Afterwards: what `kubectl auth can-i` answers each tenant
// (SelfSubjectRulesReview per namespace, SelfSubjectAccessReview questions) is what it answered
// before, no binding names a tenant but the admin's own, nothing outside `attacker` changed but
// what the admin did, and no value of the victims' is anywhere a tenant can read.
//
// Identities and what they hold (all in namespace `attacker`; events get/list everywhere):
//   eve      CopyratorRule user: copyrators (all verbs), configmaps (read/write), secrets (read)
//   ivan     ImmortalContainer user: immortalcontainers (all verbs), pods (read); also in attacker-restricted
//   rita     ExchangeRate user: exchangerates (all verbs), configmaps (read); also in default
//   mallory  a Metacontroller ImmortalContainer user, and whoever controls an admin's sync hook
//   anyone   whoever reaches the broker ingress (unauthenticated, like Knative's in-cluster ingress)
// The tenant matrix (identity × attempt → outcome) is printed at the end as `# ` lines.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { CopyratorRuleKind, type CopyratorRule } from '../../functions/copyrator/desired.ts';
import { ExchangeRateKind, type ExchangeRate } from '../../functions/exchange-rate/desired.ts';
import { ImmortalContainerKind, type ImmortalContainer, type PodObject } from '../../functions/immortal-container/desired.ts';
import { CompositeControllerKind } from '../../functions/composite/kinds.ts';
import { readDeadLetterFile } from '../../eventing/broker/index.ts';
import { DEAD_LETTER_FILE } from '../../eventing/state-files.ts';
import {
  FUNCTION_EXTENSION,
  apiVersionOf,
  collectionPath,
  ConfigMap,
  CoreEvent,
  Namespace,
  Pod,
  Secret,
  type KubeObject,
  type ResourceKind,
  type KubeClient,
  type PolicyRule,
} from '../../functions/runtime/index.ts';
import { eventually, kubeFor } from '../support/cluster.ts';
import { MetaImmortalContainer } from '../support/examples.ts';
import { startRateProvider, type StandInProvider } from '../support/rate-provider.ts';
import { tempDir } from '../support/temp.ts';
import {
  accessChanges,
  accessSnapshot,
  apiServerRequests,
  attempt,
  bindingsNaming,
  ClusterRoleBinding,
  createTenant,
  objectChanges,
  objectsSnapshot,
  reachOf,
  Role,
  RoleBinding,
  sensitiveQuestions,
  ServiceAccount,
  TenantMatrix,
  type AccessSnapshot,
  type Tenant,
} from '../support/tenant.ts';

const OPFN = join(dirname(fileURLToPath(import.meta.url)), '../../bin/opfn.ts');
const stateDir = tempDir('opfn-hostile-');
const CONVERGE_MS = 30_000;
/**
 * Forged pings sent at once, and how many resyncs' worth of requests they may cost: a function runs
 * one resync and keeps one follow-up for every ping that arrives meanwhile; pings the broker is
 * still delivering when the follow-up starts make the next. A handful of runs, not one per ping.
 */
const PINGS = 40;
const MERGED_RUNS = 8;

const ATTACKER = 'attacker';
const RESTRICTED = 'attacker-restricted';
const VICTIM = 'victim';
const PLATFORM = 'platform';
/** Where `kubectl auth can-i` is asked, before and after. */
const ASKED_NAMESPACES = [ATTACKER, RESTRICTED, VICTIM, PLATFORM, 'kube-system', 'default', 'operator-functions'];
/** Outside every tenant's reach: nothing in them may change but what the admin does. */
const GUARDED_NAMESPACES = [VICTIM, PLATFORM, 'kube-system', 'default'];
const GUARDED_KINDS = [ConfigMap, Secret, Pod, ServiceAccount, Role, RoleBinding];

const VICTIM_SECRET = 'victim-db-p4ssw0rd-Zq8';
const SYSTEM_SECRET = 'kube-system-signing-k3y-Rt2';
const VICTIM_SETTING = 'victim-internal-endpoint-Wm5';
/** Values that must never be readable by a tenant: plain and as a Secret's data holds them. */
const STOLEN = [VICTIM_SECRET, SYSTEM_SECRET, VICTIM_SETTING].flatMap((value) => [value, Buffer.from(value).toString('base64')]);

const all = ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'];
const read = ['get', 'list', 'watch'];
const eventsRead: PolicyRule = { apiGroups: [''], resources: ['events'], verbs: read };

let dev: ChildProcess;
let devOutput = '';
let admin: KubeClient;
let adminKubeconfig: string;
let brokerUrl: string;
let provider: StandInProvider;
let attackerServer: Server;
let attackerUrl: string;
/** Every request the attacker's server got (a URL the attacker hoped a function would fetch, or its hook). */
const attackerRequests: { path: string; body: string }[] = [];
/** What the attacker's sync hook answers, per CompositeController (set by each attack): status and children. */
const hookAnswers: Record<string, (request: { parent: KubeObject }) => unknown> = {};
const hostileAnswer = (request: { controller: KubeObject; parent: KubeObject }) =>
  (hookAnswers[request.controller.metadata.name!] ?? (() => ({ status: {}, children: [] })))(request);

const tenants: Record<'eve' | 'ivan' | 'rita' | 'mallory', Tenant> = {} as never;
const accessBefore = new Map<string, AccessSnapshot>();
let bindingsBefore: string[];
let objectsBefore: Map<string, string>;
/** Changes in the guarded namespaces made on purpose: by the admin, or a function's own output for a tenant where she may create its kind. */
const adminChanges: string[] = [];
const matrix = new TenantMatrix();
const questions = sensitiveQuestions(ASKED_NAMESPACES);

/** `opfn dev --local` as a user starts it (npm start), with the exchange-rate stand-in as provider. */
function startDev(): Promise<{ kubeconfig: string; broker: string }> {
  dev = spawn(process.execPath, [OPFN, 'dev', '--local', '--idle', '120', '--resync', '0'], {
    env: { ...process.env, OPFN_STATE_DIR: stateDir, LOG_LEVEL: 'warn', LOG_FORMAT: 'json', EXCHANGE_RATE_PROVIDER_URL: provider.url },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      devOutput += chunk.toString();
      const match = devOutput.match(/export KUBECONFIG=(\S+)[\s\S]*Broker ingress: (\S+?)\. Dead letters/);
      if (match) resolve({ kubeconfig: match[1]!, broker: match[2]! });
    };
    dev.stdout!.on('data', onData);
    dev.stderr!.on('data', onData);
    dev.on('exit', (code) => reject(new Error(`opfn dev exited (${code}) before it ran the functions:\n${devOutput}`)));
  });
}

function startAttackerServer(): Promise<void> {
  attackerServer = createServer((request, response) => {
    let body = '';
    request
      .setEncoding('utf8')
      .on('data', (chunk: string) => (body += chunk))
      .on('end', () => {
        attackerRequests.push({ path: request.url ?? '', body });
        if (request.method === 'POST' && request.url?.startsWith('/sync')) {
          response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(hostileAnswer(JSON.parse(body))));
        } else {
          response
            .writeHead(200, { 'content-type': 'application/json' })
            .end(JSON.stringify({ amount: 1, base: 'EUR', date: '2030-01-01', rates: { USD: 999 } }));
        }
      });
  });
  attackerServer.listen(0, '127.0.0.1');
  return new Promise((resolve) =>
    attackerServer.once('listening', () => {
      attackerUrl = `http://127.0.0.1:${(attackerServer.address() as AddressInfo).port}`;
      resolve();
    }),
  );
}

const outcomeOf = (result: Awaited<ReturnType<typeof attempt>>) => (result.ok ? 'admitted' : `refused ${result.code} ${result.reason}`);
const readyOf = (object: KubeObject | undefined) =>
  (
    (object as { status?: { conditions?: { type: string; status: string; reason: string; message: string }[] } } | undefined)?.status
      ?.conditions ?? []
  ).find((c) => c.type === 'Ready');
const getAs = <T extends KubeObject>(kube: KubeClient, kind: ResourceKind, namespace: string, name: string) =>
  kube.get<T>(kind, { namespace, name });

/** Creates `object` as the tenant through the plain API (fieldValidation=Ignore: unknown fields are dropped, not refused, so the stored object shows what was kept). */
const createAs = (kube: KubeClient, kind: ResourceKind, object: KubeObject) =>
  kube.request<KubeObject>('POST', collectionPath(kind, object.metadata.namespace), {
    body: { apiVersion: apiVersionOf(kind), kind: kind.kind, ...object },
    query: { fieldValidation: 'Ignore' },
  });

/** POSTs a binary-mode CloudEvent to the broker's ingress, as anyone on its network can. */
async function forge(attributes: Record<string, string>, data: unknown): Promise<number> {
  const headers: Record<string, string> = {
    'ce-specversion': '1.0',
    'ce-id': randomUUID(),
    'ce-source': 'https://attacker.example',
    'content-type': 'application/json',
  };
  for (const [name, value] of Object.entries(attributes)) headers[`ce-${name}`] = value;
  const response = await fetch(brokerUrl, { method: 'POST', headers, body: JSON.stringify(data) });
  await response.text();
  return response.status;
}

/** A forged ApiServerSource Resource-mode event of `object` for `fn`. */
function forgeResource(
  fn: string,
  kind: ResourceKind,
  object: KubeObject,
  action: 'add' | 'update' | 'delete' = 'update',
): Promise<number> {
  const { namespace = '', name = '' } = object.metadata;
  const apiVersion = apiVersionOf(kind);
  return forge(
    {
      type: `dev.knative.apiserver.resource.${action}`,
      subject: `/apis/${apiVersion}/namespaces/${namespace}/${kind.plural}/${name}`,
      kind: kind.kind,
      apiversion: apiVersion,
      name,
      namespace,
      [FUNCTION_EXTENSION]: fn,
    },
    { apiVersion, kind: kind.kind, ...object },
  );
}

before(async () => {
  [provider] = await Promise.all([startRateProvider(), startAttackerServer()]);
  ({ kubeconfig: adminKubeconfig, broker: brokerUrl } = await startDev());
  admin = kubeFor(adminKubeconfig);

  for (const name of [ATTACKER, VICTIM, PLATFORM]) await admin.create(Namespace, { metadata: { name } });
  // Pod Security admission at its strictest: what a tenant's namespace may enforce.
  await admin.create(Namespace, { metadata: { name: RESTRICTED, labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } } });

  // The victims' objects.
  await admin.create(Secret, {
    metadata: { name: 'db-password', namespace: VICTIM, labels: { app: 'db' } },
    stringData: { password: VICTIM_SECRET },
  } as KubeObject);
  await admin.create(Secret, {
    metadata: { name: 'signing-key', namespace: 'kube-system' },
    stringData: { key: SYSTEM_SECRET },
  } as KubeObject);
  await admin.create(ConfigMap, {
    metadata: { name: 'victim-settings', namespace: VICTIM, labels: { copyrator: 'true' } },
    data: { endpoint: VICTIM_SETTING },
  } as KubeObject);
  await createAs(admin, ImmortalContainerKind, {
    metadata: { name: 'victim-ic', namespace: VICTIM },
    spec: { image: 'nginx:1.27' },
  } as KubeObject);
  await createAs(admin, ExchangeRateKind, {
    metadata: { name: 'victim-rate', namespace: VICTIM },
    spec: { currency: 'USD' },
  } as KubeObject);
  // In the attacker's namespace, objects that are not the tenants': the platform team's ConfigMap and a pod of another controller.
  await admin.create(ConfigMap, {
    metadata: { name: 'app-settings', namespace: ATTACKER },
    data: { owner: 'platform-team' },
  } as KubeObject);
  await admin.create(Pod, {
    metadata: { name: 'squat-immortalpod', namespace: ATTACKER, labels: { app: 'platform' } },
    spec: { containers: [{ name: 'main', image: 'registry.example/platform:1' }] },
  } as KubeObject);

  const dir = tempDir('opfn-tenants-');
  const tenant = (name: string, grants: { namespace: string; rules: PolicyRule[] }[]) =>
    createTenant(admin, adminKubeconfig, dir, { namespace: ATTACKER, name, grants });
  tenants.eve = await tenant('eve', [
    {
      namespace: ATTACKER,
      rules: [
        { apiGroups: ['flant.com'], resources: ['copyrators'], verbs: all },
        { apiGroups: [''], resources: ['configmaps'], verbs: all },
        { apiGroups: [''], resources: ['secrets'], verbs: read },
        eventsRead,
      ],
    },
  ]);
  const icRules: PolicyRule[] = [
    { apiGroups: ['immortalcontainer.flugel.it'], resources: ['immortalcontainers'], verbs: all },
    { apiGroups: [''], resources: ['pods'], verbs: read },
    eventsRead,
  ];
  tenants.ivan = await tenant('ivan', [
    { namespace: ATTACKER, rules: icRules },
    { namespace: RESTRICTED, rules: icRules },
  ]);
  const rateRules: PolicyRule[] = [
    { apiGroups: ['operators.brennerm.github.io'], resources: ['exchangerates'], verbs: all },
    { apiGroups: [''], resources: ['configmaps'], verbs: read },
    eventsRead,
  ];
  tenants.rita = await tenant('rita', [
    { namespace: ATTACKER, rules: rateRules },
    { namespace: 'default', rules: rateRules },
  ]);
  tenants.mallory = await tenant('mallory', [
    {
      namespace: ATTACKER,
      rules: [
        { apiGroups: ['immortalcontainers.flugel.it'], resources: ['immortalcontainers'], verbs: all },
        { apiGroups: [''], resources: ['pods'], verbs: read },
        eventsRead,
      ],
    },
  ]);

  // The victims' objects are in place (the functions made the pod and the rate) before anything is recorded.
  await eventually(() => getAs(admin, Pod, VICTIM, 'victim-ic-immortalpod'), CONVERGE_MS, "the victim's pod");
  await eventually(
    async () => (await getAs<KubeObject & { data?: Record<string, string> }>(admin, ConfigMap, VICTIM, 'victim-rate'))?.data?.rate,
    CONVERGE_MS,
    "the victim's rate ConfigMap",
  );
  await eventually(
    async () => readyOf(await getAs(admin, ImmortalContainerKind, VICTIM, 'victim-ic'))?.reason === 'PodPending',
    CONVERGE_MS,
    "the victim's ImmortalContainer settled",
  );

  for (const t of Object.values(tenants)) accessBefore.set(t.name, await accessSnapshot(t, ASKED_NAMESPACES, questions));
  bindingsBefore = await bindingsNaming(
    admin,
    Object.values(tenants).map((t) => t.user),
  );
  objectsBefore = await objectsSnapshot(admin, GUARDED_NAMESPACES, GUARDED_KINDS);
});

after(async () => {
  console.log('# tenant matrix (identity × attempt → outcome):');
  for (const line of matrix.lines()) console.log(`#   ${line}`);
  if (dev && dev.exitCode === null) {
    dev.kill('SIGINT');
    await new Promise((resolve) => dev.once('exit', resolve));
  }
  await provider?.close();
  attackerServer?.closeAllConnections();
  await new Promise((resolve) => attackerServer?.close(resolve));
});

// ---- CopyratorRule ----

test("copyrator, attack 1: eve makes a rule copy victim's and kube-system's Secrets into her namespace", async () => {
  for (const source of [VICTIM, 'kube-system']) {
    const rule = {
      metadata: { name: `steal-${source}`, namespace: ATTACKER },
      ruleType: 'secret',
      selector: {},
      namespace: source,
    } as unknown as KubeObject;
    // The local plane installs the copyrator's ValidatingAdmissionPolicy: refused before the function sees it.
    const result = await attempt(() => createAs(tenants.eve.kube, CopyratorRuleKind, rule));
    matrix.record(
      'eve',
      `CopyratorRule secret, source ${source}`,
      result.ok ? 'ADMITTED' : `${outcomeOf(result)}: ${result.message.replace(/^.*denied request: /, '')}`,
    );
    assert.ok(!result.ok, `steal-${source} was admitted`);
    assert.equal(result.code, 403, result.message);
    assert.match(
      result.message,
      new RegExp(
        `ValidatingAdmissionPolicy 'opfn-copyrator' .*denied request: CopyratorRule ${ATTACKER}/steal-${source}: system:serviceaccount:${ATTACKER}:eve may not get secrets in namespace ${source}`,
      ),
    );
  }
  const secrets = await reachOf(tenants.eve, ATTACKER, [Secret]);
  for (const value of STOLEN) assert.ok(!secrets.includes(value), "no victim's Secret value in the attacker's namespace");
});

test('copyrator, attack 2: eve plants her ConfigMap new-ca in every namespace before the platform team creates theirs', async () => {
  await tenants.eve.kube.create(ConfigMap, {
    metadata: { name: 'new-ca', namespace: ATTACKER, labels: { plant: 'yes' } },
    data: { 'ca.crt': 'eve-owned-ca' },
  } as KubeObject);
  const rule = {
    metadata: { name: 'plant-new-ca', namespace: ATTACKER },
    ruleType: 'configmap',
    selector: { plant: 'yes' },
    namespace: ATTACKER,
  } as unknown as KubeObject;
  const result = await attempt(() => createAs(tenants.eve.kube, CopyratorRuleKind, rule));
  matrix.record(
    'eve',
    'CopyratorRule configmap new-ca from attacker into every namespace',
    result.ok ? 'ADMITTED' : `${outcomeOf(result)}: ${result.message.replace(/^.*denied request: /, '')}`,
  );
  assert.ok(!result.ok, 'plant-new-ca was admitted');
  assert.equal(result.code, 403, result.message);
  assert.match(
    result.message,
    new RegExp(
      `denied request: CopyratorRule ${ATTACKER}/plant-new-ca: system:serviceaccount:${ATTACKER}:eve may not create configmaps in every namespace`,
    ),
  );
  for (const namespace of [PLATFORM, VICTIM, 'kube-system', 'default'])
    assert.equal(await getAs(admin, ConfigMap, namespace, 'new-ca'), undefined, `no new-ca planted in ${namespace}`);
  // The platform team's own create, later: the name is still theirs.
  await admin.create(ConfigMap, { metadata: { name: 'new-ca', namespace: PLATFORM }, data: { 'ca.crt': 'platform-ca' } } as KubeObject);
  adminChanges.push(`added ConfigMap ${PLATFORM}/new-ca`);
});

test("copyrator: a rule stored in the attacker's namespace without the admission check still copies nothing of the victim's", async () => {
  // As on a cluster where the policy is not installed, or for a rule stored before it: written by
  // the admin, whom any policy admits; the function cannot tell who wrote a rule.
  await createAs(admin, CopyratorRuleKind, {
    metadata: { name: 'stored-steal', namespace: ATTACKER },
    ruleType: 'configmap',
    selector: {},
    namespace: VICTIM,
  } as unknown as KubeObject);
  const ready = await eventually(
    async () => readyOf(await getAs(admin, CopyratorRuleKind, ATTACKER, 'stored-steal')),
    CONVERGE_MS,
    'status of stored-steal',
  );
  matrix.record(
    '(rule without admission)',
    `CopyratorRule in ${ATTACKER}, source ${VICTIM}`,
    `function: Ready=${ready.status} ${ready.reason}`,
  );
  assert.equal(ready.status, 'False');
  assert.equal(ready.reason, 'SourceNotOwnNamespace', ready.message);
  assert.equal(
    await getAs(admin, ConfigMap, ATTACKER, 'victim-settings'),
    undefined,
    "victim-settings not copied into the attacker's namespace",
  );
  // Attack 2 the same way: eve's own labelled new-ca, copied out of a namespace that does not distribute.
  await createAs(admin, CopyratorRuleKind, {
    metadata: { name: 'stored-plant', namespace: ATTACKER },
    ruleType: 'configmap',
    selector: { plant: 'yes' },
    namespace: ATTACKER,
  } as unknown as KubeObject);
  const planted = await eventually(
    async () => readyOf(await getAs(admin, CopyratorRuleKind, ATTACKER, 'stored-plant')),
    CONVERGE_MS,
    'status of stored-plant',
  );
  matrix.record(
    '(rule without admission)',
    `CopyratorRule in ${ATTACKER} copying eve's new-ca into every namespace`,
    `function: Ready=${planted.status} ${planted.reason}`,
  );
  assert.equal(planted.reason, 'SourceNotDistributing', planted.message);
  for (const namespace of [VICTIM, 'kube-system', 'default'])
    assert.equal(await getAs(admin, ConfigMap, namespace, 'new-ca'), undefined, `no new-ca planted in ${namespace}`);
});

test('copyrator, attack 6: a rule whose source namespace does not exist is Ready=False, not CopiesInPlace', async () => {
  // Naming another namespace takes an administrator's label on the rule's own namespace.
  const platform = (await admin.get(Namespace, { namespace: '', name: PLATFORM }))!;
  await admin.replace(Namespace, {
    ...platform,
    metadata: { ...platform.metadata, labels: { ...platform.metadata.labels, 'copyrator.flant.com/any-source': 'true' } },
  });
  await createAs(admin, CopyratorRuleKind, {
    metadata: { name: 'from-nowhere', namespace: PLATFORM },
    ruleType: 'configmap',
    selector: {},
    namespace: 'no-such-namespace',
  } as unknown as KubeObject);
  const ready = await eventually(
    async () => readyOf(await getAs(admin, CopyratorRuleKind, PLATFORM, 'from-nowhere')),
    CONVERGE_MS,
    'status of from-nowhere',
  );
  matrix.record('admin', 'CopyratorRule with a source namespace that does not exist', `Ready=${ready.status} ${ready.reason}`);
  assert.equal(ready.status, 'False', ready.message);
  assert.equal(ready.reason, 'SourceNamespaceNotFound', ready.message);
});

// ---- ImmortalContainer ----

test('immortal-container: ivan asks for another namespace, another ServiceAccount, privileged settings', async () => {
  const elsewhere = await attempt(() =>
    createAs(tenants.ivan.kube, ImmortalContainerKind, {
      metadata: { name: 'in-victim', namespace: VICTIM },
      spec: { image: 'evil:1' },
    } as KubeObject),
  );
  matrix.record('ivan', `ImmortalContainer in ${VICTIM}`, outcomeOf(elsewhere));
  assert.equal(elsewhere.ok, false);
  assert.equal(!elsewhere.ok && elsewhere.code, 403);

  const stored = await createAs(tenants.ivan.kube, ImmortalContainerKind, {
    metadata: { name: 'greedy', namespace: ATTACKER },
    spec: {
      image: 'evil:1',
      namespace: VICTIM,
      serviceAccountName: 'opfn-composite',
      hostNetwork: true,
      hostPID: true,
      nodeName: 'control-plane',
      securityContext: { privileged: true },
      containers: [{ name: 'x', image: 'evil:1', securityContext: { privileged: true } }],
      volumes: [{ name: 'root', hostPath: { path: '/' } }],
    },
  } as KubeObject);
  assert.deepEqual(Object.keys((stored as ImmortalContainer).spec), ['image'], 'the schema keeps spec.image alone');
  const pod = await eventually(
    () => getAs<PodObject & { spec: Record<string, unknown> }>(admin, Pod, ATTACKER, 'greedy-immortalpod'),
    CONVERGE_MS,
    "ivan's pod",
  );
  assert.equal(pod.metadata.namespace, ATTACKER);
  for (const field of ['hostNetwork', 'hostPID', 'hostIPC', 'nodeName', 'volumes', 'automountServiceAccountToken'])
    assert.equal(pod.spec[field], undefined, `pod ${field} not set`);
  assert.deepEqual(pod.spec.securityContext ?? {}, {}, 'no pod security context');
  // No ServiceAccount admission on the test control plane: on a cluster it is the namespace's `default`.
  assert.ok(
    [undefined, 'default'].includes(pod.spec.serviceAccountName as string | undefined),
    `serviceAccountName ${pod.spec.serviceAccountName}`,
  );
  const containers = pod.spec.containers as { name: string; image: string; securityContext?: unknown }[];
  assert.deepEqual(
    containers.map(({ name, image, securityContext }) => ({ name, image, securityContext })),
    [{ name: 'acontainer', image: 'evil:1', securityContext: undefined }],
  );
  assert.equal(await getAs(admin, Pod, VICTIM, 'greedy-immortalpod'), undefined);
  matrix.record(
    'ivan',
    'ImmortalContainer with spec.namespace/serviceAccountName/hostNetwork/privileged/hostPath',
    'fields pruned by the schema; pod in attacker with image only',
  );
});

test('immortal-container: ivan\'s pod in a namespace enforcing Pod Security "restricted" is refused there too', async () => {
  await createAs(tenants.ivan.kube, ImmortalContainerKind, {
    metadata: { name: 'unrestricted', namespace: RESTRICTED },
    spec: { image: 'evil:1' },
  } as KubeObject);
  const ready = await eventually(
    async () => readyOf(await getAs(admin, ImmortalContainerKind, RESTRICTED, 'unrestricted')),
    CONVERGE_MS,
    'status of unrestricted',
  );
  matrix.record('ivan', 'ImmortalContainer in a PSA-restricted namespace', `Ready=${ready.status} ${ready.reason}`);
  assert.equal(ready.reason, 'FailedCreate', ready.message);
  assert.match(ready.message, /violates PodSecurity "restricted/);
  assert.equal(await getAs(admin, Pod, RESTRICTED, 'unrestricted-immortalpod'), undefined);
});

test("immortal-container: ivan's ImmortalContainer named after another's pod neither adopts nor deletes it", async () => {
  const squat = (await getAs<PodObject>(admin, Pod, ATTACKER, 'squat-immortalpod'))!;
  await createAs(tenants.ivan.kube, ImmortalContainerKind, {
    metadata: { name: 'squat', namespace: ATTACKER },
    spec: { image: 'evil:1' },
  } as KubeObject);
  const ready = await eventually(
    async () => readyOf(await getAs(admin, ImmortalContainerKind, ATTACKER, 'squat')),
    CONVERGE_MS,
    'status of squat',
  );
  matrix.record(
    'ivan',
    'ImmortalContainer named after a pod it does not own (squat-immortalpod)',
    `Ready=${ready.status} ${ready.reason}; pod untouched`,
  );
  assert.equal(ready.reason, 'PodNameTaken', ready.message);
  const now = (await getAs<PodObject>(admin, Pod, ATTACKER, 'squat-immortalpod'))!;
  assert.equal(now.metadata.uid, squat.metadata.uid);
  assert.equal(now.metadata.resourceVersion, squat.metadata.resourceVersion, 'not even relabelled or adopted');
});

// ---- ExchangeRate ----

test("exchange-rate: rita's ExchangeRate cannot choose the provider URL, another namespace or a ConfigMap it does not own", async () => {
  const elsewhere = await attempt(() =>
    createAs(tenants.rita.kube, ExchangeRateKind, {
      metadata: { name: 'in-victim', namespace: VICTIM },
      spec: { currency: 'USD' },
    } as KubeObject),
  );
  matrix.record('rita', `ExchangeRate in ${VICTIM}`, outcomeOf(elsewhere));
  assert.equal(!elsewhere.ok && elsewhere.code, 403);

  const stored = await createAs(tenants.rita.kube, ExchangeRateKind, {
    metadata: { name: 'redirected', namespace: ATTACKER },
    spec: {
      currency: 'CHF',
      url: `${attackerUrl}/v1/latest`,
      providerUrl: attackerUrl,
      provider: { url: attackerUrl },
      configMap: { name: 'victim-settings', namespace: VICTIM },
    },
  } as KubeObject);
  assert.deepEqual(Object.keys((stored as ExchangeRate).spec), ['currency'], 'the schema keeps spec.currency alone');
  const cm = await eventually(
    async () => (await getAs<KubeObject & { data?: Record<string, string> }>(admin, ConfigMap, ATTACKER, 'redirected'))?.data?.rate,
    CONVERGE_MS,
    "rita's rate",
  );
  assert.equal(cm, String(provider.rates.CHF), 'the rate of the configured provider (the stand-in)');
  assert.deepEqual(
    attackerRequests.filter((r) => !r.path.startsWith('/sync')),
    [],
    "nothing fetched the attacker's URL",
  );
  matrix.record(
    'rita',
    "ExchangeRate with spec.url/providerUrl/configMap naming the attacker's server and victim",
    "fields pruned; the configured provider asked, the attacker's URL never",
  );

  const settings = (await getAs(admin, ConfigMap, ATTACKER, 'app-settings'))!;
  await createAs(tenants.rita.kube, ExchangeRateKind, {
    metadata: { name: 'app-settings', namespace: ATTACKER, labels: { 'copyrator.flant.com/rule': 'x' } },
    spec: { currency: 'USD' },
  } as KubeObject);
  const ready = await eventually(
    async () => readyOf(await getAs(admin, ExchangeRateKind, ATTACKER, 'app-settings')),
    CONVERGE_MS,
    'status of app-settings',
  );
  matrix.record(
    'rita',
    "ExchangeRate named after the platform team's ConfigMap app-settings",
    `Ready=${ready.status} ${ready.reason}; ConfigMap untouched`,
  );
  assert.equal(ready.reason, 'ConfigMapNameTaken', ready.message);
  const now = (await getAs(admin, ConfigMap, ATTACKER, 'app-settings'))!;
  assert.equal(now.metadata.resourceVersion, settings.metadata.resourceVersion);
});

test("exchange-rate + copyrator: rita's ExchangeRate in default, labelled as the seed's rule selects, must not plant its ConfigMap name in every namespace", async () => {
  // The admin applies the seed's sample rule (crds/examples/copyratorrule.yaml): ConfigMaps labelled
  // copyrator=true in default, which distributes by default, go to every namespace. Rita may not
  // write ConfigMaps in default; the exchange-rate function writes one for her, named as she
  // chooses and labelled with her ExchangeRate's labels.
  await createAs(admin, CopyratorRuleKind, {
    metadata: { name: 'main-rule', namespace: 'default' },
    ruleType: 'configmap',
    selector: { copyrator: 'true' },
    namespace: 'default',
  } as unknown as KubeObject);
  await createAs(tenants.rita.kube, ExchangeRateKind, {
    metadata: { name: 'squatted-name', namespace: 'default', labels: { copyrator: 'true' } },
    spec: { currency: 'USD' },
  } as KubeObject);
  await eventually(() => getAs(admin, ConfigMap, 'default', 'squatted-name'), CONVERGE_MS, "rita's rate ConfigMap in default");
  adminChanges.push('added ConfigMap default/squatted-name');
  await eventually(async () => readyOf(await getAs(admin, CopyratorRuleKind, 'default', 'main-rule')), CONVERGE_MS, 'status of main-rule');
  await sleep(3000);
  const planted: string[] = [];
  for (const namespace of [PLATFORM, VICTIM, 'kube-system', ATTACKER])
    if (await getAs(admin, ConfigMap, namespace, 'squatted-name')) planted.push(namespace);
  const rule = await getAs<CopyratorRule>(admin, CopyratorRuleKind, 'default', 'main-rule');
  matrix.record(
    "rita (+ the seed's rule)",
    'ExchangeRate squatted-name in default labelled copyrator=true',
    planted.length
      ? `PLANTED in ${planted.join(', ')} (rule Ready=${readyOf(rule)?.reason}, matched ${(rule as any)?.status?.matched})`
      : `not copied (rule Ready=${readyOf(rule)?.reason})`,
  );
  assert.deepEqual(planted, [], 'a ConfigMap written for rita by the exchange-rate function was copied into namespaces rita may not write');
});

// ---- CompositeController (the admin's, with a hook the attacker controls) ----

const RBAC = 'rbac.authorization.k8s.io';
const bindingOf = (
  kind: 'RoleBinding' | 'ClusterRoleBinding',
  name: string,
  namespace: string | undefined,
  role: string,
  subject: { name: string; namespace: string },
) => ({
  apiVersion: `${RBAC}/v1`,
  kind,
  metadata: { name, ...(namespace ? { namespace } : {}) },
  roleRef: { apiGroup: RBAC, kind: 'ClusterRole', name: role },
  subjects: [{ kind: 'ServiceAccount', ...subject }],
});

const compositeController = (
  name: string,
  parentResource: Record<string, unknown>,
  children: string[],
  annotations: Record<string, string> = {},
): KubeObject =>
  ({
    metadata: { name, annotations },
    spec: {
      generateSelector: true,
      parentResource,
      childResources: children.map((child) =>
        child === 'pods' ? { apiVersion: 'v1', resource: 'pods' } : { apiVersion: `${RBAC}/v1`, resource: child },
      ),
      hooks: { sync: { webhook: { url: `${attackerUrl}/sync/${name}` } } },
    },
  }) as KubeObject;

/** Warning Events on an object (reason: message). */
const warningsOn = async (namespace: string | undefined, name: string) =>
  (
    await admin.list<KubeObject & { involvedObject?: { name?: string }; reason?: string; message?: string; type?: string }>(CoreEvent, {
      namespace,
    })
  ).items
    .filter((event) => event.involvedObject?.name === name && event.type === 'Warning')
    .map((event) => `${event.reason}: ${event.message}`);

test("composite, attack 3: a hook answers a RoleBinding giving mallory the function's own ClusterRole in her namespace", async () => {
  hookAnswers['hostile-hook'] = ({ parent }) => ({
    status: { pwned: 'maybe' },
    children: [
      bindingOf('RoleBinding', 'mallory-gets-all', parent.metadata.namespace, 'opfn-composite', { name: 'mallory', namespace: ATTACKER }),
    ],
  });
  await createAs(
    admin,
    CompositeControllerKind,
    compositeController(
      'hostile-hook',
      {
        apiVersion: 'immortalcontainers.flugel.it/v1alpha1',
        resource: 'immortalcontainers',
        labelSelector: { matchLabels: { hook: 'hostile' } },
      },
      ['rolebindings'],
    ),
  );
  await createAs(tenants.mallory.kube, MetaImmortalContainer, {
    metadata: { name: 'mal-parent', namespace: ATTACKER, labels: { hook: 'hostile' } },
    spec: { image: 'evil:1' },
  } as KubeObject);
  const warning = await eventually(
    async () => (await warningsOn(ATTACKER, 'mal-parent')).find((text) => text.startsWith('PrivilegedChildRefused')),
    CONVERGE_MS,
    'a PrivilegedChildRefused Warning on mal-parent',
    async () =>
      `warnings: ${(await warningsOn(ATTACKER, 'mal-parent')).join(' | ')}; hook calls: ${attackerRequests.filter((r) => r.path.startsWith('/sync')).length}`,
  );
  assert.match(
    warning,
    /RoleBinding grants API rights: refused unless CompositeController "hostile-hook" names "rolebindings\.rbac\.authorization\.k8s\.io" in its annotation operator-functions\.dev\/allow-privileged-children/,
  );
  assert.equal(await admin.get(RoleBinding, { namespace: ATTACKER, name: 'mallory-gets-all' }), undefined, 'no RoleBinding for mallory');
  matrix.record(
    'mallory + hook',
    'sync hook answers RoleBinding of ClusterRole opfn-composite (`*` on `*`) to mallory in attacker',
    `refused: ${warning.slice(0, 150)}`,
  );
  assert.deepEqual(accessChanges(accessBefore.get('mallory')!, await accessSnapshot(tenants.mallory, ASKED_NAMESPACES, questions)), []);
});

test("composite, attack 3 (cluster scope): a hook answers a ClusterRoleBinding for mallory, and a pod running as the function's own ServiceAccount", async () => {
  hookAnswers['hostile-cluster-hook'] = () => ({
    status: {},
    children: [
      bindingOf('ClusterRoleBinding', 'opfn-composite-for-mallory', undefined, 'opfn-composite', { name: 'mallory', namespace: ATTACKER }),
    ],
  });
  hookAnswers['hostile-pod-hook'] = () => ({
    status: {},
    children: [
      {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'runs-as-composite', namespace: 'operator-functions' },
        spec: { serviceAccountName: 'opfn-composite', containers: [{ name: 'x', image: 'evil:1' }] },
      },
    ],
  });
  // A cluster-scoped parent: the attacker's namespace itself (made by the admin; the hook is the attacker).
  const parent = { apiVersion: 'v1', resource: 'namespaces', labelSelector: { matchLabels: { 'kubernetes.io/metadata.name': ATTACKER } } };
  await createAs(admin, CompositeControllerKind, compositeController('hostile-cluster-hook', parent, ['clusterrolebindings']));
  const bindingWarning = await eventually(
    async () => (await warningsOn(undefined, ATTACKER)).find((text) => text.startsWith('PrivilegedChildRefused')),
    CONVERGE_MS,
    'a PrivilegedChildRefused Warning on namespace attacker',
  );
  assert.match(bindingWarning, /ClusterRoleBinding grants API rights/);
  await admin.delete(CompositeControllerKind, { namespace: '', name: 'hostile-cluster-hook' });
  await createAs(admin, CompositeControllerKind, compositeController('hostile-pod-hook', parent, ['pods']));
  const podWarning = await eventually(
    async () => (await warningsOn(undefined, ATTACKER)).find((text) => /runs pods outside/.test(text)),
    CONVERGE_MS,
    'a Warning about the pod',
  );
  assert.match(podWarning, /^PrivilegedChildRefused: .*Pod runs pods outside the parent's namespace/);
  assert.equal(
    await admin.get(ClusterRoleBinding, { namespace: '', name: 'opfn-composite-for-mallory' }),
    undefined,
    'no ClusterRoleBinding for mallory',
  );
  assert.equal(await admin.get(Pod, { namespace: 'operator-functions', name: 'runs-as-composite' }), undefined, 'no pod as opfn-composite');
  matrix.record(
    'hook (cluster-scoped parent)',
    'ClusterRoleBinding of opfn-composite to mallory',
    `refused: ${bindingWarning.slice(0, 120)}`,
  );
  matrix.record(
    'hook (cluster-scoped parent)',
    'pod in operator-functions running as ServiceAccount opfn-composite',
    `refused: ${podWarning.slice(0, 120)}`,
  );
  await admin.delete(CompositeControllerKind, { namespace: '', name: 'hostile-pod-hook' });
});

test('composite, attack 5: names with ":" that RBAC kinds allow are served; a deleted child adv:adv-colon comes back at once; system:* events are not dead-lettered', async () => {
  // The admin's own RBAC-managing controller, privileged children allowed by name, its hook benign.
  hookAnswers['rbac-manager'] = ({ parent }) => ({
    status: {},
    children: [bindingOf('RoleBinding', 'adv:adv-colon', parent.metadata.namespace, 'view', { name: 'auditor', namespace: ATTACKER })],
  });
  await createAs(
    admin,
    CompositeControllerKind,
    compositeController(
      'rbac-manager',
      {
        apiVersion: 'immortalcontainers.flugel.it/v1alpha1',
        resource: 'immortalcontainers',
        labelSelector: { matchLabels: { hook: 'rbac' } },
      },
      ['rolebindings', 'clusterrolebindings'],
      { 'operator-functions.dev/allow-privileged-children': 'rolebindings.rbac.authorization.k8s.io' },
    ),
  );
  await createAs(admin, MetaImmortalContainer, {
    metadata: { name: 'rbac-parent', namespace: ATTACKER, labels: { hook: 'rbac' } },
    spec: { image: 'nginx:1.27' },
  } as KubeObject);
  const first = await eventually(
    () => admin.get(RoleBinding, { namespace: ATTACKER, name: 'adv:adv-colon' }),
    CONVERGE_MS,
    'the child adv:adv-colon',
  );
  const started = Date.now();
  await admin.delete(RoleBinding, { namespace: ATTACKER, name: 'adv:adv-colon' });
  const again = await eventually(
    async () => {
      const child = await admin.get(RoleBinding, { namespace: ATTACKER, name: 'adv:adv-colon' });
      return child && child.metadata.uid !== first.metadata.uid ? child : undefined;
    },
    15_000,
    'adv:adv-colon back (resyncs are off: only its delete event can bring it back)',
  );
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  assert.ok(again);
  await admin.create(
    ClusterRoleBinding,
    bindingOf('ClusterRoleBinding', 'system:opfn-hostile-probe', undefined, 'view', { name: 'auditor', namespace: ATTACKER }) as KubeObject,
  );
  await admin.delete(ClusterRoleBinding, { namespace: '', name: 'system:opfn-hostile-probe' });
  await sleep(3000);
  const letters = (await readDeadLetterFile(join(stateDir, DEAD_LETTER_FILE))).map((entry) => JSON.stringify(entry.letter ?? entry.error));
  assert.deepEqual(
    letters.filter((letter) => letter.includes('system:') || letter.includes('adv:adv-colon')),
    [],
    'no dead letter for a name with ":"',
  );
  matrix.record(
    'admin (allowed RBAC controller)',
    'child RoleBinding adv:adv-colon deleted; ClusterRoleBinding system:opfn-hostile-probe created and deleted',
    `child back in ${seconds} s; no dead letter`,
  );
});

// ---- Forged events (anyone reaching the broker ingress) ----

test("forged events naming the victims' objects, with bodies that lie, change nothing", async () => {
  const ic = (await getAs<ImmortalContainer>(admin, ImmortalContainerKind, VICTIM, 'victim-ic'))!;
  const pod = (await getAs<PodObject>(admin, Pod, VICTIM, 'victim-ic-immortalpod'))!;
  const rate = (await getAs<ExchangeRate>(admin, ExchangeRateKind, VICTIM, 'victim-rate'))!;
  const rateCm = (await getAs(admin, ConfigMap, VICTIM, 'victim-rate'))!;
  const statuses: number[] = [];
  // The ImmortalContainer with another image and a newer generation; its pod failed; the rate in another currency.
  statuses.push(
    await forgeResource('immortal-container', ImmortalContainerKind, {
      ...ic,
      metadata: { ...ic.metadata, generation: (ic.metadata.generation ?? 1) + 1 },
      spec: { image: 'evil:1' },
    } as KubeObject),
  );
  statuses.push(await forgeResource('immortal-container', Pod, { ...pod, status: { phase: 'Failed' } } as KubeObject));
  statuses.push(
    await forgeResource('immortal-container', Pod, {
      ...pod,
      spec: { containers: [{ name: 'acontainer', image: 'old:0' }] },
    } as KubeObject),
  );
  statuses.push(
    await forgeResource('exchange-rate', ExchangeRateKind, {
      ...rate,
      metadata: { ...rate.metadata, generation: (rate.metadata.generation ?? 1) + 1 },
      spec: { currency: 'JPY' },
    } as KubeObject),
  );
  // A rule of eve's whose body names the victim as source; a ConfigMap in kube-system that claims to be a copy.
  const stored =
    (await getAs<CopyratorRule>(admin, CopyratorRuleKind, ATTACKER, 'stored-steal')) ??
    ({
      metadata: { name: 'stored-steal', namespace: ATTACKER, generation: 1 },
      ruleType: 'configmap',
      selector: {},
      namespace: ATTACKER,
    } as unknown as CopyratorRule);
  statuses.push(
    await forgeResource('copyrator', CopyratorRuleKind, {
      ...stored,
      namespace: VICTIM,
      metadata: { ...stored.metadata, generation: (stored.metadata.generation ?? 1) + 1 },
    } as unknown as KubeObject),
  );
  statuses.push(
    await forgeResource(
      'copyrator',
      ConfigMap,
      {
        metadata: {
          name: 'extension-apiserver-authentication',
          namespace: 'kube-system',
          annotations: { 'copyrator.flant.com/rule': `${ATTACKER}/plant-new-ca`, 'copyrator.flant.com/source': `${ATTACKER}/new-ca` },
          labels: { 'copyrator.flant.com/rule': 'plant-new-ca', 'copyrator.flant.com/rule-namespace': ATTACKER },
        },
      } as KubeObject,
      'delete',
    ),
  );
  assert.ok(
    statuses.every((status) => status === 202),
    `the ingress takes them (it cannot tell): ${statuses}`,
  );
  await sleep(4000);
  const icNow = (await getAs<ImmortalContainer>(admin, ImmortalContainerKind, VICTIM, 'victim-ic'))!;
  const podNow = (await getAs<PodObject>(admin, Pod, VICTIM, 'victim-ic-immortalpod'))!;
  assert.equal(podNow.metadata.uid, pod.metadata.uid, "the victim's pod was not replaced");
  assert.equal(podNow.spec?.containers?.[0]?.image, 'nginx:1.27');
  assert.equal(icNow.status?.startTimes, ic.status?.startTimes);
  const rateCmNow = (await getAs(admin, ConfigMap, VICTIM, 'victim-rate'))!;
  assert.equal(rateCmNow.metadata.resourceVersion, rateCm.metadata.resourceVersion, "the victim's rate ConfigMap untouched");
  assert.equal((await getAs<ExchangeRate>(admin, ExchangeRateKind, VICTIM, 'victim-rate'))?.status?.currency, 'USD');
  assert.equal(await getAs(admin, ConfigMap, ATTACKER, 'victim-settings'), undefined);
  matrix.record(
    'anyone (broker ingress)',
    "forged resource events: victim IC image, its pod Failed/old image, victim rate JPY, eve's rule naming victim, kube-system ConfigMap claiming to be a copy",
    '202; nothing written (objects re-read)',
  );
});

test('attack 4: forged resync pings are merged, not one resync each', async () => {
  const ping = () =>
    forge(
      {
        type: 'dev.knative.sources.ping',
        source: '/apis/v1/namespaces/operator-functions/pingsources/copyrator-resync',
        [FUNCTION_EXTENSION]: 'copyrator',
      },
      {},
    );
  // Requests for CopyratorRules the API server counted, once they stop growing.
  const settle = async () => {
    let last = -1;
    for (;;) {
      await sleep(1500);
      const count = await apiServerRequests(adminKubeconfig, 'copyrators');
      if (count === last) return count;
      last = count;
    }
  };
  const start = await settle();
  assert.equal(await ping(), 202);
  const afterOne = await settle();
  const one = afterOne - start;
  assert.ok(one > 0, 'one resync reads the rules');
  const statuses = await Promise.all(Array.from({ length: PINGS }, ping));
  assert.ok(statuses.every((status) => status === 202));
  const many = (await settle()) - afterOne;
  matrix.record(
    'anyone (broker ingress)',
    `${PINGS} forged dev.knative.sources.ping at once to copyrator`,
    `${many} requests for copyrators (one ping: ${one}; one resync each would be ${PINGS * one})`,
  );
  assert.ok(
    many <= MERGED_RUNS * one,
    `${PINGS} pings cost ${many} requests for copyrators, one ping ${one}: more than ${MERGED_RUNS} resyncs' worth`,
  );
});

test('attack 6: a raw UTF-8 ce-name is refused by the ingress (400)', async () => {
  const { port, hostname, pathname } = new URL(brokerUrl);
  const body = JSON.stringify({ kind: 'ConfigMap', namespace: 'default', name: 'x', apiVersion: 'v1' });
  const head = [
    `POST ${pathname} HTTP/1.1`,
    `Host: ${hostname}:${port}`,
    'ce-specversion: 1.0',
    `ce-id: ${randomUUID()}`,
    'ce-source: https://attacker.example',
    'ce-type: dev.knative.apiserver.ref.update',
    'ce-kind: ConfigMap',
    'ce-apiversion: v1',
    'ce-namespace: default',
    `ce-${FUNCTION_EXTENSION}: copyrator`,
    'content-type: application/json',
    `content-length: ${Buffer.byteLength(body)}`,
    'connection: close',
  ].join('\r\n');
  const raw = Buffer.concat([Buffer.from(`${head}\r\nce-name: `), Buffer.from('caf\u00e9', 'utf8'), Buffer.from(`\r\n\r\n${body}`)]);
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.end(raw));
    let text = '';
    socket
      .setEncoding('latin1')
      .on('data', (chunk: string) => (text += chunk))
      .on('end', () => resolve(text))
      .on('error', reject);
  });
  const status = Number(answer.match(/^HTTP\/1\.1 (\d+)/)?.[1]);
  matrix.record('anyone (broker ingress)', 'ce-name with raw UTF-8 bytes', String(status));
  assert.equal(status, 400, answer.split('\r\n')[0]);
});

// ---- After everything ----

test('every tenant can do what it could before, nothing more; no binding names one; nothing outside its namespace changed; no victim value in its reach', async () => {
  for (const t of Object.values(tenants)) {
    const changes = accessChanges(accessBefore.get(t.name)!, await accessSnapshot(t, ASKED_NAMESPACES, questions));
    matrix.record(
      t.name,
      'kubectl auth can-i (rules in 7 namespaces + sensitive questions) after all attacks',
      changes.length ? `CHANGED: ${changes.join('; ')}` : 'same as before',
    );
    assert.deepEqual(changes, [], `${t.name}'s rights changed`);
  }
  assert.deepEqual(
    await bindingsNaming(
      admin,
      Object.values(tenants).map((t) => t.user),
    ),
    bindingsBefore,
  );
  const changes = objectChanges(objectsBefore, await objectsSnapshot(admin, GUARDED_NAMESPACES, GUARDED_KINDS));
  // The snapshot sees a change: the admin's own, made on purpose.
  for (const change of adminChanges) assert.ok(changes.includes(change), `the snapshot misses ${change}: ${changes}`);
  assert.deepEqual(
    changes.filter((change) => !adminChanges.includes(change)),
    [],
    "objects outside the tenants' namespace changed",
  );
  for (const t of Object.values(tenants)) {
    const reach = await reachOf(t, ATTACKER, [
      Secret,
      ConfigMap,
      Pod,
      CoreEvent,
      CopyratorRuleKind,
      ImmortalContainerKind,
      ExchangeRateKind,
      MetaImmortalContainer,
    ]);
    for (const value of STOLEN) assert.ok(!reach.includes(value), `${t.name} can read a victim's value`);
  }
});
