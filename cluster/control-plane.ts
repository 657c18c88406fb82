// A real Kubernetes control plane on loopback: etcd + kube-apiserver + kube-controller-manager,
// for tests, benchmarks and `opfn cluster up`. Each start gets its own folder, certificates and
// free ports, so concurrent test files never collide. There is no kubelet: pods never run, and a
// test that needs a phase writes pods/status itself, as a kubelet would.
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync, rmSync, readFileSync, readdirSync, existsSync, openSync, closeSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Agent, fetch } from 'undici';
import { atExit } from './exit-cleanup.ts';
import { isSameProcess, processArguments, processStart } from './processes.ts';
import { provisionScript, runProvisionScript } from './provision-script.ts';

const run = promisify(execFile);
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
}

/** Where the binaries are: KUBEBUILDER_ASSETS, the cache, or a build from Kubernetes' Go modules (cluster/provision.sh). */
export function provisionBinaries(progress: (line: string) => void = (l) => process.stderr.write(l + '\n')): Promise<string> {
  return runProvisionScript(PROVISION_SCRIPT, [], 'provisioning the control plane binaries', progress);
}

/** Distinct free loopback ports: all are held open at once, so none is handed out twice. */
export async function freePorts(count: number): Promise<number[]> {
  const servers = await Promise.all(Array.from({ length: count }, () => new Promise<ReturnType<typeof createServer>>((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server));
  })));
  const ports = servers.map((server) => (server.address() as { port: number }).port);
  await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
  return ports;
}

async function openssl(dir: string, ...args: string[]): Promise<void> {
  await run('openssl', args, { cwd: dir });
}

const CERTIFICATE_DAYS = 30;

