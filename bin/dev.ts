// `opfn dev` / `npm start`: install the CRDs and run every function on the local event plane
// against the configured cluster (KUBECONFIG, ~/.kube/config or in-cluster), or, when no cluster
// is configured at all, the project's local control plane (`opfn cluster up`'s, started in the
// background when none runs, so that it and its objects outlive a restart; --local: a new one
// that stops with the plane). A configured cluster that does not answer is an error naming the
// reason, never a silent switch to another cluster: a VPN blip must not point the operators
// somewhere else. Every function runs as its generated ServiceAccount; saved sources are rebuilt
// and rolled (dev-loop.ts).
import { mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { delimiter, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import { type FunctionDeclaration, configuredKubeconfig, KubeClient } from '../functions/runtime/index.ts';
import { createLogger, logFormat } from '../functions/runtime/host/index.ts';
import { kubectlPathLine, startControlPlane, type ControlPlane } from '../cluster/index.ts';
import type { Trigger } from '../eventing/broker/index.ts';
import { applyCrds, CRD_DIR, readManifestFile } from '../eventing/crds.ts';
import { applyGeneratedObjects } from '../eventing/knative/index.ts';
import { DEFAULT_OPTIONS } from '../eventing/manifests/index.ts';
import { applyIdentities, functionKubeconfigs, serviceAccountClientsOf } from '../eventing/identities.ts';
import { EventPlane, FUNCTION_PROGRAM, triggersFromManifests, type PlaneOptions } from '../eventing/plane.ts';
import { buildFunctions, bundledFunctions } from '../build/index.ts';
import { isSameProcess, processStart } from '../processes/index.ts';
import { DEAD_LETTER_FILE, PLANE_STATE_FILE, planeRecord, STATUS_FILE } from '../eventing/state-files.ts';
import { commandFunctions, type CommandFunctions } from './function-set.ts';
import { runningLocalCluster, startLocalClusterInBackground } from './cluster.ts';
import { reloader, watchFunctionSources, writeStatusPeriodically } from './dev-loop.ts';
import { parseReplacements } from './manifests.ts';
import { say, untilSignal } from './terminal.ts';

const PROJECT_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

export interface DevOptions {
  /** The functions to run, loaded (bin/function-set.ts); default: this package's own, or those `only` names. */
  functionSet?: CommandFunctions;
  /** Of this package's own functions, only these (without `functionSet`). */
  only?: string[];
  /** YAML files of Knative Triggers to add to the broker (e.g. routing a kind to another implementation). */
  triggerFiles?: string[];
  /** Run the functions from their bundles, as the image does (default), or from TypeScript sources. */
  bundle: boolean;
  idleSeconds: number;
  /** Resync every this many seconds instead of each PingSource's schedule (0 = never); default: the schedules. */
  resyncSeconds?: number;
  stateDir: string;
  log: Logger;
  /** Where human-facing lines go (the KUBECONFIG line, what happens). */
  say: (line: string) => void;
  /** Always start a new local control plane, whatever cluster is configured. */
  local?: boolean;
  /** Environment for the function processes (e.g. LOG_FORMAT, LOG_LEVEL). */
  env?: Record<string, string>;
  /** Function name → URL its events go to instead of the function (as `opfn manifests --replace`). */
  replace?: Record<string, string>;
  /** Rebuild and roll a function when its sources are saved; default true. */
  watch?: boolean;
}

/**
 * A client per ServiceAccount of `controlPlane`: on a control plane of its own the plane runs each
 * generated ApiServerSource as its own generated identity, as Knative does.
 */
export const serviceAccountClients =
  (controlPlane: ControlPlane) =>
  async (namespace: string, account: string): Promise<KubeClient> =>
    KubeClient.fromFile(await controlPlane.serviceAccountKubeconfig(namespace, account));

/**
 * Which cluster configuration kubectl would use, if any (KUBECONFIG files that exist, ~/.kube/config,
 * in-cluster). A KUBECONFIG none of whose files exists is a mistake, not "no cluster": a typo
 * must not point the operators at a new local control plane unannounced.
 */
export function configuredCluster(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const listed = (env.KUBECONFIG ?? '').split(delimiter).filter((file) => file.trim() !== '');
  const found = configuredKubeconfig(env);
  if (found && found.files.length > 0) return listed.length > 0 ? `KUBECONFIG ${found.files.join(delimiter)}` : found.files[0];
  if (listed.length > 0)
    throw new Error(
      `KUBECONFIG names no file that exists (${listed.join(delimiter)}). Fix or unset it, or run with --local to use a new local control plane.`,
    );
  return found ? 'in-cluster service account' : undefined;
}

/**
 * The cluster of KUBECONFIG (or ~/.kube/config) if it answers within 3 s; else what is wrong, as
 * the rest of a sentence that begins "the configured cluster", and what to fix.
 */
export async function reachableCluster(): Promise<
  { kube: KubeClient; kubeconfigPath: string | undefined } | { problem: string; fix: string }
> {
  let kube: KubeClient;
  try {
    kube = KubeClient.fromEnvironment();
  } catch (error) {
    return { problem: `cannot be loaded: ${(error as Error).message}`, fix: 'Fix the kubeconfig' };
  }
  try {
    await Promise.race([
      kube.request('GET', '/version'),
      new Promise((_, reject) => setTimeout(() => reject(new Error('no answer within 3s')), 3000).unref()),
    ]);
  } catch (error) {
    const { message, code, path } = error as NodeJS.ErrnoException;
    // A CA, certificate or token file the kubeconfig names is read on the first request.
    if (path) return { problem: `names a file that cannot be read: ${path} (${code})`, fix: 'Fix the kubeconfig' };
    return {
      problem: `does not answer: ${message.includes(kube.server) ? message : `${kube.server}: ${message}`}`,
      fix: 'Fix the connection',
    };
  }
  // The function processes find the cluster where this process did: the same files, or, in a
  // pod, its service account (no KUBECONFIG).
  const files = configuredKubeconfig()?.files ?? [];
  return { kube, kubeconfigPath: files.length > 0 ? files.join(delimiter) : undefined };
}

/**
 * The cluster the plane runs against. `own`: a local control plane of this project (started
 * here, or by `opfn cluster up`), which keeps the generated Knative objects in its API server;
 * `kubectl`: the lines that point kubectl at it.
 */
interface ChosenCluster {
  kube: KubeClient;
  kubeconfigPath: string | undefined;
  own: boolean;
  /** A control plane this process started (`--local`): it stops with the plane. */
  controlPlane?: ControlPlane;
  kubectl?: { kubeconfig: string; binDir?: string };
}

/**
 * The configured cluster (KUBECONFIG, ~/.kube/config, in-cluster); with none, the project's
 * local control plane: the one `opfn cluster up` runs for this state folder, else one started
 * in the background the same way, so that it and its objects outlive this plane and a restart
 * finds them again (`opfn cluster down` stops it). `--local`: a new control plane that lives as
 * long as this process.
 */
async function chooseCluster(options: DevOptions): Promise<ChosenCluster> {
  const { say } = options;
  const configured = options.local ? undefined : configuredCluster();
  if (configured) {
    const cluster = await reachableCluster();
    if ('problem' in cluster)
      throw new Error(
        `the configured cluster (${configured}) ${cluster.problem}. ${cluster.fix}, or run with --local to use a new local control plane instead.`,
      );
    const local = runningLocalCluster(options.stateDir);
    const own =
      local !== undefined && cluster.kubeconfigPath !== undefined && resolve(cluster.kubeconfigPath) === resolve(local.kubeconfig);
    say(
      own
        ? `Using the local control plane of \`opfn cluster up\` (pid ${local!.pid}) at ${cluster.kube.server}.`
        : `Using the cluster at ${cluster.kube.server} (${configured}).`,
    );
    return { ...cluster, own, ...(own ? { kubectl: { kubeconfig: local!.kubeconfig, binDir: local!.binDir } } : {}) };
  }
  if (!options.local) {
    let local = runningLocalCluster(options.stateDir);
    if (local) say(`Using the local control plane of \`opfn cluster up\` (pid ${local.pid}); it keeps running after this plane stops.`);
    else {
      say(
        'No cluster configured (no KUBECONFIG file, no ~/.kube/config, not in a pod): starting a local control plane (etcd + kube-apiserver + kube-controller-manager) in the background. It keeps running, with its objects, when this plane stops; the next start uses it again; `npx opfn cluster down` stops it.',
      );
      local = await startLocalClusterInBackground(options.stateDir, say);
    }
    return {
      kube: KubeClient.fromFile(local.kubeconfig),
      kubeconfigPath: local.kubeconfig,
      own: true,
      kubectl: { kubeconfig: local.kubeconfig, binDir: local.binDir },
    };
  }
  say('Starting a local control plane (--local): etcd + kube-apiserver + kube-controller-manager; it stops with this plane.');
  // Its own process group: Ctrl-C stops the plane first, which then stops the control plane.
  const controlPlane = await startControlPlane({ progress: say, ownProcessGroup: true });
  return {
    kube: KubeClient.fromFile(controlPlane.kubeconfigPath),
    kubeconfigPath: controlPlane.kubeconfigPath,
    own: true,
    controlPlane,
    kubectl: { kubeconfig: controlPlane.kubeconfigPath, binDir: controlPlane.binDir },
  };
}

/** The folder holding a user's functions: the folder given, or the module's own folder. */
const watchedFolderOf = (from: string): string => (statSync(from).isDirectory() ? from : dirname(from));

/** The lines that point a shell's kubectl at the plane's local control plane. */
const kubectlLines = (kubectl: { kubeconfig: string; binDir?: string }) =>
  `  export KUBECONFIG=${kubectl.kubeconfig}${kubectl.binDir ? `\n  ${kubectlPathLine(kubectl.binDir)}   # kubectl of the same release` : ''}`;

export async function runDev(options: DevOptions): Promise<{ plane: EventPlane; stop(): Promise<void> }> {
  const { say } = options;
  // Before any cluster is touched: a mistyped function or a missing triggers file costs nothing.
  const functionSet = options.functionSet ?? (await commandFunctions({ only: options.only }));
  const triggers = triggersFromManifests((options.triggerFiles ?? []).flatMap(readManifestFile));
  mkdirSync(options.stateDir, { recursive: true });
  const cluster = await chooseCluster(options);
  const { controlPlane } = cluster;
  if (cluster.kubectl) say(`Local control plane at ${cluster.kube.server}. In another terminal:\n\n${kubectlLines(cluster.kubectl)}\n`);

  try {
    const { plane, rebuild } = await startPlane(cluster, { functionSet, triggers }, options);
    const loop = startEditLoop(plane, rebuild, functionSet, options);
    if (cluster.kubectl) {
      if (functionSet.from === undefined)
        // From the folder it runs in: this repository's crds/, or the package's under node_modules.
        say(
          `Try: kubectl apply -f ${relative(process.cwd(), join(CRD_DIR, 'examples', 'immortalcontainer.yaml'))} && kubectl get immortalcontainers,pods`,
        );
      // Again at the end, where it is seen: the start-up output above scrolls it away.
      say(`kubectl for this plane:\n${kubectlLines(cluster.kubectl)}`);
    }
    return {
      plane,
      stop: async () => {
        loop.stop();
        // Only our own record: a second plane started from the same folder must not erase the first's.
        if (planeRecord(options.stateDir)?.pid === process.pid) rmSync(join(options.stateDir, PLANE_STATE_FILE), { force: true });
        await plane.stop();
        const stats = plane.stats();
        for (const [name, fn] of Object.entries(stats.activator)) {
          // Routes are named after the function in memory, <namespace>/<name> for objects in the API server.
          const route = stats.broker[name] ?? stats.broker[`${DEFAULT_OPTIONS.namespace}/${name}`];
          options.log.info(
            { component: 'plane', function: name, ...fn, ...route },
            `${name}: ${fn.proxied + fn.direct} requests (${fn.direct} direct), up to ${fn.peakInstances} instance(s)`,
          );
        }
        await controlPlane?.stop();
        if (cluster.own && !controlPlane) say('The local control plane keeps running with its objects; `npx opfn cluster down` stops it.');
      },
    };
  } catch (error) {
    // A control plane we started must not outlive a failed start (its folder would stay behind).
    await controlPlane?.stop();
    throw error;
  }
}

/**
 * The edit loop around a running plane: saved sources of a function rebuild it and roll its
 * instances (unless `watch` is off), SIGUSR2 (`opfn reload`) does the same for every function,
 * and status.json is kept current for `opfn status`.
 */
function startEditLoop(
  plane: EventPlane,
  rebuild: (() => Promise<unknown>) | undefined,
  functionSet: CommandFunctions,
  options: DevOptions,
): { stop(): void } {
  const { reload, last } = reloader(plane, rebuild, options.say);
  const stopStatus = writeStatusPeriodically(plane, options.stateDir, last);
  const onSignal = () => void reload(plane.activator.functionNames, '`opfn reload`');
  process.on('SIGUSR2', onSignal);
  let stopWatching: (() => void) | undefined;
  if (options.watch !== false) {
    // This package's functions/ (a change to the runtime reloads every function), or the user's folder.
    const root = functionSet.from === undefined ? join(PROJECT_ROOT, 'functions') : watchedFolderOf(functionSet.from);
    const folders = Object.fromEntries(
      functionSet.functions.map(({ declaration, module }) => [declaration.name, dirname(module)] as const),
    );
    stopWatching = watchFunctionSources(root, folders, (names, files) =>
      reload(names, `${relative(root, files[0]!)}${files.length > 1 ? ` and ${files.length - 1} more` : ''} changed`),
    );
    options.say(`Watching ${root}: a saved function is rebuilt and its instances rolled (off: --no-watch).`);
  }
  return {
    stop: () => {
      stopWatching?.();
      process.off('SIGUSR2', onSignal);
      stopStatus();
      rmSync(join(options.stateDir, STATUS_FILE), { force: true });
    },
  };
}

async function startPlane(
  cluster: ChosenCluster,
  { functionSet, triggers }: { functionSet: CommandFunctions; triggers: Trigger[] },
  options: DevOptions,
): Promise<{ plane: EventPlane; rebuild?: () => Promise<unknown> }> {
  const { log, say } = options;
  const functions = functionSet.declarations;
  await applyCrds(cluster.kube, functionSet.crds);
  say(functionSet.crds.length ? 'CRDs installed and established.' : `No CRD found beside the functions in ${functionSet.from}.`);
  const bundleDir = join(options.stateDir, 'dist');
  const entries = functionSet.functions.map(({ declaration, module }) => ({ name: declaration.name, module }));
  const launch = options.bundle ? await bundledFunctions(bundleDir, entries) : sourceLaunch(functionSet);
  say(
    options.bundle
      ? `Functions bundled (esbuild); they run from ${bundleDir}, as in the image.`
      : 'Functions run from their TypeScript sources.',
  );
  // The plane runs the objects `opfn manifests` generates: on a local control plane of the
  // project they are kept in its API server (kubectl edits them live); on a configured cluster,
  // which may have a real Knative, only in memory (of them only the functions' identities are installed).
  const resyncIntervalMs = options.resyncSeconds === undefined ? undefined : options.resyncSeconds * 1000;
  const identities = join(options.stateDir, 'identities');
  let knativeObjects: PlaneOptions['knativeObjects'];
  if (cluster.own) {
    const { objects } = await applyGeneratedObjects(cluster.kube, functions, options.replace, resyncIntervalMs);
    say(
      `Knative objects generated by \`opfn manifests\` applied (${objects.length}); the plane runs them: kubectl get ksvc,brokers,triggers,pingsources,apiserversources -n ${DEFAULT_OPTIONS.namespace}`,
    );
    knativeObjects = { clientFor: serviceAccountClientsOf(cluster.kube, identities) };
  } else {
    await applyIdentities(cluster.kube, functions, options.replace);
    say(
      `The functions' ServiceAccounts and roles (as \`opfn manifests\` generates them) installed in namespace ${DEFAULT_OPTIONS.namespace}: each function runs as its own.`,
    );
  }
  // Each function runs as its generated ServiceAccount: what it may do locally is what it may do on a cluster.
  const kubeconfigs = await functionKubeconfigs(cluster.kube, functions, identities);
  const plane = new EventPlane({
    functions,
    kube: cluster.kube,
    kubeconfigPath: cluster.kubeconfigPath,
    log,
    stateDir: options.stateDir,
    idleTimeoutMs: options.idleSeconds * 1000,
    resyncIntervalMs,
    triggers,
    replace: options.replace,
    knativeObjects,
    functionKubeconfigs: kubeconfigs,
    ...launch,
    env: options.env,
  });
  const { brokerUrl, activatorUrl } = await plane.start();
  if (!cluster.own)
    say(
      `Knative objects generated by \`opfn manifests\` run in memory (nothing else installed on the cluster): ${plane.knative!.describe()}.`,
    );
  const other = planeRecord(options.stateDir);
  if (other?.pid !== process.pid && isSameProcess(other))
    say(
      `Another plane (pid ${other!.pid}) runs from ${options.stateDir}: \`opfn dead-letters replay\`, \`invoke\`, \`status\` and \`reload\` keep using it (pass --broker ${brokerUrl} for this one's).`,
    );
  // The start time tells this process apart from a later one given the same pid, once this one is gone.
  else
    writeFileSync(
      join(options.stateDir, PLANE_STATE_FILE),
      JSON.stringify(
        {
          pid: process.pid,
          startTime: processStart(process.pid),
          brokerUrl,
          activatorUrl,
          kubeconfig: cluster.kubectl?.kubeconfig ?? cluster.kubeconfigPath,
          binDir: cluster.kubectl?.binDir,
        },
        null,
        2,
      ),
    );
  for (const trigger of triggers) say(`Trigger ${trigger.name} → ${trigger.subscriber}`);
  say(
    `Running ${functions.map((f) => f.name).join(', ')} (each at zero until its first event). Broker ingress: ${brokerUrl}. Dead letters: ${resolve(options.stateDir, DEAD_LETTER_FILE)}. Functions: ${activatorUrl}/<function>. Ctrl-C stops everything.`,
  );
  return { plane, ...(options.bundle ? { rebuild: () => buildFunctions({ outdir: bundleDir, functions: entries }) } : {}) };
}

/**
 * How to start a function from its sources: this package's own by name (the plane's default), a
 * user's with its module, which the entry program imports.
 */
function sourceLaunch(functionSet: CommandFunctions): Pick<PlaneOptions, 'command'> | undefined {
  if (functionSet.from === undefined) return undefined;
  const modules = new Map(functionSet.functions.map(({ declaration, module }) => [declaration.name, module]));
  return {
    command: (declaration: FunctionDeclaration) => ({
      command: process.execPath,
      args: [FUNCTION_PROGRAM, declaration.name, modules.get(declaration.name)!],
    }),
  };
}

/** The options of `opfn dev` as the command line gives them. */
export interface DevCommandOptions {
  /** A folder or module of functions from outside this package. */
  functions?: string;
  only?: string[];
  idle: number;
  resync?: number;
  triggers?: string[];
  bundle: boolean;
  local?: boolean;
  replace?: string[];
  logFormat?: 'json' | 'pretty';
  watch: boolean;
}

/** `opfn dev`: runs the plane until a signal stops it (intake first, then the deliveries in flight). */
export async function devCommand(options: DevCommandOptions, stateDir: string): Promise<void> {
  const format = options.logFormat ?? logFormat();
  try {
    const functionSet = await commandFunctions({ functions: options.functions, only: options.only });
    const running = await runDev({
      replace: parseReplacements(
        options.replace ?? [],
        functionSet.declarations.map((declaration) => declaration.name),
        true,
      ),
      functionSet,
      triggerFiles: options.triggers,
      bundle: options.bundle,
      idleSeconds: options.idle,
      resyncSeconds: options.resync,
      stateDir,
      local: options.local,
      watch: options.watch,
      // Function processes write to a pipe: tell them the format the terminal gets.
      env: { LOG_FORMAT: format },
      log: createLogger(undefined, process.env.LOG_LEVEL ?? 'info', format),
      say,
    });
    untilSignal(running.stop, {
      stopping: 'intake first, then waiting for deliveries in flight',
      forced: 'deliveries still running are cut; child processes are killed',
    });
  } catch (error) {
    say(`opfn dev: ${(error as Error).message}`);
    process.exit(1);
  }
}