/** A CA, a serving certificate for 127.0.0.1/localhost, and a service-account signing key. */
async function writeCertificates(dir: string): Promise<void> {
  writeFileSync(join(dir, 'san.cnf'), 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n');
  await openssl(dir, 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', 'ca.key', '-out', 'ca.crt', '-days', String(CERTIFICATE_DAYS), '-subj', '/CN=operator-functions-test-ca');
  await openssl(dir, 'req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', 'apiserver.key', '-out', 'apiserver.csr', '-subj', '/CN=kube-apiserver');
  await openssl(dir, 'x509', '-req', '-in', 'apiserver.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial',
    '-out', 'apiserver.crt', '-days', String(CERTIFICATE_DAYS), '-extfile', 'san.cnf');
  await openssl(dir, 'ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', 'sa.key');
  await openssl(dir, 'ec', '-in', 'sa.key', '-pubout', '-out', 'sa.pub');
}

/** The shell line that puts `binDir`'s kubectl first on PATH, for the walkthroughs. */
export const kubectlPathLine = (binDir: string): string => `export PATH=${binDir}:$PATH`;

export const freePort = async (): Promise<number> => (await freePorts(1))[0];

function kubeconfigYaml(server: string, caPath: string, user: string, token: string): string {
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

/**
 * Kills `child` when this process ends, however it ends (exit-cleanup.ts), unless the child has
 * exited first: children must not outlive the process that started them, even one that ends
 * without calling stop() (a second Ctrl-C, a failed test, a Ctrl-C of the test runner).
 */
export function killOnExit(child: ChildProcess): ChildProcess {
  const cancel = atExit(() => child.kill('SIGKILL'));
  child.on('exit', cancel);
  return child;
}

/** Why a child could not be started at all (spawn's 'error': a binary missing or not executable). */
const spawnErrors = new WeakMap<ChildProcess, Error>();

function startProcess(dir: string, name: string, binary: string, args: string[], ownProcessGroup: boolean): ChildProcess {
  const logFd = openSync(join(dir, `${name}.log`), 'a');
  const child = spawn(binary, args, { stdio: ['ignore', logFd, logFd], detached: ownProcessGroup });
  closeSync(logFd);
  // Unhandled, the 'error' would end this process with a stack trace; waitFor names it instead.
  child.once('error', (error) => spawnErrors.set(child, error));
  return killOnExit(child);
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
export async function stopProcess(child: ChildProcess | undefined, graceMs = 5000): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

function tail(file: string, lines = 15): string {
  if (!existsSync(file)) return '';
  return readFileSync(file, 'utf8').trim().split('\n').slice(-lines).join('\n');
}

async function waitFor(what: string, child: ChildProcess, logFile: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const spawnError = spawnErrors.get(child);
    if (spawnError) throw new Error(`${what} could not be started: ${spawnError.message}`);
    if (child.exitCode !== null) throw new Error(`${what} exited with code ${child.exitCode}; its log (${logFile}) ends:\n${tail(logFile)}`);
    if (await check().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what} was not ready after ${timeoutMs / 1000}s; its log (${logFile}) ends:\n${tail(logFile)}`);
}

// etcd fsyncs on every write; on tmpfs that costs nothing, and test data need not survive.
// OPFN_CONTROL_PLANE_DIR puts the folders elsewhere (a test that kills a control plane's owner
// keeps it out of reach of the other tests' reclaimAbandonedControlPlanes).
const FOLDERS = process.env.OPFN_CONTROL_PLANE_DIR ?? (existsSync('/dev/shm') ? '/dev/shm' : tmpdir());
const FOLDER_PREFIX = 'opfn-cp-';
/** In each control plane's folder: the process that runs it and the processes it started. */
const OWNER_FILE = 'owner.json';

interface Owner { pid: number; startTime?: string; children: number[] }

/**
 * Stops the control planes whose owner was killed (SIGKILL, the OOM killer, a CI timeout run no
 * exit handler: their etcd, kube-apiserver and kube-controller-manager would run on for good,
 * and the folder holding the CA key and admin token would stay) and removes their folders; returns
 * one line for each. A process is killed only if its command line names that folder. Only where
 * /proc tells a process from a later one given the same pid.
 */
export function reclaimAbandonedControlPlanes(folders = FOLDERS): string[] {
  if (!existsSync('/proc/self/stat')) return [];
  const reclaimed: string[] = [];
  for (const name of readdirSync(folders).filter((entry) => entry.startsWith(FOLDER_PREFIX))) {
    const dir = join(folders, name);
    let owner: Owner;
    try {
      owner = JSON.parse(readFileSync(join(dir, OWNER_FILE), 'utf8')) as Owner;
    } catch {
      continue; // being created, or made by a version that kept no record
    }
    if (owner.pid === process.pid || isSameProcess(owner)) continue;
    let killed = 0;
    for (const pid of owner.children) {
      if (!processArguments(pid)?.some((arg) => arg.includes(dir))) continue;
      try {
        process.kill(pid, 'SIGKILL');
        killed++;
      } catch {
        // ended meanwhile
      }
    }
    rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    reclaimed.push(`stopped the control plane in ${dir} that process ${owner.pid} left running when it was killed (${killed} of its processes killed, folder removed)`);
  }
  return reclaimed;
}

export async function startControlPlane(options: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const progress = options.progress ?? ((line: string) => process.stderr.write(line + '\n'));
  for (const line of reclaimAbandonedControlPlanes()) progress(line);
  const binDir = options.binDir ?? (await provisionBinaries(progress));
  const dir = mkdtempSync(join(FOLDERS, FOLDER_PREFIX));
  const owner: Owner = { pid: process.pid, startTime: processStart(process.pid), children: [] };
  const recordOwner = () => writeFileSync(join(dir, OWNER_FILE), JSON.stringify(owner));
  recordOwner();
  // Removed however this process ends unless stop() ran first: the folder holds the cluster's CA
  // key and admin token, and on /dev/shm its etcd's 64 MiB of preallocated WAL is memory until
  // the next reboot. Registered before any process starts, so that those are killed first.
  const forgetDir = atExit(() => rmSync(dir, { recursive: true, force: true, maxRetries: 3 }));
  await writeCertificates(dir);

  const adminToken = randomBytes(24).toString('hex');
  writeFileSync(join(dir, 'tokens.csv'), `${adminToken},admin,admin-uid,"system:masters"\n`);
  const [etcdPort, peerPort, apiPort] = await freePorts(3);
  const server = `https://127.0.0.1:${apiPort}`;
  const caPath = join(dir, 'ca.crt');
  const kubeconfigPath = join(dir, 'admin.kubeconfig');
  writeFileSync(kubeconfigPath, kubeconfigYaml(server, caPath, 'admin', adminToken));
  const tls = new Agent({ connect: { ca: readFileSync(caPath) } });

  const request = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(server + path, {
      method,
      dispatcher: tls,
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let parsed: unknown = text;
    try { parsed = JSON.parse(text); } catch { /* plain text, e.g. /readyz */ }
    return { status: response.status, body: parsed as any };
  };

  const start = (name: string, binary: string, args: string[]) => {
    const child = startProcess(dir, name, binary, args, options.ownProcessGroup ?? false);
    if (child.pid !== undefined) owner.children.push(child.pid);
    recordOwner();
    return child;
  };
  const etcdUrl = `http://127.0.0.1:${etcdPort}`;
  const etcd = start('etcd', join(binDir, 'etcd'), [
    '--name', 'default', '--data-dir', join(dir, 'etcd'),
    '--listen-client-urls', etcdUrl, '--advertise-client-urls', etcdUrl,
    '--listen-peer-urls', `http://127.0.0.1:${peerPort}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${peerPort}`,
    '--initial-cluster', `default=http://127.0.0.1:${peerPort}`, '--log-level', 'warn',
  ]);

  const apiServerArgs = [
    '--etcd-servers', etcdUrl,
    '--bind-address', '127.0.0.1', '--advertise-address', '127.0.0.1', '--secure-port', String(apiPort),
    '--tls-cert-file', join(dir, 'apiserver.crt'), '--tls-private-key-file', join(dir, 'apiserver.key'),
    '--client-ca-file', caPath,
    '--token-auth-file', join(dir, 'tokens.csv'), '--authorization-mode', 'RBAC',
    '--service-account-key-file', join(dir, 'sa.pub'), '--service-account-signing-key-file', join(dir, 'sa.key'),
    '--service-account-issuer', 'https://kubernetes.default.svc',
    '--service-cluster-ip-range', '10.0.0.0/24',
    // The reconciler publishes the advertise address as the `kubernetes` Service's endpoint, and
    // 1.37 refuses a loopback one; nothing here reaches the API server through that Service.
    '--endpoint-reconciler-type', 'none',
    // Without a kubelet nothing mounts tokens; the ServiceAccount admission plugin would only make
    // pod creation in a brand-new namespace fail until its default ServiceAccount exists.
    '--disable-admission-plugins', 'ServiceAccount',
    // As OpenShift and many hardened clusters run: setting blockOwnerDeletion on a child needs
    // `update` on the owner's finalizers subresource, so tests catch a role that lacks it.
    '--enable-admission-plugins', 'OwnerReferencesPermissionEnforcement',
    '--profiling=false', '--v', '0',
    ...(options.apiServerFlags ?? []),
  ];
  let apiServer = start('kube-apiserver', join(binDir, 'kube-apiserver'), apiServerArgs);
  let controllerManager: ChildProcess | undefined;

  const stop = async (stopOptions: { keep?: boolean } = {}) => {
    etcd.kill('SIGCONT'); // a frozen etcd would only die at SIGKILL, after the grace period
    await stopProcess(controllerManager);
    await stopProcess(apiServer);
    await stopProcess(etcd);
    await tls.close();
    // Stopped: from now on the folder is stop()'s to keep (a failed start keeps it for the logs
    // its error names) or remove.
    forgetDir();
    // A kept folder (its logs explain a failed start) is the user's now, not one to reclaim.
    if (stopOptions.keep) rmSync(join(dir, OWNER_FILE), { force: true });
    else rmSync(dir, { recursive: true, force: true });
  };

  const apiServerReady = () =>
    waitFor('kube-apiserver', apiServer, join(dir, 'kube-apiserver.log'), 60_000, async () => (await request('GET', '/readyz')).status === 200);

  try {
    await apiServerReady();
    const controllerManagerBinary = join(binDir, 'kube-controller-manager');
    // A setup-envtest folder (KUBEBUILDER_ASSETS) has etcd and kube-apiserver only, as envtest runs.
    const runControllerManager = (options.controllerManager ?? true) && existsSync(controllerManagerBinary);
    if ((options.controllerManager ?? true) && !runControllerManager) progress(`${binDir} has no kube-controller-manager: running without it (no garbage collection, namespace deletion or ServiceAccount tokens)`);
    if (runControllerManager) {
      controllerManager = start('kube-controller-manager', controllerManagerBinary, [
        '--kubeconfig', kubeconfigPath,
        '--controllers', 'serviceaccount-token,serviceaccount,garbagecollector,namespace',
        '--service-account-private-key-file', join(dir, 'sa.key'), '--root-ca-file', caPath,
        '--leader-elect=false', '--secure-port', '0', '--v', '0',
      ]);
      // The controller manager is up once it has created the default namespace's ServiceAccount.
      await waitFor('kube-controller-manager', controllerManager, join(dir, 'kube-controller-manager.log'), 60_000,
        async () => (await request('GET', '/api/v1/namespaces/default/serviceaccounts/default')).status === 200);
    }
  } catch (error) {
    await stop({ keep: true });
    throw error;
  }

  const serviceAccountKubeconfig = async (namespace: string, name: string): Promise<string> => {
    const created = await request('POST', `/api/v1/namespaces/${namespace}/serviceaccounts`, { metadata: { name } });
    if (created.status !== 201 && created.status !== 409) throw new Error(`creating ServiceAccount ${namespace}/${name}: ${created.status} ${JSON.stringify(created.body)}`);
    // A token from the TokenRequest API (ServiceAccounts no longer get token Secrets), valid as
    // long as the control plane's certificates.
    const issued = await request('POST', `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`, {
      apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: CERTIFICATE_DAYS * 24 * 3600 },
    });
    if (issued.status !== 201) throw new Error(`requesting a token for ServiceAccount ${namespace}/${name}: ${issued.status} ${JSON.stringify(issued.body)}`);
    const path = join(dir, `sa-${namespace}-${name}.kubeconfig`);
    writeFileSync(path, kubeconfigYaml(server, caPath, `system:serviceaccount:${namespace}:${name}`, issued.body.status.token));
    return path;
  };

  const restartApiServer = async () => {
    await stopProcess(apiServer);
    apiServer = start('kube-apiserver', join(binDir, 'kube-apiserver'), apiServerArgs);
    await apiServerReady();
  };

  const pauseEtcd = () => void etcd.kill('SIGSTOP');
  const resumeEtcd = () => void etcd.kill('SIGCONT');

  return { server, kubeconfigPath, dir, binDir, etcdUrl, serviceAccountKubeconfig, request, stop, restartApiServer, pauseEtcd, resumeEtcd };
}
